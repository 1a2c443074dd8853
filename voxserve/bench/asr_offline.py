"""Offline ASR measurement, no HTTP: voxserve's cut-and-batch engine beside faster-whisper's
sequential `WhisperModel.transcribe()`, on the same audio, in one process, one after the
other.

Run: `python -m voxserve.bench.asr_offline [--audio FILE --text FILE] [--repeat N]`. With
no audio it speaks its own test set with voxserve's TTS (no server): a long clip of about
three minutes (twenty sentences and eight repeated, 1 s of silence between them) and four
short clips. It reports, per mode, the best wall time of `--repeat` runs (the machine is
shared, so the best run is the least disturbed one), RTFx and WER (lower case, no
punctuation). Imports the engine's pieces, like `bench offline`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from voxserve.audio.decode import SAMPLE_RATE, decode_audio
from voxserve.audio.encode import wav_file
from voxserve.bench.metrics import word_errors
from voxserve.config import ASRConfig, TTSConfig, default_cores
from voxserve.engine.adapters.whisper import WhisperRecognizer
from voxserve.engine.asr import ASREngine, TranscribeOptions
from voxserve.engine.transcribe import start_transcription

if TYPE_CHECKING:  # main() imports it at run time, once HF_HUB_OFFLINE is set
    from faster_whisper import WhisperModel

__all__ = ["main"]

LONG = [
    "Morning light spread slowly across the quiet valley, and the farmers walked out to check their fields before breakfast.",
    "Children in the small village school learned to read by candlelight during the long and cold winter months.",
    "Every evening the old fisherman mended his nets on the wooden pier while the gulls circled above the harbor.",
    "Scientists believe that the ocean still hides thousands of creatures that nobody has ever seen or described.",
    "Our neighbors planted a beautiful garden with roses, tulips and tall sunflowers along the side of their house.",
    "Railway workers laid new tracks through the forest so that trains could carry timber to the growing city.",
    "Musicians gathered in the town square on summer nights and played songs that everyone knew by heart.",
    "Doctors recommend that people drink plenty of water, sleep well, and take a short walk every single day.",
    "Heavy rain flooded the main road last week, and the bridge near the river was closed for several days.",
    "Travelers often stop at the little bakery by the station to buy fresh bread and a cup of hot coffee.",
    "Engineers designed the new library with large windows, so the reading rooms are bright and warm all year.",
    "Volunteers cleaned the beach on Saturday morning and collected many bags of plastic and broken glass.",
    "Farmers in the north grow potatoes, barley and oats, because the soil there is rich and the summers are short.",
    "Students who practice a little every day usually remember much more than those who study only before exams.",
    "Lightning struck the tall oak tree behind the church, but luckily nobody was hurt and the fire was put out quickly.",
    "Visitors to the museum can see ancient maps, old coins and the tools that early sailors used to find their way.",
    "Grandmother told us stories about her childhood on the farm, where she cared for horses, chickens and goats.",
    "Snow covered the mountains early this year, and the ski resorts opened their slopes a month ahead of schedule.",
    "Firefighters trained for many hours to learn how to rescue people from burning buildings safely.",
    "Finally, the long journey came to an end, and the tired travelers were happy to sleep in their own beds again.",
]  # fmt: skip
SHORT = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "A rainbow is a division of white light into many beautiful colors.",
    "The museum opens early on weekends, so we should arrive before the crowds.",
]


@dataclass
class Result:
    mode: str
    audio_s: float
    wall_s: float
    rtfx: float
    wer: float | None
    walls: list[float] = field(default_factory=list)
    """Every run's wall time, in order (the long clip: alternating with the other mode)."""


def wer(reference: str, hypothesis: str) -> float:
    """WER as the bench defines it (`bench/metrics.py`)."""
    return word_errors(reference, hypothesis).wer


