"""A user's own env: ``--task package.module:factory`` or ``--task path/to/file.py:factory``.

The factory is any callable that returns a ``gymnasium.Env``; ``env.kwargs`` (``--set
env.kwargs.NAME=VALUE``) are its keyword arguments.  Every part of ez-robot that needs the
env (training, every Ray worker, eval, export, run) makes it through :func:`make_custom`,
so each gets the same robot.  A factory whose signature takes ``render_mode`` gets
``"rgb_array"`` where frames are recorded (``eval --video``, ``run --video``).

Each mistake a user can make here is a :class:`ez_robot.errors.ConfigError` that says
what is wrong: a file or module that is not there, a name the module does not define, a
factory that raises (with where), or one that returns something other than an Env.

:class:`FactorySuite` is the registry's suite of these tasks.
"""
from __future__ import annotations

import ast
import difflib
import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import sys
import traceback
from pathlib import Path
from typing import Callable

import gymnasium as gym

from ez_robot.envs.suite import StateSuite
from ez_robot.errors import ConfigError

__all__ = ["FactorySuite", "split_task", "load_factory", "make_custom", "absolute_task", "factory_defaults"]


class FactorySuite(StateSuite):
    """``package.module:factory`` or ``path/to/file.py:factory``: a user's own env (preset
    ``custom``).  The registry asks it last: it claims every ``source:name`` that no
    prefixed suite (``atari:``, ``gym:``) claimed before it."""

    kind = "custom"

    def claims(self, task: str) -> bool:
        return ":" in task

    def knows(self, task: str) -> bool:
        load_factory(task)  # a ConfigError that says why not: no such file, no such name, ...
        return True

    def preset_family(self, task: str, obs: str) -> str:
        return "custom"

    def slug(self, task: str) -> str:
        """``reach_arm-make_arm``: the file's or module's last part, and the factory's name."""
        source, name = split_task(task)
        stem = source.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".py") if source.endswith(".py") \
            else source.rsplit(".", 1)[-1]
        return f"{stem}-{name}"

    def base_env(self, task: str, kwargs: dict, *, render: bool) -> gym.Env:
        return make_custom(task, kwargs, render=render)


def split_task(task: str) -> tuple[str, str]:
    """``"pkg.mod:make"`` -> ``("pkg.mod", "make")``; the last colon splits (Windows paths)."""
    source, _, name = task.rpartition(":")
    if not source or not name or not name.replace(".", "_").isidentifier():
        raise ConfigError(f"bad task {task!r}: a custom task is package.module:factory or path/to/file.py:factory")
    return source, name


def absolute_task(task: str) -> str:
    """A file task with its path made absolute (Ray workers and resumed runs may start in
    another directory); module tasks and every other task name as they are."""
    if not task.rpartition(":")[0].endswith(".py"):  # only a factory's source names a .py file
        return task
    source, name = split_task(task)
    return f"{Path(source).expanduser().resolve()}:{name}"


def load_factory(task: str) -> Callable[..., gym.Env]:
    source, name = split_task(task)
    module = _load_file(source) if source.endswith(".py") else _load_module(source)
    factory = module
    for part in name.split("."):
        if not hasattr(factory, part):
            options = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))]
            close = difflib.get_close_matches(part, options, n=3, cutoff=0.5)
            hint = f"; did you mean: {', '.join(close)}?" if close else \
                f"; it defines: {', '.join(options[:12]) or 'no public callables'}"
            raise ConfigError(f"{source} has no {name!r}{hint}")
        factory = getattr(factory, part)
    if not callable(factory):
        raise ConfigError(f"{source}:{name} is a {type(factory).__name__}, not a callable that makes an env")
    return factory


def make_custom(task: str, kwargs: dict, *, render: bool = False) -> gym.Env:
    """Calls the task's factory with ``kwargs`` (plus ``render_mode="rgb_array"`` when
    ``render`` and the factory takes it) and checks that it gave an Env."""
    factory = load_factory(task)
    kwargs = dict(kwargs)
    if render and "render_mode" not in kwargs and _takes(factory, "render_mode"):
        kwargs["render_mode"] = "rgb_array"
    call = f"{task.rpartition(':')[2]}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"
    try:
        env = factory(**kwargs)
    except Exception as error:  # noqa: BLE001 - the user's code: report it, with where
        raise ConfigError(f"{call} raised {type(error).__name__}: {error}{_where(error)}") from error
    if not isinstance(env, gym.Env):
        raise ConfigError(f"{call} returned a {type(env).__name__}, not a gymnasium.Env (a factory must return "
                          f"the env it makes; a gym.Env subclass or a gymnasium wrapper of one)")
    return env


