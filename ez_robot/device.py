"""Where a process computes: the torch device, and how many threads it uses."""
from __future__ import annotations

import os
import shutil

import torch

from ez_robot.errors import ConfigError

__all__ = ["resolve_device", "set_threads", "check_compile"]


def resolve_device(device: str | torch.device) -> torch.device:
    """``auto`` is CUDA when torch sees a GPU, else the CPU."""
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda was asked for, but torch sees no CUDA device; use --device auto or cpu")
    if device not in ("cpu", "cuda"):
        raise ConfigError(f"--device must be auto, cpu or cuda, got {device!r}")
    return torch.device(device)


def set_threads(threads: int) -> None:
    """Torch intra-op threads for this process, and subnormal floats flushed to zero.

    One is the default everywhere: the search runs the networks on small batches, where
    extra threads gain little, and when processes together ask for more threads than the
    machine has cores, torch's OpenMP workers spin against each other.  Raise it for large
    learner batches on an otherwise idle machine.

    Subnormal floats (below 1.2e-38) cost x86 CPUs a microcode assist per operation, and
    trained weights drift into that range, slowing each SGD step severalfold.  Flushing (the
    CPU's FTZ/DAZ modes, for this thread: torch's and onnxruntime's calls on it) changes
    numbers only below 1.2e-38.  The figures behind both are in benchmarks/README.md
    ("Threads and subnormal floats").
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"threads must be a whole number >= 1, got {threads!r}")
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)  # False where the CPU cannot (neither SSE3 nor AArch64): nothing to do


def check_compile(mode: str, device: torch.device) -> None:
    """Refuses ``train.compile`` on a CPU without a C++ compiler before a run starts: torch's
    inductor builds C++ kernels for the CPU, and without a compiler the first training step
    failed deep inside torch.  (On CUDA it writes Triton kernels and needs none.)"""
    if mode == "none" or device.type != "cpu":
        return
    from torch._inductor import config as inductor

    names = [name for name in (os.environ.get("CXX"), *inductor.cpp.cxx) if name]  # the ones inductor tries
    if not any(shutil.which(name) for name in names):
        raise ConfigError(f"train.compile={mode} on the CPU needs a C++ compiler ({' or '.join(dict.fromkeys(names))} "
                          "on PATH; CXX names another): install one (e.g. apt install g++) or leave train.compile "
                          "at none, which is as fast on a CPU (benchmarks/README.md)")
