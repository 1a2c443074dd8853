"""Read a PyTorch state dict (`torch.save` zip format) into numpy arrays without torch.

The zip holds `<root>/data.pkl`, a pickle whose tensors are calls to
`torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)`, each storage a
persistent id naming a member `<root>/data/<key>` of raw little-endian values. Only
those names (and `collections.OrderedDict`) are allowed to load: anything else in the
pickle is refused, so a tampered file cannot run code.
"""

from __future__ import annotations

import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["read_state_dict"]

_DTYPES = {
    "FloatStorage": np.float32,
    "HalfStorage": np.float16,
    "DoubleStorage": np.float64,
    "LongStorage": np.int64,
    "IntStorage": np.int32,
}


class _Storage:
    def __init__(self, dtype: type[np.generic], key: str):
        self.dtype = dtype
        self.key = key


def _rebuild_tensor(storage: np.ndarray, offset: int, size: tuple[int, ...], stride: tuple[int, ...],
                    *_: Any) -> np.ndarray:
    if not size:
        return np.array(storage[offset], dtype=storage.dtype)
    item = storage.itemsize
    view = np.lib.stride_tricks.as_strided(
        storage[offset:], shape=size, strides=tuple(s * item for s in stride), writeable=False
    )
    return np.array(view, copy=True)


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: Any, archive: zipfile.ZipFile, root: str):
        super().__init__(file)
        self._archive = archive
        self._root = root

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor
        if module == "torch" and name in _DTYPES:
            return _DTYPES[name]
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a state dict")

    def persistent_load(self, pid: Any) -> np.ndarray:
        kind, dtype, key = pid[0], pid[1], pid[2]
        if kind != "storage" or not isinstance(dtype, type):
            raise pickle.UnpicklingError(f"unexpected persistent id {pid!r}")
        raw = self._archive.read(f"{self._root}/data/{key}")
        return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<"))


def read_state_dict(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of the state dict at `path`, by name."""
    with zipfile.ZipFile(path) as archive:
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise ValueError(f"{path} is not a torch zip checkpoint")
        root = pickles[0].rsplit("/", 1)[0]
        with archive.open(pickles[0]) as f:
            state = _Unpickler(f, archive, root).load()
    if not isinstance(state, dict):
        raise TypeError(f"{path} does not hold a state dict")
    return {str(k): np.asarray(v) for k, v in state.items()}
