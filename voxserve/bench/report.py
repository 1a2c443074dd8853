"""Run settings, the JSON result file, and the terminal summary table.

A result is a plain dict: {"kind", "settings", "levels": [{"concurrency", "summary",
"health", "client_lag_s", "records"}], "health"}. `METRICS` names the figures of each kind
once, and the table, `compare` and the plot all read them from there.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import math
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voxserve.bench.burst import burst_lines

__all__ = [
    "METRICS",
    "Metric",
    "first_packet_line",
    "format_table",
    "git_revision",
    "host_info",
    "load_average",
    "load_result",
    "metric_value",
    "write_json",
]


@dataclass(frozen=True)
class Metric:
    label: str
    path: tuple[str, ...]
    """Keys from a level dict down to the number."""
    scale: float = 1.0
    fmt: str = ".1f"
    higher_is_better: bool = False


METRICS: dict[str, tuple[Metric, ...]] = {
    "speech": (
        Metric("TTFP p50 ms", ("summary", "ttfp_s", "p50"), 1e3, ".0f"),
        Metric("TTFP p99 ms", ("summary", "ttfp_s", "p99"), 1e3, ".0f"),
        Metric("E2EL p50 s", ("summary", "e2el_s", "p50"), 1, ".2f"),
        Metric("RTF p50", ("summary", "rtf", "p50"), 1, ".3f"),
        Metric("RTF p99", ("summary", "rtf", "p99"), 1, ".3f"),
        Metric("underrun p99 ms", ("summary", "underrun_s", "p99"), 1e3, ".0f"),
        Metric("cont OK %", ("summary", "continuity_ok_rate"), 100, ".0f", True),
        Metric("audio-s/s", ("summary", "audio_throughput"), 1, ".1f", True),
        Metric("req/s", ("summary", "request_throughput"), 1, ".2f", True),
        Metric("health p99 ms", ("health", "p99"), 1e3, ".1f"),
        Metric("health max ms", ("health", "max"), 1e3, ".1f"),
    ),
    "transcribe": (
        Metric("latency p50 s", ("summary", "latency_s", "p50"), 1, ".2f"),
        Metric("latency p99 s", ("summary", "latency_s", "p99"), 1, ".2f"),
        Metric("RTFx", ("summary", "rtfx"), 1, ".1f", True),
        Metric("req/s", ("summary", "request_throughput"), 1, ".2f", True),
        Metric("WER %", ("summary", "wer"), 100, ".1f"),
        Metric("health p99 ms", ("health", "p99"), 1e3, ".1f"),
        Metric("health max ms", ("health", "max"), 1e3, ".1f"),
    ),
    # Latencies from the end of speech: to `completed`, and to `speech_stopped`.
    "realtime": (
        Metric("completed p50 ms", ("summary", "completed_latency_s", "p50"), 1e3, ".0f"),
        Metric("completed p90 ms", ("summary", "completed_latency_s", "p90"), 1e3, ".0f"),
        Metric("completed p99 ms", ("summary", "completed_latency_s", "p99"), 1e3, ".0f"),
        Metric("completed max ms", ("summary", "completed_latency_s", "max"), 1e3, ".0f"),
        Metric("stopped p50 ms", ("summary", "speech_stopped_latency_s", "p50"), 1e3, ".0f"),
        Metric("deltas/utt", ("summary", "deltas_per_utterance"), 1, ".1f", True),
        Metric("WER live %", ("summary", "wer_live"), 100, ".1f"),
        Metric("WER file %", ("summary", "wer_file"), 100, ".1f"),
        Metric("files RTFx", ("summary", "files", "rtfx"), 1, ".1f", True),
        Metric("health p50 ms", ("health", "p50"), 1e3, ".1f"),
        Metric("health p99 ms", ("health", "p99"), 1e3, ".1f"),
        Metric("health max ms", ("health", "max"), 1e3, ".1f"),
    ),
    # Voice-to-voice: the end of the user's speech to the reply's first audio byte.
    "voice-loop": (
        Metric("v2v p50 ms", ("summary", "voice_to_voice_s", "p50"), 1e3, ".0f"),
        Metric("v2v p90 ms", ("summary", "voice_to_voice_s", "p90"), 1e3, ".0f"),
        Metric("v2v p99 ms", ("summary", "voice_to_voice_s", "p99"), 1e3, ".0f"),
        Metric("completed p50 ms", ("summary", "completed_latency_s", "p50"), 1e3, ".0f"),
        Metric("cont OK %", ("summary", "continuity_ok_rate"), 100, ".0f", True),
        Metric("stall s", ("summary", "stall_total_s"), 1, ".2f"),
        Metric("WER %", ("summary", "wer_live"), 100, ".1f"),
        Metric("health p99 ms", ("health", "p99"), 1e3, ".1f"),
        # With --barge-in-ms: the user's onset to the cancel (VAD), the cancel to
        # audio.cancelled, the cancelled reply's audio after the cancel, and the next
        # reply's voice to voice.
        Metric("onset→cancel p50 ms", ("summary", "barge_in", "detect_s", "p50"), 1e3, ".0f"),
        Metric("cancel→cancelled p50 ms", ("summary", "barge_in", "answer_s", "p50"), 1e3, ".0f"),
        Metric("cancelled max ms", ("summary", "barge_in", "answer_s", "max"), 1e3, ".0f"),
        Metric("audio after cancel max ms", ("summary", "barge_in", "audio_after_cancel_s", "max"), 1e3, ".0f"),
        Metric("v2v after barge-in p50 ms", ("summary", "voice_to_voice_after_barge_in_s", "p50"), 1e3, ".0f"),
        Metric("reply audio after barge-in p50 ms", ("summary", "reply_first_audio_after_barge_in_s", "p50"), 1e3, ".0f"),
        Metric("reply audio first turn p50 ms", ("summary", "reply_first_audio_first_turn_s", "p50"), 1e3, ".0f"),
    ),
}


def metric_value(level: dict[str, Any], metric: Metric) -> float | None:
    """The metric's value in display units, or None when absent (no probes, no WER...)."""
    node: Any = level
    for key in metric.path:
        if not isinstance(node, dict) or node.get(key) is None:
            return None
        node = node[key]
    value = float(node)
    return None if math.isnan(value) else value * metric.scale


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_table(result: dict[str, Any]) -> str:
    """One row per level: requests ok/failed, then every metric of the result's kind."""
    metrics = METRICS[result["kind"]]
    header = ["c", "ok/fail", *(m.label for m in metrics)]
    rows = [header]
    for level in result["levels"]:
        s = level["summary"]
        row = [str(level["concurrency"]), f"{s['completed']}/{s['failed']}"]
        row += [_cell(metric_value(level, m), m.fmt) for m in metrics]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for level in result["levels"]:
        line = first_packet_line(level["summary"].get("first_packet_s") or {})
        if line:
            lines.append(f"c={level['concurrency']} first packet p50 ms: {line}")
        tail = level["summary"].get("first_packet_tail_s") or {}
        if tail.get("n", 0) and (level["concurrency"] > 1 or level["summary"]["completed"] >= 20):
            lines.append(f"c={level['concurrency']} slowest {int(tail['n'])} first packets, mean ms: "
                         f"{first_packet_tail_line(tail)}")
    for level in result["levels"]:
        lines += burst_lines(level)
    for level in result["levels"]:
        failures = level["summary"]["failures_by_status"]
        if failures:
            shown = ", ".join(f"{'no response' if code == '0' else code}: {n}"
                              for code, n in failures.items())
            lines.append(f"c={level['concurrency']} failures by status: {shown}")
    health = result.get("health")
    note = result.get("settings", {}).get("health_note")
    if note:
        lines.append(f"/health: {note}")
    if health and health.get("n"):
        lines.append(f"/health over the run: {int(health['n'])} probes, p50 "
                     f"{health['p50'] * 1e3:.1f} ms, p99 {health['p99'] * 1e3:.1f} ms, max "
                     f"{health['max'] * 1e3:.1f} ms, {int(health['failures'])} failed")
    return "\n".join(lines)


