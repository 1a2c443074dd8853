"""What a new machine builds on first use, built once before the first test.

On an empty cache (`make test` gives every run a fresh `XDG_CACHE_HOME`), the bundled
models are joined, split and converted the first time anything loads them. Done inside
whichever test met them first, that cost would count against that test's timeout, and a
conversion's failure would look like that test's. `fill` does each step once, in the
order a server meets them, and times it; the suite's session fixture reports the times.
On a warm cache each step only finds its files.

Piper's files and the others' share nothing, and most of their steps hold the GIL (graph
rewriting in Python), so Piper's run in a child process of their own beside the rest:
on two cores the fill takes about as long as its longer half, Piper's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from voxserve.runners.kokoro import onnx_runner as kokoro
from voxserve.runners.moonshine.onnx_runner import MoonshineRunner
from voxserve.runners.piper import onnx_runner as piper
from voxserve.runners.piper import weights as piper_weights
from voxserve.runners.piper.prior_graph import PRIOR_LENGTHS, fixed_priors
from voxserve.runners.whisper import weights as whisper_weights
from voxserve.runners.whisper.interface import bundled_base, bundled_model

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
        "Whisper base: the joined model": bundled_base,
        "Moonshine: the rewritten graphs": lambda: MoonshineRunner(),
    }


def _kokoro_weights() -> object:
    from voxserve.runners.kokoro import weights as kokoro_weights

    return kokoro_weights.load_weights(kokoro.model_file())


def _run(names: list[str]) -> dict[str, float]:
    steps = _steps()
    took: dict[str, float] = {}
    for name in names:
        started = time.perf_counter()
        steps[name]()
        took[name] = time.perf_counter() - started
    return took


def fill() -> dict[str, float]:
    """Build every cached model file the suite uses; the seconds each step took."""
    names = list(_steps())
    piper_steps = [name for name in names if name.startswith("Piper")]
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.model_cache", *piper_steps],
        cwd=Path(__file__).resolve().parents[1], stdout=subprocess.PIPE, text=True,
    )
    try:
        took = _run([name for name in names if name not in piper_steps])
    finally:
        out, _ = child.communicate()
    if child.returncode != 0:
        raise RuntimeError(f"building Piper's cached files failed (exit {child.returncode})")
    took.update(json.loads(out.splitlines()[-1]))
    return {name: took[name] for name in names}


if __name__ == "__main__":
    print(json.dumps(_run(sys.argv[1:])))
