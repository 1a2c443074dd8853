"""The simulated device (`--device sim`): one simulated GPU per process (`device`), the time
an H200 takes for each stage's step (`costs`), the fitted phoneme durations the voice
models' stand-ins give (`durations`), and what every stand-in shares to take that time
(`steps`). The stand-ins themselves live in their families' wings
(`runners/<family>/sim_runner.py`): they take the real inputs and give outputs of the real
shapes and lengths (never speech).

A tool for capacity planning and CI. No torch, no GPU.
"""

from voxserve.runners.sim.costs import STAGES, StageCost
from voxserve.runners.sim.device import SimDevice, host_work, sim_device

__all__ = ["STAGES", "SimDevice", "StageCost", "host_work", "sim_device"]
