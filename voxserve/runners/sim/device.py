"""`SimDevice`: the one simulated GPU of a process, and the host work a step costs.

A step on a real GPU has a host share (Python and launches: the GIL is held and a CPU
core is busy) and a device share (the kernels run while the calling thread waits with
the GIL released). The simulated device reproduces both in wall time:
- `host_work(s)` spins in Python for `s` seconds of this thread's CPU time, holding the
  GIL as launches do, so it counts as the server's CPU and delays other Python threads;
- `SimDevice.run(s)` waits `s` seconds of device time with the GIL released. One GPU
  runs one step's kernels at a time, so the device time of every step in the process,
  of every model and thread, is serialized: two steps in flight overlap their host work,
  not their device time. A step queues behind those reserved before it (first come,
  first served, as on one CUDA stream).

It is a tool for capacity planning and CI: nothing here makes sound.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["SimDevice", "host_work", "sim_device"]


def host_work(seconds: float) -> None:
    """Busy Python for `seconds` of this thread's CPU time (GIL held, as eager launches
    are): on a loaded machine it takes longer in wall time, as real launches would."""
    if seconds <= 0:
        return
    end = time.thread_time_ns() + int(seconds * 1e9)
    while time.thread_time_ns() < end:
        pass


class SimDevice:
    """One simulated GPU: serializes device time across every step of the process."""

    name = "sim"
    description = "simulated H200 (no sound: a stand-in for capacity planning and CI)"

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._free_at = 0.0
        """When the device finishes the work reserved so far (clock seconds)."""
        self.busy_s = 0.0
        """Device seconds run since start."""
        self.steps = 0
        """Device calls run since start."""
        self.by_stage: dict[str, tuple[int, int]] = {}
        """(calls, items) run since start, by stage (`costs.StageCost.name`)."""

    def reserve(self, seconds: float, stage: str = "", items: int = 1) -> float:
        """Queue `seconds` of device work (a call of `items` items of `stage`) behind what
        is reserved; returns when it ends."""
        if seconds < 0:
            raise ValueError(f"device time must be >= 0, not {seconds}")
        with self._lock:
            start = max(self._clock(), self._free_at)
            self._free_at = start + seconds
            self.busy_s += seconds
            self.steps += 1
            calls, held = self.by_stage.get(stage, (0, 0))
            self.by_stage[stage] = (calls + 1, held + items)
            return self._free_at

    def use(self) -> tuple[float, dict[str, tuple[int, int]]]:
        """Device seconds run, and (calls, items) by stage, since start."""
        with self._lock:
            return self.busy_s, dict(self.by_stage)

    def run(self, seconds: float, stage: str = "", items: int = 1) -> None:
        """Run `seconds` of device work: wait, GIL released, until the device has run it
        after everything reserved before it."""
        self.wait_until(self.reserve(seconds, stage, items))

    def wait_until(self, end: float) -> None:
        """Wait, GIL released, until `end` on the device's clock (what `reserve` returned):
        a caller that does its host share between reserving and waiting overlaps the two."""
        while (left := end - self._clock()) > 0:
            self._sleep(left)


_DEVICE = SimDevice()


def sim_device() -> SimDevice:
    """The process's one simulated GPU, shared by every model and thread."""
    return _DEVICE
