"""How many frames of context a vocoder chunk needs, and what fewer would save.

The frames are `VocoderChunking.left_context` and `right_context`.

Every segment of the built-in prompts goes through stage A once; its latent is then
decoded whole, and in chunks as the server cuts it (the crowded plan: 16, 32, 64, then
128 frames), with a given number of context frames on each side of every chunk. The
kept audio of each chunk is compared with the same samples of the whole decode (SNR,
per chunk index; the median and the worst over the segments), and the frames decoded
per frame kept are counted.

    python scripts/bench/vocoder_context.py --contexts 4,6,8,10
    python scripts/bench/vocoder_context.py --contexts 10/6,6/10,10/8,8/10   # left/right
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

import numpy as np

from voxserve.bench.prompts import BUILTIN_PROMPTS
from voxserve.config import TTSConfig
from voxserve.engine.adapters.piper import CHUNKING, PiperVoice
from voxserve.engine.tts import FIRST_SEGMENT_CHARS, MAX_SEGMENT_CHARS
from voxserve.engine.work import plan_chunk
from voxserve.text.split import normalize, segment


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    noise = float(np.sum((reference - other) ** 2))
    return 10 * float(np.log10(float(np.sum(reference**2)) / max(noise, 1e-30)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contexts", default="4,6,8,10",
                        help="frames of context to try: N on each side, or LEFT/RIGHT")
    parser.add_argument("--chunks", type=int, default=4, help="chunk indices reported apart; later ones pooled")
    args = parser.parse_args()
    contexts = [c if "/" in c else f"{c}/{c}" for c in args.contexts.split(",")]
    config = TTSConfig()
    voice = PiperVoice.load(config)
    model, hop = voice.model, voice.model.hop
    speaker = voice.voices[0]
    found: dict[tuple[str, int], list[float]] = {}
    decoded = dict.fromkeys(contexts, 0)
    kept = 0
    for prompt in BUILTIN_PROMPTS:
        pieces = segment(normalize(prompt), first_max_chars=FIRST_SEGMENT_CHARS,
                         max_chars=MAX_SEGMENT_CHARS)
        for item in (item for piece in pieces for item in voice.inputs(piece, speaker, 1.0)):
            (z,) = model.acoustic.run([item])
            frames = z.shape[-1]
            whole = model.vocoder.run([z])[0]
            kept += frames
            for context in contexts:
                left, right = (int(n) for n in context.split("/"))
                chunking = replace(CHUNKING, left_context=left, right_context=right)
                pos, index = 0, 0
                while pos < frames:
                    lo, hi, start, end = plan_chunk(frames, pos, index, chunking)
                    pcm = model.vocoder.run([np.ascontiguousarray(z[:, lo:hi])])[0]
                    part = pcm[(start - lo) * hop : (end - lo) * hop]
                    ref = whole[start * hop : end * hop]
                    found.setdefault((context, min(index, args.chunks)), []).append(snr_db(ref, part))
                    decoded[context] += hi - lo
                    pos, index = end, index + 1
    print(f"{kept} frames kept over the segments of {len(BUILTIN_PROMPTS)} prompts")
    print("left/right | frames decoded per frame kept | SNR per chunk index (median / worst, dB)")
    for context in contexts:
        cells = []
        for index in range(args.chunks + 1):
            values = found.get((context, index), [])
            if values:
                label = f"{index}+" if index == args.chunks else str(index)
                cells.append(f"{label}: {statistics.median(values):.1f} / {min(values):.1f}")
        print(f"{context:>10} | {decoded[context] / kept:.3f} | " + "; ".join(cells))


if __name__ == "__main__":
    main()
