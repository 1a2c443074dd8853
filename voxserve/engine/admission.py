"""Admission: whether a new stream may start, and the line it waits in. The whole rule
lives here; the engines only report what they see.

The line (`Admission`) runs on the event loop: at most `limit` active streams, a bounded
FIFO of waiters behind them, and 429 past the queue or after the wait times out. On a
batched device the line is as long as the device carries (`carry`: everyone active and
waiting, at the device's batch curve, within its budget), so a burst that the device can
run is queued whole rather than refused; a refusal's `Retry-After` is then the time the
device needs for the work ahead of it (`drain`).

An optional `gate(active, kind)` says whether the engine can take one more stream right
now (no live stream is about to underrun, and the load with it stays within what the
workers sustain); it is told how many streams are admitted and the `kind` the waiter
named (its voice model; None if it did not say). While it says no, newcomers wait even
below `limit`, in order; a timer re-asks it every `recheck_s` while anyone waits. With
nothing active, the gate is not asked: one stream always runs. Every wait is cancellable: a client that leaves while
queued simply drops out of the line. `close()` (at shutdown) answers every waiter and
every later caller with 503.

The TTS gate (`hold_reason`) is pure: it is given a `LoadView` of the engine (each
model's measured cost, the streams live and starting, the players of the live ones) and
says why a newcomer must wait, or None. The load of the live streams is the sum of their
models' costs, and the device's budget is its capacity times `TARGET_UTILIZATION`: one
stream of a model six times as costly counts as six. A newcomer is let in only if the
load *with it* stays within the budget (`room_for`): for a model whose capacity is three
streams, "under capacity now" would let in a fourth. On a batched device a model's cost
is read at the batch its live streams make (`CostMeter.cost(batch)`), so that the
hundredth stream costs what a step of a hundred costs per stream, not what one alone does.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from voxserve.engine.work import Playback
from voxserve.errors import Overloaded, Unavailable

__all__ = [
    "EAGER_SLACK_S",
    "EAGER_UTILIZATION",
    "MIN_SLACK_S",
    "TARGET_UTILIZATION",
    "Admission",
    "LoadView",
    "hold_reason",
    "lagging",
    "load_with",
    "room_for",
    "stream_capacity",
    "weighted_room",
]

TARGET_UTILIZATION = 0.85
"""Admission keeps the streams' measured load below this share of the device: the rest
absorbs what the meter has not seen yet (a long sentence's stage A, a burst's first
chunks, another process on the cores)."""

EAGER_UTILIZATION = 0.8
"""Up to this share of the device (the load with the newcomer, at the measured costs),
admission is eager: a burst is let in at once, and only a live stream within
`EAGER_SLACK_S` of running dry holds newcomers. Lower holds a burst back and its first
audio waits; higher lets in streams that then run dry together (docs/BENCHMARKS.md,
"Tuning constants", has the figures)."""

EAGER_SLACK_S = 0.1
"""How close to running dry a live stream must be to hold newcomers while admission is
eager. Below the scheduler's `URGENT_SLACK_S`: while newcomers start, live streams are
served just in time, that far ahead, and that is no reason to hold anyone."""

MIN_SLACK_S = 0.5
"""Near capacity (above `EAGER_UTILIZATION`), a newcomer waits while a live stream past
start-up has less than this much audio ahead of its player (streams out of credit
excepted): the stream count follows what the device sustains right now."""


Gate = Callable[[int, str | None], bool]
"""gate(active, kind): whether one more stream of `kind` fits now."""

Carry = Callable[[int, Mapping[str | None, int], str | None], bool]
"""carry(active, queued, kind): whether the device carries the streams active, those
queued (by the kind each named) and one more of `kind`, once they are all let in."""

Drain = Callable[[int, Mapping[str | None, int]], float | None]
"""drain(active, queued): seconds the device needs to do the work of the streams active
and queued (None: not known yet)."""


class Admission:
    def __init__(
        self,
        limit: int,
        max_queue: int,
        timeout_s: float,
        gate: Gate | None = None,
        recheck_s: float = 0.05,
        carry: Carry | None = None,
        drain: Drain | None = None,
    ):
        """`carry` (a batched device): past `max_queue` the line goes on taking waiters
        while the device carries them all, up to `limit + max_queue` streams active and
        queued together, so that a burst the device can run waits its turn instead of
        being refused. `drain`: a refusal's `Retry-After` is the time the device needs
        for the work ahead, rather than a guess from the line's length."""
        if limit < 1 or max_queue < 0:
            raise ValueError("limit must be >= 1 and max_queue >= 0")
        self.limit = limit
        self.max_queue = max_queue
        self.timeout_s = timeout_s
        self.gate = gate
        self.recheck_s = recheck_s
        self.carry = carry
        self.drain = drain
        self.active = 0
        self.rejected = 0
        self.gated = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._kinds: dict[asyncio.Future[None], str | None] = {}
        """The kind each waiter named, for the gate."""
        self._queued: Counter[str | None] = Counter()
        """The waiters by the kind each named, for `carry` and `drain`."""
        self._timer: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def _retry_after(self) -> float:
        if self.drain is not None:
            seconds = self.drain(self.active, self._queued)
            if seconds is not None:
                return float(max(1, math.ceil(seconds)))
        return max(1.0, round(1.0 + self.queued / max(1, self.limit)))

    def _may_queue(self, kind: str | None) -> bool:
        """Whether a newcomer of `kind` may wait in line: while the line is shorter than
        `max_queue`, or, past it, while the device carries everyone (`carry`) within
        `limit + max_queue` streams."""
        if len(self._waiters) < self.max_queue:
            return True
        if self.carry is None or self.active + len(self._waiters) >= self.limit + self.max_queue:
            return False
        return self.carry(self.active, self._queued, kind)

    def _room(self, kind: str | None) -> bool:
        if self.active >= self.limit:
            return False
        if self.active == 0 or self.gate is None:
            return True
        if self.gate(self.active, kind):
            return True
        self.gated += 1
        return False

    def refuse_if_full(self) -> None:
        """Raise now what `acquire` would raise at once (503 when closed, 429 when the
        queue is full), so that a request about to be refused skips its costly
        preparation. It takes nothing and asks no gate; `acquire` decides the rest."""
        if self._closed:
            raise Unavailable("server is shutting down")
        if (self._waiters or self.active >= self.limit) and not self._may_queue(None):
            self._refuse()

    def _refuse(self) -> None:
        self.rejected += 1
        raise Overloaded(
            f"server is at capacity ({self.active} streams, {self.queued} queued); retry later",
            retry_after=self._retry_after(),
        )

    async def acquire(self, kind: str | None = None) -> None:
        """Take a slot, waiting in line if need be; `kind` is passed to the gate."""
        if self._closed:
            raise Unavailable("server is shutting down")
        if not self._waiters and self._room(kind):
            self.active += 1
            return
        if not self._may_queue(kind):
            self._refuse()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._kinds[waiter] = kind
        self._queued[kind] += 1
        self._arm_timer()
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.timeout_s)
        except TimeoutError:
            if _granted(waiter):
                return  # granted at the last moment: keep the slot
            self._drop(waiter)
            self.rejected += 1
            raise Overloaded(
                f"no stream slot freed within {self.timeout_s:g} s; retry later",
                retry_after=self._retry_after(),
            ) from None
        except BaseException:
            if _granted(waiter):
                self.release()  # granted, but the caller is gone: pass the slot on
            else:
                self._drop(waiter)
            raise

    def _drop(self, waiter: asyncio.Future[None]) -> None:
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)
        self._forget(waiter)
        waiter.cancel()

    def _forget(self, waiter: asyncio.Future[None]) -> None:
        """Drop a waiter's kind, as it leaves the line."""
        if waiter in self._kinds:
            kind = self._kinds.pop(waiter)
            self._queued[kind] -= 1
            if self._queued[kind] <= 0:
                del self._queued[kind]

    def _grant(self) -> None:
        """Admit waiters, oldest first, while there is room."""
        while self._waiters and self._room(self._kinds.get(self._waiters[0])):
            waiter = self._waiters.popleft()
            self._forget(waiter)
            if not waiter.done():
                self.active += 1
                waiter.set_result(None)

    def release(self) -> None:
        self.active -= 1
        self._grant()

    def _arm_timer(self) -> None:
        if self.gate is not None and (self._timer is None or self._timer.done()):
            self._timer = asyncio.get_running_loop().create_task(self._recheck())

    async def _recheck(self) -> None:
        while self._waiters:
            await asyncio.sleep(self.recheck_s)
            self._grant()

    def close(self) -> None:
        """Refuse every waiter and every later call with 503 (the server is stopping)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        self._kinds.clear()
        self._queued.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(Unavailable("server is shutting down"))


def _granted(waiter: asyncio.Future[None]) -> bool:
    return waiter.done() and not waiter.cancelled() and waiter.exception() is None


@dataclass(frozen=True)
class LoadView:
    """What the TTS engine sees when a newcomer asks to start."""

    capacity: float
    """Device-seconds per second: the CPU's workers, or 1 for a device that runs one
    batched step at a time."""
    slots: int
    """Units the device runs at once (a CPU's workers, a batched device's step)."""
    costs: Mapping[str, float | None]
    """Each model's cost per stream, as admission counts it (None: not measured yet)."""
    live: Mapping[str, int]
    """Streams per model, live or admitted and not yet submitted under a known model."""
    unsubmitted: int
    """Streams admitted, not yet submitted, of no known model."""
    starting: int
    """Streams that have not sent two chunks yet, and those admitted not yet submitted."""
    playback: Sequence[Playback]
    """The players of the live streams past start-up."""
    now: float
    batched: bool = False
    """A batched device: at most `slots` streams start at once however cheap its costs."""


