"""The bench's pure metric functions, against values computed by hand."""

from __future__ import annotations

import math

import jiwer
import pytest

from voxserve.bench.metrics import (
    continuity_ok_rate,
    max_underrun,
    normalize_text,
    parse_server_timing,
    percentile,
    summarize,
    word_error_rate,
    word_errors,
)
from voxserve.bench.prompts import BUILTIN_PROMPTS, pick
from voxserve.bench.speech import SpeechRecord, chunk_samples, finish_record

pytestmark = pytest.mark.timeout(10)


def test_percentile_interpolates_between_ranks() -> None:
    values = [4.0, 1.0, 3.0, 2.0]  # sorted: 1 2 3 4
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    assert percentile(values, 50) == pytest.approx(2.5)  # rank 1.5
    assert percentile(values, 99) == pytest.approx(3.97)  # rank 2.97 -> 3 + 0.97
    assert percentile([7.0], 95) == 7.0
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError):
        percentile(values, 101)


def test_summarize() -> None:
    s = summarize([0.1, 0.2, 0.3, 0.4, 1.0])
    assert s["n"] == 5
    assert s["mean"] == pytest.approx(0.4)
    assert s["p50"] == pytest.approx(0.3)
    assert s["p95"] == pytest.approx(0.4 + 0.8 * 0.6)  # rank 3.8
    assert s["max"] == 1.0
    empty = summarize([])
    assert empty["n"] == 0 and math.isnan(empty["p99"]) and math.isnan(empty["mean"])


def test_underrun_of_exactly_150_ms() -> None:
    # 1 kHz so samples are milliseconds. Chunk 0 (100 ms of audio) at t=1.000 s starts the
    # player, which runs dry at t=1.100. Chunk 1 comes at t=1.250: 250 ms played against
    # 100 ms received before it -> 150 ms deficit. Chunk 2 at t=1.300 after 200 samples:
    # 300 - 200 = 100 ms. The worst is 150 ms.
    arrivals = [1.000, 1.250, 1.300]
    samples = [100, 100, 400]
    assert max_underrun(arrivals, samples, 1000) == pytest.approx(0.150)
    # The same trace at 24 kHz: identical seconds.
    assert max_underrun(arrivals, [2400, 2400, 9600], 24000) == pytest.approx(0.150)


def test_underrun_counts_only_samples_received_before_the_chunk() -> None:
    # Chunk 1 carries 10 s of audio, but it cannot cover its own lateness.
    assert max_underrun([0.0, 0.5], [100, 10_000], 1000) == pytest.approx(0.4)
    # A late third chunk after a big second one is fine: 110 ms played of 1100 received.
    assert max_underrun([0.0, 0.01, 1.1], [100, 1000, 50], 1000) == pytest.approx(0.0)


def test_stream_that_keeps_ahead_has_no_underrun() -> None:
    # Each chunk comes exactly when the previous one finishes playing: deficit 0.
    assert max_underrun([0.0, 0.1, 0.2, 0.3], [100, 100, 100, 100], 1000) == pytest.approx(0.0)
    # A stream ahead of the player has negative deficits, reported as 0.
    assert max_underrun([0.0, 0.01, 0.02], [500, 500, 500], 1000) == 0.0
    assert max_underrun([0.3], [100], 1000) == 0.0


def test_continuity_threshold_is_inclusive() -> None:
    deficit_100ms = max_underrun([0.0, 0.2], [100, 100], 1000)
    assert deficit_100ms == pytest.approx(0.1)
    underruns = [0.0, 0.1, 0.150, 0.05]
    assert continuity_ok_rate(underruns, 0.1) == pytest.approx(0.75)
    assert continuity_ok_rate(underruns, 0.2) == 1.0
    assert math.isnan(continuity_ok_rate([], 0.1))


def test_underrun_rejects_mismatched_traces() -> None:
    with pytest.raises(ValueError):
        max_underrun([0.0, 1.0], [100], 1000)
    with pytest.raises(ValueError):
        max_underrun([0.0], [100], 0)


def testchunk_samples_carry_split_samples_to_the_next_chunk() -> None:
    assert chunk_samples([3, 3, 2]) == [1, 2, 1]  # 8 bytes = 4 samples
    assert sum(chunk_samples([1, 1, 1, 1, 7])) == 5


def test_finish_record_from_a_hand_made_trace() -> None:
    rec = SpeechRecord(0, 10, 0.0, 0.0, status=200, sample_rate=1000,
                       chunk_times_s=[0.05, 0.30, 0.32], chunk_bytes=[200, 200, 400],
                       e2el_s=0.40)
    finish_record(rec)
    assert rec.ok
    assert rec.ttfp_s == 0.05
    assert rec.audio_s == pytest.approx(0.4)  # 800 bytes = 400 samples at 1 kHz
    assert rec.rtf == pytest.approx(1.0)
    assert rec.max_underrun_s == pytest.approx(0.15)  # 250 ms after start, 100 received
    empty = finish_record(SpeechRecord(1, 10, 0.0, 0.0, status=200, sample_rate=1000,
                                       e2el_s=0.1))
    assert not empty.ok and empty.error


def test_normalize_text() -> None:
    assert normalize_text("Hello, World!  It's   twenty-one.") == "hello world its twenty one"
    assert normalize_text("“Quoted” — dash…") == "quoted dash"
    assert normalize_text("   ") == ""


def test_word_errors_match_jiwer() -> None:
    ref = "The quick brown fox jumps over the lazy dog."
    hyp = "the quick brown fox jumped over lazy dogs and cats"
    counts = word_errors(ref, hyp)
    # jumps->jumped, dog->dogs (2 subs), "the" deleted, "and cats" inserted
    assert counts.errors == 5 and counts.reference_words == 9
    assert counts.wer == pytest.approx(jiwer.wer(normalize_text(ref), normalize_text(hyp)))
    assert word_errors("Hello, there!", "hello there").errors == 0


def test_corpus_wer_weights_by_reference_words() -> None:
    pairs = [("one two three four", "one two three four"), ("five six", "five")]
    assert word_error_rate(pairs) == pytest.approx(1 / 6)
    assert word_error_rate([("a b", "")]) == 1.0
    assert math.isnan(word_error_rate([]))


def test_pick_is_seeded_and_cycles() -> None:
    a = pick(BUILTIN_PROMPTS, 50, seed=3)
    assert a == pick(BUILTIN_PROMPTS, 50, seed=3)
    assert len(a) == 50 and set(a[: len(BUILTIN_PROMPTS)]) == set(BUILTIN_PROMPTS)
    assert 30 <= len(BUILTIN_PROMPTS) <= 50
    lengths = sorted(len(p) for p in BUILTIN_PROMPTS)
    assert lengths[0] < 20 and lengths[-1] > 400


def test_server_timing_is_read_in_seconds_and_odd_entries_are_skipped() -> None:
    value = 'text;dur=1.5, acoustic;desc="two threads";dur=20, cache;desc=hit, bad;dur=x, total;dur=31.25'
    assert parse_server_timing(value) == {"text": 0.0015, "acoustic": 0.02, "total": 0.03125}
    assert parse_server_timing("") == {}
