"""Turn one decoded window (a cut piece of at most 30 s) into timed segments and words.

Pure: tokens, alignment and a tokenizer in; dataclasses out. Times are made absolute by
adding the piece's true start, and clamped to the piece, so segments stay monotonic across
cuts. Unlike faster-whisper's batched path, text after the last timestamp is kept (it ends
at the end of the piece) rather than dropped.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from voxserve.runners.whisper import TIME_PRECISION, Alignment, DecodeOutput

__all__ = [
    "TimedSegment",
    "Word",
    "compression_ratio",
    "is_silence",
    "needs_fallback",
    "split_pieces",
    "window_segments",
]

COMPRESSION_RATIO_THRESHOLD = 2.4
LOGPROB_THRESHOLD = -1.0
NO_SPEECH_THRESHOLD = 0.6
PREPEND_PUNCTUATION = "\"'“¿([{-"
APPEND_PUNCTUATION = "\"'.。,，!！?？:：”)]}、"
SENTENCE_END = ".。!！?？"
TOKENS_PER_SECOND = 50  # one encoder frame per 20 ms


class WhisperTokenizer(Protocol):
    timestamp_begin: int
    eot: int

    def decode(self, tokens: list[int]) -> str: ...

    def split_to_word_tokens(self, tokens: list[int]) -> tuple[list[str], list[list[int]]]: ...


@dataclass(frozen=True)
class Word:
    word: str
    start: float
    end: float
    probability: float


@dataclass(frozen=True)
class TimedSegment:
    start: float
    end: float
    text: str
    tokens: tuple[int, ...]
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    temperature: float
    seek: int
    """Start of its piece, in 10 ms feature frames (OpenAI's `seek`)."""
    words: tuple[Word, ...] | None = None


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def is_silence(out: DecodeOutput) -> bool:
    """Whisper's rule: likely no speech, and no confident text either."""
    return out.no_speech_prob > NO_SPEECH_THRESHOLD and out.avg_logprob < LOGPROB_THRESHOLD


def needs_fallback(out: DecodeOutput, text: str) -> bool:
    """Whisper's rule for decoding again at a higher temperature."""
    if is_silence(out):
        return False
    return compression_ratio(text) > COMPRESSION_RATIO_THRESHOLD or out.avg_logprob < LOGPROB_THRESHOLD


def split_pieces(
    tokens: list[int], timestamp_begin: int, duration: float
) -> list[tuple[float, float, list[int]]]:
    """(start, end, text tokens) per timestamped piece, relative to the window.

    A timestamp after text closes a piece; one before text opens it. Text without an
    opening timestamp starts where the previous piece ended; text without a closing one
    ends at `duration`.
    """
    pieces: list[tuple[float, float, list[int]]] = []
    text: list[int] = []
    opened: float | None = None
    last_end = 0.0
    for token in tokens:
        if token < timestamp_begin:
            text.append(token)
            continue
        time = min(duration, (token - timestamp_begin) * TIME_PRECISION)
        if text:
            start = last_end if opened is None else opened
            pieces.append((start, max(start, time), text))
            last_end = max(start, time)
            text = []
            opened = None
        else:
            opened = time
    if text:
        start = last_end if opened is None else opened
        pieces.append((start, max(start, duration), text))
    return pieces


@dataclass
class _Timing:
    word: str
    tokens: list[int]
    start: float
    end: float
    probability: float


def _word_timings(tok: WhisperTokenizer, text_tokens: list[int], alignment: Alignment) -> list[_Timing]:
    """Word timings relative to the window, from the alignment heads' path."""
    words, word_tokens = tok.split_to_word_tokens(text_tokens + [tok.eot])
    if len(word_tokens) <= 1 or len(alignment.text_indices) == 0:
        return []
    boundaries = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    jumps = np.pad(np.diff(alignment.text_indices), (1, 0), constant_values=1).astype(bool)
    jump_times = alignment.time_indices[jumps] / TOKENS_PER_SECOND
    if len(jump_times) == 0:
        return []
    last = len(jump_times) - 1
    starts = jump_times[np.minimum(boundaries[:-1], last)]
    ends = jump_times[np.minimum(boundaries[1:], last)]
    probs = alignment.token_probs
    timings = []
    for i in range(len(word_tokens) - 1):
        a, b = int(boundaries[i]), int(boundaries[i + 1])
        p = float(np.mean(probs[a:b])) if probs[a:b] else 0.0
        timings.append(_Timing(words[i], list(word_tokens[i]), float(starts[i]), float(ends[i]), p))
    _limit_long_words(timings)
    _merge_punctuation(timings)
    return timings


def _limit_long_words(timings: list[_Timing]) -> None:
    """Whisper's hack: a word at a sentence end may not last over twice the median word."""
    durations = np.array([t.end - t.start for t in timings])
    durations = durations[durations.nonzero()]
    if not len(durations):
        return
    max_duration = 2 * min(0.7, float(np.median(durations)))
    for i in range(1, len(timings)):
        t = timings[i]
        if t.end - t.start <= max_duration:
            continue
        if t.word in SENTENCE_END:
            t.end = t.start + max_duration
        elif timings[i - 1].word in SENTENCE_END:
            t.start = t.end - max_duration


def _merge_punctuation(timings: list[_Timing]) -> None:
    """Opening punctuation joins the next word, closing punctuation the previous one.

    Emptied entries stay (with no tokens) so that token counts still line up.
    """
    i, j = len(timings) - 2, len(timings) - 1
    while i >= 0:
        prev, nxt = timings[i], timings[j]
        if prev.word.startswith(" ") and prev.word.strip() in PREPEND_PUNCTUATION:
            nxt.word, nxt.tokens = prev.word + nxt.word, prev.tokens + nxt.tokens
            prev.word, prev.tokens = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(timings):
        prev, nxt = timings[i], timings[j]
        if not prev.word.endswith(" ") and nxt.word in APPEND_PUNCTUATION:
            prev.word, prev.tokens = prev.word + nxt.word, prev.tokens + nxt.tokens
            nxt.word, nxt.tokens = "", []
        else:
            i = j
        j += 1


def window_segments(
    out: DecodeOutput,
    tok: WhisperTokenizer,
    offset: float,
    duration: float,
    temperature: float,
) -> list[TimedSegment]:
    """Absolute-timed segments of one window; none when the window is silence."""
    if is_silence(out):
        return []
    pieces = split_pieces(out.tokens, tok.timestamp_begin, duration)
    timings = None
    if out.alignment is not None:
        text_tokens = [t for t in out.tokens if t < tok.eot]
        timings = _word_timings(tok, text_tokens, out.alignment) if text_tokens else []
    seek = int(round(offset * 100))
    segments: list[TimedSegment] = []
    w = 0
    for start, end, text_tokens in pieces:
        text = tok.decode(text_tokens)
        if not text.strip():
            continue
        words: tuple[Word, ...] | None = None
        if timings is not None:
            mine = []
            taken = 0
            while w < len(timings) and taken < len(text_tokens):
                t = timings[w]
                taken += len(t.tokens)
                w += 1
                if t.word.strip():
                    ws, we = min(max(t.start, 0.0), duration), min(max(t.end, 0.0), duration)
                    mine.append(
                        Word(t.word, round(offset + ws, 3), round(offset + max(ws, we), 3), t.probability)
                    )
            words = tuple(mine)
        segments.append(
            TimedSegment(
                start=round(offset + start, 3),
                end=round(offset + end, 3),
                text=text,
                tokens=tuple(text_tokens),
                avg_logprob=out.avg_logprob,
                compression_ratio=compression_ratio(text),
                no_speech_prob=out.no_speech_prob,
                temperature=temperature,
                seek=seek,
                words=words,
            )
        )
    return segments
