"""Summarize `ray_sessions.sh`'s runs: for each bench and level, the median over rounds of
one process's figures and `serve --ray`'s, and Ray's over one process's.

usage: python scripts/bench/ray_sessions_summary.py OUTDIR
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

FIGURES = {
    # bench: (the summary's latency, its percentiles, the other figures to compare)
    "realtime": ("completed_latency_s", ("p50", "p99"), ("wer_live",)),
    "stream-text": ("first_clause_latency_s", ("p50", "p99"), ("continuity_ok_rate",)),
}


def _runs(out: Path, bench: str, setup: str) -> list[dict[int, dict[str, float]]]:
    latency, quantiles, others = FIGURES[bench]
    runs = []
    for path in sorted(out.glob(f"{bench}-{setup}-*.json")):
        figures: dict[int, dict[str, float]] = {}
        for level in json.loads(path.read_text())["levels"]:
            s = level["summary"]
            row = {q: s[latency][q] * 1000 for q in quantiles}
            row.update({name: float(s[name]) for name in others if s.get(name) is not None})
            row["failed"] = float(s.get("failed", 0))
            figures[level["concurrency"]] = row
        runs.append(figures)
    return runs


def main(out: Path) -> None:
    for bench, (latency, quantiles, others) in FIGURES.items():
        plain, ray = _runs(out, bench, "plain"), _runs(out, bench, "ray")
        if not plain or not ray:
            continue
        print(f"{bench}: {latency} in ms, median of {len(plain)} / {len(ray)} rounds (one process / Ray)")
        names = [*quantiles, *others, "failed"]
        print("c    | " + " | ".join(f"{n}: one / ray / ratio" for n in names))
        for c in sorted(plain[0]):
            cells = []
            for name in names:
                a = statistics.median(run[c][name] for run in plain if name in run[c])
                b = statistics.median(run[c][name] for run in ray if name in run[c])
                ratio = f"{b / a:.2f}" if a else "-"
                cells.append(f"{a:.3g} / {b:.3g} / {ratio}")
            print(f"{c:<4} | " + " | ".join(cells))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
