"""The pure scheduler, driven with a fake clock and plain objects."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest

from voxserve.engine.admission import lagging
from voxserve.engine.batched_scheduler import FURTHER_LOOKS_PER_SLOT, BatchedScheduler
from voxserve.engine.cpu_scheduler import CpuScheduler
from voxserve.engine.queues import Entry, Kind, Queues
from voxserve.engine.scheduler import Budget, Scheduler
from voxserve.engine.work import (
    AcousticWork,
    Latent,
    ModelProfile,
    VocoderChunking,
    VocoderWork,
    plan_chunk,
)

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


def make(credits: int = 4, slack: float = 0.15) -> CpuScheduler:
    return CpuScheduler(credits=credits, urgent_slack=slack)


def start_stream(
    s: Scheduler, sid: int, now: float, frames: int = 200, segments: int = 1, profile: ModelProfile = PIPER,
    elapsed: float | None = None,
) -> None:
    """Add a stream, run its first stage A and first chunk at `now` (the chunk timed at
    `elapsed`, if given)."""
    s.add(sid, [seg() for _ in range(segments)], now, profile)
    (work,) = s.next_step(now)
    assert isinstance(work, AcousticWork) and work.stream_id == sid
    s.complete_acoustic(work, latent(frames))
    (chunk,) = s.next_step(now)
    assert isinstance(chunk, VocoderWork) and chunk.stream_id == sid
    s.complete_vocoder(chunk, (chunk.end - chunk.start) * profile.hop, now, elapsed)
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


def _run_until_idle(s: CpuScheduler, sid: int = 1) -> list[VocoderWork]:
    """Run every unit that can run now (stage A yields 40 frames); the chunks run, in order."""
    chunks = []
    while (w := s.next_work(0.0)) is not None:
        if isinstance(w, AcousticWork):
            s.complete_acoustic(w, latent(40))
        else:
            chunks.append(w)
            s.complete_vocoder(w, (w.end - w.start) * HOP, 0.0)
            s.taken(sid)
    return chunks


def test_an_incomplete_stream_waits_for_the_rest_of_its_text() -> None:
    """A stream started on its text's first piece plays it, marks no chunk as its last,
    and goes on with the segments `extend` brings; the last of those ends it."""
    s = make(credits=100)
    s.add(1, [seg()], 0.0, PIPER, complete=False)
    head = _run_until_idle(s)
    assert head and not any(w.last for w in head) and s.has(1) and s.pending_work(1)
    s.extend(1, [seg(), seg()])
    tail = _run_until_idle(s)
    assert tail[0].segment == 1 and {w.segment for w in tail} == {1, 2}
    assert tail[-1].last and not any(w.last for w in tail[:-1]) and not s.has(1)


def test_a_rest_that_says_nothing_ends_the_stream_with_an_empty_chunk() -> None:
    s = make(credits=100)
    s.add(1, [seg()], 0.0, PIPER, complete=False)
    assert not any(w.last for w in _run_until_idle(s))
    s.extend(1, [])
    (end,) = _run_until_idle(s)
    assert end.last and end.hi == end.lo and not s.has(1)


def test_the_rest_may_come_while_the_streams_chunks_are_still_running() -> None:
    s = make(credits=100)
    s.add(1, [seg()], 0.0, PIPER, complete=False)
    a = s.next_work(0.0)
    assert isinstance(a, AcousticWork)
    s.extend(1, [])  # stage A in flight: its latent will be the last
    s.complete_acoustic(a, latent(40))
    chunks = _run_until_idle(s)
    assert chunks[-1].last and chunks[-1].end == 40 and not s.has(1)

    s.add(2, [seg()], 0.0, PIPER, complete=False)
    a = s.next_work(0.0)
    assert isinstance(a, AcousticWork)
    s.complete_acoustic(a, latent(40))
    first = s.next_work(0.0)
    assert isinstance(first, VocoderWork)
    s.complete_vocoder(first, (first.end - first.start) * HOP, 0.0)
    second = s.next_work(0.0)
    assert isinstance(second, VocoderWork) and second.end == 40
    assert not second.last  # claimed before the stream knew it ends
    s.extend(2, [])
    chunk = s.complete_vocoder(second, (second.end - second.start) * HOP, 0.0)
    assert chunk is not None and not chunk.last and s.has(2)
    end = s.next_work(0.0)
    assert isinstance(end, VocoderWork) and end.last and end.hi == end.lo and end.seq == 2
    chunk = s.complete_vocoder(end, 0, 0.0)
    assert chunk is not None and chunk.last and not s.has(2)


def test_an_empty_latent_before_the_rest_is_known_is_skipped() -> None:
    s = make(credits=100)
    s.add(1, [seg()], 0.0, PIPER, complete=False)
    a = s.next_work(0.0)
    assert isinstance(a, AcousticWork)
    s.complete_acoustic(a, latent(0))  # a first piece that made no frames
    assert s.next_work(0.0) is None and s.has(1)
    s.extend(1, [seg()])
    chunks = _run_until_idle(s)
    assert chunks[0].seq == 0 and chunks[-1].last and sum(w.end - w.start for w in chunks) == 40


def test_extending_a_gone_stream_does_nothing_and_twice_is_an_error() -> None:
    s = make()
    s.extend(9, [seg()])
    s.add(1, [seg()], 0.0, PIPER, complete=False)
    s.extend(1, [])
    with pytest.raises(ValueError, match="complete"):
        s.extend(1, [])


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


def test_a_stream_started_in_a_burst_skips_the_smallest_chunk() -> None:
    """While `burst_waiting` other new streams wait for their first chunk, a stream's
    chunks are 32, 64, 128 frames instead of 16, 32, 64, 128; once fewer wait, the next
    stream starts as usual."""
    s = CpuScheduler(credits=100, budget=Budget(burst_waiting=2))
    for sid in (1, 2, 3):
        s.add(sid, [seg()], 0.0, PIPER)
    spans: dict[int, list[tuple[int, int, int, int]]] = {1: [], 2: [], 3: []}
    while (w := s.next_work(0.0)) is not None:
        if isinstance(w, AcousticWork):
            s.complete_acoustic(w, latent(300))
            continue
        spans[w.stream_id].append((w.lo, w.start, w.end, w.hi))
        s.complete_vocoder(w, (w.end - w.start) * HOP, 0.0)
    # Stream 1's first chunk is claimed while streams 2 and 3 wait; stream 2's while
    # only stream 3 does.
    assert spans[1] == [(0, 0, 32, 42), (22, 32, 96, 106), (86, 96, 224, 234), (214, 224, 300, 300)]
    assert [(start, end) for _, start, end, _ in spans[2]] == [(0, 16), (16, 48), (48, 112), (112, 240), (240, 300)]
    assert spans[3][0][1:3] == (0, 16)


@pytest.mark.parametrize(("skip", "sizes"), [(0, [16, 32, 64, 128, 128]), (1, [32, 64, 128, 128, 128])])
def test_plan_chunk_skips_sizes(skip: int, sizes: list[int]) -> None:
    c = VocoderChunking()
    pos, got = 0, []
    for index in range(5):
        _, _, start, end = plan_chunk(10_000, pos, index, c, skip=skip)
        got.append(end - start)
        pos = end
    assert got == sizes


def test_stage_a_leaves_a_worker_for_the_vocoder() -> None:
    s = CpuScheduler(credits=4, budget=Budget(acoustic_slots=1))
    start_stream(s, 1, now=0.0, segments=2)
    s.add(2, [seg(100)], 0.0, PIPER)
    s.add(3, [seg(100)], 0.0, PIPER)
    first = s.next_work(0.0)
    assert isinstance(first, AcousticWork) and first.stream_id == 2  # new stream first
    second = s.next_work(0.0)
    # Stream 3's stage A would also be a new stream's first work, but one stage A is
    # already running, and stream 1's player (16 frames, 186 ms) would come within the
    # urgent slack before that stage A (100 ids, 50 ms expected) ended: its chunk goes next.
    assert isinstance(second, VocoderWork) and second.stream_id == 1
    s.complete_acoustic(first, latent(50), elapsed=0.01)
    third = s.next_work(0.0)
    assert isinstance(third, VocoderWork) and third.stream_id == 2  # its first chunk
    fourth = s.next_work(0.0)
    assert isinstance(fourth, AcousticWork) and fourth.stream_id == 3


@pytest.mark.parametrize(("now", "beside"), [(0.0, True), (0.16, True), (0.18, False)])
def test_newcomers_stage_a_takes_the_vocoders_worker_while_live_streams_have_time(
    now: float, beside: bool
) -> None:
    """A burst of new streams starts on every worker while the live ones are well ahead of
    their players, and goes back to one stage A at a time once one would become urgent
    within twice the newcomer's expected stage A time."""
    s = CpuScheduler(credits=4, budget=Budget(slots=2, acoustic_slots=1))
    start_stream(s, 1, now=0.0, segments=2)  # alone: its first chunk has 12 frames
    second = s.next_work(0.0)  # 24 more: 36 frames (418 ms) ahead of its player
    assert isinstance(second, VocoderWork) and second.stream_id == 1
    s.complete_vocoder(second, (second.end - second.start) * HOP, 0.0)
    s.taken(1)
    s.add(2, [seg(100)], now, PIPER)
    s.add(3, [seg(100)], now, PIPER)
    a2 = s.next_work(now)
    assert isinstance(a2, AcousticWork) and a2.stream_id == 2
    nxt = s.next_work(now)
    # Stream 3's stage A is expected to take 50 ms (100 ids): beside stream 2's while
    # stream 1's player has more than the urgent slack and twice that left (150 ms +
    # 100 ms of 418 ms - now), and stream 1's third chunk first once it has not.
    if beside:
        assert isinstance(nxt, AcousticWork) and nxt.stream_id == 3
        assert s.next_work(now) is None  # both workers are held
    else:
        assert isinstance(nxt, VocoderWork) and nxt.stream_id == 1


