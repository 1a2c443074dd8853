"""A shared budget of decoded audio samples, so that transcriptions cannot take memory
without bound however many long uploads arrive at once.

Decoding takes from the budget block by block, before it allocates each block
(`audio.blocks`), and the request gives it all back when it ends. One request's share is
capped by what it may decode (`ASRConfig.max_audio_seconds`, a third of the default
budget), so no single upload holds all of it. A request that would pass the budget fails at once with 429 instead of
waiting: waiting while holding half-decoded audio could leave two large requests each
stuck on the other's memory.
"""

from __future__ import annotations

import threading

from voxserve.errors import Overloaded

__all__ = ["AudioBudget", "Lease"]


class AudioBudget:
    def __init__(self, capacity: int, rate: int):
        if capacity < 1 or rate < 1:
            raise ValueError("the audio budget and its rate must be positive")
        self.capacity = capacity
        self.rate = rate
        self._held = 0
        self._lock = threading.Lock()
        self.refused = 0

    @property
    def held(self) -> int:
        """Samples held by live requests now."""
        return self._held

    def lease(self) -> Lease:
        return Lease(self)

    def _take(self, n: int) -> bool:
        with self._lock:
            if self._held + n > self.capacity:
                self.refused += 1
                return False
            self._held += n
            return True

    def _give(self, n: int) -> None:
        with self._lock:
            self._held -= n


class Lease:
    """One request's share of the budget; `release` is idempotent."""

    def __init__(self, budget: AudioBudget):
        self._budget = budget
        self.samples = 0
        self._released = False

    def take(self, n: int) -> None:
        """Reserve `n` more samples; raises Overloaded (429) when the budget is spent."""
        if self._released:
            raise RuntimeError("lease already released")
        if not self._budget._take(n):
            held = self._budget.held / self._budget.rate / 60
            raise Overloaded(
                f"the server already holds {held:.0f} minutes of audio being transcribed, "
                "its limit; retry later or send a shorter file",
                retry_after=5.0,
            )
        self.samples += n

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._budget._give(self.samples)
