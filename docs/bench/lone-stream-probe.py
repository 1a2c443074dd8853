"""A lone Piper stream, in process: what the idle core buys, measured only while the rest
of the machine is quiet.

Two probes, interleaved per prompt so that machine noise hits them alike:

- `--engine` (default): the TTS engine with the idle-core policies off (`--idle-threads 1
  --idle-chunks 1`: one chunk per stream at a time, single-threaded sessions, stage A
  whole, as before issue 15) and on (the defaults), each speaking the bench prompts one
  at a time. Per request: time to the first chunk from `submit`, the first packet's
  stage A and decode (`FirstPacket`), and audio seconds per wall second.
- `--parts`: the pieces of the first packet on 1 and 2 intra-op threads: stage A whole
  (prior and flow), the prior alone, the flow over the whole first segment and over the
  head a deferred flow computes first (58 frames, window 90), and decodes of 26 and 52
  frames (the first and second chunk windows).

Each sample also records the CPU that other processes used meanwhile (from /proc/stat,
minus this process; over a request, or over a prompt's whole set of pieces), in cores; the summary keeps the samples under `--quiet` cores (0.2)
and says how many there were. A sample is taken only after a second in which others used
less than `--gate` cores. On a 2-core machine, two threads only pay while the other core
is free, so numbers from a busy machine understate them. Linux only (/proc).

    python docs/bench/lone-stream-probe.py --minutes 10 -o lone.jsonl
    python docs/bench/lone-stream-probe.py --parts --minutes 10 -o parts.jsonl
    python docs/bench/lone-stream-probe.py --summarize lone.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

_HZ = os.sysconf("SC_CLK_TCK")


def _machine_busy() -> int:
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:]]
    return sum(vals) - vals[3] - vals[4]


def _self_busy() -> int:
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _others(run: Callable[[], Any]) -> tuple[Any, float]:
    """Run; return its result and the cores other processes used meanwhile."""
    m0, s0, t0 = _machine_busy(), _self_busy(), time.perf_counter()
    result = run()
    wall = time.perf_counter() - t0
    return result, ((_machine_busy() - m0) - (_self_busy() - s0)) / _HZ / max(wall, 1e-3)


def _first_segments() -> list[str]:
    from voxserve.bench.prompts import BUILTIN_PROMPTS, pick
    from voxserve.config import TTSConfig
    from voxserve.text.split import normalize, segment

    first = TTSConfig().first_segment_chars
    return [segment(normalize(p), first_max_chars=first)[0] for p in pick(list(BUILTIN_PROMPTS), 24, 0)]


def _engine_probe() -> tuple[list[str], Callable[[str], list[dict[str, Any]]]]:
    from voxserve.bench.prompts import BUILTIN_PROMPTS, pick
    from voxserve.config import TTSConfig
    from voxserve.engine.tts import TTSEngine
    from voxserve.engine.voices import Voice

    base = replace(TTSConfig(), models=("piper",))
    variants = {"off": replace(base, idle_threads=1, idle_chunks=1), "on": base}
    engines = {}
    for name, config in variants.items():
        engine = TTSEngine(config)
        engine.start()
        engine.warmup()
        engines[name] = engine

    def one(text: str) -> list[dict[str, Any]]:
        rows = []
        for name, engine in engines.items():
            voice = engine.default_model.voices[0]

            def run(engine: TTSEngine = engine, voice: Voice = voice) -> dict[str, Any]:
                prepared = engine.prepare(text, voice)
                started = time.perf_counter()
                handle = engine.submit(prepared, 24000)
                first, samples, packet = None, 0, None
                try:
                    while True:
                        item = handle.stream.get_blocking(60)
                        engine.taken(handle.id)
                        if first is None and len(item.pcm):
                            first, packet = time.perf_counter() - started, item.first_packet
                        samples += len(item.pcm)
                        if item.last:
                            break
                finally:
                    engine.abort(handle.id)
                wall = time.perf_counter() - started
                row: dict[str, Any] = {"ttfp": first, "audio": samples / 24000, "wall": wall}
                if packet is not None:
                    row["acoustic"] = packet.acoustic_end - packet.acoustic_start
                    row["decode"] = packet.decode_end - packet.decode_start
                return row

            row, others = _others(run)
            rows.append({"variant": name, "chars": len(text), "others": others, **row})
        return rows

    return pick(list(BUILTIN_PROMPTS), 24, 0), one


def _parts_probe() -> tuple[list[str], Callable[[str], list[dict[str, Any]]]]:
    from voxserve.config import VocoderChunking
    from voxserve.engine.piper_voice import PiperVoice
    from voxserve.runners.piper import PiperModel, bundled_voice

    model = PiperModel(bundled_voice())
    voice = PiperVoice(model, VocoderChunking(), 1.15)
    acoustic, vocoder = model.acoustic, model.vocoder

    def one(text: str) -> list[dict[str, Any]]:
        (item,) = voice.inputs(text, voice.voices[0], 1.0)[:1]
        z = acoustic.run([item])[0]
        ((prior, _),) = acoustic.run_prior([item])
        pieces: dict[str, Callable[[int], Any]] = {
            "stage A": lambda t: acoustic.run([item], t),
            "prior": lambda t: acoustic.run_prior([item], t),
            "flow whole": lambda t: acoustic.flow(prior, 0, prior.frames, t),
            "flow head 58": lambda t: acoustic.flow(prior, 0, 58, t),
            "decode 26": lambda t: vocoder.run([z[:, :26]], t),
            "decode 52": lambda t: vocoder.run([z[:, :52]], t),
        }
        def run() -> list[dict[str, Any]]:
            rows = []
            for name, piece in pieces.items():
                for threads in (1, 2):
                    started = time.perf_counter()
                    piece(threads)
                    seconds = time.perf_counter() - started
                    rows.append({"variant": f"{name} {threads}t", "frames": prior.frames, "seconds": seconds})
            return rows

        # One reading for the whole set: /proc/stat counts in 10 ms ticks.
        rows, others = _others(run)
        return [{**row, "others": others} for row in rows]

    return _first_segments(), one


def summarize(path: str, quiet: float) -> None:
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["others"] < quiet:
            by[row["variant"]].append(row)
    print(f"{path}: {sum(len(v) for v in by.values())} of {len(rows)} samples with others < {quiet} cores")
    for name, kept in by.items():
        if "seconds" in kept[0]:
            values = sorted(r["seconds"] * 1e3 for r in kept)
            print(f"  {name:18s} n={len(kept):3d}  median {statistics.median(values):6.1f} ms  min {values[0]:6.1f} ms")
            continue
        ttfp = statistics.median(r["ttfp"] for r in kept) * 1e3
        rate = sum(r["audio"] for r in kept) / sum(r["wall"] for r in kept)
        line = f"  {name:4s} n={len(kept):3d}  first chunk p50 {ttfp:5.1f} ms, {rate:5.1f} audio-s/s"
        if all("acoustic" in r for r in kept):
            line += (f" (stage A p50 {statistics.median(r['acoustic'] for r in kept) * 1e3:.1f} ms,"
                     f" first decode p50 {statistics.median(r['decode'] for r in kept) * 1e3:.1f} ms)")
        print(line)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", action="store_true", help="time the first packet's pieces instead")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--gate", type=float, default=0.6, help="cores others may use in the second before a sample")
    p.add_argument("--quiet", type=float, default=0.2, help="cores others may use during a kept sample")
    p.add_argument("-o", "--output", default="lone-stream-probe.jsonl")
    p.add_argument("--summarize", metavar="FILE", help="only summarize a stored run")
    args = p.parse_args()
    if args.summarize:
        summarize(args.summarize, args.quiet)
        return 0
    texts, one = _parts_probe() if args.parts else _engine_probe()
    for text in texts[:2]:
        one(text)  # first-run costs
    end, i = time.time() + args.minutes * 60, 0
    with open(args.output, "a") as out:
        while time.time() < end:
            _, others = _others(lambda: time.sleep(1.0))
            if others > args.gate:
                continue
            out.writelines(json.dumps(row) + "\n" for row in one(texts[i % len(texts)]))
            out.flush()
            i += 1
    summarize(args.output, args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
