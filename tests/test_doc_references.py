"""The docs point at code as `engine/asr.py: NAME`; each such pointer must name a module
that exists and a name that module holds, so that a module split cannot leave the docs
pointing at the old place."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POINTER = re.compile(r"`((?:engine|serving|api|runners|audio|ray|bench|text)/[\w/]+\.py): ([^`]+)`")


def _pointers() -> list[tuple[str, str, str]]:
    found = []
    for doc in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        for m in POINTER.finditer(doc.read_text()):
            for name in re.split(r",\s*", m.group(2)):
                name = name.strip().split(".")[-1].split("(")[0].rstrip("*").strip()
                if re.fullmatch(r"\w+", name):
                    found.append((doc.name, m.group(1), name))
    return found


def test_docs_point_at_names_their_modules_hold() -> None:
    pointers = _pointers()
    assert len(pointers) > 20
    wrong = [(doc, module, name) for doc, module, name in pointers
             if not (ROOT / "voxserve" / module).exists() or name not in (ROOT / "voxserve" / module).read_text()]
    assert wrong == []