def make_clips() -> tuple[tuple[bytes, str], list[tuple[bytes, str]]]:
    """(long wav, its text) and the short clips, spoken by voxserve's TTS at 24 kHz."""
    from voxserve.engine.tts import TTSEngine

    tts = TTSEngine(TTSConfig())
    tts.start()
    try:
        voice = tts.default_model.voices[0]
        spoken = [tts.synthesize(t, voice, sample_rate=24000) for t in LONG]
        short = [(wav_file(tts.synthesize(t, voice, sample_rate=24000), 24000), t) for t in SHORT]
    finally:
        tts.stop()
    gap = np.zeros(24000, dtype=np.int16)
    pieces = spoken + spoken[:8]
    joined = np.concatenate([x for i, p in enumerate(pieces) for x in ((gap, p) if i else (p,))])
    return (wav_file(joined, 24000), " ".join(LONG + LONG[:8])), short


async def _engine_many(engine: ASREngine, clips: list[bytes], pool: ThreadPoolExecutor) -> list[str]:
    async def one(data: bytes) -> str:
        transcription = await start_transcription(engine, data, TranscribeOptions(language="en"), pool)
        return (await transcription.collect()).text

    return list(await asyncio.gather(*(one(c) for c in clips)))


def run_engine(engine: ASREngine, clips: list[bytes], pool: ThreadPoolExecutor) -> tuple[float, list[str]]:
    started = time.perf_counter()
    texts = asyncio.run(_engine_many(engine, clips, pool))
    return time.perf_counter() - started, texts


def run_sequential(model: WhisperModel, audio: np.ndarray, beam_size: int) -> tuple[float, str]:
    started = time.perf_counter()
    segments, _ = model.transcribe(audio, language="en", beam_size=beam_size)
    text = "".join(s.text for s in segments)  # the generator decodes as it is read
    return time.perf_counter() - started, text


