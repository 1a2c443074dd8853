"""Live sessions' share of the ASR workers: when a session may start a decode, and how
many sessions the workers sustain. The rules are pure functions of what the engine sees
(`LiveView`) and of the meter (`LiveMeter`, fed the time); `LivePolicy` is the engine's
handle on them, asked by the realtime use case. Nothing here decodes, knows a session's
audio, or speaks a protocol.

When to decode (the session asks with its own facts, gets a deadline or None):

- **final** at the commit: due `target_s` after now;
- **early final**, once speech has paused: only while no live work waits for a worker
  (the pause may yet end in speech, and a queued final of another session must not
  wait behind a guess); due `target_s` after the rest of the silence;
- **delta**, while the user speaks: only when a worker is idle and no other work keeps
  the cores busy (speech); due `DELTA_SLACK_S` after now, later than any final.

How many sessions (`live_capacity`): see its docstring. The engine's warm-up times a
decode, and `LiveEstimate` turns that into the cost of a session whose user talks half
the time: sessions are admitted by that estimate from the start. Once the meter has
measured live work, its figures replace the estimate's, blended back towards it as the
measurement ages (`MEASURE_HALF_LIFE_S` without a live decode), so a quiet server
forgets a busy spell. The capacity shown rises at once and falls by at most one session
every `FALL_STEP_S` (`Damper`), so one noisy window cannot collapse it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

from voxserve.engine.admission import TARGET_UTILIZATION

__all__ = [
    "DELTA_SLACK_S",
    "Damper",
    "LiveEstimate",
    "LiveMeter",
    "LivePolicy",
    "LiveView",
    "delta_deadline",
    "early_final_deadline",
    "final_deadline",
    "live_capacity",
    "session_weight",
]

DELTA_SLACK_S = 5.0
"""How far after now a delta's deadline lies: after every final's."""
METER_WINDOW_S = 120.0
"""Session-seconds the meter remembers: its sums are halved past this, so the cost
follows the sessions as they are now (talkative or quiet, the machine busy or not)."""
METER_MIN_SESSION_S = 10.0
METER_MIN_DECODES = 4.0
"""The cost counts as measured once the window holds this much session time and this
many live decodes: less says more about one turn than about a session."""
MEASURE_HALF_LIFE_S = 20.0
"""The measurement's weight against the estimate halves every this many seconds without
a live decode: a server left idle comes back to the estimate within a minute."""
FALL_STEP_S = 10.0
"""The capacity falls by one session at most this often; it rises at once."""
TALK_SHARE = 0.5
"""The estimate's user talks half the time..."""
TURN_SPEECH_S = 3.0
"""...in turns of this much speech..."""
DECODES_PER_TURN = 1.5
"""...each decoded this many times (its final, and an early final or delta that speech
made useless half of the time)..."""
SPEECH_DECODE_FACTOR = 1.3
"""...each decode taking this many times the warm-up's decode of silence: a turn's words
make the decoder run more steps than silence does, and the estimate rounds that up, so
that it admits too few sessions rather than too many."""


@dataclass(frozen=True)
class LiveView:
    """What the engine sees when a session asks."""

    now: float
    """On the clock deadlines are given in."""
    live_queued: int
    """Live pieces waiting for a worker."""
    idle_workers: int
    """Workers with nothing to do: none while anything waits for a batch."""


def final_deadline(view: LiveView, target_s: float) -> float:
    return view.now + target_s


def early_final_deadline(view: LiveView, rest_s: float, target_s: float) -> float | None:
    """The deadline of a final decoded while the silence that will end the turn still
    runs `rest_s`, or None while other live work waits for a worker."""
    if view.live_queued:
        return None
    return view.now + rest_s + target_s


def delta_deadline(view: LiveView, elsewhere: bool) -> float | None:
    """The deadline of a partial transcript, or None unless a worker is idle and nothing
    `elsewhere` (speech) keeps the cores busy: deltas use spare capacity only."""
    if view.idle_workers <= 0 or elsewhere:
        return None
    return view.now + DELTA_SLACK_S


def live_capacity(cost: float, decode_s: float, workers: float, target_s: float) -> int:
    """Sessions the workers sustain with each final within `target_s` of its end of
    speech, at `cost` worker-seconds of live decoding per session-second, where a live
    decode takes `decode_s` seconds (`LiveMeter.decode_s`); at least one.

    The rule: n sessions fit while their load stays within a share of the `workers`,
    n * cost <= rho * workers, where rho is the utilization at which a final, decoded
    in `decode_s` after waiting for a worker, still meets the target. Turns end when
    users stop speaking, not when a worker frees up, so a final's wait is a queue's:
    taking each worker as a queue with Poisson arrivals and decodes of fixed length
    (M/D/1), the mean wait is rho * decode_s / (2 * (1 - rho)), and
    decode_s + wait <= target_s gives rho <= 2 (target_s - decode_s) / (2 target_s -
    decode_s). One queue per worker overstates the wait on several workers, so the rule
    errs on the safe side; rho never passes admission's `TARGET_UTILIZATION`, whose
    headroom absorbs what the meter has not seen yet. A decode of `target_s` or more
    misses the target even alone: one session is let in, as one stream always is.
    """
    if cost <= 0:
        return 1 << 30
    if decode_s >= target_s:
        return 1
    rho = min(TARGET_UTILIZATION, 2 * (target_s - decode_s) / (2 * target_s - decode_s))
    return max(1, math.floor(rho * workers / cost + 1e-9))


