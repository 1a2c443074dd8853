"""Where a model runs and on what: one rule for speech and transcription.

`auto` means CUDA with torch when torch is installed and sees a GPU, else the CPU with
the model's CPU runtime (CTranslate2 for Whisper, ONNX Runtime for the voice models). A
machine with no NVIDIA driver never imports torch to find that out. `sim` is the
simulated H200 of `runners/sim`, whose runtime is its own stand-ins; auto never
picks it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["BATCHED_DEVICES", "gpu_present", "resolve_device", "sim_device_use"]

BATCHED_DEVICES = ("cuda", "sim")
"""Devices that run one batch at a time and take large ones well: a GPU, and the
simulated one, scheduled exactly as the real one."""


def gpu_present() -> bool:
    """Whether this machine shows an NVIDIA GPU, read from the driver's files."""
    gpus = Path("/proc/driver/nvidia/gpus")
    return Path("/dev/nvidia0").exists() or (gpus.is_dir() and any(gpus.iterdir()))


def _cuda() -> bool:
    from voxserve.runners.torch_device import cuda_available

    return cuda_available()


def resolve_device(device: str, runtime: str, cpu_runtime: str) -> tuple[str, str]:
    """(device, runtime) for a model whose CPU runtime is `cpu_runtime`: an auto device is
    cuda when a GPU is there and the runtime may be torch, an auto runtime is torch on
    cuda and `cpu_runtime` on the CPU, and the sim device runs the sim runtime. Raises ValueError for a choice this machine
    cannot run."""
    if device == "sim":
        if runtime not in ("auto", "sim"):
            raise ValueError(f"the sim device runs its own stand-ins, not {runtime}: leave the runtime auto")
        return "sim", "sim"
    has_torch = importlib.util.find_spec("torch") is not None
    if device == "auto":
        device = "cuda" if runtime != cpu_runtime and has_torch and gpu_present() and _cuda() else "cpu"
    if runtime == "auto":
        runtime = "torch" if device == "cuda" else cpu_runtime
    if runtime == "torch" and not has_torch:
        raise ValueError("the torch runtime needs torch: pip install 'voxserve[gpu]'")
    if device == "cuda" and not _cuda():
        raise ValueError("--device cuda, but torch sees no CUDA device: use --device cpu or auto")
    return device, runtime


def sim_device_use() -> tuple[float, dict[str, tuple[int, int]]]:
    """The simulated GPU's device seconds so far in this process, and its (calls, items)
    by stage."""
    from voxserve.runners.sim.device import sim_device

    return sim_device().use()
