"""Decoded audio held in fixed-size float32 blocks, so that it grows without copying. Pure.

A contiguous array that grows must copy itself to grow: for a moment it holds the audio
twice. Blocks never move, so memory is the audio plus at most one partly filled block.
Each block is reserved (`reserve(n)`) before it is allocated, so a memory budget refuses
the growth instead of learning of it afterwards.

Slicing (`blocks[a:b]`) gives a view when the slice lies within one block and otherwise a
copy of just that slice; callers slice bounded ranges (a 30 s piece, a 5 s search window),
never the whole file. `Samples` is what the cut planner and feature code accept: this
class or a plain numpy array.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

__all__ = ["BLOCK_SAMPLES", "Reserve", "SampleBlocks", "Samples"]

BLOCK_SAMPLES = 10 * 16000
"""10 s at 16 kHz: 640 KB, so the unused tail of the last block is small, and above glibc's
mmap threshold as voxserve sets it, so a freed block goes straight back to the OS."""

Reserve = Callable[[int], None]
"""Called with the count of samples about to be allocated; raises to refuse them."""


def _no_reserve(n: int) -> None:
    pass


class Samples(Protocol):
    """Mono float32 samples that can be measured and sliced."""

    def __len__(self) -> int: ...

    def __getitem__(self, key: slice, /) -> np.ndarray: ...


class SampleBlocks:
    """A growable sequence of float32 samples stored in blocks of `block` samples."""

    def __init__(self, block: int = BLOCK_SAMPLES, reserve: Reserve = _no_reserve):
        if block < 1:
            raise ValueError("the block size must be positive")
        self.block = block
        self._reserve = reserve
        self._blocks: list[np.ndarray] = []
        self._len = 0

    def __len__(self) -> int:
        return self._len

    @property
    def allocated(self) -> int:
        """Samples allocated (and reserved), the unused tail of the last block included."""
        return len(self._blocks) * self.block

    def extend(self, samples: np.ndarray) -> None:
        """Append float32 samples, reserving and allocating new blocks as needed."""
        n = len(samples)
        at = self._len - (len(self._blocks) - 1) * self.block
        if self._blocks and at + n <= self.block:  # the common case: fits in the last block
            self._blocks[-1][at : at + n] = samples
            self._len += n
            return
        taken = 0
        while taken < n:
            if self._len == self.allocated:
                self._reserve(self.block)
                self._blocks.append(np.empty(self.block, dtype=np.float32))
            at = self._len - (len(self._blocks) - 1) * self.block
            k = min(self.block - at, n - taken)
            self._blocks[-1][at : at + k] = samples[taken : taken + k]
            taken += k
            self._len += k

    def __getitem__(self, key: slice, /) -> np.ndarray:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("SampleBlocks takes only contiguous slices")
        start, stop, _ = key.indices(self._len)
        if stop <= start:
            return np.zeros(0, dtype=np.float32)
        first, last = start // self.block, (stop - 1) // self.block
        if first == last:
            base = first * self.block
            return self._blocks[first][start - base : stop - base]
        out = np.empty(stop - start, dtype=np.float32)
        at = start
        while at < stop:
            i, offset = divmod(at, self.block)
            n = min(self.block - offset, stop - at)
            out[at - start : at - start + n] = self._blocks[i][offset : offset + n]
            at += n
        return out

    def chunks(self) -> list[np.ndarray]:
        """Views of the filled part of every block, in order."""
        views = list(self._blocks)
        if views and self._len < self.allocated:
            views[-1] = views[-1][: self._len - (len(views) - 1) * self.block]
        return views

    def to_array(self) -> np.ndarray:
        """All samples as one contiguous array (a copy when there is more than one block)."""
        views = self.chunks()
        if not views:
            return np.zeros(0, dtype=np.float32)
        return views[0] if len(views) == 1 else np.concatenate(views)
