"""The runners' cache of converted model files: where it is, and writing into it so that a
reader never sees half of a file."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["default_cache_dir", "write_atomically"]


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
