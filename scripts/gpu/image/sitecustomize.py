"""The GPU image's packages, on a machine that has more: in a dry run of the GPU bench,
the top-level modules named in `VOXSERVE_BENCH_ABSENT` (comma-separated) are refused at
import, as they would be there, unless found in the folders listed before this one on
the path (the bench's trimmed copies)."""

from __future__ import annotations

import importlib.machinery
import os
import sys

_ABSENT = frozenset(n for n in os.environ.get("VOXSERVE_BENCH_ABSENT", "").split(",") if n)
_HERE = os.path.dirname(os.path.abspath(__file__))


class _ImageOnly:
    """Finds an absent module only in the path entries ahead of this folder."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> object:
        if name.split(".")[0] not in _ABSENT or "." in name:
            return None
        ahead = []
        for entry in sys.path:
            if os.path.abspath(entry or ".") == _HERE:
                break
            ahead.append(entry)
        spec = importlib.machinery.PathFinder.find_spec(name, ahead)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r} (not on the GPU image)", name=name)
        return spec


if _ABSENT:
    sys.meta_path.insert(0, _ImageOnly())
