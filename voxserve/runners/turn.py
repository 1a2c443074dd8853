"""smart-turn v3.2: whether a turn's speech so far is a complete thought.

The model (BSD-2-Clause, `smart-turn-v3.2-cpu.onnx`, 8.7 MB) ships inside the `pipecat-ai`
1.14.0 wheel; the Makefile takes it from there into `<venv>/share/voxserve/smart-turn` and
checks its pinned sha256 (`smart_turn.sha256`). It is never downloaded at run time, and
pipecat is never installed. The graph takes `input_features` [batch, 80, 800] (the
newest 8 s of 16 kHz audio as `audio/mel.py: TurnFeatures`) and gives `logits`
[batch, 1], which are already probabilities (a sigmoid ends the graph): at 0.5 or above,
the speaker has finished the thought.

A call costs tens of milliseconds of one core, so callers keep it off any latency path
that cannot wait that long (`python -m voxserve.runners.turn` times it here).
This module is one of the places that import onnxruntime; it knows nothing of sessions,
threads or HTTP (`engine/vad.py: TurnEngine` runs it).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from voxserve.audio.mel import SAMPLE_RATE, TURN_SAMPLES, TurnFeatures
from voxserve.runners.options import cpu_options

__all__ = ["COMPLETE_AT", "MODEL_FILE", "SmartTurn", "default_model_path"]

MODEL_FILE = "smart-turn-v3.2-cpu.onnx"
COMPLETE_AT = 0.5
"""A probability at or above this says the thought is complete."""


def default_model_path() -> Path:
    """Where the Makefile puts the model: `<venv>/share/voxserve/smart-turn`."""
    return Path(sys.prefix) / "share" / "voxserve" / "smart-turn" / MODEL_FILE


class SmartTurn:
    """The end-of-turn model on one intra-op thread: it runs beside the ASR workers, so it
    takes one core's slice at a time and its cost is easy to count."""

    def __init__(self, path: Path | None = None, threads: int = 1) -> None:
        path = path or default_model_path()
        if not path.is_file():
            raise FileNotFoundError(
                f"the end-of-turn model {path} is missing: `make install` fetches it "
                "(from the pipecat-ai 1.14.0 wheel, checked against its sha256)"
            )
        self._session = ort.InferenceSession(str(path), cpu_options(threads), providers=["CPUExecutionProvider"])
        self._features = TurnFeatures()

    def complete(self, samples: np.ndarray) -> float:
        """The probability that the speech in `samples` (16 kHz mono float, the turn so far
        with its trailing silence; only the newest 8 s count) is a finished thought."""
        features = self._features(samples[-TURN_SAMPLES:])[None]
        (out,) = self._session.run(None, {"input_features": features})
        return float(np.asarray(out).reshape(-1)[0])


def _measure(calls: int = 20) -> None:
    """Print the wall time of one call (features and model) on 3 s of noise."""
    model = SmartTurn()
    audio = (0.1 * np.random.default_rng(0).standard_normal(3 * SAMPLE_RATE)).astype(np.float32)
    model.complete(audio)
    start = time.perf_counter()
    for _ in range(calls):
        model.complete(audio)
    print(f"one call: {(time.perf_counter() - start) / calls * 1000:.1f} ms")


if __name__ == "__main__":
    _measure()