def test_urgent_stage_a_is_not_kept_waiting_by_a_chunk_that_is_not() -> None:
    s = CpuScheduler(credits=4, budget=Budget(acoustic_slots=1))
    start_stream(s, 2, now=0.0)
    ahead = s.next_work(0.0)  # stream 2: 48 frames (557 ms) ahead of its player
    assert isinstance(ahead, VocoderWork) and ahead.stream_id == 2
    s.complete_vocoder(ahead, (ahead.end - ahead.start) * HOP, 0.0)
    s.taken(2)
    start_stream(s, 1, now=0.0, frames=16, segments=2)  # all of its first sentence is out
    s.add(3, [seg(100)], 0.0, PIPER)
    a3 = s.next_work(0.0)
    assert isinstance(a3, AcousticWork) and a3.stream_id == 3  # holds the one stage A slot
    # At 0.1 s stream 1's player has 86 ms left and its next sentence is not made: its
    # stage A goes before stream 2's chunk, which has 457 ms to spare.
    nxt = s.next_work(0.1)
    assert isinstance(nxt, AcousticWork) and (nxt.stream_id, nxt.segment) == (1, 1)


def test_stage_a_cost_estimate_learns_from_one_thread_units_only() -> None:
    s = make()
    s.add(1, [seg(10), seg(10)], 0.0, PIPER)
    a = s.next_work(0.0)
    assert isinstance(a, AcousticWork)
    # A lone stream's stage A on two threads (Piper's prior alone there) runs faster
    # than the one-thread stage A that deadlines plan for: it leaves the estimate as is.
    s.complete_acoustic(replace(a, threads=2), latent(50), elapsed=1e-4)
    assert s.acoustic_s_per_id("piper") == PIPER.acoustic_s_per_id


