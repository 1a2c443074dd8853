"""Turn one decoded window (a cut piece of at most 30 s) into timed segments and words.

Pieces are decoded as text only (see `DecodeOptions.without_timestamps`). When timings are
asked for, the alignment heads give each word its time, and the words are grouped into
sentence-sized segments; otherwise a piece is one segment spanning it. Times are made
absolute by adding the piece's true start and are clamped to the piece, so segments stay
monotonic across cuts. Pure: tokens, alignment and a tokenizer in; dataclasses out.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from voxserve.runners.whisper.interface import Alignment, DecodeOutput

__all__ = [
    "TimedSegment",
    "TokenLogprob",
    "Word",
    "compression_ratio",
    "ends_in_a_loop",
    "group_sentences",
    "is_silence",
    "needs_fallback",
    "window_segments",
]

COMPRESSION_RATIO_THRESHOLD = 2.4
LOGPROB_THRESHOLD = -1.0
NO_SPEECH_THRESHOLD = 0.6
PREPEND_PUNCTUATION = "\"'“¿([{-"
APPEND_PUNCTUATION = "\"'.。,，!！?？:：”)]}、"
SENTENCE_END = ".。!！?？"
LOOP_MIN_WORDS = 2
"""A text that ends by saying its last words again, back to back, this many words or more
("... an easy way to travel. Food and an easy way to travel", "Hello there. Hello
there."), is a decoding loop: people rarely say a phrase twice back to back, and a short
window makes Whisper do it (`scripts/bench/window_probe.py` counts what this catches)."""
_WORD = re.compile(r"\w+(?:'\w+)*")
CLAUSE_END = ",，;；:："
SOFT_SPLIT_S = 8.0
"""A segment this long ends at the next clause mark."""
HARD_SPLIT_S = 15.0
"""A segment this long ends at the next word."""
TOKENS_PER_SECOND = 50  # one encoder frame per 20 ms


class WhisperTokenizer(Protocol):
    @property
    def timestamp_begin(self) -> int: ...

    @property
    def eot(self) -> int: ...

    def decode(self, tokens: list[int]) -> str: ...

    def split_to_word_tokens(self, tokens: list[int]) -> tuple[list[str], list[list[int]]]: ...


@dataclass(frozen=True)
class Word:
    word: str
    start: float
    end: float
    probability: float


@dataclass(frozen=True)
class TokenLogprob:
    """One text token's log-probability, in OpenAI's `logprobs` shape."""

    token: str
    logprob: float
    bytes: tuple[int, ...]


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
    logprobs: tuple[TokenLogprob, ...] | None = None
    """Each text token's log-probability, when the request asks for them."""


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


def ends_in_a_loop(text: str) -> bool:
    """Whether `text` ends with a run of at least `LOOP_MIN_WORDS` words said twice in a
    row (case and punctuation aside). Whisper does this when it decodes past the end of
    the speech in a short encoder window; speech itself almost never does it. The
    compression-ratio rule misses it: one repeat does not compress enough."""
    words = [w.lower() for w in _WORD.findall(text)]
    return any(
        words[-k:] == words[-2 * k : -k] for k in range(LOOP_MIN_WORDS, len(words) // 2 + 1)
    )


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


def group_sentences(words: list[Word]) -> list[list[Word]]:
    """Subtitle-sized groups: end at a sentence mark, at a clause mark after
    `SOFT_SPLIT_S`, or anywhere after `HARD_SPLIT_S`."""
    groups: list[list[Word]] = []
    current: list[Word] = []
    for word in words:
        current.append(word)
        text = word.word.strip()
        length = word.end - current[0].start
        if (
            text[-1:] in tuple(SENTENCE_END)
            or (length >= SOFT_SPLIT_S and text[-1:] in tuple(CLAUSE_END))
            or length >= HARD_SPLIT_S
        ):
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups


def _words(timings: list[_Timing], offset: float, duration: float) -> list[tuple[Word, list[int]]]:
    """Absolute, clamped, monotonic words with the tokens each one carries."""
    out: list[tuple[Word, list[int]]] = []
    floor = 0.0
    for t in timings:
        if not t.word.strip():
            if t.tokens and out:  # keep every token with some word
                out[-1][1].extend(t.tokens)
            continue
        start = min(max(t.start, floor), duration)
        end = min(max(t.end, start), duration)
        floor = start
        word = Word(t.word, round(offset + start, 3), round(offset + end, 3), t.probability)
        out.append((word, list(t.tokens)))
    return out


def window_segments(
    out: DecodeOutput,
    tok: WhisperTokenizer,
    offset: float,
    duration: float,
    temperature: float,
    logprobs: bool = False,
) -> list[TimedSegment]:
    """Absolute-timed segments of one window; none when the window is silence. With
    `logprobs`, each segment carries its text tokens' log-probabilities: the alignment's
    probability of each token given the ones before it and the audio."""
    if is_silence(out):
        return []
    text_tokens = [t for t in out.tokens if t < tok.eot]
    text = tok.decode(text_tokens)
    if not text.strip():
        return []

    segment = _segment_maker(out, tok, offset, temperature, logprobs)
    words = []
    if out.alignment is not None:
        words = _words(_word_timings(tok, text_tokens, out.alignment), offset, duration)
    if not words:
        return [segment(offset, offset + duration, text, text_tokens, None, 0)]
    by_word = {id(w): tokens for w, tokens in words}
    segments = []
    first = 0
    for group in group_sentences([w for w, _ in words]):
        tokens = [t for w in group for t in by_word[id(w)]]
        segments.append(
            segment(group[0].start, group[-1].end, "".join(w.word for w in group), tokens, tuple(group), first)
        )
        first += len(tokens)
    return segments


def _segment_maker(
    out: DecodeOutput, tok: WhisperTokenizer, offset: float, temperature: float, logprobs: bool
) -> Callable[[float, float, str, list[int], tuple[Word, ...] | None, int], TimedSegment]:
    """What makes one segment of a window: (start, end, text, its tokens, its words, the
    index of its first text token in the window) -> the segment, with the window's scores,
    and with `logprobs` its text tokens' log-probabilities: the alignment's probability
    of each token given the ones before it and the audio."""
    probs: dict[int, float] = {}
    if logprobs and out.alignment is not None:
        probs = dict(enumerate(out.alignment.token_probs))

    def token_logprobs(first: int, tokens: list[int]) -> tuple[TokenLogprob, ...] | None:
        if not logprobs:
            return None
        return tuple(_token_logprob(tok, t, probs.get(first + i)) for i, t in enumerate(tokens))

    def segment(
        start: float, end: float, text: str, tokens: list[int], words: tuple[Word, ...] | None, first: int
    ) -> TimedSegment:
        return TimedSegment(
            start=round(start, 3),
            end=round(end, 3),
            text=text,
            tokens=tuple(tokens),
            avg_logprob=out.avg_logprob,
            compression_ratio=compression_ratio(text),
            no_speech_prob=out.no_speech_prob,
            temperature=temperature,
            seek=round(offset * 100),
            words=words,
            logprobs=token_logprobs(first, tokens),
        )

    return segment


def _token_logprob(tok: WhisperTokenizer, token: int, probability: float | None) -> TokenLogprob:
    """A token's text, its log-probability (a floor of 1e-10 under it) and its bytes."""
    text = tok.decode([token])
    p = probability if probability is not None else 0.0
    return TokenLogprob(text, round(math.log(max(p, 1e-10)), 6), tuple(text.encode("utf-8")))