def first_packet_line(parts: dict[str, dict[str, float]]) -> str:
    """`text 1.2, queue 0.1, ... = server 31.0 + http 4.2`: the p50 of each part of time
    to first audio as the server reported it, then its total and the client's rest. The
    p50s of the parts need not add up to the p50 of the total."""
    cells = [f"{name} {v['p50'] * 1e3:.1f}" for name, v in parts.items()
             if name not in ("total", "http") and not math.isnan(v.get("p50", math.nan))]
    if not cells:
        return ""
    line = ", ".join(cells)
    for name, label in (("total", " = server"), ("http", " + http")):
        if name in parts and not math.isnan(parts[name].get("p50", math.nan)):
            line += f"{label} {parts[name]['p50'] * 1e3:.1f}"
    return line


def first_packet_tail_line(tail: dict[str, float]) -> str:
    """`admission 812.0, queue 40.1, ... = TTFP 930.2`: the mean of each part over the
    slowest first packets (`speech.first_packet_tail`), which add up to their TTFP; parts
    under 0.05 ms are left out."""
    cells = [f"{name} {v * 1e3:.1f}" for name, v in tail.items()
             if name not in ("total", "ttfp", "n") and v >= 5e-5]
    return ", ".join(cells) + f" = TTFP {tail.get('ttfp', math.nan) * 1e3:.1f}"


