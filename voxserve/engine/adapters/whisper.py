"""Whisper as a recognizer (`engine/recognizer.py`): its runners (CTranslate2 on a CPU,
torch, or the simulated device) behind the engine's seam.

What is Whisper's own lives here: the start-of-transcript sequence and the prompt
(`WhisperModel.options`), the temperature ladder, the compression-ratio and
log-probability checks that send a piece to the next temperature, the loop check that
decodes a piece of a fitted window again in Whisper's own 30 s, and the alignment heads'
word timings (`engine/segments.py`). A batch key is the piece's decoding options.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from voxserve.audio.mel import N_FRAMES, SAMPLE_RATE
from voxserve.engine.recognizer import Abilities, Decoded, Piece, Retry, TranscribeOptions
from voxserve.engine.segments import (
    COMPRESSION_RATIO_THRESHOLD,
    compression_ratio,
    ends_in_a_loop,
    needs_fallback,
    window_segments,
)
from voxserve.engine.threads import run_lowered
from voxserve.runners.whisper.interface import (
    AudioInput,
    BatchedWhisperModel,
    DecodeInput,
    DecodeOptions,
    DecodeOutput,
    WhisperModel,
)

__all__ = ["FALLBACK_TEMPERATURES", "WhisperRecognizer", "best_attempt"]

FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
"""The temperatures a piece is decoded at in turn while it fails Whisper's checks."""

WhisperInput = DecodeInput | AudioInput


class WhisperRecognizer:
    """A loaded Whisper model. On a batched device (`batched`) a piece goes to the
    runner as raw samples and the runner makes the batch's log-mel on the device; on a
    CPU the audio pool makes each piece's log-mel."""

    timed_piece_s: float | None = None
    """Whisper times words from its alignment heads, and segments from its words."""
    trims_silence = False

    def __init__(self, runner: WhisperModel, batched: bool, beam_size: int, memory_mb: float = 0.0):
        if batched and not isinstance(runner, BatchedWhisperModel):
            raise TypeError(f"{type(runner).__name__} takes no raw audio: it cannot serve a batched device")
        self.runner = runner
        self.batched = batched
        self.beam_size = beam_size
        self.name = runner.name
        self.memory_mb = memory_mb
        self.mel = runner.log_mel()
        self.abilities = Abilities(
            languages=tuple(runner.languages),
            detects_language=runner.multilingual,
            translates=runner.multilingual,
            word_timings=True,
            prompt=True,
            logprobs=True,
        )

    # -- the seam ----------------------------------------------------------------------
    def attempts(self, options: TranscribeOptions, beam_size: int) -> list[Hashable]:
        temperatures = (options.temperature,) if options.temperature > 0 else FALLBACK_TEMPERATURES
        return [
            self.runner.options(options.task, options.language, options.prompt, beam_size, t)
            for t in temperatures
        ]

    def input(self, samples: np.ndarray, window: int) -> WhisperInput:
        if self.batched:
            return AudioInput(np.array(samples, dtype=np.float32), window)
        features, frames = self.mel(samples)
        if window < features.shape[-1]:
            features = np.ascontiguousarray(features[:, :window])
        return DecodeInput(features, frames)

    def prepared(self, piece: Any, options: TranscribeOptions) -> WhisperInput:
        """The piece aligned to its text when the request shows times or log-probabilities
        (the alignment gives both)."""
        assert isinstance(piece, DecodeInput | AudioInput)
        return replace(piece, align=options.timings or options.logprobs)

    def width(self, piece: Any) -> int:
        """Feature frames of the piece's encoder window on a CPU (pieces of one window
        share a batch); 0 on a batched device, which pads a batch to its widest piece:
        one fuller batch costs it less than several narrow ones."""
        return 0 if self.batched else _window(piece)

    def decode(self, inputs: Sequence[Any], key: Hashable, threads: int = 1) -> list[DecodeOutput]:
        assert isinstance(key, DecodeOptions)
        if self.batched:
            runner = self.runner
            assert isinstance(runner, BatchedWhisperModel)
            return runner.run_audio([x for x in inputs if isinstance(x, AudioInput)], key)
        return self.runner.run([x for x in inputs if isinstance(x, DecodeInput)], key, threads)

    def judge(
        self, piece: Piece, key: Hashable, out: Any, attempts: int, options: TranscribeOptions
    ) -> Retry | Decoded:
        """A fitted piece whose text ends in a loop is decoded again in the 30 s window
        (the same attempt); one that fails Whisper's checks goes to the next temperature
        while there is one; then the best attempt gives the segments."""
        assert isinstance(key, DecodeOptions) and isinstance(out, DecodeOutput)
        tok = self.runner.tokenizer(options.task, out.language or options.language)
        text = tok.decode([t for t in out.tokens if t < tok.eot])
        if _window(piece.input) < N_FRAMES and ends_in_a_loop(text):
            return Retry(_widened(piece.input), advance=False)
        piece.tried.append((out, text, key.temperature))
        if needs_fallback(out, text) and piece.attempt + 1 < attempts:
            return Retry(piece.input, advance=True)
        best, _, temperature = best_attempt(piece.tried)
        segments = window_segments(best, tok, piece.offset, piece.duration, temperature, options.logprobs)
        return Decoded(segments, best.language)

    def warm(self, solo_threads: int, nice: int) -> None:
        """Decode one second of silence (aligned), and load the solo replica."""
        opts = self.runner.options("transcribe", "en", None, self.beam_size, 0.0)
        silence = np.zeros(SAMPLE_RATE, dtype=np.float32)
        piece = replace(self.input(silence, fitted_window(len(silence))), align=True)
        self.decode([piece], opts)
        if solo_threads > 1 and not self.batched:
            # Loads the solo replica; its threads inherit the lowered priority.
            run_lowered(nice, self.decode, [piece], opts, solo_threads)