@pytest.mark.parametrize(("elapsed", "first"), [(None, 2), (26 * 2e-3, 1)])
def test_a_chunk_is_urgent_by_when_it_must_start(elapsed: float | None, first: int) -> None:
    """Once chunks are timed (2 ms a frame here), a live stream's next chunk (52 frames
    decoded: 104 ms) is urgent when its player runs dry within the urgent slack plus that
    time, and goes before a new stream's stage A; untimed, it is not urgent yet."""
    s = make()
    start_stream(s, 1, now=0.0, frames=300, elapsed=elapsed)  # 26 frames decoded, 186 ms of audio
    s.add(2, [seg()], 0.0, PIPER)
    nxt = s.next_work(0.0)
    assert nxt is not None and nxt.stream_id == first
    if first == 1:
        assert isinstance(nxt, VocoderWork) and nxt.hi - nxt.lo == 52


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
    assert lagging(s.playback(), 0.6, 0.5) == 1


def test_a_young_stream_does_not_count_as_lagging() -> None:
    """Admission counts a stream as lagging only once it has had `min_slack` seconds since
    its first packet to build that much audio ahead."""
    s = make(credits=100)
    start_stream(s, 1, now=0.0, frames=200)
    second = s.next_work(0.0)
    assert isinstance(second, VocoderWork)
    s.complete_vocoder(second, (second.end - second.start) * HOP, 0.0)  # 48 frames: 0.557 s
    assert lagging(s.playback(), 0.1, 0.5) == 0  # 0.457 s left, but 0.1 s old
    assert lagging(s.playback(), 0.5, 0.5) == 1  # 0.057 s left at 0.5 s old


def test_a_stream_served_just_in_time_does_not_count_as_lagging() -> None:
    """While newcomers' first chunks go first, a live stream's next chunk runs once it is
    urgent: it plays with `urgent_slack` (0.15 s) ahead. Admission's `min_slack` is below
    that, so such a stream holds nobody; one that got closer to dry does."""
    s = make(credits=100)
    start_stream(s, 1, now=0.0, frames=200)
    second = s.next_work(0.0)
    assert isinstance(second, VocoderWork)
    s.complete_vocoder(second, (second.end - second.start) * HOP, 0.0)  # 48 frames: 0.557 s
    assert lagging(s.playback(), 0.42, 0.1) == 0  # 0.137 s ahead: urgent, served in time
    assert lagging(s.playback(), 0.47, 0.1) == 1  # 0.087 s ahead: falling behind


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


