"""Process settings every ez-robot process makes (ez_robot.device)."""
import platform
import subprocess
import sys

import pytest

from ez_robot.device import set_threads
from ez_robot.errors import ConfigError

PRODUCT = "import torch; x = torch.tensor([1e-39]); {setup}; print((x * 1.0).item())"
FLUSHES = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64", "aarch64", "arm64"),
                             reason="flushing subnormal floats needs SSE3 or AArch64")


@FLUSHES
def test_set_threads_flushes_subnormal_floats_to_zero():
    """Weights that drift below 1.2e-38 made a CPU learner 7x slower; every process that
    calls set_threads computes with them as zero.  In a fresh interpreter each: without it
    1e-39 survives a multiplication, with it the product is 0."""
    def product(setup):
        out = subprocess.run([sys.executable, "-c", PRODUCT.format(setup=setup)], capture_output=True, text=True,
                             check=True)
        return float(out.stdout.strip())

    assert product("pass") == pytest.approx(1e-39, rel=1e-3)
    assert product("from ez_robot.device import set_threads; set_threads(1)") == 0.0


@pytest.mark.parametrize("threads", [0, -1, 1.5, True, "2"])
def test_set_threads_refuses_what_is_not_a_thread_count(threads):
    with pytest.raises(ConfigError, match="threads must be a whole number >= 1"):
        set_threads(threads)


ONNX_PRODUCT = """
import numpy as np, onnxruntime as ort
from onnx import TensorProto, helper
x, y = (helper.make_tensor_value_info(name, TensorProto.FLOAT, [4]) for name in "xy")
one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
graph = helper.make_graph([helper.make_node("Mul", ["x", "one"], ["y"])], "times_one", [x], [y], [one])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 9
{setup}
session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
import torch
print(session.run(None, {{"x": np.full(4, 1e-39, np.float32)}})[0].max(), (torch.tensor([1e-39]) * 1.0).item())
"""


@FLUSHES
@pytest.mark.parametrize("preset", ["latency", "throughput"])
def test_onnxruntime_sessions_compute_subnormal_floats_as_zero(preset):
    """The onboard runtime's sessions and the trainers' onnxruntime searches flush them too.
    onnxruntime sets the calling thread's mode whenever it makes a session, so a session
    made without the setting turned torch's flushing off again in every trainer process
    (a cheetah_run learner stayed at ~110 steps/min with set_threads alone).  Fresh
    interpreters: (onnxruntime's product, torch's product after the session was made)."""
    def products(setup):
        code = ONNX_PRODUCT.format(setup="from ez_robot.device import set_threads; set_threads(1); " + setup)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        return tuple(float(value) for value in out.split())

    assert products("options = ort.SessionOptions()") == pytest.approx((1e-39, 1e-39), rel=1e-3)
    assert products(f"from ez_robot.export.runtime import session_options; "
                    f"options = session_options({preset!r}, threads=1)") == (0.0, 0.0)


def test_compile_on_a_cpu_without_a_cpp_compiler_is_refused_before_a_run_starts(monkeypatch, tmp_path):
    """train.compile builds C++ kernels on a CPU; without a compiler both trainers refuse
    the config with a ConfigError that says what to do, before anything is made."""
    import torch

    from ez_robot import ray_trainer, trainer
    from ez_robot.config import load_config
    from ez_robot.device import check_compile

    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr("shutil.which", lambda name: None)
    check_compile("none", torch.device("cpu"))  # nothing to compile, nothing to refuse
    check_compile("reduce-overhead", torch.device("cuda"))  # Triton kernels: no C++ compiler needed
    with pytest.raises(ConfigError, match="needs a C\\+\\+ compiler"):
        check_compile("default", torch.device("cpu"))
    config = load_config("gym:CartPole-v1", budget=1000, overrides=["train.compile=default"])
    for train in (trainer.train, ray_trainer.train):
        with pytest.raises(ConfigError, match="leave train.compile at none"):
            train(config, tmp_path / train.__module__, device="cpu", progress=False)
        assert not (tmp_path / train.__module__).exists()
    monkeypatch.setenv("CXX", "clang++")  # the compiler a user names, as inductor takes it
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}" if name == "clang++" else None)
    check_compile("default", torch.device("cpu"))
