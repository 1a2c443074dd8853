"""Moonshine base-en as a recognizer (`engine/recognizer.py`), over its ONNX Runtime runner
(`runners/moonshine/onnx_runner.py`).

Moonshine takes a piece of audio at its own length (no 30 s window), decodes greedily,
and has no alignment heads, so it gives no word times. A piece is decoded once: there is
no temperature ladder, and a piece whose tokens reach the runner's budget is a loop that
another temperature rarely mends. Its segments are timed from the cuts: a request that
shows times gets pieces cut at pauses into at most `TIMED_PIECE_S` seconds, each one
segment, so that subtitles stay sentence-sized. It speaks English only.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from voxserve.engine.recognizer import Abilities, Decoded, Piece, Retry, TranscribeOptions
from voxserve.engine.segments import TimedSegment, TokenLogprob, compression_ratio
from voxserve.engine.threads import run_lowered
from voxserve.runners.moonshine.onnx_runner import (
    MIN_SAMPLES,
    SAMPLE_RATE,
    MoonshineOutput,
    MoonshineRunner,
)

__all__ = ["TIMED_PIECE_S", "MoonshineRecognizer"]

TIMED_PIECE_S = 10.0
"""The longest piece, hence the longest segment, of a request that shows times: a
subtitle's length, cut at a pause (`engine/chunking.py`)."""

_KEY = ("moonshine", "greedy")
"""The one batch key: every piece is decoded alike."""


class MoonshineRecognizer:
    """A loaded Moonshine model, shared by every decoding worker (an ONNX Runtime session
    runs from several threads at once)."""

    timed_piece_s: float | None = TIMED_PIECE_S
    trims_silence = True
    """Leading and trailing silence is cut off every upload: a piece that starts with a
    second of silence can come back empty from Moonshine."""

    def __init__(self, runner: MoonshineRunner, memory_mb: float = 0.0):
        self.runner = runner
        self.name = runner.name
        self.memory_mb = memory_mb
        self.abilities = Abilities(
            languages=tuple(runner.languages),
            detects_language=False,
            translates=False,
            word_timings=False,
            prompt=False,
            logprobs=True,
        )

    @classmethod
    def load(cls) -> MoonshineRecognizer:
        return cls(MoonshineRunner(threads=1))

    def attempts(self, options: TranscribeOptions, beam_size: int) -> list[Hashable]:
        return [_KEY]

    def input(self, samples: np.ndarray, window: int) -> np.ndarray:
        """The piece's samples, at least the encoder's shortest input (zeros after)."""
        piece = np.array(samples, dtype=np.float32)
        if len(piece) < MIN_SAMPLES:
            piece = np.pad(piece, (0, MIN_SAMPLES - len(piece)))
        return piece

    def prepared(self, piece: Any, options: TranscribeOptions) -> Any:
        return piece

    def width(self, piece: Any) -> int:
        """0: pieces of any lengths share a batch (the runner encodes each at its own
        length and decodes them together)."""
        return 0

    def decode(self, inputs: Sequence[Any], key: Hashable, threads: int = 1) -> list[MoonshineOutput]:
        return self.runner.run(list(inputs), threads=threads)

    def judge(
        self, piece: Piece, key: Hashable, out: Any, attempts: int, options: TranscribeOptions
    ) -> Retry | Decoded:
        assert isinstance(out, MoonshineOutput)
        text = out.text.strip()
        if not text:
            return Decoded([], "en")
        logprobs = None
        if options.logprobs:
            strings = self.runner.tokenizer.token_strings(out.tokens)
            raw = self.runner.tokenizer.token_bytes(out.tokens)
            logprobs = tuple(
                TokenLogprob(s, round(lp, 6), tuple(b)) for s, lp, b in zip(strings, out.logprobs, raw, strict=True)
            )
        segment = TimedSegment(
            start=round(piece.offset, 3),
            end=round(piece.offset + piece.duration, 3),
            text=" " + text,
            tokens=tuple(out.tokens),
            avg_logprob=out.avg_logprob,
            compression_ratio=compression_ratio(text),
            no_speech_prob=0.0,
            temperature=0.0,
            seek=round(piece.offset * 100),
            logprobs=logprobs,
        )
        return Decoded([segment], "en")

    def warm(self, solo_threads: int, nice: int) -> None:
        """Decode a second of silence, on one thread and on the solo session set."""
        silence = np.zeros(SAMPLE_RATE, dtype=np.float32)
        self.decode([silence], _KEY, 1)
        if solo_threads > 1:
            run_lowered(nice, self.decode, [silence], _KEY, solo_threads)
