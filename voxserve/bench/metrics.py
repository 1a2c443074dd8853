"""Pure metric functions for the bench, as docs/BENCHMARKS.md ("What the columns mean") defines them.

Numbers in, numbers out: no I/O, no clocks, no HTTP. Times are seconds.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "Stalls",
    "WordErrors",
    "cer_characters",
    "character_error_rate",
    "character_errors",
    "continuity_ok_rate",
    "max_underrun",
    "normalize_text",
    "parse_server_timing",
    "percentile",
    "playback_stalls",
    "summarize",
    "word_error_rate",
    "word_errors",
]

SUMMARY_KEYS = ("mean", "p50", "p95", "p99", "max")


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation between ranks (numpy's default).

    NaN for an empty sequence, so that a level with no successes cannot report 0 ms.
    """
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within [0, 100], got {q}")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def summarize(values: Sequence[float]) -> dict[str, float]:
    """mean, p50, p95, p99 and max of `values` (NaN each when empty), plus the count."""
    values = list(values)
    out: dict[str, float] = {"n": float(len(values))}
    out["mean"] = sum(values) / len(values) if values else math.nan
    for q in (50, 95, 99):
        out[f"p{q}"] = percentile(values, q)
    out["max"] = max(values) if values else math.nan
    return out


def parse_server_timing(value: str) -> dict[str, float]:
    """A `Server-Timing` header's durations in seconds by name (`name;dur=ms, ...`);
    entries without a duration, or with a bad one, are left out."""
    out: dict[str, float] = {}
    for entry in value.split(",")[:64]:
        name, *params = (p.strip() for p in entry.split(";"))
        for param in params:
            key, _, raw = param.partition("=")
            if key.strip().lower() != "dur" or not name:
                continue
            try:
                ms = float(raw.strip().strip('"'))
            except ValueError:
                continue
            if math.isfinite(ms):
                out[name] = ms / 1e3
    return out


def max_underrun(arrivals: Sequence[float], samples: Sequence[int], rate: int) -> float:
    """Largest playback deficit of one stream, in seconds (0.0 if it never ran dry).

    The player starts when chunk 0 arrives and plays in real time with no extra buffer.
    For each later chunk k the deficit is (arrival_k - arrival_0) * rate minus the samples
    received *before* chunk k; a positive deficit is how long the player had been silent
    when chunk k came. `arrivals` and `samples` describe the non-empty chunks, in order.
    """
    if len(arrivals) != len(samples):
        raise ValueError("arrivals and samples must have one entry per chunk")
    if rate <= 0:
        raise ValueError(f"sample rate must be positive, got {rate}")
    worst = 0.0
    received = 0
    for k, (arrival, size) in enumerate(zip(arrivals, samples, strict=True)):
        if k > 0:
            deficit = (arrival - arrivals[0]) * rate - received
            worst = max(worst, deficit)
        received += size
    return worst / rate


@dataclass(frozen=True)
class Stalls:
    """How a stream plays on a player that waits whenever it runs dry."""

    count: int
    """Waits longer than the threshold."""
    total_s: float
    """Their summed length."""
    end_s: float
    """When the last sample has played, on the arrivals' clock (waits included)."""


def playback_stalls(arrivals: Sequence[float], samples: Sequence[int], rate: int,
                    threshold_s: float = 0.0) -> Stalls:
    """Play a stream in real time from its first chunk and count the stalls.

    Unlike `max_underrun`, which keeps the schedule set by the first chunk, this player
    does what a real one does: when it runs dry it waits for the next chunk and goes on
    from there, so one late chunk delays everything after it but is counted once. Every
    wait moves the playback clock; only waits longer than `threshold_s` count as stalls
    (a player's own small buffer hides shorter ones).
    """
    if len(arrivals) != len(samples):
        raise ValueError("arrivals and samples must have one entry per chunk")
    if rate <= 0:
        raise ValueError(f"sample rate must be positive, got {rate}")
    if not arrivals:
        return Stalls(0, 0.0, math.nan)
    count, total = 0, 0.0
    end = arrivals[0]
    for arrival, size in zip(arrivals, samples, strict=True):
        wait = arrival - end
        if wait > 0:
            if wait > threshold_s:
                count += 1
                total += wait
            end = arrival
        end += size / rate
    return Stalls(count, total, end)


def continuity_ok_rate(underruns: Sequence[float], threshold_s: float = 0.1) -> float:
    """Share of streams whose max underrun is <= threshold_s (NaN when there are none)."""
    if not underruns:
        return math.nan
    return sum(1 for u in underruns if u <= threshold_s) / len(underruns)


_SPACES = re.compile(r"\s+")
_WORD_JOINERS = frozenset("-\u2010\u2011\u2012\u2013\u2014/")


def normalize_text(text: str) -> str:
    """Lowercase, drop every Unicode punctuation character, collapse whitespace.

    Apostrophes are punctuation too, so "Don't" and "dont" compare equal on both sides.
    """
    lowered = unicodedata.normalize("NFKC", text).lower()
    kept = []
    for ch in lowered:
        if unicodedata.category(ch).startswith("P"):
            # Joiners split words ("twenty-one" -> "twenty one"); other marks just vanish.
            kept.append(" " if ch in _WORD_JOINERS else "")
        else:
            kept.append(ch)
    return _SPACES.sub(" ", "".join(kept)).strip()


@dataclass(frozen=True)
class WordErrors:
    """Edit counts of one hypothesis against one reference, after normalization."""

    errors: int
    reference_words: int

    @property
    def wer(self) -> float:
        return self.errors / self.reference_words if self.reference_words else math.nan


def word_errors(reference: str, hypothesis: str) -> WordErrors:
    """Substitutions + deletions + insertions (word-level Levenshtein) after normalization."""
    ref = normalize_text(reference).split()
    return WordErrors(_edits(ref, normalize_text(hypothesis).split()), len(ref))


def _edits(ref: Sequence[str], hyp: Sequence[str]) -> int:
    """Levenshtein distance between two sequences (words or characters)."""
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        current = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h))
        previous = current
    return previous[-1]


def word_error_rate(pairs: Sequence[tuple[str, str]]) -> float:
    """Corpus WER over (reference, hypothesis) pairs: total edits / total reference words."""
    counts = [word_errors(ref, hyp) for ref, hyp in pairs]
    words = sum(c.reference_words for c in counts)
    return sum(c.errors for c in counts) / words if words else math.nan


def cer_characters(text: str) -> str:
    """The characters a character error rate counts: NFKC, lower case, without
    punctuation, symbols or spaces (Chinese and Japanese are written without spaces, and
    a judge's punctuation is not speech)."""
    text = unicodedata.normalize("NFKC", text).lower()
    return "".join(ch for ch in text if unicodedata.category(ch)[0] not in "PSZC")


def character_errors(reference: str, hypothesis: str) -> WordErrors:
    """Character-level Levenshtein edits of `cer_characters` of both, and the reference's
    length (in `WordErrors`' fields: errors, reference characters)."""
    ref = cer_characters(reference)
    return WordErrors(_edits(ref, cer_characters(hypothesis)), len(ref))


def character_error_rate(pairs: Sequence[tuple[str, str]]) -> float:
    """Corpus CER over (reference, hypothesis) pairs: total edits / reference characters."""
    counts = [character_errors(ref, hyp) for ref, hyp in pairs]
    chars = sum(c.reference_words for c in counts)
    return sum(c.errors for c in counts) / chars if chars else math.nan
