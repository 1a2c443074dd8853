"""How many frames of context a window of Piper's flow needs (`runners.piper.onnx_runner.FLOW_CONTEXT`).

A lone stream's stage A leaves the flow to the chunks of its head: each of the first three
chunks runs the flow over its own vocoder window plus some frames of z_p on each side.
This decodes every such chunk of every segment of the built-in prompts both ways, from
the same z_p: with the whole segment's flow, and with the flow over a window of a given
context, and prints the SNR of the kept audio between the two (per chunk of the lone and
the crowded chunk plans; the median and the worst over the segments).

    python scripts/bench/flow_context.py --contexts 12,16,20,32
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from voxserve.bench.prompts import BUILTIN_PROMPTS
from voxserve.config import TTSConfig
from voxserve.engine.adapters.piper import CHUNKING, PiperVoice
from voxserve.engine.tts import FIRST_SEGMENT_CHARS, MAX_SEGMENT_CHARS
from voxserve.engine.work import plan_chunk
from voxserve.runners.piper import onnx_runner as piper
from voxserve.text.split import normalize, segment


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    noise = float(np.sum((reference - other) ** 2))
    return 10 * float(np.log10(float(np.sum(reference**2)) / max(noise, 1e-30)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contexts", default="12,16,20,32", help="frames of context to try")
    parser.add_argument("--chunks", type=int, default=3, help="head chunks per segment")
    parser.add_argument("--quiet-noise", action="store_true", help="noise scales 0 (z_p is the mean)")
    args = parser.parse_args()
    contexts = [int(c) for c in args.contexts.split(",")]
    config = TTSConfig()
    voice = PiperVoice.load(config)
    if args.quiet_noise:
        voice = PiperVoice(voice.model, CHUNKING, 1.0, noise_scale=0.0, noise_w=0.0)
    model, runner, hop = voice.model, voice.model.acoustic, voice.model.hop
    speaker = voice.voices[0]
    found: dict[tuple[str, int, int], list[float]] = {}
    segments = 0
    for prompt in BUILTIN_PROMPTS:
        pieces = segment(normalize(prompt), first_max_chars=FIRST_SEGMENT_CHARS,
                         max_chars=MAX_SEGMENT_CHARS)
        for item in (item for piece in pieces for item in voice.inputs(piece, speaker, 1.0)):
            ((prior, _),) = runner.run_prior([item])
            piper.FLOW_CONTEXT = prior.frames  # a window of everything: the whole flow
            whole = runner.flow(prior, 0, prior.frames)
            segments += 1
            for plan, alone in (("lone", True), ("crowded", False)):
                pos = 0
                for index in range(args.chunks):
                    lo, hi, start, end = plan_chunk(prior.frames, pos, index, CHUNKING, alone)
                    pos = end
                    if end <= start or hi + max(contexts) >= prior.frames:
                        break  # the segment's end: no window runs there
                    kept = slice((start - lo) * hop, (end - lo) * hop)
                    reference = model.vocoder.run([whole[:, lo:hi]])[0][kept]
                    for context in contexts:
                        piper.FLOW_CONTEXT = context
                        pcm = model.vocoder.run([runner.flow(prior, lo, hi)])[0][kept]
                        found.setdefault((plan, index, context), []).append(snr_db(reference, pcm))
    print(f"{segments} segments")
    for (plan, index, context), values in found.items():
        print(f"{plan:8} chunk {index} context {context:2}: SNR p50 {statistics.median(values):6.1f} dB, "
              f"worst {min(values):6.1f} dB (n={len(values)})")


if __name__ == "__main__":
    main()