def session_weight(cost: float | None, extra: float, shares_cores: bool) -> float:
    """What a session that also spends `extra` CPU-seconds per second of its audio (the
    noise filter) counts for in admission, against 1 for a plain session whose live
    decoding costs `cost` worker-seconds per session-second. On a CPU the filter runs on
    the cores the ASR workers decode on, so it weighs (cost + extra) / cost; on a device
    that decodes elsewhere (`shares_cores` False) it takes nothing the capacity counts,
    and a session weighs 1. Before any cost is known, 1."""
    if not shares_cores or cost is None or cost <= 0 or extra <= 0:
        return 1.0
    return (cost + extra) / cost


@dataclass(frozen=True)
class LiveEstimate:
    """A live session's cost before any is measured, from the warm-up's timings."""

    decode_s: float
    """How long one live decode takes on one worker."""
    turn_call_s: float = 0.0
    """The end-of-turn model's time per turn (semantic_vad), on its own thread."""

    @classmethod
    def from_warmup(cls, silence_decode_s: float, turn_call_s: float = 0.0) -> LiveEstimate:
        """From the warm-up's decode of silence on one thread (and the end-of-turn model's call)."""
        return cls(silence_decode_s * SPEECH_DECODE_FACTOR, turn_call_s)

    @property
    def cost(self) -> float:
        """Worker-seconds per session-second."""
        turns_per_s = TALK_SHARE / TURN_SPEECH_S
        return turns_per_s * (DECODES_PER_TURN * self.decode_s + self.turn_call_s)


class Damper:
    """The capacity as shown: it follows a rising target at once and a falling one by one
    session per `step_s` at most. Pure: the caller passes the time."""

    def __init__(self, step_s: float = FALL_STEP_S) -> None:
        self.step_s = step_s
        self.value: int | None = None
        self._fell_at = -math.inf

    def __call__(self, target: int, now: float) -> int:
        if self.value is None or target >= self.value:
            self.value = target
        elif now - self._fell_at >= self.step_s:
            self.value -= 1
            self._fell_at = now
        return self.value


class LiveMeter:
    """Worker-seconds of live decoding (deltas and finals) per second of session time,
    over recent session time. Pure: the caller passes the time.

    Session time is the open sessions integrated over time. A decode on several threads
    (alone on the machine) costs its wall time times its threads: more than it would on
    one worker, so the cost errs high while a lone session runs. Wall time is what counts:
    a core shared with another process costs more.
    """

    def __init__(self, window_s: float = METER_WINDOW_S) -> None:
        self.window_s = window_s
        self.busy = 0.0
        """Worker-seconds of live decoding."""
        self.wall = 0.0
        self.wall_sq = 0.0
        """Sums of each decode's wall time and of its square (`decode_s`)."""
        self.decodes = 0.0
        self.session_s = 0.0
        self.open = 0
        self.most_open = 0
        """Most sessions open at once while the meter measured."""
        self._measured = False
        self._at: float | None = None
        self.last_decode: float | None = None
        """When the last live decode was counted."""

    def sessions(self, count: int, now: float) -> None:
        """`count` sessions are open from `now` on."""
        self._advance(now)
        self.open = max(0, count)

    def add(self, busy_s: float, now: float, threads: int = 1) -> None:
        """A batch of live pieces took `busy_s` seconds on `threads` threads."""
        self._advance(now)
        self.busy += busy_s * max(1, threads)
        self.wall += busy_s
        self.wall_sq += busy_s * busy_s
        self.decodes += 1
        self.most_open = max(self.most_open, self.open)
        self.last_decode = now

    def add_other(self, busy_s: float, now: float) -> None:
        """Other live work (the end-of-turn model) took `busy_s` seconds of one core: it
        counts in the cost, not in the decodes' length."""
        self._advance(now)
        self.busy += busy_s

    def measured(self) -> bool:
        """Whether the window has held enough to go by; it stays so (quiet sessions that
        decode little afterwards are measured as quiet)."""
        if not self._measured:
            self._measured = self.session_s >= METER_MIN_SESSION_S and self.decodes >= METER_MIN_DECODES
        return self._measured

    def cost(self, now: float) -> float | None:
        """Worker-seconds per session-second, or None until measured."""
        self._advance(now)
        return self.busy / self.session_s if self.measured() else None

    def decode_s(self) -> float | None:
        """How long a live decode takes, as a final sees it: the decodes' wall time,
        averaged weighted by itself (sum of squares over sum), since the decode a final
        finds running on its worker is the more likely a long one. On several threads a
        decode takes less than on one; once sessions share the workers, decodes run on
        one and the figure follows. None until measured."""
        return self.wall_sq / self.wall if self.measured() and self.wall > 0 else None

    def _advance(self, now: float) -> None:
        if self._at is not None and now > self._at:
            self.session_s += self.open * (now - self._at)
            while self.session_s > self.window_s:
                self.measured()
                self.busy /= 2
                self.wall /= 2
                self.wall_sq /= 2
                self.decodes /= 2
                self.session_s /= 2
        self._at = now if self._at is None else max(self._at, now)