def factory_defaults(task: str) -> dict:
    """The literal defaults of a factory's parameters (a function's, or a class's
    ``__init__``), read from its source file without importing anything: reading a run
    that names a factory must run none of its code.  {} where the source is not found or
    not Python; a default that is neither a literal nor a module-level ``NAME = literal``
    is left out."""
    try:
        source, name = split_task(task)
        path = Path(source).expanduser() if source.endswith(".py") else _module_file(source)
        tree = ast.parse(path.read_text())
    except (ConfigError, OSError, SyntaxError, UnicodeDecodeError, ValueError, ImportError, AttributeError,
            TypeError):
        return {}
    node = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name), None)
    if isinstance(node, ast.ClassDef):
        node = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if node is None:
        return {}
    args = node.args
    positional = args.posonlyargs + args.args
    pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    pairs += [(arg, default) for arg, default in zip(args.kwonlyargs, args.kw_defaults) if default is not None]
    constants = {n.targets[0].id: n.value for n in tree.body  # NAME = literal at the module's top level
                 if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)}
    defaults = {}
    for arg, default in pairs:
        if isinstance(default, ast.Name) and default.id in constants:
            default = constants[default.id]
        try:
            defaults[arg.arg] = ast.literal_eval(default)
        except (ValueError, TypeError, SyntaxError, RecursionError):  # an expression: it needs the module
            pass
    return defaults


def _module_file(module: str) -> Path:
    """The source file of ``module``, found along sys.path as an import would find it, but
    without executing it or its packages' ``__init__``."""
    spec, search = None, None
    parts = module.split(".")
    for i in range(len(parts)):
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:i + 1]), search)
        if spec is None:
            raise ImportError(module)
        search = spec.submodule_search_locations
    return Path(spec.origin)


def _takes(factory, parameter: str) -> bool:
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return False
    return parameter in signature.parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())


def _load_module(source: str):
    try:
        return importlib.import_module(source)
    except ModuleNotFoundError as error:
        if error.name and source.startswith(error.name):  # the module itself (or its package) is missing
            raise ConfigError(f"no module named {source!r} (from the task {source}:...): install the package, "
                              f"add its directory to PYTHONPATH, or name the file, path/to/file.py:factory") from None
        raise ConfigError(f"importing {source} failed: {error}{_where(error)}") from error
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # noqa: BLE001 - the user's module raised (or exited) while importing
        raise ConfigError(f"importing {source} {_raised(error)}{_where(error)}") from error


def _load_file(source: str):
    path = Path(source).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"no file {source} (resolved to {path}) for the task {source}:...")
    name = f"ez_robot_task_{hashlib.sha1(str(path).encode()).hexdigest()[:12]}"  # the same in every process
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before exec: dataclasses and pickling look the module up
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        del sys.modules[name]
        raise
    except BaseException as error:  # noqa: BLE001 - sys.exit() too: the command must not end silently
        del sys.modules[name]
        raise ConfigError(f"loading {source} {_raised(error)}{_where(error)}") from error
    return module


def _raised(error: BaseException) -> str:
    """What an import did instead of defining the module: 'called sys.exit(3)', 'raised X: ...'."""
    if isinstance(error, SystemExit):
        return f"called sys.exit({error.code!r}) (a task's module must not exit when imported)"
    return f"raised {type(error).__name__}: {error}"


def _where(error: BaseException) -> str:
    """' (at file:line)': the innermost frame of the traceback, where the user's code failed."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if Path(f.filename).resolve() != Path(__file__).resolve()
              and "importlib" not in f.filename]
    if not frames:  # it failed in the call itself (a bad keyword argument)
        return ""
    frame = frames[-1]
    return f" (at {frame.filename}:{frame.lineno})"
