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
from voxserve.engine.kokoro_voice import CHUNKING, KokoroVoice
from voxserve.engine.scheduler import Latent, plan_chunk
from voxserve.engine.tts import crossfade
from voxserve.engine.voices import Span
from voxserve.runners.kokoro import HOP, KokoroModel


def render(model: KokoroVoice, latent: Latent, plan: tuple[int, int, float, int, int]) -> tuple[np.ndarray, list[int]]:
    first, later, growth, context, fade = plan
    chunking = replace(CHUNKING, first_chunk_frames=first, chunk_frames=later,
                       left_context=context, right_context=context)
    pieces: list[np.ndarray] = []
    joins: list[int] = []
    held: np.ndarray | None = None
    pos = index = 0
    while pos < latent.frames:
        lo, hi, start, end = plan_chunk(latent.frames, pos, index, chunking, level=latent.level, growth=growth)
        full = model.decode([Span(latent, lo, hi)])[0]
        head = fade // 2 if start > 0 else 0
        tail = fade // 2 if end < latent.frames else 0
        pcm = full[(start - lo) * HOP - head : (end - lo) * HOP + tail]
        if head and held is not None:
            pcm = np.concatenate([crossfade(held, pcm[: 2 * head]), pcm[2 * head :]])
        if start > 0:
            joins.append(start * HOP)
        held = pcm[len(pcm) - 2 * tail :] if tail else None
        pieces.append(pcm[: len(pcm) - 2 * tail] if tail else pcm)
        pos, index = end, index + 1
    return np.concatenate(pieces), joins


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
            rendered = [render(model, latent, plan) for latent in latents]
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