# -- the idle core: workers held per unit, threads and chunks while alone -----
PIPER16 = ModelProfile("piper", HOP, RATE, VocoderChunking(idle_first_chunk_frames=16))
"""Piper whose first chunk is 16 frames even when alone (0.186 s of audio: not urgent at
once, so a second chunk may follow it)."""
PIPER8 = ModelProfile("piper", HOP, RATE, VocoderChunking(idle_first_chunk_frames=8))
"""Piper whose first chunk is 8 frames when alone."""


def idle(credits: int = 4, workers: int = 2) -> CpuScheduler:
    """As the engine builds it on a CPU: two workers, stage A leaves one for the vocoder;
    no burst plan (the tests that want it say so)."""
    return CpuScheduler(credits=credits, budget=replace(Budget.cpu(workers), burst_waiting=0))


def test_a_lone_stream_runs_stage_a_on_both_cores_and_holds_them() -> None:
    s = idle()
    s.add(1, [seg(), seg()], 0.0, PIPER16)
    a = s.next_work(0.0)
    assert isinstance(a, AcousticWork) and a.threads == 2
    assert s.busy_workers == 2 and s.next_work(0.0) is None  # it holds both workers
    s.complete_acoustic(a, latent(100))
    assert s.busy_workers == 0
    first = s.next_work(0.0)
    assert isinstance(first, VocoderWork) and first.seq == 0
    s.complete_vocoder(first, 16 * HOP, 0.0)
    # Past the first packet there are two units (the next chunk, the next sentence's
    # stage A): one thread each, side by side.
    pair = [s.next_work(0.0), s.next_work(0.0)]
    assert sorted(type(w).__name__ for w in pair) == ["AcousticWork", "VocoderWork"]
    assert all(w is not None and w.threads == 1 for w in pair)
    assert s.next_work(0.0) is None


def test_a_lone_stream_decodes_two_chunks_at_once_and_releases_them_in_order() -> None:
    s = idle(credits=100)
    start_stream(s, 1, now=0.0, frames=300, profile=PIPER16)
    one, two = s.next_work(0.0), s.next_work(0.0)
    assert isinstance(one, VocoderWork) and isinstance(two, VocoderWork)
    assert (one.seq, one.start, one.end) == (1, 16, 48)
    assert (two.seq, two.start, two.end) == (2, 48, 112)
    assert one.threads == two.threads == 1
    assert s.next_work(0.1) is None  # idle_chunks = 2
    # The second finishes first: nothing is released until the first is done.
    early = s.complete_vocoder(two, 64 * HOP, 0.2)
    assert early is not None and early.released == 0 and s.produced(1) == 16 * HOP
    both = s.complete_vocoder(one, 32 * HOP, 0.3)
    assert both is not None and both.released == 2 and both.samples == 96 * HOP
    assert s.produced(1) == 112 * HOP and s.busy_workers == 0


def test_an_urgent_lone_stream_gets_both_threads_for_one_chunk_instead_of_two_chunks() -> None:
    """Two chunks in flight would share a core if something else (another process) held
    the other: the one the player waits for would come later. So an urgent stream runs
    one chunk at a time, on both threads while alone."""
    s = idle(credits=100)
    start_stream(s, 1, now=0.0, frames=300, profile=PIPER16)  # 16 frames out: dry at 0.186 s
    urgent = s.next_work(0.1)
    assert isinstance(urgent, VocoderWork) and urgent.threads == 2
    assert s.next_work(0.1) is None


def test_stream_ends_after_its_last_chunk_in_order() -> None:
    s = idle(credits=100)
    start_stream(s, 1, now=0.0, frames=60, profile=PIPER16)  # chunks (0,16) sent; (16,60) is the rest
    rest = s.next_work(0.0)
    assert isinstance(rest, VocoderWork) and rest.last and rest.threads == 2  # alone
    chunk = s.complete_vocoder(rest, 44 * HOP, 0.0)
    assert chunk is not None and chunk.last and not s.has(1)


def test_last_chunk_out_of_order_ends_the_stream_once_the_earlier_one_is_in() -> None:
    s = idle(credits=100)
    start_stream(s, 1, now=0.0, frames=112, profile=PIPER16)
    one, two = s.next_work(0.0), s.next_work(0.0)
    assert isinstance(one, VocoderWork) and isinstance(two, VocoderWork) and two.last
    early = s.complete_vocoder(two, 64 * HOP, 0.0)
    assert early is not None and not early.last and s.has(1)
    done = s.complete_vocoder(one, 32 * HOP, 0.0)
    assert done is not None and done.last and done.released == 2 and not s.has(1)


def test_crowded_streams_get_one_unit_per_worker_on_one_thread() -> None:
    s = idle(credits=100)
    start_stream(s, 1, now=0.0, frames=300, profile=PIPER16)
    start_stream(s, 2, now=0.0, frames=300, profile=PIPER16)
    units = [s.next_work(0.0), s.next_work(0.0)]
    assert sorted(w.stream_id for w in units if w is not None) == [1, 2]
    assert all(w is not None and w.threads == 1 for w in units)
    assert s.next_work(0.0) is None  # every worker is held


