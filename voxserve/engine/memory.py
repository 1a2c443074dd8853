"""glibc malloc settings for a long-running server with many threads and large arrays.

Two defaults of glibc make the RSS of a process like this one creep up over hours
without any leak:
- every thread that allocates may get an arena of its own (up to 8 per core), and memory
  freed in one arena is not reused by another;
- the threshold above which an allocation gets its own mmap (and goes back to the OS when
  freed) grows each time such a block is freed, up to 32 MB. After the first few audio
  buffers, every array of a segment lands on the heap instead, where it fragments.
`tune_allocator` caps the arenas and fixes the mmap threshold. Call it at start-up, before
the worker threads exist. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = ["tune_allocator"]

log = logging.getLogger(__name__)

_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

ARENAS = 2
"""Arenas in all: the event loop and the inference threads mostly allocate in turn."""
MMAP_THRESHOLD = 256 * 1024
"""Blocks this large or larger are mmapped and returned to the OS when freed (a second of
24 kHz float32 audio is 96 KB; a segment's latent and PCM buffers are larger)."""


def tune_allocator() -> bool:
    """Apply the settings; True when the C library took them."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(_M_ARENA_MAX, ARENAS)) and bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    if not ok:
        log.warning("could not tune malloc; RSS may creep up over long runs")
    return ok
