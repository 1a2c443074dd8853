"""The batched device's scheduling policy: each step is up to `batch` units that one
call runs together (a GPU), gathered best first from per-kind queues
(`BatchedScheduler.next_step`). Pure and synchronous.

A step holds one kind of unit (`Kind`: one stage, one model and one window bucket): the
kind of the head of the ranking if it is urgent, or a new stream's that has waited
`NEW_WAIT_S`; else the kind with the most units waiting, so that steps fill. A step
costs the device little more for more units, and urgent units and first audio still go
first. Room left in a step goes to further chunks of the streams already in it.

The claimable units are kept in per-kind queues sorted by deadline (`engine/queues.py`),
updated at each change of a stream that moves what it may claim (`_touch`), so a step
reads its units off their fronts and costs O(units), not a ranking of every stream. The
ranking, the budget and the credits are the shared base's (`engine/scheduler.py`).
"""

from __future__ import annotations

from voxserve.engine.queues import Entry, Kind, LatentState, Queues, StreamState, Window
from voxserve.engine.scheduler import CREDITS, URGENT_SLACK_S, Budget, Rank, Scheduler
from voxserve.engine.work import BatchedWindows, ModelProfile, VocoderWork, Work

__all__ = ["FURTHER_LOOKS_PER_SLOT", "NEW_WAIT_S", "BatchedScheduler"]

NEW_WAIT_S = 0.05
"""How long the best new stream's unit may wait while steps go to a fuller kind
(`BatchedScheduler.next_step`): about two full steps of a GPU, so that a new stream's
first audio waits a few tens of ms for steps that fill, and no longer."""

FURTHER_LOOKS_PER_SLOT = 2
"""How many of the step's streams may have their next window planned, per slot left in
the step, in looking for further chunks of its kind (`BatchedScheduler._claim_chunks`).
Most streams' next window is of another kind, and each look plans a window under the
engine lock: unbounded, a step a few units short of full would look at every stream it
holds to fill its last slots. A stream passed over runs its next chunk in a later step."""

_URGENT, _NEW, _AHEAD = Rank.URGENT, Rank.NEW, Rank.AHEAD
"""The ranks as plain names for a step's look at every queue: reading a member off an
enum class goes through its metaclass."""


