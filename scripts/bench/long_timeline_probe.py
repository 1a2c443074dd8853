"""Even pieces on long files: the ASR engine's critical path with 30 s cuts and with pieces of at most N s, beside faster-whisper.

One long file through the ASR engine, with a timeline of its critical path, beside
faster-whisper's sequential `transcribe()`; in one process, alternating.

- `base`: 30 s cuts (`even_piece_s = 0`) and batches sized by every worker, busy or not;
- `eN` for each N of `--limits`: the engine as it is with `even_piece_s = N`: a file of a
  few pieces recut into pieces of at most N s, a multiple of the workers of them
  (`even_spans`), and batches sized by the idle workers;
- `fw`: faster-whisper `WhisperModel.transcribe()` on the same model, int8,
  `cpu_threads=2`, beam 5, `language="en"`.

Each round runs the three in turn (the order rotates). For the engine modes it records
when each step of the request ran (decode + cut, each piece's log-mel, queueing, each
batch per worker, the last result) and prints round 1's timeline and every round's
summary. Then the crowded case: 4 and 16 short clips at once through each engine mode,
alternating. The engines run at nice 0, like faster-whisper. Run from the repository
root with the clips of `python -m voxserve.bench.asr_offline --save DIR`:

    python scripts/bench/long_timeline_probe.py --dir DIR --text LONG.txt --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from voxserve.audio.decode import SAMPLE_RATE, decode_audio
from voxserve.bench.metrics import word_errors
from voxserve.config import ASRConfig
from voxserve.engine.asr import ASREngine, TranscribeOptions
from voxserve.engine.threads import single_threaded_blas
from voxserve.engine.transcribe import start_transcription

Event = tuple[str, str, float, float]
"""(thread, what, start, end), times from the request's start."""


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.t0 = 0.0
        self.lock = threading.Lock()

    def wrap(self, name: str, fn: Callable[..., Any], label: Callable[..., str] | None = None) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                end = time.perf_counter()
                what = name + (label(*args, **kwargs) if label else "")
                with self.lock:
                    self.events.append((threading.current_thread().name, what, start - self.t0, end - self.t0))

        return wrapped


def instrument(engine: ASREngine, rec: Recorder, base: bool) -> None:
    engine.prepare = rec.wrap("decode+cut", engine.prepare)  # type: ignore[method-assign]
    engine.features = rec.wrap("log-mel", engine.features, lambda p, i: f" #{i}")  # type: ignore[method-assign]

    def batch_label(inputs: Any, opts: Any, threads: int = 1) -> str:
        return f" x{len(inputs)} w{inputs[0].features.shape[-1] // 100}s t{threads}"

    engine.runner.run = rec.wrap("batch", engine.runner.run, batch_label)  # type: ignore[method-assign]
    engine.submit_all = rec.wrap("queue", engine.submit_all, lambda h, p, pieces: f" {[i for i, _ in pieces]}")  # type: ignore[method-assign]
    if base:
        batcher = engine._batcher
        orig = batcher.next_batch
        batcher.next_batch = lambda now, files=True, idle=None: orig(now, files)  # type: ignore[method-assign]


async def _one(engine: ASREngine, data: bytes, pool: ThreadPoolExecutor) -> str:
    t = await start_transcription(engine, data, TranscribeOptions(language="en"), pool)
    try:
        return (await t.collect()).text
    finally:
        t.cancel()


def run_engine(engine: ASREngine, rec: Recorder, data: bytes, pool: ThreadPoolExecutor) -> tuple[float, float, str]:
    rec.events.clear()
    c0 = time.process_time()
    rec.t0 = time.perf_counter()
    text = asyncio.run(_one(engine, data, pool))
    return time.perf_counter() - rec.t0, time.process_time() - c0, text


def run_many(engine: ASREngine, clips: list[bytes], pool: ThreadPoolExecutor) -> float:
    async def go() -> None:
        await asyncio.gather(*(_one(engine, c, pool) for c in clips))

    t0 = time.perf_counter()
    asyncio.run(go())
    return time.perf_counter() - t0


def summary(events: list[Event], wall: float) -> str:
    batches = [e for e in events if e[1].startswith("batch")]
    by_thread: dict[str, list[Event]] = {}
    for e in batches:
        by_thread.setdefault(e[0], []).append(e)
    first = min((e[2] for e in batches), default=0.0)
    prep = [e for e in events if e[1] == "decode+cut"]
    ends = [max(e[3] for e in es) for es in by_thread.values()]
    lanes = "; ".join(
        " + ".join(e[1].removeprefix("batch ") for e in sorted(es, key=lambda e: e[2])) + f" ends {max(e[3] for e in es):.2f}"
        for _, es in sorted(by_thread.items())
    )
    idle_end = max(ends) - min(ends) if len(ends) > 1 else max(ends, default=0.0)
    return (
        f"decode+cut {prep[0][3] - prep[0][2]:.2f} s, first batch at {first:.2f} s, "
        f"workers: {lanes}; one worker idles {idle_end:.2f} s at the end; done {wall:.2f} s"
    )


