"""What speech costs a device: each voice model's measured cost. Pure: no locks, no
clock, no models. Admission (`engine/admission.py`) weighs streams by it.

A model's cost is device-seconds per audio-second: on a CPU, worker-seconds (a model that
decodes ten times faster than real time on one worker costs 0.1); on a batched device, the time of its
steps over the audio they made, which falls as the batch grows (a step of 64 chunks
takes little more than a step of one), so it is kept per batch size.
"""

from __future__ import annotations

__all__ = ["CostMeter", "batch_bucket"]


def batch_bucket(batch: int) -> int:
    """The power of two at or below `batch`: batch sizes measured together."""
    return 1 << (max(1, batch).bit_length() - 1)


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

    A batched step is measured by its batch size's bucket (`batch_bucket`), as the
    step's time over the audio of all its units. `cost(batch)` reads the bucket at or
    below `batch` that has a measure (a smaller batch costs more per second of audio, so
    the figure errs on the safe side), else the smallest measured one.

    A batched device's warm-up also gives the meter its batch curve (`add(...,
    curve=True)`): steps timed at every batch bucket on a device with nothing else to
    do, kept apart as well (`curve_cost`), since traffic's figures, which `cost` follows,
    hold whatever else the host did meanwhile.
    """

    STAGES = ("acoustic", "vocoder")

    def __init__(self, window_s: float = 30.0):
        self._window_s = window_s
        self._windows: dict[tuple[str, bool, int], _Window] = {}
        self._curve: dict[tuple[str, bool, int], _Window] = {}

    def add(
        self, stage: str, busy_s: float, audio_s: float, threads: int = 1, batch: int = 1, curve: bool = False
    ) -> None:
        """A unit of `stage` (or a step of `batch` units) ran `busy_s` seconds on `threads`
        workers and made `audio_s` seconds of audio (stage A: its latents'); `curve`: a
        warm-up step of the batch curve, kept in `curve_cost` too."""
        key = (stage, threads > 1, batch_bucket(batch))
        for windows in (self._windows, self._curve) if curve else (self._windows,):
            window = windows.get(key)
            if window is None:
                window = windows[key] = _Window(self._window_s)
            window.add(busy_s * threads, audio_s)

    def cost(self, batch: int = 1) -> float | None:
        """Device-seconds per audio-second at `batch` units a step, or None before both
        stages made 2 s of audio."""
        return self._cost(self._windows, batch)

    def curve_cost(self, batch: int = 1) -> float | None:
        """As `cost`, from the warm-up's batch curve alone (None without one)."""
        return self._cost(self._curve, batch)

    def _cost(self, windows: dict[tuple[str, bool, int], _Window], batch: int) -> float | None:
        total = 0.0
        for stage in self.STAGES:
            rate = self._rate(windows, stage, False, batch)
            if rate is None:
                rate = self._rate(windows, stage, True, batch)
            if rate is None:
                return None
            total += rate
        return total

    @staticmethod
    def _rate(windows: dict[tuple[str, bool, int], _Window], stage: str, spread: bool, batch: int) -> float | None:
        rates = {
            size: rate
            for (name, wide, size), window in windows.items()
            if name == stage and wide == spread and (rate := window.rate()) is not None
        }
        if not rates:
            return None
        below = [size for size in rates if size <= batch]
        return rates[max(below)] if below else rates[min(rates)]
