"""The core install: what a robot computer installs to run a bundle.

``pip install .`` without extras gives numpy, onnxruntime, pyyaml, click and the compiled
tree; in a fresh virtual environment with only that, a bundle exported by the full
install loads and acts as it does there, with torch, ray, dm_control and gymnasium absent.
The deployment layer (the bundle format, the runtime, the controller, the search) never
imports the training layer, even where it is installed."""
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import traceback
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest

from ez_robot.export.onnx_export import export_model
from ez_robot.export.runtime import Policy
from tests.test_export import observations_for, tiny_model

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "setup.py", "README.md", "ez_robot", "ctree", "envs", "export", "configs")
"""What ``pip install .`` reads (pyproject's package-dir)."""
TRAINING = ("torch", "ray", "dm_control", "gymnasium")
DEPLOYMENT = ("ez_robot", "ez_robot.cli", "ez_robot.mcts", "ez_robot.action_modes", "ez_robot.errors",
              "ez_robot.export.bundle", "ez_robot.export.runtime", "ez_robot.export.controller", "ez_robot.video")
TRAINING_MODULES = ("ez_robot.networks", "ez_robot.inference", "ez_robot.torch_inference", "ez_robot.learner",
                    "ez_robot.evaluation", "ez_robot.envs", "ez_robot.export.onnx_export",
                    "ez_robot.export.onnx_graphs")
BUNDLES = {"swingup": ("cartpole_swingup", []),  # joint mode on a continuous robot: a table of vectors
           "walker-gaussian": ("walker_walk", ["env.action_mode=gaussian", "search.num_candidates=6"])}


def test_the_deployment_layer_imports_nothing_of_training():
    code = (f"import importlib, json, sys\n"
            f"for name in {DEPLOYMENT!r}: importlib.import_module(name)\n"
            f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {TRAINING!r} "
            f"or m in {TRAINING_MODULES!r})))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def _install_core(tmp: Path, log: list) -> None:
    """A venv at tmp/venv with the core install of a copy of this checkout."""
    try:
        src = tmp / "src"
        src.mkdir()
        for name in SOURCES:
            if (ROOT / name).is_dir():
                shutil.copytree(ROOT / name, src / name,
                                ignore=shutil.ignore_patterns("__pycache__", "*.so", "_tree.cpp", "*.egg-info"))
            else:
                shutil.copy2(ROOT / name, src / name)
        # the build requirements, as pyproject.toml gives them
        build = json.loads(re.search(r"^requires = (\[.*\])$", (ROOT / "pyproject.toml").read_text(), re.M)[1])
        # onnxruntime and numpy as here, so that both sides compute the same numbers
        same = [f"onnxruntime=={version('onnxruntime')}", f"numpy=={version('numpy')}"]
        pip = [sys.executable, "-m", "pip", "--python", str(_python(tmp)), "install", "-q",
               "--disable-pip-version-check"]
        for command in ([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")],
                        [*pip, *build, *same],
                        [*pip, "--no-build-isolation", str(src), *same]):
            out = subprocess.run(command, capture_output=True, text=True, timeout=400, env=_clean_env())
            if out.returncode != 0:
                log.append(f"{' '.join(command)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
                return
    except Exception:  # reported by the test, not lost in the thread
        log.append(traceback.format_exc())


def _python(tmp: Path) -> Path:
    return tmp / "venv" / ("Scripts" if os.name == "nt" else "bin") / "python"


def _clean_env() -> dict:
    """This process's environment without what would point the venv's Python at our packages."""
    return {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}


@pytest.fixture(scope="module")
def lean(tmp_path_factory):
    """A core-only venv (built in a thread) and bundles exported here (meanwhile)."""
    tmp = tmp_path_factory.mktemp("lean")
    log: list = []
    installing = threading.Thread(target=_install_core, args=(tmp, log))
    installing.start()
    bundles = {}
    try:
        for name, (task, overrides) in BUNDLES.items():
            net, config = tiny_model(task, overrides=overrides)
            export_model(net, config, tmp / name, observations=4)
            bundles[name] = (tmp / name, observations_for(net, 6, seed=7))
    finally:
        installing.join()
    assert not log, log[0]
    return {"python": _python(tmp), "bundles": bundles, "dir": tmp}


def test_the_core_install_loads_a_bundle_and_acts_without_torch(lean):
    bundles = {name: (str(bundle), obs.tolist()) for name, (bundle, obs) in lean["bundles"].items()}
    code = (f"import importlib.util, json, sys\n"
            f"import numpy as np\n"
            f"from ez_robot.export.runtime import Policy\n"
            f"actions = {{}}\n"
            f"for name, (bundle, observations) in {bundles!r}.items():\n"
            f"    policy = Policy.load(bundle, seed=0)\n"
            f"    actions[name] = [np.asarray(policy.act(np.asarray(o, np.float32))).tolist() for o in observations]\n"
            f"print(json.dumps({{'installed': [m for m in {TRAINING!r} if importlib.util.find_spec(m)],\n"
            f"                  'actions': actions, 'runtime': __import__('ez_robot').__file__}}))\n")
    out = subprocess.run([str(lean["python"]), "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=lean["dir"], env=_clean_env())
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["installed"] == []  # torch, ray, dm_control, gymnasium: none
    assert Path(result["runtime"]).is_relative_to(lean["dir"] / "venv")  # the installed package, not this checkout
    for name, (bundle, observations) in lean["bundles"].items():
        policy = Policy.load(bundle, seed=0)  # here, with the full install: the same decisions
        here = [policy.act(o) for o in observations]
        there = np.asarray(result["actions"][name])
        np.testing.assert_array_equal(there, np.asarray(here))
        assert there.shape == (len(observations), policy.action_spec.dims or 1)
        assert np.all(there >= policy.action_low) and np.all(there <= policy.action_high)
        if policy.action_table is not None:  # joint mode: each action is a row of the table
            assert all(any(np.array_equal(a, row) for row in policy.action_table) for a in there)
        else:
            assert len(np.unique(there.round(4), axis=0)) > 1  # not one constant action


def test_the_core_install_gives_the_command_line_help(lean):
    for args in (["--help"], ["run", "--help"]):
        out = subprocess.run([str(lean["python"].parent / "ez-robot"), *args], capture_output=True, text=True,
                             timeout=60, cwd=lean["dir"], env=_clean_env())
        assert out.returncode == 0, out.stderr
        assert "Usage: " in out.stdout
    assert "Run an exported BUNDLE at a fixed control rate" in out.stdout
