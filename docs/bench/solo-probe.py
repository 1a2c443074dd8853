"""A lone short clip through the ASR engine, with and without its two levers (issue 15):
a solo replica on two intra-op threads, and an encoder window fitted to the clip.

Four engines (solo_threads 1 or 2, fitted_windows off or on) transcribe each clip of a
`bench transcribe` manifest one at a time, no HTTP, in rotating order so that machine
noise hits them alike. Reports per engine the median latency, the median ratio to the
plain engine (one thread, 30 s) clip by clip, and the WER. Run from the repository root:

    python docs/bench/solo-probe.py --manifest /tmp/asrset/manifest.jsonl --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from voxserve.bench.metrics import normalize_text, word_errors
from voxserve.config import ASRConfig
from voxserve.engine.asr import ASREngine, TranscribeOptions
from voxserve.engine.threads import single_threaded_blas
from voxserve.engine.transcribe import start_transcription

MODES = {
    "1 thread, 30 s": (1, False),
    "2 threads, 30 s": (2, False),
    "1 thread, fitted": (1, True),
    "2 threads, fitted": (2, True),
}


async def _once(engine: ASREngine, data: bytes, pool: ThreadPoolExecutor) -> tuple[float, str]:
    started = time.perf_counter()
    job = await start_transcription(engine, data, TranscribeOptions(language="en"), pool)
    text = (await job.collect()).text
    return time.perf_counter() - started, text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--manifest", type=Path, required=True)
    p.add_argument("--repeat", type=int, default=3, help="passes over the clips")
    p.add_argument("--nice", type=int, default=ASRConfig().nice,
                   help="the engines' nice increment (0 on a machine shared with other "
                   "normal-priority work, or they get what it leaves)")
    p.add_argument("-o", "--output", type=Path, help="write the rows as JSON")
    args = p.parse_args(argv)
    clips = [json.loads(line) for line in args.manifest.read_text().splitlines() if line.strip()]
    datas = [(args.manifest.parent / c["audio"]).read_bytes() for c in clips]
    single_threaded_blas()  # as `voxserve serve` does
    engines = {}
    for name, (threads, fitted) in MODES.items():
        engine = ASREngine(ASRConfig(workers=2, solo_threads=threads, fitted_windows=fitted, nice=args.nice))
        engine.start()
        engine.warmup()
        engines[name] = engine
    names = list(MODES)
    rows: dict[str, list[float]] = {n: [] for n in names}
    errors = dict.fromkeys(names, 0)
    words = sum(len(normalize_text(c["text"]).split()) for c in clips)
    with ThreadPoolExecutor(2) as pool:
        for rep in range(args.repeat):
            for i, data in enumerate(datas):
                turn = (i + rep) % len(names)
                for name in names[turn:] + names[:turn]:
                    wall, text = asyncio.run(_once(engines[name], data, pool))
                    rows[name].append(wall)
                    if rep == 0:
                        errors[name] += word_errors(clips[i]["text"], text).errors
            print(f"pass {rep + 1}/{args.repeat}", file=sys.stderr)
    for engine in engines.values():
        engine.stop()
    base = rows[names[0]]
    print(f"{'engine':20} {'p50 ms':>7} {'mean ms':>8} {'vs plain':>8} {'WER %':>6}")
    summary = {}
    for name in names:
        ratio = statistics.median(a / b for a, b in zip(rows[name], base, strict=True))
        summary[name] = {
            "p50_ms": round(1000 * statistics.median(rows[name]), 1),
            "mean_ms": round(1000 * statistics.mean(rows[name]), 1),
            "vs_plain": round(ratio, 3),
            "wer_pct": round(100 * errors[name] / words, 2),
        }
        s = summary[name]
        print(f"{name:20} {s['p50_ms']:7.0f} {s['mean_ms']:8.0f} {s['vs_plain']:8.3f} {s['wer_pct']:6.2f}")
    if args.output:
        args.output.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
