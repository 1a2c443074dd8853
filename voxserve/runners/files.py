"""Writing the runners' cached files so that a reader never sees half of one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["write_atomically"]


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