LIVE_WINDOW_MIN_S = 10.0
LIVE_WINDOW_STEP_S = 5.0
LIVE_WINDOW_MARGIN_S = 1.0
"""A piece under 30 s (a live turn; a short file) is encoded in a window sized to it,
not Whisper's full 30 s: its audio plus 1 s, rounded up to 5 s steps, at least 10 s,
which keeps the WER of 30 s windows (docs/BENCHMARKS.md, "Tuning constants"). A fitted
piece whose text ends in a loop is decoded again in 30 s (`ends_in_a_loop`): in a short
window Whisper sometimes repeats the last words."""


def fitted_window(samples: int) -> int:
    """Feature frames (10 ms each) of the encoder window fitted to this many samples."""
    seconds = samples / SAMPLE_RATE + LIVE_WINDOW_MARGIN_S
    window = max(LIVE_WINDOW_MIN_S, math.ceil(seconds / LIVE_WINDOW_STEP_S) * LIVE_WINDOW_STEP_S)
    return min(N_FRAMES, round(window * 100))


def _window(piece: WhisperInput) -> int:
    """Feature frames of the encoder window a piece asks for."""
    return piece.window if isinstance(piece, AudioInput) else int(piece.features.shape[-1])


def _widened(piece: WhisperInput) -> WhisperInput:
    """The piece in Whisper's own 30 s window. Host features past the piece's audio are
    zeros (`LogMel`), so padding them gives exactly those."""
    if isinstance(piece, AudioInput):
        return replace(piece, window=N_FRAMES)
    width = piece.features.shape[-1]
    return replace(piece, features=np.pad(piece.features, ((0, 0), (0, N_FRAMES - width))))


def best_attempt(tried: list[tuple[DecodeOutput, str, float]]) -> tuple[DecodeOutput, str, float]:
    """The last attempt if it passed; otherwise Whisper's pick among all attempts."""
    out, text, _ = tried[-1]
    if len(tried) == 1 or not needs_fallback(out, text):
        return tried[-1]
    readable = [t for t in tried if compression_ratio(t[1]) <= COMPRESSION_RATIO_THRESHOLD]
    return max(readable or tried, key=lambda t: t[0].avg_logprob)