class BatchedScheduler(Scheduler):
    """The scheduler of a batched device: steps of up to `budget.batch` units of one kind.

    A claim leaves the queues as they are: the claimed unit's entry has already left its
    queue (`Queues.take`; a further chunk of a step has none), and the stream's other
    queued unit, if any, holds. A chunk's claim moves neither whether stage A may run nor
    its deadline (the latents' frames left to play and the player's position stay), and
    stage A's claim moves neither the next chunk's window nor its deadline; no further
    chunk may be queued after a claim, since one is now in flight. Only a chunk's claim
    forgets the kept window, which starts where the claim ended. So a step of a hundred
    units costs a hundred claims, not a hundred re-queuings."""

    def __init__(self, budget: Budget, credits: int = CREDITS, urgent_slack: float = URGENT_SLACK_S):
        if not budget.stepped:
            raise ValueError("a budget of one unit per step is scheduled by CpuScheduler")
        super().__init__(credits, budget, urgent_slack)
        self._queues: dict[Kind, Queues] = {}
        """The claimable units by kind (`_kind`), kept up to date by `_touch`: a step
        reads the heads of a few queues instead of ranking every stream, so streams
        waiting on their credits, their stage A or a chunk in flight cost it nothing, and
        a step of n units costs O(n) plus the stale entries it passes (a unit queued
        costs a binary search and a move of pointers)."""
        self._entries = 0
        """Entries in `_queues`, stale ones included (`_compact`)."""
        self._windows: dict[ModelProfile, BatchedWindows] = {}
        """Each profile's window tables."""

    def _windows_for(self, profile: ModelProfile) -> BatchedWindows:
        windows = self._windows.get(profile)
        if windows is None:
            windows = self._windows[profile] = BatchedWindows(profile)
        return windows

    # -- the queues ------------------------------------------------------------------
    def _touch(self, stream: StreamState) -> None:
        """After any change to a stream's state: queue the units it may claim now (its
        next chunk, its next stage A) under their kinds, and make its older entries
        stale. Whether a unit may be claimed does not depend on the clock, so between
        changes it holds; only whether a deadline is urgent does, and a step reads that
        at its own `now`."""
        stream.unqueue()
        stream.window = None
        if stream.id not in self._streams:
            return
        if stream.claimed == 0:
            # Its first window's size, and so its kind, is set here: the step that
            # claims it holds only windows of that kind.
            stream.skip = int(self._burst(stream))
        if self._vocoder_candidate(stream, False):
            self._queue(stream, acoustic=False)
        if self._acoustic_candidate(stream):
            self._queue(stream, acoustic=True)
        if self._entries > 4 * len(self._streams) + 1024:
            self._compact()

    def _queue(self, stream: StreamState, acoustic: bool) -> None:
        """Queue the stream's next stage A (`acoustic`) or chunk under its kind, with its
        deadline as of now: a new stream's arrival, or when a live stream's unit must
        start (a chunk: less its expected decode time at the current estimate, which the
        entry keeps until the stream's next change)."""
        kind = self._kind(stream, acoustic)
        queues = self._queues.get(kind)
        if queues is None:
            frames, window = stream.profile.step_frames, kind.window
            limit = None if frames is None or window is None else max(1, frames // window)
            queues = self._queues[kind] = Queues(kind, limit)
        if stream.first_packet_at is None:
            queues.push(queues.new, Entry(stream.arrival, stream.id, acoustic, stream.version, stream))
        else:
            deadline = self._deadline(stream, acoustic)
            if not acoustic:
                lo, hi, _, _, _ = self._next_window(stream)
                deadline -= self._vocoder_s_per_frame.get(stream.profile.name, 0.0) * (hi - lo)
            queues.push(queues.live, Entry(deadline, stream.id, acoustic, stream.version, stream))
        self._entries += 1

    def _compact(self) -> None:
        """Drop the stale entries of every queue, and the queues left empty."""
        self._entries = 0
        for kind, queues in list(self._queues.items()):
            left = queues.compact()
            self._entries += left
            if not left:
                del self._queues[kind]

    def _kind(self, stream: StreamState, acoustic: bool) -> Kind:
        """What the stream's next stage A or chunk must share with the units of its step."""
        if acoustic:
            return Kind(stream.profile.name)
        lo, hi, _, _, bucket = self._next_window(stream)
        return Kind(stream.profile.name, bucket or hi - lo)

    def _next_window(self, stream: StreamState) -> Window:
        """The stream's next chunk's window, computed once per change of its state."""
        if stream.window is None:
            latent = stream.open_latent()
            assert latent is not None
            stream.window = self._window(stream, latent)
            stream.window_latent = latent
        return stream.window

    def _window(self, stream: StreamState, latent: LatentState) -> Window:
        """The plan's window for the stream's next chunk, cut from `latent`, with its
        kept frames exact (no move to a quiet frame) and grown with context to one of the
        model's `window_buckets`, so that streams at different points of their plans
        share a window size and one call (`BatchedWindows`)."""
        windows = stream.windows
        assert windows is not None
        return windows.window(latent.latent.frames, latent.claimed, stream.claimed, stream.alone, stream.skip)

    # -- steps -----------------------------------------------------------------------
    def next_step(self, now: float, elsewhere: bool = False) -> list[Work]:
        """Up to `batch` units that one call can run together (one kind: `_kind`; fewer
        where the model bounds a step's frames, `ModelProfile.step_frames`), best first
        by the ranking, of the kind `_choose` picks. Room left in the step goes to a
        further chunk of the streams already in it (the budget's `spare_chunks`), which a
        batched call runs for little more time. Empty when nothing can run or every slot
        is held. (`elsewhere` is the CPU's: a batched device's steps are not on the
        cores.)"""
        budget = self.budget
        free = budget.batch if budget.slots is None else min(budget.batch, budget.slots - self._busy)
        if free <= 0:
            return []
        chosen = self._choose(now)
        if chosen is None:
            return []
        if chosen.limit is not None:
            free = min(free, chosen.limit)  # the model's `step_frames`
        units = chosen.take(free, now, self.urgent_slack)
        window = chosen.kind.window
        if window is None:
            step = self._claim_acoustic(units)
        else:
            step = self._claim_chunks(units, window, free, now)
        self._busy += len(step)
        return step

    def _choose(self, now: float) -> Queues | None:
        """The queue the next step takes from: the best unit's kind, if it is urgent or a
        new stream's that has waited `NEW_WAIT_S`; else the kind with the most units
        waiting. None when no unit may be claimed."""
        slack = self.urgent_slack
        head: tuple[Rank, float, int, bool] | None = None  # the best unit's order
        chosen: Queues | None = None
        fullest: Queues | None = None
        for queues in self._queues.values():
            if not queues.size:
                continue  # only stale entries: nothing to claim
            live, new = queues.head()
            if live is not None:
                rank = _URGENT if live.deadline - now <= slack else _AHEAD
                key = (rank, live.deadline, live.stream_id, live.acoustic)
                if head is None or key < head:
                    head, chosen = key, queues
            if new is not None:
                key = (_NEW, new.deadline, new.stream_id, new.acoustic)
                if head is None or key < head:
                    head, chosen = key, queues
            if fullest is None or queues.size > fullest.size:
                fullest = queues
        if head is None or chosen is None or fullest is None:
            return None
        rank, deadline, _, _ = head
        waited = rank == _NEW and now - deadline >= NEW_WAIT_S
        if rank != _URGENT and not waited and fullest.size > chosen.size:
            return fullest  # nothing is urgent: the kind with the most units waiting
        return chosen

    def _claim_acoustic(self, units: list[StreamState]) -> list[Work]:
        """The stage A of each of `units`, taken off their queue for one step."""
        step: list[Work] = []
        for stream in units:
            stream.queued_acoustic = None  # its entry left the queue (`Queues.take`)
            step.append(self._book_acoustic(stream))
        return step

    def _claim_chunks(self, units: list[StreamState], size: int, free: int, now: float) -> list[Work]:
        """A step's chunks, of window size `size` (`_kind`): the next chunk of each of
        `units`, then, while the step has fewer than `free`, a further chunk of those
        streams that may run one (`_vocoder_candidate(stream, True, now)`) and whose next
        window is of the same size, planning at most `FURTHER_LOOKS_PER_SLOT` windows per
        free slot. (The checks and the open latent's lookup are inline: a step checks up
        to `batch` streams.)"""
        step: list[Work] = []
        self._claim_vocoders(units, step)
        credits, spare, slack = self.credits, self.budget.spare_chunks, self.urgent_slack
        room = free - len(step)
        looks = FURTHER_LOOKS_PER_SLOT * room
        further: list[StreamState] = []
        for stream in units:
            if len(further) >= room or looks <= 0:
                break
            first_packet_at = stream.first_packet_at
            if stream.untaken >= credits or not 0 < stream.in_flight < spare or first_packet_at is None:
                continue
            for latent in stream.latents:  # `StreamState.open_latent`
                if latent.claims == 0 or latent.claimed < latent.latent.frames:
                    break
            else:
                continue
            if first_packet_at + stream.produced / stream.profile.sample_rate - now <= slack:  # `dry_at`
                continue
            # The units share the step's model, so the kind is the window's bucket.
            window = stream.window
            if window is None:
                looks -= 1
                window = stream.window = self._window(stream, latent)
                stream.window_latent = latent
            lo, hi, _, _, bucket = window
            if (bucket or hi - lo) == size:
                further.append(stream)
        self._claim_vocoders(further, step)
        self.spread["chunks"] += len(further)
        return step

    def _claim_vocoders(self, streams: list[StreamState], step: list[Work]) -> None:
        """Claim the next chunk of each of `streams` onto `step`, streams whose next
        chunk's kind was just read (their queue entries' or `_claim_chunks`'s), with the
        window computed once and kept (`_next_window`). A first chunk's window was planned
        as the stream was queued, its burst's skip with it (`_touch`); a step never claims
        one alone. A step makes up to `batch` of these under the engine lock, in this one
        loop."""
        append = step.append
        for stream in streams:
            stream.queued_vocoder = None  # its entry left the queue (`Queues.take`)
            window = stream.window
            if window is None:
                window = self._next_window(stream)
            latent = stream.window_latent
            assert latent is not None
            lo, hi, start, end, bucket = window
            seq, last = self._book_claim(stream, latent, end)
            stream.window = None  # the next window starts where this one ended
            append(VocoderWork(stream.id, latent.segment, latent.latent, lo, hi, start, end, last, seq, 1, bucket))
