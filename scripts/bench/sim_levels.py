"""Speech levels on the simulated H200 (`--device sim`): batch fill and the server's CPU.

Starts `voxserve serve --device sim` with one voice model, then for each level runs
`voxserve bench speech` (a closed loop of C clients, `--rounds` rounds of the built-in
English prompts, the clients spread over `--processes` processes) and reads the server's
`/metrics` before and after it. Per level it prints and writes (JSON):
- the mean units per step of each stage (decoder/vocoder and stage A), from the engine's
  `voxserve_tts_step_units` histogram, and the padded frames' share of what the vocoder
  steps decoded (`voxserve_tts_step_frames_total` by part);
- items per call of each stage as the simulated GPU counts them, and its busy share;
- the server process's CPU milliseconds per audio-second delivered;
- the bench's continuity, first audio p50 / p99 and audio-s/s.

    .venv/bin/python scripts/bench/sim_levels.py --model tts-1-hd --levels 64,256 --out /tmp/sim
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

MODELS = {"tts-1": "piper", "tts-1-hd": "kokoro"}
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def scrape(base: str) -> dict[str, float]:
    """Every sample of `/metrics` by its name and labels."""
    out: dict[str, float] = {}
    for line in httpx.get(f"{base}/metrics", timeout=30).text.splitlines():
        m = _SAMPLE.match(line)
        if m and not line.startswith("#"):
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def wait_ready(base: str, server: subprocess.Popen[bytes], timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited ({server.returncode})")
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit("the server did not get ready")


def level_figures(before: dict[str, float], after: dict[str, float], bench: dict[str, Any]) -> dict[str, object]:
    """The level's figures from the `/metrics` deltas and the bench's summary."""
    def delta(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    stages = sorted({k[k.index('"') + 1 : k.rindex('"')] for k in after if k.startswith("voxserve_sim_device_calls_total")})
    units = {
        s: delta(f'voxserve_sim_device_items_total{{stage="{s}"}}') / max(1.0, delta(f'voxserve_sim_device_calls_total{{stage="{s}"}}'))
        for s in stages
    }
    step_stages = sorted(
        {k[k.index('stage="') + 7 : k.index('"', k.index('stage="') + 7)] for k in after
         if k.startswith("voxserve_tts_step_units_count")}
    )
    step_units = {
        s: delta(f'voxserve_tts_step_units_sum{{stage="{s}"}}') / max(1.0, delta(f'voxserve_tts_step_units_count{{stage="{s}"}}'))
        for s in step_stages
    }
    frames = {
        part: delta(f'voxserve_tts_step_frames_total{{part="{part}"}}') for part in ("kept", "context", "bucket", "padding")
    }
    summary = bench["summary"]
    audio = float(summary["audio_s"])
    cpu = delta("process_cpu_seconds_total")
    wall = float(summary["wall_s"])
    busy = delta("voxserve_sim_device_busy_seconds_total")
    return {
        "step_units": step_units,
        "padded_share": frames["padding"] / sum(frames.values()) if sum(frames.values()) else None,
        "step_frames": frames,
        "units_per_call": units,
        "calls": {s: delta(f'voxserve_sim_device_calls_total{{stage="{s}"}}') for s in stages},
        "device_busy_s": busy,
        "device_busy_share": busy / wall if wall else None,
        "server_cpu_s": cpu,
        "audio_s": audio,
        "server_cpu_ms_per_audio_s": 1e3 * cpu / audio if audio else None,
        "continuity": summary["continuity_ok_rate"],
        "ttfp_p50_ms": 1e3 * summary["ttfp_s"]["p50"],
        "ttfp_p99_ms": 1e3 * summary["ttfp_s"]["p99"],
        "audio_per_s": summary["audio_throughput"],
        "first_audio_tail_ms": {k: round(1e3 * v, 1) for k, v in summary.get("first_packet_tail_s", {}).items()
                                if k != "n"},
        "admission_held": {
            k[k.index('"') + 1 : k.rindex('"')]: delta(k) for k in after if k.startswith("voxserve_tts_admission_held_total")
        },
        "completed": summary["completed"],
        "failed": summary["failed"],
        "wall_s": summary["wall_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="tts-1-hd")
    parser.add_argument("--levels", default="64,256")
    parser.add_argument("--rounds", type=int, default=2, help="prompts per client (default 2)")
    parser.add_argument("--processes", type=int, default=2, help="bench client processes")
    parser.add_argument("--port", type=int, default=8310)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("server_args", nargs="*", help="more `serve` flags, after --")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    base = f"http://127.0.0.1:{args.port}"
    python = sys.executable
    levels = [int(x) for x in args.levels.split(",")]
    serve = [python, "-m", "voxserve.cli", "serve", "--device", "sim", "--no-asr", "--port", str(args.port),
             "--tts-models", MODELS[args.model], "--tts-max-queue", str(max(levels)),
             # a closed loop's client may open its next connection before the server
             # has seen its last one close: room for both, past the 1024 default
             "--limit-concurrency", str(2 * max(levels) + 64), *args.server_args]
    with (args.out / "server.log").open("wb") as log:
        server = subprocess.Popen(serve, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
        results: dict[str, object] = {"server": serve[2:], "levels": {}}
        try:
            wait_ready(base, server)
            for c in levels:
                before = scrape(base)
                load = os.getloadavg()[0]
                out = args.out / f"bench-{args.model}-c{c}.json"
                bench = [python, "-m", "voxserve.cli", "bench", "speech", "--base-url", base, "--model", args.model,
                         "--concurrency", str(c), "--num-prompts", str(args.rounds * c), "--processes",
                         str(args.processes), "--warmup", "1", "--no-progress", "-o", str(out)]
                subprocess.run(bench, check=True, stdout=subprocess.DEVNULL)
                after = scrape(base)
                figures = level_figures(before, after, json.loads(out.read_text())["levels"][0])
                figures["load_average_1m"] = load  # other work on the machine skews every figure
                results["levels"][str(c)] = {"bench": bench[2:], **figures}  # type: ignore[index]
                print(f"{args.model} c={c}: {json.dumps(figures)}", flush=True)
        finally:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
    (args.out / f"sim-{args.model}.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
