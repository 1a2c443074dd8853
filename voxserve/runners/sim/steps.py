"""What every stand-in shares: timing one step on the simulated H200, and its sound.

A step's host share runs first (Python holding the GIL, `host_work`), then its device
share on the process's one `SimDevice`; the cost of both comes from the stage's
`StageCost` for the step's batch, padded to its longest item.
"""

from __future__ import annotations

import numpy as np

from voxserve.runners.sim.costs import StageCost
from voxserve.runners.sim.device import SimDevice, host_work, sim_device

__all__ = ["TONE_LEVEL", "SimStage", "tone"]

TONE_LEVEL = 0.05
"""Peak of the stand-ins' output (-26 dBFS): audible enough to show audio flows, too quiet
and too plain (one steady sine) to pass for speech."""


def tone(frames: int, hop: int, periods_per_frame: int = 4) -> np.ndarray:
    """float32 PCM of `frames` frames: a steady sine with a whole number of periods per
    frame, so windows cut at frame bounds join without a click."""
    one = TONE_LEVEL * np.sin(2 * np.pi * periods_per_frame * np.arange(hop) / hop)
    return np.tile(one.astype(np.float32), frames)


class SimStage:
    """One stage's steps on the simulated device: `step(batch, length)` takes the time
    that stage's call of `batch` items padded to `length` units takes on an H200."""

    def __init__(self, cost: StageCost, graphed: bool, device: SimDevice | None = None, speed: float = 1.0):
        if not speed > 0:
            raise ValueError(f"a device's speed is a positive factor, not {speed}")
        self.cost = cost
        self.graphed = graphed
        """Time steps as replayed CUDA graphs, or as eager calls (launches on the host)."""
        self.device = device or sim_device()
        self.speed = speed
        """The device's speed as a multiple of the H200's: its share of a step is divided
        by it, the host's is not (`--tts-sim-speed`)."""

    def step(self, batch: int, length: int) -> None:
        host_work(self.cost.host_s(batch, length, self.graphed))
        self.device.run(self.cost.device_s(batch, length) / self.speed, self.cost.name, batch)
