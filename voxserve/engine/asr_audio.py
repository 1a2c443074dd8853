"""A transcription's audio on its way to the ASR engine: the decoded samples, where they
are cut into pieces, and the samples and encoder window of each piece.

These are pure steps over samples that callers run in their audio pool (through
`ASREngine.prepare` and `ASREngine.piece`); the engine's lock and its workers are not
here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from voxserve.audio.blocks import Samples
from voxserve.audio.chunks import AUTO, Chunking
from voxserve.audio.cut import Span, plan_spans
from voxserve.audio.mel import N_FRAMES, SAMPLE_RATE
from voxserve.engine.adapters.whisper import fitted_window
from voxserve.engine.budget import AudioBudget, Lease
from voxserve.engine.chunking import Hearing, even_pieces, planner
from voxserve.engine.recognizer import Recognizer

__all__ = [
    "ENCODER_30S_AS_SPEECH_S",
    "SILENCE_PEAK",
    "PreparedAudio",
    "cut",
    "live_audio",
    "piece_samples",
]

ENCODER_30S_AS_SPEECH_S = 27.0
"""One encoder pass over a 30 s window costs about as much as beam-decoding 27 s of speech,
and a window of w seconds (w / 30)^2 of it: what `even_pieces` weighs a cut by (the
timings: docs/BENCHMARKS.md, "Tuning constants")."""
SILENCE_PEAK = 10 ** (-60 / 20)
"""A piece whose loudest sample stays under -60 dBFS is not decoded: Whisper would only
hallucinate on it ("you", "Thank you.")."""


@dataclass(frozen=True)
class PreparedAudio:
    audio: Samples
    """16 kHz mono float32: `SampleBlocks` from `prepare`, sliced one piece at a time."""
    spans: list[Span]
    lease: Lease | None = None
    """This audio's share of the engine's buffered-audio budget."""
    fitted: bool = False
    """Encode each piece in a window fitted to it even without `engine/asr.py: FITTED_WINDOWS`
    (live turns)."""
    window: int | None = None
    """Encode every piece in this many feature frames (pieces cut evenly by `even_pieces`:
    one width, so they share batches); None: each piece's own window."""

    def release(self) -> None:
        """Give the audio's share of the budget back (the request is over); idempotent."""
        if self.lease is not None:
            self.lease.release()

    @property
    def duration(self) -> float:
        return len(self.audio) / SAMPLE_RATE


def cut(
    audio: Samples,
    lease: Lease,
    recognizer: Recognizer,
    *,
    chunking: Chunking | None,
    timed: bool,
    through: Hearing | None,
    workers: int,
    ahead: int,
    even_piece_s: float,
) -> PreparedAudio:
    """Decoded audio, holding `lease`, cut into pieces for `recognizer`.

    Cuts fall in the silences the VAD finds (`engine/chunking.py`, with `chunking`'s
    settings, hearing the audio `through` the request's noise filter when it has one). A
    request that shows times (`timed`) on a model that times segments from the cuts gets
    pieces of at most its `timed_piece_s`, and a model that `trims_silence` gets the VAD's
    cuts whatever the audio's length. A file of 2 to `ahead` pieces is cut again into even
    pieces of at most `even_piece_s` for `workers` (`engine/chunking.py: even_pieces`), all
    encoded in the window of the longest. Whether a request shows times never changes a
    Whisper cut: the pieces decide the words, and a transcript must say the same words
    with or without times."""
    if recognizer.timed_piece_s is not None and timed:
        plan = planner(audio, chunking or AUTO, through)
        assert plan is not None
        return PreparedAudio(audio, plan(recognizer.timed_piece_s), lease)
    plan = planner(audio, chunking or (AUTO if recognizer.trims_silence else None), through)
    if plan is None:
        return PreparedAudio(audio, [Span(0, len(audio))], lease)
    spans = plan()
    recut = even_pieces(plan, spans, workers, ahead, even_piece_s, _busiest)
    if recut is spans:
        return PreparedAudio(audio, spans, lease)
    return PreparedAudio(audio, recut, lease, window=fitted_window(max(len(s) for s in recut)))


def live_audio(samples: np.ndarray, budget: AudioBudget) -> PreparedAudio:
    """Audio that is already 16 kHz float32 (a live utterance), cut where it is quiet
    and holding its share of `budget` like an upload."""
    lease = budget.lease()
    try:
        lease.take(len(samples))
        audio = np.ascontiguousarray(samples, dtype=np.float32)
        return PreparedAudio(audio, plan_spans(audio, SAMPLE_RATE), lease, fitted=True)
    except BaseException:
        lease.release()
        raise


def piece_samples(
    prepared: PreparedAudio, index: int, fitted_windows: bool
) -> tuple[np.ndarray, int] | None:
    """A piece's samples and the encoder window it gets (fitted to it when
    `fitted_windows` or the audio asks, else Whisper's 30 s), or None when it is silent."""
    span = prepared.spans[index]
    samples = prepared.audio[span.start : span.end]
    if not len(samples) or max(-float(samples.min()), float(samples.max())) < SILENCE_PEAK:
        return None
    if prepared.window is not None:
        window = prepared.window
    elif prepared.fitted or fitted_windows:
        window = fitted_window(len(samples))
    else:
        window = N_FRAMES
    return samples, window


def _busiest(spans: list[Span], workers: int) -> float:
    """Cost of the largest batch, in seconds of speech decoded, when idle workers take
    consecutive pieces, each its share of what is left (`Batcher.next_batch`): its audio,
    plus each piece's encoder pass in the window fitted to the longest piece."""
    window = fitted_window(max(len(s) for s in spans)) / N_FRAMES
    encoder = ENCODER_30S_AS_SPEECH_S * window * window
    most, first = 0.0, 0
    for free in range(workers, 0, -1):
        take = math.ceil((len(spans) - first) / free)
        if take:
            audio = (spans[first + take - 1].end - spans[first].start) / SAMPLE_RATE
            most = max(most, take * encoder + audio)
        first += take
    return most