def hold_reason(view: LoadView, newcomer: str | None, default: str) -> str | None:
    """Why one more stream of model `newcomer` (None: the costliest) must wait, or None:

    - "starting": while the cost of a model concerned (the newcomer's, or a live
      stream's) is not measured yet, at most one stream per slot of the device is
      starting, so a burst of arrivals ramps up instead of being let in before anyone
      can tell it is too much. On a batched device always (a step's worth of streams
      starting at once): a stream's start costs the host far more than its steady
      state (its request, its stage A, its first chunks, which carry the most context
      per second of audio), which the device's batch curve does not see, and a burst
      let in whole would have every stream's second chunk due at once;
    - "lagging": a live stream is about to run dry (`lagging`): within `EAGER_SLACK_S`
      while the load with the newcomer is within `EAGER_UTILIZATION`, within
      `MIN_SLACK_S` above it, so that near capacity newcomers come in only as fast as
      the live streams stay ahead;
    - "load": the load with the newcomer would pass the budget (`room_for`).
    """
    concerned = {*view.live, newcomer or default}
    measured = all(view.costs.get(name) is not None for name in concerned)
    if (view.batched or not measured) and view.starting >= view.slots:
        return "starting"
    load = load_with(view.costs, view.live, view.unsubmitted, newcomer)
    eager = measured and load is not None and load <= view.capacity * EAGER_UTILIZATION
    if lagging(view.playback, view.now, EAGER_SLACK_S if eager else MIN_SLACK_S):
        return "lagging"
    if not room_for(view.capacity * TARGET_UTILIZATION, view.costs, view.live, view.unsubmitted, newcomer):
        return "load"
    return None