def test_a_second_chunk_never_delays_another_stream() -> None:
    """A stream's second chunk in flight is claimed only when nothing else can run: a
    newcomer's stage A, or another stream's chunk, goes first."""
    s = idle(credits=100)
    start_stream(s, 1, now=0.0, frames=300, profile=PIPER16)
    start_stream(s, 2, now=0.0, frames=300, profile=PIPER16)
    w1 = s.next_work(0.0)
    assert w1 is not None
    s.abort(2 if w1.stream_id == 1 else 1)  # the other stream leaves; its unit was not claimed
    s.add(3, [seg()], 0.0, PIPER)
    nxt = s.next_work(0.0)
    assert isinstance(nxt, AcousticWork) and nxt.stream_id == 3 and nxt.threads == 1


def test_a_newcomer_waits_for_a_worker_and_then_goes_first() -> None:
    s = idle(credits=100)
    start_stream(s, 1, now=0.0, frames=300, profile=PIPER16)
    one, two = s.next_work(0.0), s.next_work(0.0)
    assert isinstance(one, VocoderWork) and isinstance(two, VocoderWork)
    s.add(2, [seg()], 0.0, PIPER)
    assert s.next_work(0.0) is None  # both workers decode stream 1
    s.complete_vocoder(one, 32 * HOP, 0.0)
    nxt = s.next_work(0.0)
    assert isinstance(nxt, AcousticWork) and nxt.stream_id == 2 and nxt.threads == 1


def test_credits_bound_the_chunks_in_flight() -> None:
    s = idle(credits=2)
    start_stream(s, 1, now=0.0, frames=300, profile=PIPER16)  # its first chunk was taken
    one = s.next_work(0.0)
    two = s.next_work(0.0)
    assert isinstance(one, VocoderWork) and isinstance(two, VocoderWork)
    s.complete_vocoder(one, 32 * HOP, 0.0)
    s.complete_vocoder(two, 64 * HOP, 0.0)
    assert s.next_work(0.0) is None  # two chunks untaken: out of credit
    s.taken(1)
    assert isinstance(s.next_work(0.0), VocoderWork)


def test_one_worker_never_runs_two_threads_or_two_chunks() -> None:
    s = CpuScheduler(credits=100, budget=Budget(slots=1, spare_threads=2, spare_chunks=2))
    s.add(1, [seg()], 0.0, PIPER)
    a = s.next_work(0.0)
    assert isinstance(a, AcousticWork) and a.threads == 1
    assert s.next_work(0.0) is None
    s.complete_acoustic(a, latent(300))
    first = s.next_work(0.0)
    assert isinstance(first, VocoderWork) and first.threads == 1
    s.complete_vocoder(first, 16 * HOP, 0.0)
    assert isinstance(s.next_work(0.0), VocoderWork) and s.next_work(0.0) is None


def test_aborted_and_failed_work_gives_its_workers_back() -> None:
    s = idle(credits=100)
    start_stream(s, 1, now=0.0, frames=300, profile=PIPER16)
    one, two = s.next_work(0.0), s.next_work(0.0)
    assert isinstance(one, VocoderWork) and isinstance(two, VocoderWork)
    s.fail(1, one)
    assert s.busy_workers == 1 and not s.has(1)
    assert s.complete_vocoder(two, 64 * HOP, 0.0) is None  # late result of a dropped stream
    assert s.busy_workers == 0
    s.add(2, [seg()], 0.0, PIPER)
    a = s.next_work(0.0)
    assert isinstance(a, AcousticWork) and a.threads == 2
    s.abort(2)
    s.complete_acoustic(a, latent(10))
    assert s.busy_workers == 0


def test_a_whole_segment_model_decodes_two_segments_at_once_when_alone() -> None:
    """Kokoro's case: no chunking, so parallel chunks are whole segments of one stream."""
    s = idle(credits=100)
    s.add(1, [seg(), seg(), seg()], 0.0, WHOLE)
    a0 = s.next_work(0.0)
    assert isinstance(a0, AcousticWork) and a0.threads == 2
    s.complete_acoustic(a0, latent(40))
    first = s.next_work(0.0)
    assert isinstance(first, VocoderWork) and first.threads == 2 and (first.start, first.end) == (0, 40)
    s.complete_vocoder(first, 40 * WHOLE.hop, 0.0)
    a1 = s.next_work(0.0)
    assert isinstance(a1, AcousticWork) and a1.segment == 1 and a1.threads == 2
    s.complete_acoustic(a1, latent(30))
    pair = [s.next_work(0.0), s.next_work(0.0)]  # segment 1's decode beside segment 2's stage A
    assert sorted(type(w).__name__ for w in pair) == ["AcousticWork", "VocoderWork"]
    a2 = next(w for w in pair if isinstance(w, AcousticWork))
    s.complete_acoustic(a2, latent(20))
    second = s.next_work(0.0)  # segment 2 decodes beside segment 1
    assert isinstance(second, VocoderWork) and second.segment == 2 and second.threads == 1
    one = next(w for w in pair if isinstance(w, VocoderWork))
    assert s.complete_vocoder(second, 20 * WHOLE.hop, 0.0) is not None
    done = s.complete_vocoder(one, 30 * WHOLE.hop, 0.0)
    assert done is not None and done.released == 2 and done.last and not s.has(1)


