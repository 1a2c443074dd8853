"""One PNG that shows a run, or several runs overlaid, against concurrency.

Speech: TTFP p50/p99, RTF p50/p99, continuity OK rate, audio throughput, underrun p99 and
`/health` p99. Transcribe: latency p50/p99, RTFx, WER and `/health` p99. matplotlib with
the Agg backend, so it needs no display.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from voxserve.bench.report import METRICS, Metric, metric_value

__all__ = ["plot_results"]

# Panels: title, y label, metrics drawn (the first solid, the second dashed), log y.
_PANELS: dict[str, list[tuple[str, str, tuple[str, ...], bool]]] = {
    "speech": [
        ("Time to first audio", "ms", ("TTFP p50 ms", "TTFP p99 ms"), True),
        ("Real-time factor (E2EL / audio)", "RTF", ("RTF p50", "RTF p99"), False),
        ("Continuity OK (max underrun <= threshold)", "% of streams", ("cont OK %",), False),
        ("Audio throughput", "audio-s per wall-s", ("audio-s/s",), False),
        ("Worst playback gap", "underrun p99, ms", ("underrun p99 ms",), False),
        ("/health under load", "p99, ms", ("health p99 ms",), True),
    ],
    "transcribe": [
        ("Latency", "s", ("latency p50 s", "latency p99 s"), True),
        ("RTFx (input audio-s per wall-s)", "RTFx", ("RTFx",), False),
        ("Word error rate", "%", ("WER %",), False),
        ("/health under load", "p99, ms", ("health p99 ms",), True),
    ],
    "realtime": [
        ("End of speech to completed", "ms",
         ("completed p50 ms", "completed p90 ms", "completed p99 ms"), True),
        ("End of speech to speech_stopped", "p50, ms", ("stopped p50 ms",), False),
        ("Word error rate, live and file", "%", ("WER live %", "WER file %"), False),
        ("/health under load", "p99, ms", ("health p99 ms",), True),
    ],
    "voice-loop": [
        ("Voice to voice (end of speech to first reply audio)", "ms",
         ("v2v p50 ms", "v2v p90 ms", "v2v p99 ms"), True),
        ("End of speech to completed", "p50, ms", ("completed p50 ms",), False),
        ("Replies played without a stall", "% of turns", ("cont OK %",), False),
        ("/health under load", "p99, ms", ("health p99 ms",), True),
    ],
}


def _series(result: dict[str, Any], metric: Metric) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for level in result["levels"]:
        value = metric_value(level, metric)
        if value is not None:
            xs.append(int(level["concurrency"]))
            ys.append(value)
    return xs, ys


def _log_ticks(lo: float, hi: float) -> list[float]:
    """Round ticks (1-2-5 per decade, finer on a narrow range) between lo and hi."""
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    ticks: list[float] = []
    for steps in ((1, 2, 5), (1, 1.5, 2, 3, 4, 5, 7), (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9)):
        ticks = [m * 10.0**k for k in range(first, last + 1) for m in steps]
        ticks = [t for t in ticks if lo <= t <= hi]
        if len(ticks) >= 3:
            return ticks
    return ticks if len(ticks) == 2 else [lo, (lo * hi) ** 0.5, hi]


def plot_results(runs: list[tuple[str, dict[str, Any]]], path: Path) -> None:
    """Draw every (label, result) pair on shared panels and save a PNG at `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    plain = FuncFormatter(lambda value, _pos: f"{value:g}")

    kinds = {result["kind"] for _, result in runs}
    if len(kinds) != 1:
        raise ValueError(f"runs of different kinds ({', '.join(sorted(kinds))}) cannot share a plot")
    kind = kinds.pop()
    by_label = {m.label: m for m in METRICS[kind]}
    panels = _PANELS[kind]
    cols = 3 if len(panels) > 4 else 2
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.8 * rows), squeeze=False)
    levels = sorted({int(lv["concurrency"]) for _, r in runs for lv in r["levels"]})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (title, ylabel, names, log_y) in zip(axes.flat, panels, strict=False):
        for i, (label, result) in enumerate(runs):
            for style, name in zip(("-", "--", ":"), names, strict=False):
                xs, ys = _series(result, by_label[name])
                if xs:
                    parts = [label] if len(runs) > 1 else []
                    if len(names) > 1:
                        parts.append(name.split()[1])  # "p50" / "p99", "live" / "file"
                    ax.plot(xs, ys, style, marker="o", color=colors[i % len(colors)],
                            label=" ".join(parts) or None)
        ax.set_title(title, fontsize=11)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(ylabel)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(levels))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([str(c) for c in levels])
        drawn = [float(y) for line in ax.get_lines() for y in line.get_ydata()]
        if log_y and drawn and min(drawn) > 0:
            lo, hi = min(drawn) / 1.25, max(drawn) * 1.25
            ax.set_yscale("log")
            ax.set_ylim(lo, hi)
            ax.yaxis.set_major_locator(FixedLocator(_log_ticks(lo, hi)))
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_locator(NullLocator())
        else:
            ax.set_ylim(0, max(drawn, default=1.0) * 1.1 or 1.0)
        if "cont OK %" in names:
            ax.set_ylim(-5, 105)
        if "RTF p50" in names:
            ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":", label="real time")
        if "underrun p99 ms" in names:
            threshold = runs[0][1]["settings"].get("underrun_threshold_s")
            if threshold:
                ax.axhline(threshold * 1e3, color="grey", linewidth=0.8, linestyle=":",
                           label="continuity threshold")
        ax.grid(True, which="both", alpha=0.3)
        if any(not h.get_label().startswith("_") for h in ax.get_lines()):
            ax.legend(fontsize=8)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(f"voxserve bench {kind}: {', '.join(label for label, _ in runs)}", fontsize=13)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
