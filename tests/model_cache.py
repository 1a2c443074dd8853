"""What a new machine builds on first use, built once before the first test.

On an empty cache (`make test` gives every run a fresh `XDG_CACHE_HOME`), the bundled
models are joined, split and converted the first time anything loads them. Done inside
whichever test met them first, that cost would count against that test's timeout, and a
conversion's failure would look like that test's. `fill` does each step once, in the
order a server meets them, and times it; the suite's session fixture reports the times.
On a warm cache each step only finds its files.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from voxserve.runners.kokoro import onnx_runner as kokoro
from voxserve.runners.piper import onnx_runner as piper
from voxserve.runners.piper import weights as piper_weights
from voxserve.runners.piper.prior_graph import PRIOR_LENGTHS, fixed_priors
from voxserve.runners.whisper import weights as whisper_weights
from voxserve.runners.whisper.interface import bundled_model

__all__ = ["fill"]


def _steps() -> dict[str, Callable[[], object]]:
    voice = piper.bundled_voice().model
    return {
        "Piper: the split graphs": lambda: piper.split_model(voice),
        "Piper: the prior's fixed-length copies": lambda: fixed_priors(piper.split_model(voice).prior, PRIOR_LENGTHS),
        "Piper: the torch weights": lambda: piper_weights.load_weights(voice),
        "Kokoro: the joined model": kokoro.model_file,
        "Kokoro: the int8 stages": lambda: kokoro.split_model(kokoro.model_file(), "int8"),
        "Kokoro: the float32 stages": lambda: kokoro.split_model(kokoro.model_file(), "float32"),
        "Kokoro: the torch weights": lambda: _kokoro_weights(),
        "Whisper: the torch weights": lambda: whisper_weights.load_weights(bundled_model()[0]),
    }


def _kokoro_weights() -> object:
    from voxserve.runners.kokoro import weights as kokoro_weights

    return kokoro_weights.load_weights(kokoro.model_file())


def fill() -> dict[str, float]:
    """Build every cached model file the suite uses; the seconds each step took."""
    took: dict[str, float] = {}
    for name, step in _steps().items():
        started = time.perf_counter()
        step()
        took[name] = time.perf_counter() - started
    return took
