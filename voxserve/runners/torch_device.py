"""What torch can see: whether a CUDA device is there. Imported only once torch is chosen."""

from __future__ import annotations

import torch

__all__ = ["cuda_available"]


def cuda_available() -> bool:
    """Whether torch sees a CUDA device."""
    return bool(torch.cuda.is_available())
