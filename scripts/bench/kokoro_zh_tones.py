"""Kokoro's Mandarin voices: the pitch stage A predicts for each lexical tone.

    PYTHONPATH=$PWD .venv/bin/python scripts/bench/kokoro_zh_tones.py [--voices zf_xiaoni,zf_xiaobei] [--min-gap 1]
        [--as-shipped]

Mandarin tells words apart by tone: tone 1 (→) is high and level, tone 2 (↗) rises,
tone 3 (↓) is low, tone 4 (↘) falls. For each Mandarin voice, on the ten sentences of
`kokoro_cjk.py`, this reads the F0 that stage A (the prosody predictor) gives over each
toned syllable's vowels (the run of vowels before the tone arrow, and the arrow, at the
durations stage A predicts), in semitones against the voice's median F0 over the ten
sentences. It prints, per voice and tone, the mean height and the slope (the last third
of the vowels less the first third), and the height of tone 1 above tone 3.

As Kokoro ships them (`--as-shipped`), every Mandarin voice but one puts tone 1 2-7
semitones above tone 3; `zf_xiaoni` puts it about 3 below, and its tone 4 hardly falls, at
each style row tried. The server moves that voice's prosody half toward the other female
voices' (`PROSODY_REPAIRS` in runners/kokoro/onnx_runner.py), which puts its tone 1 about 4
semitones above tone 3 (docs/KOKORO.md). Exits 1 when a voice's tone 1 is less than
`--min-gap` semitones above its tone 3. Stage A only (no decoder, no Whisper): about 10 s
on one core.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from scripts.bench.kokoro_cjk import SENTENCES
from voxserve.engine.adapters.kokoro import KokoroVoice
from voxserve.runners.kokoro.onnx_runner import (
    KokoroInput,
    KokoroModel,
    list_voices,
    load_voice,
    style_row,
)
from voxserve.text.kokoro_vocab import KOKORO_VOCAB

TONES = {"→": 1, "↗": 2, "↓": 3, "↘": 4}
VOWELS = frozenset("aeiouyɤəɛɨʊɚɔ")
"""The vowels `text/kokoro_zh.py` writes (j, w and ɥ are glides, and stay out)."""
_SYMBOL = {i: s for s, i in KOKORO_VOCAB.items()}


def nuclei(ids: np.ndarray, durations: np.ndarray) -> list[tuple[int, int, int]]:
    """(tone, first frame, end frame) of each toned syllable's vowels and arrow. `durations`
    are stage A's frames per token, the pads included (token k + 1 is ids[k])."""
    starts = np.concatenate(([0], np.cumsum(durations)))
    symbols = [_SYMBOL[int(i)] for i in ids]
    found = []
    for k, symbol in enumerate(symbols):
        if symbol not in TONES:
            continue
        first = k
        while first > 0 and symbols[first - 1] in VOWELS:
            first -= 1
        found.append((TONES[symbol], int(starts[first + 1]), int(starts[k + 2])))
    return found


def tone_heights(voice: KokoroVoice, name: str, as_shipped: bool = False) -> dict[int, tuple[float, float, int]]:
    """Tone -> (mean height, mean slope, syllables), in semitones against the voice's median
    F0; with the voice's style rows as served, or as Kokoro ships them."""
    ref = voice.resolve_voice(name)
    rows = load_voice(name, as_shipped=as_shipped)
    acoustic, _ = voice.model.runners(1)
    spoken = []
    for sentence in SENTENCES["zh"]:
        for item in voice.inputs(sentence, ref, 1.0):
            style = style_row(rows, len(item.ids))
            (frames,) = acoustic.run([KokoroInput(item.ids, style, 1.0)])
            f0 = frames.decoder_input.f0.reshape(-1, 2).mean(axis=1)  # two points per frame
            spoken.append((nuclei(item.ids, frames.durations), f0))
    median = float(np.median(np.concatenate([f0[f0 > 10] for _, f0 in spoken])))
    per_tone: dict[int, list[tuple[float, float]]] = {t: [] for t in TONES.values()}
    for syllables, f0 in spoken:
        for tone, lo, hi in syllables:
            voiced = f0[lo:hi][f0[lo:hi] > 10]
            if len(voiced) < 2:
                continue
            semitones = 12 * np.log2(voiced / median)
            third = max(1, len(semitones) // 3)
            slope = semitones[-third:].mean() - semitones[:third].mean()
            per_tone[tone].append((float(semitones.mean()), float(slope)))
    return {
        t: (float(np.mean([h for h, _ in v])), float(np.mean([s for _, s in v])), len(v))
        for t, v in per_tone.items() if v
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--voices", default="", help="only these Mandarin voices (comma-separated)")
    parser.add_argument("--min-gap", type=float, default=1.0, help="semitones tone 1 must be above tone 3")
    parser.add_argument("--as-shipped", action="store_true",
                        help="the voices' style rows as Kokoro ships them, without the server's prosody repairs")
    args = parser.parse_args(argv)
    names = [v.name for v in list_voices() if v.language == "zh"]
    if args.voices:
        wanted = set(args.voices.split(","))
        if unknown := wanted - set(names):
            parser.error(f"not a Mandarin voice: {', '.join(sorted(unknown))}")
        names = [n for n in names if n in wanted]
    voice = KokoroVoice(KokoroModel(threads=1))
    print("voice          " + "   ".join(f"tone {t}: height slope" for t in (1, 2, 3, 4)) + "   tone 1 - tone 3")
    low = []
    for name in names:
        heights = tone_heights(voice, name, args.as_shipped)
        gap = heights[1][0] - heights[3][0]
        cells = "   ".join(f"{heights[t][0]:+5.1f} st {heights[t][1]:+5.1f} st" for t in (1, 2, 3, 4))
        print(f"{name:14s} {cells}   {gap:+5.1f} st")
        if gap < args.min_gap:
            low.append(name)
    print(f"tone 1 less than {args.min_gap:g} semitones above tone 3: {', '.join(low) or 'none'}")
    return 1 if low else 0


if __name__ == "__main__":
    sys.exit(main())
