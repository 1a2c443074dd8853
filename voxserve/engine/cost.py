"""What speech costs the workers: each voice model's measured cost, and how many streams
of a given mix of models the workers sustain. Pure: no locks, no clock, no models.

A model's cost is worker-seconds per audio-second (Piper ~0.08 on this CPU; a model six
times as slow, ~0.5). The load of the live streams is the sum of their models' costs, and
the workers' budget is `workers x target_utilization`: one stream of a model six times
as costly counts as six. A newcomer is let in only if the load *with it* stays within the
budget (`room_for`): for a model whose capacity is three streams, "under capacity now"
would let in a fourth.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["CostMeter", "load_with", "room_for", "stream_capacity"]


class _Window:
    """Worker-seconds over audio-seconds of recent work: both sums are halved whenever the
    audio sum passes `window_s`, so the figure follows the machine as it is now (other
    processes, long or short sentences) rather than since start-up."""

    def __init__(self, window_s: float):
        self.window_s = window_s
        self.busy = 0.0
        self.audio = 0.0

    def add(self, busy_s: float, audio_s: float) -> None:
        self.busy += busy_s
        self.audio += audio_s
        if self.audio > self.window_s:
            self.busy /= 2
            self.audio /= 2

    def rate(self) -> float | None:
        return self.busy / self.audio if self.audio >= 2.0 else None


class CostMeter:
    """Worker-seconds per audio-second of one voice model, over its recent units of work.
    Wall time is what counts: a core shared with another process costs more.

    Stage A and stage B are measured apart, each over the audio it made: stage A per
    second of audio in the latents it computed, stage B per second it decoded; the cost is
    their sum. One ratio of all the work over the audio decoded would read high whenever
    streams start together, because a stream's stage A runs a whole sentence ahead of its
    audio: in a burst of 16 Piper streams it read 0.11-0.14 against 0.09 at steady load,
    and admission, counting 16 streams at that cost, held the last ones back for nothing.

    Units on one worker are the ones admission needs: once streams share the machine,
    every unit runs on one. A unit on several threads (a lone stream using the idle core)
    costs more worker-seconds for its audio, so it is counted only while a stage has no
    one-worker measure yet (a model that has only run alone, as after its warm-up).
    """

    STAGES = ("acoustic", "vocoder")

    def __init__(self, window_s: float = 30.0):
        self._windows = {(stage, spread): _Window(window_s) for stage in self.STAGES for spread in (False, True)}

    def add(self, stage: str, busy_s: float, audio_s: float, threads: int = 1) -> None:
        """A unit of `stage` ran `busy_s` seconds on `threads` workers and made `audio_s`
        seconds of audio (stage A: its latent's)."""
        self._windows[stage, threads > 1].add(busy_s * threads, audio_s)

    def cost(self) -> float | None:
        """Worker-seconds per audio-second, or None before both stages made 2 s of audio."""
        total = 0.0
        for stage in self.STAGES:
            rate = self._windows[stage, False].rate()
            if rate is None:
                rate = self._windows[stage, True].rate()
            if rate is None:
                return None
            total += rate
        return total


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


def _known(costs: Mapping[str, float | None]) -> dict[str, float]:
    return {name: c for name, c in costs.items() if c is not None and c > 0}


def _load(known: Mapping[str, float], live: Mapping[str, int], unsubmitted: int) -> float:
    """Worker-seconds per second of the streams counted: unmeasured models, and streams
    not yet submitted whose model is not known, at the costliest measured cost (they are
    few, and only briefly)."""
    ceiling = max(known.values())
    return sum(n * known.get(name, ceiling) for name, n in live.items()) + unsubmitted * ceiling