def _git_dirs(folder: Path) -> tuple[Path, Path] | None:
    """(the checkout's git dir, the shared one) when `folder` holds a checkout.

    In a `git worktree` checkout `.git` is a file naming its own git dir, whose
    `commondir` leads to the refs the worktrees share.
    """
    git = folder / ".git"
    if git.is_dir():
        return git, git
    if git.is_file():
        text = git.read_text().strip()
        if text.startswith("gitdir: "):
            own = (folder / text[8:]).resolve()
            common = own / "commondir"
            shared = (own / common.read_text().strip()).resolve() if common.exists() else own
            return own, shared
    return None


def git_revision(start: Path | None = None) -> str | None:
    """The commit checked out where voxserve lives, read from .git files (no git process)."""
    here = (start or Path(__file__)).resolve()
    for folder in (here, *here.parents):
        try:
            dirs = _git_dirs(folder)
            if dirs is None:
                continue
            own, shared = dirs
            head = (own / "HEAD").read_text().strip()
            if not head.startswith("ref: "):
                return head
            ref = head[5:]
            for git in (own, shared):
                if (git / ref).exists():
                    return (git / ref).read_text().strip()
            packed = shared / "packed-refs"
            if packed.exists():
                for line in packed.read_text().splitlines():
                    if line.endswith(" " + ref):
                        return line.split()[0]
        except OSError:
            return None
        return None
    return None


def host_info() -> dict[str, Any]:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        cores = os.cpu_count() or 0
    return {"platform": platform.platform(), "python": platform.python_version(),
            "cores": cores, "hostname": platform.node(), "loadavg_at_start": load_average()}


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages: a shared machine's noise, recorded with the run."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - unavailable
        return None


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _clean(value: Any) -> Any:
    """NaN and infinities become null, so the file is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def write_json(result: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_clean(result), indent=1, allow_nan=False)
    path.write_text(text + "\n", encoding="utf-8")


def load_result(path: Path) -> dict[str, Any]:
    """A result as `write_result` wrote it, or gzipped (`.json.gz`), as docs/bench keeps
    the larger ones."""
    raw = path.read_bytes()
    result = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    if not isinstance(result, dict) or result.get("kind") not in METRICS:
        raise ValueError(f"{path} is not a voxserve bench result ({', '.join(METRICS)})")
    return result


def command_line() -> list[str]:
    return list(sys.argv)
