"""The simulated device (`--device sim`): stand-ins for the voice models' two stages that
take the real inputs, give outputs of the real shapes and lengths (never speech), and
take the time an H200 would (`costs`), on one simulated GPU per process (`device`).

A tool for capacity planning and CI. No torch, no GPU.
"""

from voxserve.runners.sim.costs import STAGES, StageCost
from voxserve.runners.sim.device import SimDevice, host_work, sim_device

__all__ = ["STAGES", "SimDevice", "StageCost", "host_work", "sim_device"]