def test_a_stream_alone_gets_a_smaller_first_chunk_and_a_crowded_one_the_usual() -> None:
    s = idle(credits=100)
    s.add(1, [seg()], 0.0, PIPER8)
    a = s.next_work(0.0)
    assert isinstance(a, AcousticWork)
    s.complete_acoustic(a, latent(100))
    first = s.next_work(0.0)
    assert isinstance(first, VocoderWork) and (first.start, first.end, first.hi) == (0, 8, 18)
    s.complete_vocoder(first, 8 * HOP, 0.0)
    nxt = s.next_work(0.0)  # 93 ms out: urgent, so one chunk on both threads
    # The chunks after a small first one grow from it (8, 16, 32, ...), so that the second,
    # due 93 ms after the first, is small too.
    assert isinstance(nxt, VocoderWork) and (nxt.lo, nxt.start, nxt.end) == (0, 8, 24) and nxt.threads == 2
    s.complete_vocoder(nxt, 16 * HOP, 0.0)
    third = s.next_work(0.0)
    assert isinstance(third, VocoderWork) and (third.start, third.end) == (24, 56)
    fourth = s.next_work(0.0)  # 278 ms out: a second chunk in flight beside the third
    assert isinstance(fourth, VocoderWork) and (fourth.start, fourth.end) == (56, 100) and fourth.last

    s = idle(credits=100)
    start_stream(s, 1, now=0.0, frames=300, profile=PIPER16)
    s.add(2, [seg()], 0.0, PIPER8)
    a2 = s.next_work(0.0)
    assert isinstance(a2, AcousticWork) and a2.stream_id == 2
    s.complete_acoustic(a2, latent(100))
    first = s.next_work(0.0)  # stream 1 has a chunk to run too: stream 2 is not alone
    assert isinstance(first, VocoderWork) and first.stream_id == 2
    assert (first.start, first.end) == (0, 16) and first.threads == 1


def test_work_elsewhere_on_the_cores_turns_the_idle_core_policies_off() -> None:
    """A transcription batch on the other core: a lone stream runs as a crowded one, one
    unit on one thread, one chunk at a time, its first chunk of the usual size."""
    s = idle(credits=100)
    s.add(1, [seg()], 0.0, PIPER8)
    a = s.next_work(0.0, elsewhere=True)
    assert isinstance(a, AcousticWork) and a.threads == 1
    s.complete_acoustic(a, latent(300))
    first = s.next_work(0.0, elsewhere=True)
    assert isinstance(first, VocoderWork) and first.threads == 1 and (first.start, first.end) == (0, 16)
    s.complete_vocoder(first, 16 * HOP, 0.0)
    one = s.next_work(0.0, elsewhere=True)
    assert isinstance(one, VocoderWork) and one.threads == 1
    assert s.next_work(0.0, elsewhere=True) is None  # no second chunk beside it
    two = s.next_work(0.0)  # the other core is free again: a second chunk beside the first
    assert isinstance(two, VocoderWork) and two.seq == one.seq + 1


def test_a_lone_first_chunk_gets_both_threads_and_the_second_follows() -> None:
    s = idle(credits=100)
    s.add(1, [seg()], 0.0, PIPER8)
    a = s.next_work(0.0)
    assert isinstance(a, AcousticWork)
    s.complete_acoustic(a, latent(300))
    first = s.next_work(0.0)
    assert isinstance(first, VocoderWork) and first.threads == 2 and (first.start, first.end) == (0, 8)
    assert s.next_work(0.0) is None
    s.complete_vocoder(first, 8 * HOP, 0.0)
    second = s.next_work(0.0)  # 93 ms out: urgent, one chunk on both threads
    assert isinstance(second, VocoderWork) and second.threads == 2 and (second.start, second.end) == (8, 24)


# -- one ranking, one budget: a batched device's steps -------------------------
def batched(batch: int = 8, credits: int = 4) -> BatchedScheduler:
    return BatchedScheduler(credits=credits, budget=Budget.batched(batch))