class LivePolicy:
    """The engine's live policy: `see()` reads the engine (under its lock) and the
    meter is fed by the engine's workers. Thread-safe; its lock is taken last (never
    hold it while calling into the engine).

    `slots`: units the device decodes at once (a CPU's workers; a batched device's
    batch), one session each before anything is measured. `workers`: worker-seconds the
    device gives per second (a CPU's workers; 1 for a device that runs one batch at a
    time)."""

    def __init__(
        self,
        see: Callable[[], LiveView],
        clock: Callable[[], float],
        slots: int,
        workers: float,
        meter: LiveMeter | None = None,
    ) -> None:
        self._see = see
        self._clock = clock
        self.slots = max(1, slots)
        self.workers = workers
        self.meter = meter or LiveMeter()
        self.estimate: LiveEstimate | None = None
        """Set by the engine's warm-up; None admits one session per slot until measured."""
        self._damper = Damper()
        self._lock = threading.Lock()

    # -- when to decode ---------------------------------------------------------------
    def final_deadline(self, target_s: float) -> float:
        return final_deadline(self._see(), target_s)

    def early_final_deadline(self, rest_s: float, target_s: float) -> float | None:
        return early_final_deadline(self._see(), rest_s, target_s)

    def delta_deadline(self, elsewhere: bool) -> float | None:
        return delta_deadline(self._see(), elsewhere)

    # -- how many sessions --------------------------------------------------------------
    def sessions(self, count: int) -> None:
        with self._lock:
            self.meter.sessions(count, self._clock())

    def ran(self, busy_s: float, threads: int = 1) -> None:
        """A batch of live pieces took `busy_s` seconds on `threads` threads."""
        with self._lock:
            self.meter.add(busy_s, self._clock(), threads)

    def ran_other(self, busy_s: float) -> None:
        """Other live work (the end-of-turn model) took `busy_s` seconds of one core."""
        with self._lock:
            self.meter.add_other(busy_s, self._clock())

    def capacity(self, target_s: float, most: int = 1 << 30, turn_call_s: float = 0.0) -> int:
        """Sessions to admit for finals due `target_s` after the end of speech:
        `live_capacity` at the cost and decode length `figures` gives, at most `most`
        (the hard cap), through the damper. `turn_call_s`: the end-of-turn model's time
        per call (semantic_vad), counted in the estimate."""
        with self._lock:
            now = self._clock()
            figures = self.figures(now, turn_call_s)
            target = self.slots if figures is None else live_capacity(*figures, self.workers, target_s)
            return self._damper(min(most, target), now)

    def session_weight(self, extra: float, shares_cores: bool, turn_call_s: float = 0.0) -> float:
        """`session_weight` at the cost admission goes by now (`figures`)."""
        with self._lock:
            figures = self.figures(self._clock(), turn_call_s)
        return session_weight(None if figures is None else figures[0], extra, shares_cores)

    def reset_damper(self) -> None:
        """Show the next capacity as it is, undamped (a new meter was put in)."""
        with self._lock:
            self._damper = Damper()

    def figures(self, now: float, turn_call_s: float = 0.0) -> tuple[float, float] | None:
        """(cost, decode_s) to admit by: the estimate's (with `turn_call_s` for the
        end-of-turn model) until the meter has measured; then the measured ones, blended
        back towards the estimate's by their age (the weight halves every
        `MEASURE_HALF_LIFE_S` since the last live decode); None with neither. Call under
        the lock."""
        cost, decode = self.meter.cost(now), self.meter.decode_s()
        est = self.estimate
        if est is not None and turn_call_s:
            est = LiveEstimate(est.decode_s, turn_call_s)
        if cost is None or decode is None:
            return None if est is None else (est.cost, est.decode_s)
        if est is None:
            return cost, decode
        age = max(0.0, now - (self.meter.last_decode or now))
        w = 0.5 ** (age / MEASURE_HALF_LIFE_S)
        return w * cost + (1 - w) * est.cost, w * decode + (1 - w) * est.decode_s
