"""The pure scheduler, driven with a fake clock and plain objects."""

from __future__ import annotations

import numpy as np
import pytest

from voxserve.config import VocoderChunking
from voxserve.engine.scheduler import AcousticWork, Scheduler, SegmentInput, VocoderWork

HOP, RATE = 256, 22050
FRAME_S = HOP / RATE


def seg() -> SegmentInput:
    return SegmentInput(np.arange(5, dtype=np.int64), 0.0, 1.0, 0.0)


def latent(frames: int) -> np.ndarray:
    return np.zeros((192, frames), dtype=np.float32)


def make(credits: int = 4, slack: float = 0.15) -> Scheduler:
    return Scheduler(VocoderChunking(), HOP, RATE, credits=credits, urgent_slack=slack)


def start_stream(s: Scheduler, sid: int, now: float, frames: int = 200, segments: int = 1) -> None:
    """Add a stream, run its first stage A and first chunk at `now`."""
    s.add(sid, [seg() for _ in range(segments)], now)
    work = s.next_work(now)
    assert isinstance(work, AcousticWork) and work.stream_id == sid
    s.complete_acoustic(work, latent(frames))
    chunk = s.next_work(now)
    assert isinstance(chunk, VocoderWork) and chunk.stream_id == sid
    s.complete_vocoder(chunk, (chunk.end - chunk.start) * HOP, now)
    s.taken(sid)


def test_first_chunk_is_small_then_regular_with_context() -> None:
    s = make()
    s.add(1, [seg()], 0.0)
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
    s.add(1, [seg()], 0.0)
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
    s.add(2, [seg()], 0.01)
    work = s.next_work(0.02)
    assert isinstance(work, AcousticWork) and work.stream_id == 2


def test_live_stream_about_to_underrun_outranks_new_stream() -> None:
    s = make()
    start_stream(s, 1, now=0.0)
    s.add(2, [seg()], 0.1)
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
    s.add(1, [seg(), seg(), seg()], 0.0)
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
    s.add(1, [seg(), seg()], 0.0)
    a = s.next_work(0.0)
    assert s.pending_work(1)
    assert s.abort(1)
    assert not s.pending_work(1) and not s.has(1)
    assert isinstance(a, AcousticWork)
    s.complete_acoustic(a, latent(40))  # late result: ignored
    assert s.next_work(0.0) is None and len(s) == 0


def test_empty_last_segment_still_ends_the_stream() -> None:
    s = make()
    s.add(1, [seg()], 0.0)
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
        s.add(1, [], 0.0)
    s.add(1, [seg()], 0.0)
    with pytest.raises(ValueError):
        s.add(1, [seg()], 0.0)


def test_chunks_grow_to_the_maximum() -> None:
    s = make(credits=100)
    s.add(1, [seg()], 0.0)
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
    s = Scheduler(VocoderChunking(), HOP, RATE, credits=4, acoustic_slots=1)
    start_stream(s, 1, now=0.0, segments=2)
    s.add(2, [seg()], 0.0)
    s.add(3, [seg()], 0.0)
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
    before = s.acoustic_s_per_id
    s.add(1, [seg()], 0.0)
    a = s.next_work(0.0)
    assert isinstance(a, AcousticWork)
    s.complete_acoustic(a, latent(50), elapsed=1.0)
    assert s.acoustic_s_per_id > before
