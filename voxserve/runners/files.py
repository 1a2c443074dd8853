"""The runners' cache of converted model files and the arrays read from model files: the
cache's place, a cached file written so that a reader never sees half of one, and an array
handed out of a converter that owns its memory and may be written."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

__all__ = ["default_cache_dir", "initializer_array", "owned", "owned_arrays", "write_atomically"]


def owned(array: np.ndarray) -> np.ndarray:
    """`array` itself when it may be written and its memory is numpy's own (directly, or
    through views of an array that owns it); otherwise a copy that is. A tensor read from
    a protobuf, a memory map or a file's bytes is a read-only view of that buffer:
    `torch.from_numpy` warns on it and would share memory torch may not write, and the
    view keeps the whole source alive. One copy at load costs the size of the weights
    once, and lets the source be freed."""
    return array if owns_memory(array) else np.array(array, copy=True, order="C")


def owns_memory(array: np.ndarray) -> bool:
    """Whether `array` may be written and its memory is numpy's own, directly or through
    views of an array that owns it."""
    root = array
    while isinstance(root.base, np.ndarray):
        root = root.base
    return bool(array.flags.writeable and root.base is None and root.flags.owndata)


def owned_arrays(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each array of `arrays` through `owned`."""
    return {name: owned(value) for name, value in arrays.items()}


def initializer_array(tensor: onnx.TensorProto) -> np.ndarray:
    """An ONNX tensor's value as an array of its own (`owned`): `numpy_helper.to_array`
    gives a read-only view of the tensor's raw bytes."""
    from onnx import numpy_helper

    return owned(numpy_helper.to_array(tensor))


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/voxserve`, or `~/.cache/voxserve`: every family's converted files."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "voxserve"


def write_atomically(target: Path, write: Callable[[str], None], suffix: str = ".tmp") -> None:
    """Call write(tmp_path) on a new file beside `target`, then move it into place: two
    processes that fill one cache at once each write their own file, and the last move
    wins whole. The temporary file is removed if `write` fails."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=suffix)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