def lagging(playback: Sequence[Playback], now: float, min_slack: float) -> int:
    """Live streams whose playback runs dry within `min_slack` seconds.

    Streams out of credit are not counted: their client is the slow part, not us. Nor
    are streams whose first packet went out less than `min_slack` ago: they have not had
    the time to build that much audio ahead (after two chunks, 48 frames, a Piper stream
    has 0.56 s, so at 0.5 s it would count 57 ms after its first packet), and the
    scheduler's urgent class keeps them playing. Counted, they would make each newcomer
    of a burst wait for the one before to get its third chunk out. A `min_slack` below
    the urgent slack counts only streams the scheduler is failing to serve in time: one
    served just in time, as every live stream is while newcomers' first chunks go
    first, keeps the urgent slack ahead.
    """
    return sum(
        1
        for player in playback
        if not player.out_of_credit
        and now - player.started >= min_slack
        and player.dry_at - now < min_slack
    )


def stream_capacity(
    budget: float,
    costs: Mapping[str, float | None],
    live: Mapping[str, int],
    unsubmitted: int,
    default: str,
) -> float | None:
    """Streams the workers sustain for the mix of models live now: `budget` (worker-
    seconds per second) over the mean cost per stream. None while no cost is known.

    `costs` is each model's measured cost (None: not yet measured), `live` the live
    streams per model, `unsubmitted` the streams admitted but not yet submitted whose
    model is not known (the engine counts the others in `live`: `TTSEngine._counted`).
    `n < capacity`, for the n streams counted, says exactly that their load is under the
    budget. A model not yet measured, and those unsubmitted streams, count at the
    costliest measured model; with no stream counted it is the capacity in streams of the
    `default` model.
    """
    known = _known(costs)
    if not known:
        return None
    load = _load(known, live, unsubmitted)
    count = sum(live.values()) + unsubmitted
    mean = load / count if count else known.get(default, max(known.values()))
    return budget / mean


