"""Kokoro's windowed stage B against the whole-sentence decode, for several window plans:
log-mel distance, level, energy dips and clicks at the joins (docs/KOKORO.md, "Choosing the
windows"). Offline, in process; each plan renders exactly as the engine streams.

    .venv/bin/python scripts/bench/kokoro_windows.py FIRST,LATER,GROWTH,CONTEXT[,CROSSFADE] ...

CROSSFADE is in samples (default 600); 0 joins with hard cuts.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import replace

import numpy as np

from voxserve.bench import kokoro_prosody as kp
from voxserve.engine.adapters.kokoro import CHUNKING, KokoroVoice
from voxserve.runners.kokoro.onnx_runner import HOP, KokoroModel


def main() -> None:
    plans = []
    for arg in sys.argv[1:] or ["48,48,1.25,12"]:
        parts = arg.split(",")
        plans.append((int(parts[0]), int(parts[1]), float(parts[2]), int(parts[3]),
                      int(parts[4]) if len(parts) > 4 else HOP))
    model = KokoroVoice(KokoroModel())
    clips = []
    for voice, text in itertools.product(("af_heart", "af_nova"), kp.PROSODY_TEXTS):
        whole, latents = kp._whole(model, text, voice)
        clips.append((whole, latents))
    print("| first, later, growth, context, crossfade | log-mel, median (max) | level | joins in sound / all | worst dip there | worst click |")
    print("|---|---|---|---|---|---|")
    for plan in plans:
        mel, level, dips, clicks, sounding, total = [], [], [], [], 0, 0
        for whole, latents in clips:
            first, later, growth, context, fade = plan
            chunking = replace(CHUNKING, first_chunk_frames=first, chunk_frames=later,
                               left_context=context, right_context=context)
            rendered = [kp.render_windows(model, latent, chunking, growth, fade) for latent in latents]
            pcm = np.concatenate([p for p, _ in rendered])
            offset, joins = 0, list[int]()
            for part, at in rendered:
                joins.extend(offset + j for j in at)
                offset += len(part)
            dip, click, n = kp.join_quality(whole, pcm, joins)
            mel.append(kp.mel_distance_db(whole, pcm))
            level.append(kp._db(pcm) - kp._db(whole))
            dips.append(dip)
            clicks.append(click)
            sounding += n
            total += len(joins)
        print(f"| {', '.join(map(str, plan))} | {np.median(mel):.2f} dB ({max(mel):.2f}) | {np.median(level):+.2f} dB | "
              f"{sounding} / {total} | {max(dips):.1f} dB | {max(clicks):+.1f} dB |", flush=True)


if __name__ == "__main__":
    main()