def test_a_batched_step_runs_the_new_streams_stage_a_together_then_their_first_chunks() -> None:
    s = batched()
    for sid in range(1, 6):
        s.add(sid, [seg(3 + sid)], 0.0, PIPER)
    step = s.next_step(0.0)
    assert [type(w) for w in step] == [AcousticWork] * 5
    assert [w.stream_id for w in step] == [1, 2, 3, 4, 5]  # oldest first, then by id
    assert s.next_step(0.0) == []  # every stream's next unit waits on its stage A
    for w in step:
        assert isinstance(w, AcousticWork)
        s.complete_acoustic(w, latent(300))
    chunks = s.next_step(0.0)
    assert len(chunks) == 5 and all(isinstance(w, VocoderWork) and w.seq == 0 for w in chunks)
    # One size: five streams at once are a burst, so each starts with the plan's second
    # size (32 frames and 10 of context), planned as it was queued.
    assert {(w.lo, w.hi) for w in chunks if isinstance(w, VocoderWork)} == {(0, 42)}
    assert all(w.threads == 1 for w in chunks)


def test_a_batched_step_takes_one_stage_one_model_and_one_window_size() -> None:
    s = batched()
    s.add(1, [seg()], 0.0, PIPER)
    s.add(2, [seg()], 0.1, WHOLE)
    s.add(3, [seg()], 0.2, PIPER)
    first = s.next_step(0.3)
    # The head of the ranking (stream 1, stage A) decides: stage A of Piper streams only.
    assert [w.stream_id for w in first] == [1, 3]
    second = s.next_step(0.3)
    assert [w.stream_id for w in second] == [2]
    for w in first + second:
        assert isinstance(w, AcousticWork)
        s.complete_acoustic(w, latent(300 if w.model == "piper" else 40))
    chunks = s.next_step(0.3)
    assert [w.stream_id for w in chunks] == [1, 3]


def test_a_batched_step_is_bounded_by_the_batch_and_the_slots_held() -> None:
    s = BatchedScheduler(credits=4, budget=Budget.batched(4, steps=2))
    for sid in range(10):
        s.add(sid, [seg()], 0.0, PIPER)
    one, two = s.next_step(0.0), s.next_step(0.0)
    assert len(one) == len(two) == 4
    assert s.next_step(0.0) == []  # 8 units in flight: both steps' slots are held
    for w in one:
        assert isinstance(w, AcousticWork)
        s.complete_acoustic(w, latent(300))
    assert len(s.next_step(0.0)) == 4  # a step's worth of slots came back


def test_an_urgent_chunk_leads_the_batch_ahead_of_new_streams() -> None:
    """The same ranking as on a CPU: a live stream about to run dry goes first, and the
    step is filled with units like it."""
    s = batched(credits=100)
    start_stream(s, 1, now=0.0, frames=300)  # 16 frames out: dry at 0.186 s
    s.add(2, [seg()], 0.1, PIPER)
    step = s.next_step(0.1)
    assert [w.stream_id for w in step] == [1] and isinstance(step[0], VocoderWork)


def test_room_left_in_a_batched_step_runs_a_live_stream_further_ahead() -> None:
    fixed = ModelProfile("fixed", HOP, RATE, VocoderChunking(first_chunk_frames=32, chunk_frames=32, max_chunk_frames=32))
    s = batched(credits=100)
    start_stream(s, 1, now=0.0, frames=1000, profile=fixed)
    step = s.next_step(0.0)  # not urgent: its chunk, and the next one (the same size)
    assert [w.stream_id for w in step] == [1, 1]
    assert [w.seq for w in step if isinstance(w, VocoderWork)] == [1, 2]
    assert s.spread["chunks"] == 1


def test_a_batched_device_keeps_the_plans_exact_sizes() -> None:
    """No move of a chunk's end to a quiet frame: streams at one point of the plan share
    a window size, and so one call."""
    level = np.ones(300, dtype=np.float32)
    level[18] = 0.0
    quiet = Latent(np.zeros((192, 300), dtype=np.float32), 300, level=level)
    for policy, budget, end in ((BatchedScheduler, Budget.batched(8), 16), (CpuScheduler, Budget(), 18)):
        s: Scheduler = policy(credits=4, budget=budget)
        s.add(1, [seg()], 0.0, PIPER)
        (a,) = s.next_step(0.0)
        assert isinstance(a, AcousticWork)
        s.complete_acoustic(a, quiet)
        (chunk,) = s.next_step(0.0)
        assert isinstance(chunk, VocoderWork) and chunk.end == end


