"""The one simulated GPU of a process: it serializes device time across every model and
thread, as one GPU runs one kernel stream at a time.

A call reserves its device time on the device's timeline (after whatever is already on
it), spends its host time holding the GIL meanwhile (the Python between kernels), then
waits, with the GIL released, until its device time has passed.
"""

from __future__ import annotations

import threading
import time

__all__ = ["SimDevice", "sim_device"]


class SimDevice:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free_at = 0.0
        self.busy_s = 0.0
        """Device time spent so far: busy_s / wall time is the share of its capacity used."""

    def run(self, device_s: float, host_s: float = 0.0) -> None:
        """One call: `device_s` on the device after the calls before it, `host_s` of it
        spent by this thread holding the GIL."""
        with self._lock:
            start = max(time.perf_counter(), self._free_at)
            self._free_at = start + device_s
            self.busy_s += device_s
            done = self._free_at
        end = time.perf_counter() + host_s
        while time.perf_counter() < end:
            pass
        left = done - time.perf_counter()
        if left > 0:
            time.sleep(left)


_DEVICE = SimDevice()


def sim_device() -> SimDevice:
    """The process's simulated GPU."""
    return _DEVICE
