"""Summarize `tts_ab.sh`'s runs: per concurrency, the median over rounds of each tree's
first-audio p50 and p99 and continuity, and tree B over tree A.

usage: python scripts/bench/tts_ab_summary.py OUTDIR
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def main(out: Path) -> None:
    runs: dict[str, list[dict[int, dict[str, float]]]] = {"a": [], "b": []}
    for path in sorted(out.glob("[ab]-*.json")):
        levels = json.loads(path.read_text())["levels"]
        runs[path.name[0]].append(
            {
                level["concurrency"]: {
                    "p50": level["summary"]["ttfp_s"]["p50"] * 1000,
                    "p99": level["summary"]["ttfp_s"]["p99"] * 1000,
                    "ok": level["summary"]["continuity_ok_rate"] * 100,
                }
                for level in levels
            }
        )
    print(f"rounds: A {len(runs['a'])}, B {len(runs['b'])}")
    print("c    | A p50 | B p50 | B/A  | A p99 | B p99 | B/A  | A cont % | B cont %")
    for c in sorted(runs["a"][0]):
        med = {
            tree: {key: statistics.median(run[c][key] for run in runs[tree]) for key in ("p50", "p99", "ok")}
            for tree in runs
        }
        a, b = med["a"], med["b"]
        print(
            f"{c:<4} | {a['p50']:5.0f} | {b['p50']:5.0f} | {b['p50'] / a['p50']:.2f} | {a['p99']:5.0f} | "
            f"{b['p99']:5.0f} | {b['p99'] / a['p99']:.2f} | {a['ok']:8.1f} | {b['ok']:8.1f}"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
