"""How an upload is cut into pieces: Silero VAD over the decoded audio, then the pure
planner (`audio/chunks.py: plan_chunks`).

The rule: a request with a `chunking_strategy` is cut where its VAD settings allow; a
request without one is cut the same way with `AUTO` once its audio is over one piece
(30 s), because a cut in a VAD silence loses no word where an energy cut can (docs/ASR.md,
"Cutting"). Audio of at most 30 s with no strategy is one piece, and nothing runs.

The VAD is cheap beside the decoding it plans (Silero, one thread); it runs
in the caller's thread, the audio pool, over the audio in blocks of at most
`VAD_BLOCK_SAMPLES`, so an hour-long upload is never copied whole. One model is loaded
on first use and shared: an ONNX Runtime session may run from several threads at once,
and each call carries its own `VADStream`. No HTTP, no asyncio here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from voxserve.audio.blocks import Samples
from voxserve.audio.chunks import AUTO, Chunking, plan_chunks
from voxserve.audio.cut import Span
from voxserve.runners.vad import FRAME_SAMPLES, SAMPLE_RATE, SileroVAD, VADStream

__all__ = ["MAX_PIECE_S", "Cost", "Planner", "even_pieces", "plan_pieces", "planner", "speech_probabilities"]

MAX_PIECE_S = 30.0
"""Whisper's window: the longest piece."""
VAD_BLOCK_SAMPLES = 256 * FRAME_SAMPLES
"""Samples scored per call (8 s): a bounded copy out of `SampleBlocks`."""

EVEN_LIMIT_RANGE_S = 2.0
EVEN_LIMIT_STEP_S = 1.0
"""`even_pieces` tries limits from the longest piece down by 2 s in 1 s steps: three
plans, a few ms each once the probabilities are known."""

Cost = Callable[[list[Span], int], float]
"""The work of a plan's busiest worker, given its pieces and the workers."""

_lock = threading.Lock()
_vad: SileroVAD | None = None


def _model() -> SileroVAD:
    global _vad
    with _lock:
        if _vad is None:
            _vad = SileroVAD()
        return _vad


class Hearing(Protocol):
    """A stateful filter the VAD hears the audio through (`engine/denoise.py:
    FileFilter`): its output keeps the input's sample indices, the newest samples held
    back until `flush`."""

    def feed(self, samples: np.ndarray) -> np.ndarray: ...

    def flush(self) -> np.ndarray: ...


def speech_probabilities(audio: Samples, vad: SileroVAD | None = None, through: Hearing | None = None) -> np.ndarray:
    """Speech probability of each whole 32 ms frame of 16 kHz `audio`, heard `through` a
    filter when one is given (the frames keep the audio's indices)."""
    model = vad or _model()
    stream = VADStream()
    n = len(audio)
    parts = []
    for lo in range(0, n, VAD_BLOCK_SAMPLES):
        block = audio[lo : min(n, lo + VAD_BLOCK_SAMPLES)]
        parts.append(model.score(stream, block if through is None else through.feed(block)))
    if through is not None:
        parts.append(model.score(stream, through.flush()))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


@dataclass(frozen=True)
class Planner:
    """One upload's speech probabilities, ready to plan pieces of any length limit."""

    audio: Samples
    probs: np.ndarray
    chunking: Chunking

    def __call__(self, max_seconds: float = MAX_PIECE_S) -> list[Span]:
        return plan_chunks(self.audio, self.probs, SAMPLE_RATE, self.chunking, max_seconds)


def planner(audio: Samples, chunking: Chunking | None, through: Hearing | None = None) -> Planner | None:
    """The VAD planner for `audio` (16 kHz) by the rule of this module, the VAD hearing
    the audio `through` a noise filter when one is given; None when the audio is one
    piece (at most 30 s and no strategy asked for)."""
    if chunking is None:
        if len(audio) <= int(MAX_PIECE_S * SAMPLE_RATE):
            return None
        chunking = AUTO
    return Planner(audio, speech_probabilities(audio, through=through), chunking)


def plan_pieces(audio: Samples, chunking: Chunking | None, max_seconds: float = MAX_PIECE_S) -> list[Span]:
    """The pieces `audio` (16 kHz) is decoded in, by the rule of this module."""
    plan = planner(audio, chunking)
    return [Span(0, len(audio))] if plan is None else plan(max_seconds)


def even_pieces(
    plan: Planner, spans: list[Span], workers: int, most: int, longest: float, cost: Cost
) -> list[Span]:
    """`spans` recut by `plan` into even pieces of at most `longest` seconds: of the
    limits `longest` and up to `EVEN_LIMIT_RANGE_S` below it, the plan whose busiest
    worker has the least work (`cost`), preferring a number of pieces that is a multiple
    of `workers`; `spans` itself for a file of one piece or of more than `most`, or with
    `longest` 0. Why even pieces: docs/ASR.md, "Even short pieces"."""
    if len(spans) < 2 or len(spans) > most or longest <= 0:
        return spans
    best: list[Span] | None = None
    best_load = (1, 0.0)
    limit = longest
    while limit >= longest - EVEN_LIMIT_RANGE_S:
        planned = plan(limit)
        load = (len(planned) % workers, cost(planned, workers))
        if best is None or load < best_load:
            best, best_load = planned, load
        limit -= EVEN_LIMIT_STEP_S
    return best or spans
