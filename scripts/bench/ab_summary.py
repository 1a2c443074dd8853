"""Summarize `ab.sh`'s runs: for each set and level, the median over rounds of each tree's
figure, and tree B over tree A.

Speech: first audio p50 (ms) and continuity; transcription: latency p50 (ms); realtime:
end of speech to the completed transcript, p50 (ms).

usage: python scripts/bench/ab_summary.py OUTDIR
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

FIGURES = {
    "piper": ("ttfp_s", "first audio p50 ms"),
    "kokoro": ("ttfp_s", "first audio p50 ms"),
    "sim": ("ttfp_s", "first audio p50 ms"),
    "asr": ("latency_s", "latency p50 ms"),
    "realtime": ("completed_latency_s", "completed p50 ms"),
}


def figures(path: Path, key: str) -> dict[int, float]:
    levels = json.loads(path.read_text())["levels"]
    return {level["concurrency"]: level["summary"][key]["p50"] * 1000 for level in levels}


def main(out: Path) -> None:
    print("set      | c   | A median | B median | B/A  | rounds | figure")
    for name, (key, label) in FIGURES.items():
        runs = {
            tree: [figures(p, key) for p in sorted(out.glob(f"{name}-{tree}-*.json"))]
            for tree in "ab"
        }
        if not runs["a"] or not runs["b"]:
            continue
        for c in sorted(runs["a"][0]):
            a = statistics.median(run[c] for run in runs["a"])
            b = statistics.median(run[c] for run in runs["b"])
            print(
                f"{name:<8} | {c:<3} | {a:8.0f} | {b:8.0f} | {b / a:.2f} | {len(runs['a'])}/{len(runs['b'])}    | {label}"
            )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