def test_a_batched_step_plans_a_first_chunk_of_a_burst_as_it_is_queued() -> None:
    """A stream queued for its first chunk while `Budget.burst_waiting` others wait for
    theirs skips the plan's smallest size, as on a CPU worker; on a batched device it is
    decided as the stream is queued, which sets its window's kind, so that the step that
    claims the burst's first chunks holds one window size. A stream that starts after
    the burst has gone gets the smallest size."""
    s = BatchedScheduler(credits=4, budget=Budget(slots=16, batch=8, spare_chunks=2, burst_waiting=2))
    for sid in (1, 2, 3):
        s.add(sid, [seg()], 0.0, PIPER)
    stage_a = s.next_step(0.0)
    for w in stage_a:
        assert isinstance(w, AcousticWork)
        s.complete_acoustic(w, latent(300))
    chunks = s.next_step(0.0)
    kept = [(w.stream_id, w.start, w.end) for w in chunks if isinstance(w, VocoderWork) and w.seq == 0]
    assert kept == [(1, 0, 32), (2, 0, 32), (3, 0, 32)]  # one step, one window size
    s.add(4, [seg()], 1.0, PIPER)
    stage_a = s.next_step(1.0)
    assert [w.stream_id for w in stage_a] == [4]
    assert isinstance(stage_a[0], AcousticWork)
    s.complete_acoustic(stage_a[0], latent(300))
    late = [w for w in s.next_step(1.0) if isinstance(w, VocoderWork) and w.stream_id == 4]
    assert [(w.start, w.end) for w in late] == [(0, 16)]
    plain = batched()  # three streams are no burst at the default `BURST_WAITING`
    for sid in (1, 2, 3):
        plain.add(sid, [seg()], 0.0, PIPER)
    for w in plain.next_step(0.0):
        assert isinstance(w, AcousticWork)
        plain.complete_acoustic(w, latent(300))
    assert [(w.start, w.end) for w in plain.next_step(0.0) if isinstance(w, VocoderWork)] == [(0, 16)] * 3


@dataclass
class _Queued:
    """What a queue reads of a stream: its version, and the slots `Queues.push` sets."""

    version: int = 0
    queued_vocoder: object = None
    queued_acoustic: object = None


@pytest.mark.parametrize("n", [3, 20, 60])
def test_a_queue_takes_in_the_rankings_order(n: int) -> None:
    """A step's take gives urgent live units first, then new streams' by arrival, then
    the other live units by deadline, ties going to the older stream, and stale entries
    never; a second take goes on where the first stopped."""
    import random

    rng = random.Random(n)
    now, slack = 10.0, 0.5
    q = Queues(Kind("piper", 48))
    entries = []
    for sid in rng.sample(range(1000), 80):
        # Deadlines on a coarse grid, so that many tie; a fifth of the entries go stale.
        entry = Entry(now + rng.randint(-4, 12) * 0.25, sid, False, 0, _Queued())  # type: ignore[arg-type]
        entries.append(entry)
        q.push(q.new if sid % 3 == 0 else q.live, entry)
    for entry in entries:
        if rng.random() < 0.2:
            entry[4].version += 1
            q.size -= 1
    current = [e for e in entries if e[3] == e[4].version]
    live = sorted(e for e in current if e[1] % 3)
    new = sorted(e for e in current if e[1] % 3 == 0)
    urgent = [e for e in live if e[0] - now <= slack]
    ranked = [e[1] for e in urgent + new + live[len(urgent) :]]
    by_id = {id(e[4]): e[1] for e in entries}
    first = [by_id[id(s)] for s in q.take(n, now, slack)]
    second = [by_id[id(s)] for s in q.take(n, now, slack)]
    assert first == ranked[:n] and second == ranked[n : 2 * n]
    assert q.size == len(current) - len(first) - len(second)
    for kept in (q.live, q.new):  # still sorted, and nothing taken is left
        assert kept == sorted(kept) and not {e[1] for e in kept} & set(first + second)


def test_a_step_looks_for_further_chunks_a_bounded_number_of_times() -> None:
    """A step with room left plans at most `FURTHER_LOOKS_PER_SLOT` next windows per free
    slot in looking for further chunks of its kind, however many streams it holds: each
    look is a window's planning under the engine lock, and most are of another kind."""
    s = BatchedScheduler(credits=100, budget=Budget.batched(14))
    for sid in range(12):
        s.add(sid, [seg()], 0.0, PIPER)
    for w in s.next_step(0.0):
        assert isinstance(w, AcousticWork)
        s.complete_acoustic(w, latent(1000))
    for w in s.next_step(0.0):
        assert isinstance(w, VocoderWork) and w.seq == 0
        s.complete_vocoder(w, (w.end - w.start) * HOP, 0.0)
    step = s.next_step(0.0)  # the 12 second chunks, 2 slots to spare
    assert [w.seq for w in step if isinstance(w, VocoderWork)] == [1] * 12
    planned = [stream for stream in s._streams.values() if stream.window is not None]
    # Every third chunk is of another size than the step's, so none is claimed, and
    # only the first looks were made.
    assert s.spread["chunks"] == 0 and len(planned) == FURTHER_LOOKS_PER_SLOT * 2 < 12
