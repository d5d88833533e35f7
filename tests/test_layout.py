"""The package's shape: no import cycle, no module over 500 lines, the deployment layer apart
from training, and the test suite independent of the benchmarks."""
import ast
from pathlib import Path

import ez_robot

PACKAGE = Path(ez_robot.__file__).resolve().parent
ROOT = Path(__file__).resolve().parent.parent


def _modules() -> dict[str, Path]:
    """Every Python module of the installed package (envs/, export/, ctree/ and configs/ install
    as its subpackages), by dotted name."""
    import ez_robot.ctree
    import ez_robot.envs
    import ez_robot.export

    folders = {"ez_robot": PACKAGE, "ez_robot.envs": Path(ez_robot.envs.__file__).parent,
               "ez_robot.export": Path(ez_robot.export.__file__).parent,
               "ez_robot.ctree": Path(ez_robot.ctree.__file__).parent}
    modules = {}
    for package, folder in folders.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if package == "ez_robot" and parts and parts[0] in ("envs", "export", "ctree"):
                continue  # an in-tree copy: counted under its own package
            modules[".".join([package, *parts])] = path
    return modules


def _imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that importing ``name`` (at ``path``) runs, from any import
    statement in it, those inside functions included: the module named, and the package
    ``__init__`` modules on the way that are not already running (the importer's own)."""
    targets = set()
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            named = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            # `from package import module` runs the module; `from module import name` needs the module run
            named = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in named:
            parts = target.split(".")
            chain = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
            targets |= {m for m in chain if m in modules and (m == target or not name.startswith(m + "."))}
    targets.discard(name)
    return targets


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, name, set(modules)) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    done, path = set(), []

    def visit(name):  # depth-first: a module met again on the current path closes a cycle
        if name in path:
            return path[path.index(name):] + [name]
        if name in done:
            return None
        path.append(name)
        for target in sorted(graph[name]):
            found = visit(target)
            if found:
                return found
        path.pop()
        done.add(name)
        return None

    for name in sorted(graph):
        found = visit(name)
        if found:
            return found
    return None


def test_the_package_has_no_import_cycle():
    """Imports inside functions count: a lazy import that only dodges a cycle is still one."""
    graph = _graph()
    assert {"ez_robot.mcts", "ez_robot.config.loading", "ez_robot.envs.registry", "ez_robot.export.runtime"} <= set(graph)
    cycle = _cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_the_cycle_check_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_task_registry_never_imports_the_config():
    """``ez_robot.config`` asks ``ez_robot.envs``; no module of ``ez_robot.envs`` imports the
    config, not even inside a function."""
    graph = _graph()
    assert "ez_robot.envs" in graph["ez_robot.config.tasks"]  # the config does ask the registry
    for name, targets in graph.items():
        if name.startswith("ez_robot.envs"):
            assert not [t for t in targets if t.startswith("ez_robot.config")], name


def test_the_deployment_layer_imports_nothing_of_training():
    """The onboard runtime, the search and the control loop import no training module
    (torch-free core), lazy imports included: the simulated robot's env guard is the
    simulator's, not training's."""
    graph = _graph()
    training = {"ez_robot.networks", "ez_robot.learner", "ez_robot.losses", "ez_robot.inference",
                "ez_robot.torch_inference", "ez_robot.evaluation", "ez_robot.trainer", "ez_robot.ray_trainer",
                "ez_robot.api"}
    deployment = ["ez_robot.mcts", "ez_robot.action_modes", "ez_robot.export.runtime", "ez_robot.export.bundle",
                  "ez_robot.export.controller", "ez_robot.export.robot", "ez_robot.export.guards",
                  "ez_robot.export.ticks"]
    for start in deployment:
        seen, todo = set(), [start]
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(graph[name])
        assert not seen & training, (start, sorted(seen & training))


def test_no_module_is_over_500_lines():
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > 500}
    assert not long, long


def test_no_test_imports_the_benchmarks():
    for path in (ROOT / "tests").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not [n for n in names if n.split(".")[0] == "benchmarks"], path.name
