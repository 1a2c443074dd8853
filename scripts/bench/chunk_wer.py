"""WER of long clips under each cut rule: energy cuts (`audio/cut.py`) against VAD cuts
(`audio/chunks.py`), in 30 s pieces and in the even short pieces of `even_spans`.

Each clip is a WAV with its reference text beside it (`NAME.wav`, `NAME.txt`). The
engine decodes the pieces each rule plans (tiny.en, int8, beam 5, two workers); the
script prints each clip's WER, word errors and piece count per rule, and the totals.

    python scripts/bench/chunk_wer.py CLIP.wav [CLIP.wav ...]
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import numpy as np

from voxserve.audio.chunks import AUTO, Chunking, plan_chunks
from voxserve.audio.cut import Span, plan_spans
from voxserve.audio.decode import SAMPLE_RATE, decode_audio
from voxserve.bench.metrics import word_errors
from voxserve.config import ASRConfig
from voxserve.engine.asr import (
    EVEN_PIECE_S,
    SEGMENTS_AHEAD,
    ASREngine,
    PreparedAudio,
    TranscribeOptions,
    even_spans,
    fitted_window,
)
from voxserve.engine.chunking import speech_probabilities


def transcribe(engine: ASREngine, prepared: PreparedAudio) -> str:
    async def run() -> str:
        handle = engine.open(TranscribeOptions(language="en"), prepared, asyncio.get_running_loop())
        engine.submit_all(handle, prepared, [(i, engine.piece(prepared, i)) for i in range(len(prepared.spans))])
        texts = []
        while (window := await handle.results.get()) is not None:
            texts.append("".join(s.text for s in window.segments))
        return "".join(texts)

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("clips", nargs="+", type=Path)
    args = parser.parse_args()
    engine = ASREngine(ASRConfig(workers=2, nice=0))
    engine.start()
    totals: dict[str, list[int]] = {}
    try:
        for clip in args.clips:
            audio = decode_audio(clip.read_bytes(), max_seconds=3600)
            reference = clip.with_suffix(".txt").read_text()
            probs = speech_probabilities(audio)
            workers = engine.config.workers

            def vad(chunking: Chunking, limit: float, audio: np.ndarray = audio, probs: np.ndarray = probs) -> list[Span]:
                return plan_chunks(audio, probs, SAMPLE_RATE, chunking, limit)

            plans: dict[str, tuple[list[Span], bool]] = {
                "energy 30 s": (plan_spans(audio, SAMPLE_RATE), False),
                "energy even": (even_spans(audio, plan_spans(audio, SAMPLE_RATE), workers, SEGMENTS_AHEAD, EVEN_PIECE_S), True),
                "vad 30 s": (vad(AUTO, 30.0), False),
                "vad 30 s, 500 ms": (vad(Chunking(silence_duration_ms=500), 30.0), False),
                "vad 14 s": (vad(AUTO, EVEN_PIECE_S), True),
            }
            for name, (spans, even) in plans.items():
                window = fitted_window(max(len(s) for s in spans)) if even else None
                text = transcribe(engine, PreparedAudio(audio, spans, window=window))
                errors = word_errors(reference, text)
                total = totals.setdefault(name, [0, 0])
                total[0] += errors.errors
                total[1] += errors.reference_words
                print(f"{clip.name:28s} {name:18s} pieces {len(spans):3d}  WER {errors.wer:6.2%}  "
                      f"({errors.errors}/{errors.reference_words})  cuts {[round(s.start / SAMPLE_RATE, 1) for s in spans[1:]]}",
                      flush=True)
        for name, (errs, words) in totals.items():
            print(f"total {name:18s} {errs}/{words} = {errs / max(1, words):.2%}")
    finally:
        engine.stop()


if __name__ == "__main__":
    main()