def room_for(
    budget: float,
    costs: Mapping[str, float | None],
    live: Mapping[str, int],
    unsubmitted: int,
    newcomer: str | None,
) -> bool:
    """Whether one more stream of the model `newcomer` keeps the load of the streams
    within `budget` (worker-seconds per second); True while no cost is known.

    Counted as `stream_capacity` counts; the newcomer at its model's cost, or at the
    costliest measured model when its model is not named or not yet measured.
    """
    load = load_with(costs, live, unsubmitted, newcomer)
    return load is None or load <= budget


def load_with(
    costs: Mapping[str, float | None],
    live: Mapping[str, int],
    unsubmitted: int,
    newcomer: str | None,
) -> float | None:
    """Worker-seconds per second of the streams counted as `room_for` counts them, with
    one more of the model `newcomer`; None while no cost is known."""
    known = _known(costs)
    if not known:
        return None
    ceiling = max(known.values())
    cost = known.get(newcomer, ceiling) if newcomer is not None else ceiling
    return _load(known, live, unsubmitted) + cost


def weighted_room(held: Mapping[str, int], weights: Mapping[str, float], newcomer: str, limit: int) -> bool:
    """Whether one more request of `newcomer` fits under `limit` when each request held
    weighs its model's `weights` (the cheapest model 1): transcription admission, whose
    models differ in cost per second of audio as voice models do."""
    load = sum(weights.get(model, 1.0) * n for model, n in held.items())
    return load + weights.get(newcomer, 1.0) <= limit


def _known(costs: Mapping[str, float | None]) -> dict[str, float]:
    return {name: c for name, c in costs.items() if c is not None and c > 0}


def _load(known: Mapping[str, float], live: Mapping[str, int], unsubmitted: int) -> float:
    """Worker-seconds per second of the streams counted: unmeasured models, and streams
    not yet submitted whose model is not known, at the costliest measured cost (they are
    few, and only briefly)."""
    ceiling = max(known.values())
    return sum(n * known.get(name, ceiling) for name, n in live.items()) + unsubmitted * ceiling
