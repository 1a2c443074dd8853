"""The CPU workers' scheduling policy: each worker's step is one unit, the best of the
ranking, claimed when the worker asks (`CpuScheduler.next_work`). Pure and synchronous.

Every runnable unit is ranked afresh at each step, at the worker's `now` (`Candidate`).
The ranking, the budget and the credits are the shared base's (`engine/scheduler.py`);
what is the CPU's own is how its spare capacity is spent: threads for a unit that runs
alone, a smaller first chunk for a stream that starts alone, a second chunk of a stream
when nothing else can run, and a worker kept for the vocoder while chunks wait
(`Budget.acoustic_slots`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from voxserve.engine.queues import LatentState, StreamState, Window
from voxserve.engine.scheduler import CREDITS, URGENT_SLACK_S, Budget, Rank, Scheduler
from voxserve.engine.work import VocoderWork, Work, plan_chunk

__all__ = ["Candidate", "CpuScheduler"]


@dataclass(frozen=True)
class Candidate:
    """A unit that could run now, ranked: its stream's next stage A (`acoustic`) or next
    chunk. The ranking is `order`: the best runs first."""

    rank: Rank
    deadline: float
    """When the unit must start (a chunk: its player runs dry then, less its decode time)."""
    stream: StreamState
    acoustic: bool

    @property
    def order(self) -> tuple[Rank, float, int]:
        """Rank, then the earlier deadline, then the older stream."""
        return (self.rank, self.deadline, self.stream.id)



class CpuScheduler(Scheduler):
    """The scheduler of CPU workers: one unit per worker step, by the ranking."""

    def __init__(self, credits: int = CREDITS, budget: Budget | None = None, urgent_slack: float = URGENT_SLACK_S):
        if budget is not None and budget.stepped:
            raise ValueError("a budget of batched steps is scheduled by BatchedScheduler")
        super().__init__(credits, budget, urgent_slack)

    def next_step(self, now: float, elsewhere: bool = False) -> list[Work]:
        """One unit on a CPU worker (`next_work`), as a step."""
        work = self.next_work(now, elsewhere)
        return [] if work is None else [work]

    def next_work(self, now: float, elsewhere: bool = False) -> Work | None:
        """A CPU worker's step: pick and claim the next unit, or None if nothing can run
        now (or every slot is held). Spare capacity is spent only while the unit would
        leave workers idle: on `spare_threads` for a unit that is alone, on a smaller
        first chunk for a stream that starts alone, on a second chunk of a stream when
        nothing else can run. `elsewhere`: work outside the scheduler (a transcription
        batch) uses the cores now, so nothing counts as spare."""
        budget = self.budget
        free = None if budget.slots is None else budget.slots - self._busy
        if free is not None and free <= 0:
            return None
        pick = self._pick(now, spread=not elsewhere)
        if pick is None:
            return None
        acoustic, stream = pick.acoustic, pick.stream
        if not acoustic and stream.in_flight:
            self.spread["chunks"] += 1
        idle = free is not None and free == budget.slots and free > 1 and not elsewhere
        if acoustic:
            work: Work = self._book_acoustic(stream)
        else:
            # Before its first packet a stream has no other unit, so it is alone if no
            # other stream has one.
            first_alone = idle and stream.claimed == 0 and self._pick(now, exclude=stream) is None
            work = self._claim_vocoder(stream, first_alone)
        if idle and budget.spare_threads > 1 and self._pick(now) is None:
            work = replace(work, threads=min(budget.spare_threads, free or 1))  # workers would idle
            self.spread["threads"] += 1
        self._busy += work.threads
        return work

    def _decode_time(self, stream: StreamState) -> float:
        """How long the stream's next chunk is expected to take on one thread (0 before any
        chunk of its model was timed). A chunk is ranked by when it must start, not by
        when its player runs dry: a 128-frame chunk takes ~80 ms on one core, so the
        urgent slack alone leaves it too little room once the machine slows down."""
        per_frame = self._vocoder_s_per_frame.get(stream.profile.name)
        latent = stream.open_latent()
        if not per_frame or latent is None:
            return 0.0
        lo, hi, _, _, _ = self._window(stream, latent)
        return per_frame * (hi - lo)

    def _rank(self, stream: StreamState, acoustic: bool, now: float) -> Candidate:
        deadline = self._deadline(stream, acoustic)
        if stream.first_packet_at is None:
            return Candidate(Rank.NEW, deadline, stream, acoustic)
        if not acoustic:
            deadline -= self._decode_time(stream)
        if deadline - now <= self.urgent_slack:
            return Candidate(Rank.URGENT, deadline, stream, acoustic)
        return Candidate(Rank.AHEAD, deadline, stream, acoustic)

    def _pick(self, now: float, exclude: StreamState | None = None, spread: bool = True) -> Candidate | None:
        """The best unit to run now, without claiming it: one unit per stream at a time,
        else (only when none is left, and `spread`) a further chunk of a stream.
        `exclude`: a stream not to consider."""
        best: dict[bool, Candidate] = {}  # the best of each stage
        for stream in self._streams.values():
            if stream is exclude:
                continue
            for acoustic in (False, True):
                ok = self._acoustic_candidate(stream) if acoustic else self._vocoder_candidate(stream, False)
                if not ok:
                    continue
                candidate = self._rank(stream, acoustic, now)
                if acoustic not in best or candidate.order < best[acoustic].order:
                    best[acoustic] = candidate
        if (
            True in best
            and False in best
            and self.budget.acoustic_slots is not None
            and self._acoustic_in_flight >= self.budget.acoustic_slots
            and not self._may_take_vocoders_worker(best[True], best[False], now)
        ):
            del best[True]  # keep a worker for the vocoder
        if best:
            return min(best.values(), key=lambda c: c.order)
        if self.budget.slots is None or self.budget.spare_chunks < 2 or not spread:
            return None
        extra = [
            self._rank(stream, False, now)
            for stream in self._streams.values()
            if stream is not exclude and self._vocoder_candidate(stream, True, now)
        ]
        return min(extra, key=lambda c: c.order) if extra else None

    def _may_take_vocoders_worker(self, acoustic: Candidate, vocoder: Candidate, now: float) -> bool:
        """Whether the best stage A (`acoustic`, its rank) may take a worker beyond
        `acoustic_slots` although vocoder work waits (`vocoder`, the best one's rank):
        - a live stream's urgent stage A (its next sentence), while no chunk is urgent;
        - a new stream's stage A, while the live stream that needs the vocoder soonest is
          not urgent and would not be within twice this stage A's expected time (the
          spare that a next sentence's stage A gets too: `Scheduler._deadline`). Else the
          worker kept for the vocoder would only run that stream further ahead of its
          player while the newcomer waits, and a burst of newcomers would run its stage
          A's one at a time on one worker."""
        if acoustic.rank == Rank.URGENT:
            return vocoder.rank != Rank.URGENT
        if acoustic.rank != Rank.NEW or vocoder.rank != Rank.AHEAD:
            return False
        expected = self._acoustic_time(acoustic.stream)
        return vocoder.deadline - now - 2 * expected > self.urgent_slack

    # -- claims ----------------------------------------------------------------------
    def _claim_vocoder(self, stream: StreamState, alone: bool = False) -> VocoderWork:
        """Claim the stream's next chunk; `alone`: it is a first chunk that no other unit
        runs beside, so its stream follows the idle plan."""
        latent = stream.open_latent()
        assert latent is not None
        if stream.claimed == 0:
            stream.alone = alone
            stream.skip = int(not alone and self._burst(stream))
        lo, hi, start, end, bucket = self._window(stream, latent)
        seq, last = self._book_claim(stream, latent, end)
        return VocoderWork(stream.id, latent.segment, latent.latent, lo, hi, start, end, last, seq, bucket=bucket)

    def _window(self, stream: StreamState, latent: LatentState) -> Window:
        """`plan_chunk`'s window for the stream's next chunk, cut from `latent` (a CPU has
        no buckets: 0)."""
        lo, hi, start, end = plan_chunk(
            latent.frames, latent.claimed, stream.claimed, stream.profile.chunking, stream.alone,
            stream.skip, latent.latent.level, stream.profile.chunk_growth,
        )
        return lo, hi, start, end, 0
