"""`bench compare A.json B.json`: two runs side by side, with B/A ratios per level."""

from __future__ import annotations

from typing import Any

from voxserve.bench.report import METRICS, metric_value

__all__ = ["format_comparison"]


def format_comparison(a: dict[str, Any], b: dict[str, Any], label_a: str = "A",
                      label_b: str = "B") -> str:
    """For each concurrency in both runs, every metric as A, B and B/A.

    The last column says which run is better on that metric, so a reader does not have to
    remember whether a ratio above 1 is good.
    """
    if a["kind"] != b["kind"]:
        raise ValueError(f"cannot compare a {a['kind']} run with a {b['kind']} run")
    metrics = METRICS[a["kind"]]
    levels_b = {lv["concurrency"]: lv for lv in b["levels"]}
    lines = [f"A = {label_a} ({a['settings'].get('base_url', '?')})",
             f"B = {label_b} ({b['settings'].get('base_url', '?')})"]
    shared = [lv for lv in a["levels"] if lv["concurrency"] in levels_b]
    if not shared:
        lines.append("the two runs share no concurrency level")
        return "\n".join(lines)
    width = max(len(m.label) for m in metrics)
    for level_a in shared:
        level_b = levels_b[level_a["concurrency"]]
        lines.append("")
        lines.append(f"c={level_a['concurrency']}".ljust(width)
                     + f"  {'A':>10}  {'B':>10}  {'B/A':>7}  better")
        for m in metrics:
            va, vb = metric_value(level_a, m), metric_value(level_b, m)
            cells = [format(v, m.fmt) if v is not None else "-" for v in (va, vb)]
            ratio, better = "-", ""
            if va is not None and vb is not None:
                if va != 0:
                    ratio = f"{vb / va:.2f}"
                if va != vb:
                    better = "B" if (vb > va) == m.higher_is_better else "A"
            lines.append(f"{m.label.ljust(width)}  {cells[0]:>10}  {cells[1]:>10}  "
                         f"{ratio:>7}  {better}")
    return "\n".join(lines)