def _save(folder: Path, long_clip: tuple[bytes, str], short: list[tuple[bytes, str]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, clips in (("long", [long_clip]), ("short", short)):
        lines = []
        for i, (data, text) in enumerate(clips):
            path = folder / f"{name}-{i:02d}.wav"
            path.write_bytes(data)
            lines.append(json.dumps({"audio": str(path.resolve()), "text": text}))
        (folder / f"manifest-{name}.jsonl").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m voxserve.bench.asr_offline", description=__doc__.split("\n\n")[0])
    p.add_argument("--audio", type=Path, help="long audio file (default: speak the built-in clip)")
    p.add_argument("--text", type=Path, help="its reference transcript")
    p.add_argument("--repeat", type=int, default=2, help="runs per mode; the best is reported")
    p.add_argument("--beam-size", type=int, default=ASRConfig().beam_size)
    p.add_argument("--workers", type=int, default=default_cores(), help="engine decoding threads")
    p.add_argument("--fw-threads", type=int, default=default_cores(),
                   help="faster-whisper's cpu_threads (default: every core, as for one stream; "
                   "0 is CTranslate2's own default)")
    p.add_argument("--nice", type=int, default=ASRConfig().nice,
                   help="the engine's nice increment (faster-whisper runs at the process's "
                   "own priority: on a machine shared with other work, pass 0 to compare "
                   "like with like)")
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--save", type=Path,
                   help="also write the clips here, with manifest-long.jsonl and manifest-short.jsonl "
                   "for `voxserve bench transcribe --manifest`")
    args = p.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from faster_whisper import WhisperModel

    from voxserve.engine.threads import single_threaded_blas

    single_threaded_blas()  # as `voxserve serve` does

    if args.audio:
        long_clip = (args.audio.read_bytes(), args.text.read_text() if args.text else "")
        short: list[tuple[bytes, str]] = []
    else:
        print("speaking the test clips with voxserve's TTS...", file=sys.stderr)
        long_clip, short = make_clips()
    if args.save:
        _save(args.save, long_clip, short)
    audio = decode_audio(long_clip[0], max_seconds=4 * 3600)
    seconds = len(audio) / SAMPLE_RATE
    reference = long_clip[1]

    config = ASRConfig(workers=args.workers, beam_size=args.beam_size, nice=args.nice)
    engine = ASREngine(config)
    engine.start()
    engine.warmup()
    whisper = engine.default
    if not isinstance(whisper, WhisperRecognizer):
        raise SystemExit(f"the offline bench compares Whisper with faster-whisper; {whisper.name} is not Whisper")
    model_dir = str(whisper.runner.model_dir)
    sequential = WhisperModel(model_dir, device="cpu", compute_type="int8", cpu_threads=args.fw_threads)
    results: list[Result] = []

    def best(times: list[float]) -> float:
        return min(times)

    with ThreadPoolExecutor(engine.config.audio_workers) as pool:
        # Long form: alternate the two modes so that both see the same neighbours.
        eng_times, seq_times = [], []
        eng_text = seq_text = ""
        loads = [os.getloadavg()[0]]
        for _ in range(args.repeat):
            t, texts = run_engine(engine, [long_clip[0]], pool)
            eng_times.append(t)
            eng_text = texts[0]
            t, seq_text = run_sequential(sequential, audio, args.beam_size)
            seq_times.append(t)
            loads.append(os.getloadavg()[0])
        for mode, times, text in (
            ("voxserve cut+batch, long", eng_times, eng_text),
            ("faster-whisper transcribe(), long", seq_times, seq_text),
        ):
            wall = best(times)
            werr = wer(reference, text) if reference else None
            results.append(Result(mode, seconds, wall, seconds / wall, werr, [round(x, 3) for x in times]))
        ratios = [s / e for e, s in zip(eng_times, seq_times, strict=True)]
        print(
            f"long form, round by round (faster-whisper time / voxserve time): "
            f"{' '.join(f'{r:.2f}x' for r in ratios)}; median {statistics.median(ratios):.2f}x; "
            f"medians {statistics.median(eng_times):.2f} s / {statistics.median(seq_times):.2f} s; "
            f"load average {' '.join(f'{x:.1f}' for x in loads)}",
            file=sys.stderr,
        )

        if short:
            # One short clip at a time: latency.
            lat_e, lat_s = [], []
            for data, _ in short * args.repeat:
                lat_e.append(run_engine(engine, [data], pool)[0])
                clip = decode_audio(data, max_seconds=60)
                lat_s.append(run_sequential(sequential, clip, args.beam_size)[0])
            short_s = statistics.mean(len(decode_audio(d, 60)) / SAMPLE_RATE for d, _ in short)
            results.append(Result("voxserve, one short clip (median)", short_s, statistics.median(lat_e), short_s / statistics.median(lat_e), None))
            results.append(Result("faster-whisper, one short clip (median)", short_s, statistics.median(lat_s), short_s / statistics.median(lat_s), None))
            # Sixteen short clips at once through the engine, and one after another sequentially.
            clips = [short[i % len(short)] for i in range(16)]
            total = sum(len(decode_audio(d, 60)) / SAMPLE_RATE for d, _ in clips)
            conc_times, conc_wer = [], 0.0
            for _ in range(args.repeat):
                t, texts = run_engine(engine, [d for d, _ in clips], pool)
                conc_times.append(t)
                conc_wer = statistics.mean(wer(ref, hyp) for (_, ref), hyp in zip(clips, texts, strict=True))
            results.append(Result("voxserve, 16 short clips at once", total, best(conc_times), total / best(conc_times), conc_wer))
            seq_times, seq_wer = [], 0.0
            for _ in range(args.repeat):
                started = time.perf_counter()
                hyps = [run_sequential(sequential, decode_audio(d, 60), args.beam_size)[1] for d, _ in clips]
                seq_times.append(time.perf_counter() - started)
                seq_wer = statistics.mean(wer(ref, hyp) for (_, ref), hyp in zip(clips, hyps, strict=True))
            results.append(Result("faster-whisper, 16 short clips in turn", total, best(seq_times), total / best(seq_times), seq_wer))
    snapshot = engine.snapshot()
    engine.stop()

    print(f"{'mode':42s} {'audio s':>8s} {'wall s':>8s} {'RTFx':>7s} {'WER':>7s}")
    for r in results:
        w = f"{r.wer * 100:6.1f}%" if r.wer is not None else "      -"
        print(f"{r.mode:42s} {r.audio_s:8.1f} {r.wall_s:8.2f} {r.rtfx:7.1f} {w}")
    print(f"engine batch sizes: {dict(sorted(snapshot['batch_sizes'].items()))}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
