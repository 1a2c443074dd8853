"""`scripts/check_history.py`, the lint stage's check that the repository speaks of the
product and not of how it was built: run as `make lint` runs it, on this repository and
on small git repositories with planted lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_history.py"


def _check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(root)], check=False, capture_output=True, text=True, timeout=60)


def _repo(tmp_path: Path, files: dict[str, str | bytes]) -> Path:
    for name, content in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    return tmp_path


def test_this_repository_passes() -> None:
    result = _check(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


# The planted phrases are built from parts, so that this file's own source holds none of
# what the check looks for.
SESSION, ISSUE, STOP = "sess" + "ion", "iss" + "ue", "this" + " stop"


def test_history_in_prose_is_flagged_and_code_is_not(tmp_path: Path) -> None:
    root = _repo(tmp_path, {
        "docs/GUIDE.md": (
            "# Guide\n"
            f"Measured in {SESSION} 7, on main at 1a2b3c4.\n"
            "The cache lives in `~/.cache/voxserve/6e742170d3090165`.\n"
            "```sh\n"
            "git checkout 1a2b3c4   # a command, not prose\n"
            "```\n"
            "Numbers such as 40000000 and words such as deadbeef are not hashes.\n"
        ),
        "voxserve/rule.py": (
            f'"""A rule ({ISSUE} 15)."""\n'
            "KEY = \"vx-test-4f9c2a7e1b\"\n"
            f"# chosen in {STOP}\n"
            "def f() -> None:\n"
            '    """Fine: what it does and why."""\n'
        ),
        "tests/test_rule.py": f'print("{ISSUE} 3 is only a string here")\n',
        "README.md": "Nothing to see.\n",
        "notes/old.md": f"{SESSION} 1, {ISSUE} 2, abcdef1: outside the checked folders\n",
    })
    result = _check(root)
    assert result.returncode == 1
    assert sorted(result.stdout.splitlines()) == [
        "docs/GUIDE.md:2: hash-like token: '1a2b3c4'",
        f"docs/GUIDE.md:2: history: '{SESSION} 7'",
        f"voxserve/rule.py:1: history: '{ISSUE} 15'",
        f"voxserve/rule.py:3: history: '{STOP}'",
    ]


def test_a_tracked_tree_over_the_bound_fails(tmp_path: Path) -> None:
    root = _repo(tmp_path, {"README.md": "A product.\n", "data/blob.bin": b"\0" * 5_000_001})
    result = _check(root)
    assert result.returncode == 1
    assert "the tracked tree is 5,000,012 bytes, over 5,000,000" in result.stdout
