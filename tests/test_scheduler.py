"""The pure scheduler, driven with a fake clock and plain objects."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from voxserve.config import VocoderChunking
from voxserve.engine.scheduler import AcousticWork, Latent, ModelProfile, Scheduler, VocoderWork

HOP, RATE = 256, 22050
FRAME_S = HOP / RATE
PIPER = ModelProfile("piper", HOP, RATE, VocoderChunking())
WHOLE = ModelProfile("whole", 600, 24000, None, acoustic_s_per_id=3e-3)
"""A second model: another hop and rate, and a decoder that takes whole segments."""


@dataclass(frozen=True)
class Ids:
    ids: np.ndarray


def seg(n: int = 5) -> Ids:
    return Ids(np.arange(n, dtype=np.int64))


def latent(frames: int) -> Latent:
    return Latent(np.zeros((192, frames), dtype=np.float32), frames)


def make(credits: int = 4, slack: float = 0.15) -> Scheduler:
    return Scheduler(credits=credits, urgent_slack=slack)


def start_stream(
    s: Scheduler, sid: int, now: float, frames: int = 200, segments: int = 1, profile: ModelProfile = PIPER
) -> None:
    """Add a stream, run its first stage A and first chunk at `now`."""
    s.add(sid, [seg() for _ in range(segments)], now, profile)
    work = s.next_work(now)
    assert isinstance(work, AcousticWork) and work.stream_id == sid
    s.complete_acoustic(work, latent(frames))
    chunk = s.next_work(now)
    assert isinstance(chunk, VocoderWork) and chunk.stream_id == sid
    s.complete_vocoder(chunk, (chunk.end - chunk.start) * profile.hop, now)
    s.taken(sid)


def test_first_chunk_is_small_then_regular_with_context() -> None:
    s = make()
    s.add(1, [seg()], 0.0, PIPER)
    a = s.next_work(0.0)
    assert isinstance(a, AcousticWork)
    s.complete_acoustic(a, latent(100))
    first = s.next_work(0.0)
    assert isinstance(first, VocoderWork)
    assert (first.lo, first.start, first.end, first.hi) == (0, 0, 16, 26)
    s.complete_vocoder(first, 16 * HOP, 0.0)
    second = s.next_work(0.0)
    assert isinstance(second, VocoderWork)
    assert (second.lo, second.start, second.end, second.hi) == (6, 16, 48, 58)
    assert second.crop == (10, 42)


def test_tail_is_merged_and_covers_every_frame() -> None:
    s = make(credits=100)
    s.add(1, [seg()], 0.0, PIPER)
    a = s.next_work(0.0)
    assert isinstance(a, AcousticWork)
    s.complete_acoustic(a, latent(90))
    spans, last = [], None
    while (w := s.next_work(0.0)) is not None:
        assert isinstance(w, VocoderWork)
        spans.append((w.start, w.end))
        last = s.complete_vocoder(w, (w.end - w.start) * HOP, 0.0)
    assert spans == [(0, 16), (16, 48), (48, 90)]  # 42 frames: no 10-frame tail chunk
    assert last is not None and last.last and not s.has(1)


def test_new_stream_goes_before_live_stream_with_slack() -> None:
    s = make()
    start_stream(s, 1, now=0.0)  # 16 frames out: dry at 0.186 s
    s.add(2, [seg()], 0.01, PIPER)
    work = s.next_work(0.02)
    assert isinstance(work, AcousticWork) and work.stream_id == 2


def test_live_stream_about_to_underrun_outranks_new_stream() -> None:
    s = make()
    start_stream(s, 1, now=0.0)
    s.add(2, [seg()], 0.1, PIPER)
    dry = 16 * FRAME_S
    work = s.next_work(dry - 0.05)  # within the 150 ms slack
    assert isinstance(work, VocoderWork) and work.stream_id == 1


def test_earliest_deadline_first_among_live_streams() -> None:
    s = make()
    start_stream(s, 1, now=0.0)
    start_stream(s, 2, now=-0.1)  # started earlier: runs dry earlier
    work = s.next_work(0.0)
    assert isinstance(work, VocoderWork) and work.stream_id == 2


def test_credits_skip_a_stream_that_does_not_read() -> None:
    s = make(credits=2)
    start_stream(s, 1, now=0.0)
    start_stream(s, 2, now=0.0)
    # Stream 1's client takes nothing more: after 2 untaken chunks it is skipped.
    seen = []
    for _ in range(6):
        w = s.next_work(0.0)
        if w is None:
            break
        seen.append(w.stream_id)
        assert isinstance(w, VocoderWork)
        s.complete_vocoder(w, (w.end - w.start) * HOP, 0.0)
        if w.stream_id == 2:
            s.taken(2)
    assert seen.count(1) == 2
    assert seen.count(2) >= 3
    s.taken(1)
    nxt = s.next_work(10.0)
    assert nxt is not None and nxt.stream_id == 1


def test_in_flight_chunk_spends_credit() -> None:
    s = make(credits=1)
    start_stream(s, 1, now=0.0)
    w = s.next_work(0.0)
    assert isinstance(w, VocoderWork)
    assert s.next_work(0.0) is None  # one chunk in flight, none more allowed


def test_stage_a_runs_one_sentence_ahead_after_first_packet() -> None:
    s = make()
    s.add(1, [seg(), seg(), seg()], 0.0, PIPER)
    a0 = s.next_work(0.0)
    assert isinstance(a0, AcousticWork)
    s.complete_acoustic(a0, latent(100))
    assert isinstance(s.next_work(0.0), VocoderWork)
    # Before the first packet, no look-ahead: the core stays free for other first chunks.
    assert s.next_work(0.0) is None
    first = VocoderWork(1, 0, latent(100), 0, 26, 0, 16, False)
    s.complete_vocoder(first, 16 * HOP, 0.0)
    s.taken(1)
    nxt = [s.next_work(0.0), s.next_work(0.0)]
    kinds = sorted(type(w).__name__ for w in nxt)
    assert kinds == ["AcousticWork", "VocoderWork"]
    a1 = next(w for w in nxt if isinstance(w, AcousticWork))
    assert a1.segment == 1
    s.complete_acoustic(a1, latent(50))
    assert not any(isinstance(s.next_work(0.0), AcousticWork) for _ in range(2))


def test_abort_drops_all_work_and_ignores_late_results() -> None:
    s = make()
    s.add(1, [seg(), seg()], 0.0, PIPER)
    a = s.next_work(0.0)
    assert s.pending_work(1)
    assert s.abort(1)
    assert not s.pending_work(1) and not s.has(1)
    assert isinstance(a, AcousticWork)
    s.complete_acoustic(a, latent(40))  # late result: ignored
    assert s.next_work(0.0) is None and len(s) == 0


def test_empty_last_segment_still_ends_the_stream() -> None:
    s = make()
    s.add(1, [seg()], 0.0, PIPER)
    a = s.next_work(0.0)
    assert isinstance(a, AcousticWork)
    s.complete_acoustic(a, latent(0))
    w = s.next_work(0.0)
    assert isinstance(w, VocoderWork) and w.last and w.hi == w.lo
    chunk = s.complete_vocoder(w, 0, 0.0)
    assert chunk is not None and chunk.last and not s.has(1)


def test_rejects_empty_and_duplicate_streams() -> None:
    s = make()
    with pytest.raises(ValueError):
        s.add(1, [], 0.0, PIPER)
    s.add(1, [seg()], 0.0, PIPER)
    with pytest.raises(ValueError):
        s.add(1, [seg()], 0.0, PIPER)


def test_chunks_grow_to_the_maximum() -> None:
    s = make(credits=100)
    s.add(1, [seg()], 0.0, PIPER)
    a = s.next_work(0.0)
    assert isinstance(a, AcousticWork)
    s.complete_acoustic(a, latent(200))
    spans = []
    while (w := s.next_work(0.0)) is not None:
        assert isinstance(w, VocoderWork)
        spans.append((w.start, w.end))
        s.complete_vocoder(w, (w.end - w.start) * HOP, 0.0)
    assert spans == [(0, 16), (16, 48), (48, 112), (112, 200)]


def test_stage_a_leaves_a_worker_for_the_vocoder() -> None:
    s = Scheduler(credits=4, acoustic_slots=1)
    start_stream(s, 1, now=0.0, segments=2)
    s.add(2, [seg()], 0.0, PIPER)
    s.add(3, [seg()], 0.0, PIPER)
    first = s.next_work(0.0)
    assert isinstance(first, AcousticWork) and first.stream_id == 2  # new stream first
    second = s.next_work(0.0)
    # Stream 3's stage A would also be a new stream's first work, but one stage A is
    # already running and stream 1 has vocoder work: that goes next.
    assert isinstance(second, VocoderWork) and second.stream_id == 1
    s.complete_acoustic(first, latent(50), elapsed=0.01)
    third = s.next_work(0.0)
    assert isinstance(third, VocoderWork) and third.stream_id == 2  # its first chunk
    fourth = s.next_work(0.0)
    assert isinstance(fourth, AcousticWork) and fourth.stream_id == 3


def test_stage_a_cost_estimate_moves_its_deadline() -> None:
    s = make()
    assert s.acoustic_s_per_id("piper") is None
    s.add(1, [seg()], 0.0, PIPER)
    before = s.acoustic_s_per_id("piper")
    assert before == PIPER.acoustic_s_per_id
    a = s.next_work(0.0)
    assert isinstance(a, AcousticWork)
    s.complete_acoustic(a, latent(50), elapsed=1.0)
    after = s.acoustic_s_per_id("piper")
    assert after is not None and after > before


def test_whole_segment_model_decodes_each_segment_in_one_chunk() -> None:
    s = make(credits=100)
    s.add(1, [seg(), seg()], 0.0, WHOLE)
    a = s.next_work(0.0)
    assert isinstance(a, AcousticWork) and a.model == "whole"
    s.complete_acoustic(a, latent(90))
    first = s.next_work(0.0)
    assert isinstance(first, VocoderWork)
    assert (first.lo, first.start, first.end, first.hi, first.last) == (0, 0, 90, 90, False)
    assert first.crop == (0, 90)
    s.complete_vocoder(first, 90 * WHOLE.hop, 0.0)
    s.taken(1)
    assert s.produced(1) == 90 * 600
    a2 = s.next_work(0.0)
    assert isinstance(a2, AcousticWork) and a2.segment == 1
    s.complete_acoustic(a2, latent(30))
    second = s.next_work(0.0)
    assert isinstance(second, VocoderWork)
    assert (second.lo, second.start, second.end, second.hi, second.last) == (0, 0, 30, 30, True)
    chunk = s.complete_vocoder(second, 30 * WHOLE.hop, 0.0)
    assert chunk is not None and chunk.last and not s.has(1)


def test_each_stream_is_timed_in_its_own_model_figures() -> None:
    """A Piper stream and a whole-segment stream of another hop and rate, side by side.

    Piper's first chunk (16 frames of 256 samples at 22050 Hz) plays for 0.186 s. The
    other stream's first segment, 10 frames of 600 samples at 24 kHz, plays for 0.25 s,
    and its next stage A is due 2 x 5 ids x 3 ms before that: at 0.22 s. Read in Piper's
    figures it would be 0.116 s and go first."""
    s = make(credits=100)
    start_stream(s, 1, now=0.0, frames=200)
    start_stream(s, 2, now=0.0, frames=10, segments=2, profile=WHOLE)
    assert s.produced(2) == 10 * 600
    work = s.next_work(0.0)
    assert isinstance(work, VocoderWork) and work.stream_id == 1
    s.complete_vocoder(work, (work.end - work.start) * HOP, 0.0)
    # Piper now has 48 frames out (0.557 s): the other stream's stage A comes first.
    nxt = s.next_work(0.0)
    assert isinstance(nxt, AcousticWork) and nxt.stream_id == 2 and nxt.model == "whole"
    # At 0.6 s Piper's stream, past start-up, has run dry; the other has sent one chunk.
    assert s.lagging(0.6, 0.5) == 1


def test_stage_a_cost_is_learned_per_model() -> None:
    s = make()
    s.add(1, [seg()], 0.0, PIPER)
    s.add(2, [seg()], 0.0, WHOLE)
    works = [s.next_work(0.0), s.next_work(0.0)]
    for work in works:
        assert isinstance(work, AcousticWork)
        s.complete_acoustic(work, latent(20), elapsed=0.5 if work.model == "whole" else None)
    assert s.acoustic_s_per_id("piper") == PIPER.acoustic_s_per_id
    whole = s.acoustic_s_per_id("whole")
    assert whole is not None and whole > WHOLE.acoustic_s_per_id