def timeline(events: list[Event]) -> str:
    rows = sorted(events, key=lambda e: e[2])
    return "\n".join(f"  {e[2]:7.3f} {e[3]:7.3f} {e[3] - e[2]:6.3f}  {e[0]:18s} {e[1]}" for e in rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", type=Path, required=True, help="clips saved by asr_offline --save")
    p.add_argument("--text", type=Path, required=True, help="the long clip's reference transcript")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--crowd-rounds", type=int, default=3)
    p.add_argument("--limits", default="19", help="even_piece_s values to run, comma-separated")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from faster_whisper import WhisperModel

    single_threaded_blas()
    data = (args.dir / "long-00.wav").read_bytes()
    shorts = [(args.dir / f"short-{i:02d}.wav").read_bytes() for i in range(4)]
    reference = args.text.read_text()
    audio = decode_audio(data, max_seconds=4 * 3600)
    seconds = len(audio) / SAMPLE_RATE
    engines: dict[str, tuple[ASREngine, Recorder]] = {}
    limits = {"base": 0.0} | {f"e{x}": float(x) for x in args.limits.split(",")}
    for mode, limit in limits.items():
        engine = ASREngine(ASRConfig(nice=0))
        engine.even_piece_s = limit
        engine.start()
        engine.warmup()
        rec = Recorder()
        instrument(engine, rec, base=mode == "base")
        engines[mode] = (engine, rec)
    fw = WhisperModel(str(engines["base"][0].runner.model_dir), device="cpu", compute_type="int8", cpu_threads=2)
    order = [*limits, "fw"]
    walls: dict[str, list[float]] = {m: [] for m in order}
    cpus: dict[str, list[float]] = {m: [] for m in order}
    wers: dict[str, list[float]] = {m: [] for m in order}
    loads = [os.getloadavg()[0]]
    with ThreadPoolExecutor(2) as pool:
        for r in range(args.rounds):
            k = r % len(order)
            for mode in order[k:] + order[:k]:
                if mode == "fw":
                    c0, t0 = time.process_time(), time.perf_counter()
                    segments, _ = fw.transcribe(audio, language="en", beam_size=5)
                    text = "".join(s.text for s in segments)
                    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                else:
                    engine, rec = engines[mode]
                    wall, cpu, text = run_engine(engine, rec, data, pool)
                    print(f"round {r + 1} {mode}: {summary(rec.events, wall)}", flush=True)
                    if r == 0:
                        print(timeline(rec.events), flush=True)
                walls[mode].append(wall)
                cpus[mode].append(cpu)
                wers[mode].append(word_errors(reference, text).wer)
            loads.append(os.getloadavg()[0])
        print(f"\nlong clip {seconds:.1f} s, {args.rounds} rounds, load average {' '.join(f'{x:.1f}' for x in loads)}")
        for mode in order:
            print(
                f"{mode:5s} wall median {statistics.median(walls[mode]):6.2f} s (all {' '.join(f'{x:.2f}' for x in walls[mode])}), "
                f"CPU median {statistics.median(cpus[mode]):5.2f} s, WER {' '.join(f'{w * 100:.1f}%' for w in sorted(set(wers[mode])))}"
            )
        for mode in limits:
            ratios = [f / e for f, e in zip(walls["fw"], walls[mode], strict=True)]
            print(f"fw / {mode}: {' '.join(f'{x:.2f}x' for x in ratios)}; median {statistics.median(ratios):.2f}x")
            ratios = [b / e for b, e in zip(walls["base"], walls[mode], strict=True)]
            print(f"base / {mode}: {' '.join(f'{x:.2f}x' for x in ratios)}; median {statistics.median(ratios):.2f}x")
        crowd: dict[str, list[float]] = {}
        for n in (4, 16):
            clips = [shorts[i % 4] for i in range(n)]
            for r in range(args.crowd_rounds):
                for mode in list(limits) if r % 2 == 0 else list(limits)[::-1]:
                    crowd.setdefault(f"{mode} c={n}", []).append(run_many(engines[mode][0], clips, pool))
        print(f"crowded, load average {os.getloadavg()[0]:.1f}:")
        for name, v in crowd.items():
            print(f"  {name}: wall median {statistics.median(v):.2f} s (all {' '.join(f'{x:.2f}' for x in v)})")
    for engine, _ in engines.values():
        print(f"batch sizes {dict(sorted(engine.snapshot()['batch_sizes'].items()))}")
        engine.stop()
    if args.json:
        args.json.write_text(json.dumps({"walls": walls, "cpus": cpus, "wers": wers, "loads": loads, "crowd": crowd}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
