"""One long file through the ASR engine with the old and the new feeder, beside
faster-whisper's sequential `transcribe()`, in one process, alternating (issue 15).

- `old`: the feeder before issue 15's long-form work: each piece is featurized and queued
  on its own, so pieces 0 and 1 start alone at batch 1 while the rest are featurized;
- `new`: `voxserve.engine.transcribe` as it is (the first pieces featurized first and
  queued together with `submit_all`);
- `one`: the new feeder with the batcher told of one worker, so the whole file goes as one
  batch on the solo replica (two intra-op threads): a variant that was tried, not adopted;
- `fw`: faster-whisper 1.2.1 `WhisperModel.transcribe()` on the same model, int8,
  `cpu_threads=2`, beam 5, `language="en"`, its defaults otherwise.

Rounds alternate the order (old, new, one, fw / fw, one, new, old). Reports each mode's
wall and process CPU time per round, medians, WER, and faster-whisper's time over each
engine mode's round by round. The engine runs at nice 0, like faster-whisper. Run from
the repository root, with the long clip of `python -m voxserve.bench.asr_offline --save DIR`:

    python docs/bench/long-feeder-probe.py --audio DIR/long-00.wav --text LONG.txt --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path

from voxserve.audio.decode import SAMPLE_RATE, decode_audio
from voxserve.bench.metrics import word_errors
from voxserve.config import ASRConfig
from voxserve.engine import transcribe
from voxserve.engine.asr import ASREngine, ASRHandle, PreparedAudio, TranscribeOptions
from voxserve.engine.threads import single_threaded_blas
from voxserve.errors import ServerError

NEW_FEED = transcribe._feed


async def old_feed(engine: ASREngine, handle: ASRHandle, prepared: PreparedAudio, pool: Executor) -> None:
    """The feeder as it was: one piece featurized, then queued, then the next."""
    loop = asyncio.get_running_loop()
    ahead = engine.config.segments_ahead
    try:
        for index in range(len(prepared.spans)):
            await handle.results.wait_room(index, ahead)
            decode_input = await loop.run_in_executor(pool, engine.features, prepared, index)
            if not engine.submit(handle, prepared, index, decode_input):
                return
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - as the feeder does: the request fails, not the run
        handle.results.fail(ServerError(f"could not prepare audio features: {exc}"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--audio", type=Path, required=True)
    p.add_argument("--text", type=Path, required=True, help="its reference transcript")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--beam-size", type=int, default=5)
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from faster_whisper import WhisperModel

    single_threaded_blas()
    data = args.audio.read_bytes()
    reference = args.text.read_text()
    audio = decode_audio(data, max_seconds=4 * 3600)
    seconds = len(audio) / SAMPLE_RATE
    engine = ASREngine(ASRConfig(nice=0, beam_size=args.beam_size))
    engine.start()
    engine.warmup()
    fw = WhisperModel(str(engine.runner.model_dir), device="cpu", compute_type="int8", cpu_threads=2)
    workers = engine.config.workers

    async def one(pool: Executor) -> str:
        job = await transcribe.start_transcription(engine, data, TranscribeOptions(language="en"), pool)
        return (await job.collect()).text

    modes = ("old", "new", "one", "fw")
    walls: dict[str, list[float]] = {m: [] for m in modes}
    cpus: dict[str, list[float]] = {m: [] for m in modes}
    wers: dict[str, float] = {}
    with ThreadPoolExecutor(engine.config.audio_workers) as pool:
        for r in range(args.rounds):
            for mode in modes if r % 2 == 0 else modes[::-1]:
                engine._batcher.workers = 1 if mode == "one" else workers
                transcribe._feed = old_feed if mode == "old" else NEW_FEED
                wall, cpu = time.perf_counter(), time.process_time()
                if mode == "fw":
                    segments, _ = fw.transcribe(audio, language="en", beam_size=args.beam_size)
                    text = "".join(s.text for s in segments)
                else:
                    text = asyncio.run(one(pool))
                walls[mode].append(time.perf_counter() - wall)
                cpus[mode].append(time.process_time() - cpu)
                wers[mode] = word_errors(reference, text).wer
            print(
                f"round {r}: " + " ".join(f"{m} {walls[m][-1]:.2f} s" for m in modes)
                + f"; load average {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    engine.stop()
    for m in modes:
        wall = statistics.median(walls[m])
        print(
            f"{m:4s} wall median {wall:.2f} s (RTFx {seconds / wall:.1f}), process CPU median "
            f"{statistics.median(cpus[m]):.2f} s, WER {wers[m] * 100:.1f}%"
        )
    for m in ("old", "new", "one"):
        ratios = [f / e for f, e in zip(walls["fw"], walls[m], strict=True)]
        print(f"fw / {m}: {' '.join(f'{x:.2f}x' for x in ratios)}; median {statistics.median(ratios):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
