"""How many frames of context Piper's windows need: the flow's (`runners.piper.onnx_runner.FLOW_CONTEXT`)
and the vocoder's (`VocoderChunking.left_context`, `right_context`).

Every segment of the built-in prompts goes through stage A once and is then decoded whole
and in windows as the server cuts them; the kept audio of each window is compared with the
same samples of the whole decode (SNR; the median and the worst over the segments).

- `--stage flow` (the default): a lone stream's stage A leaves the flow to the chunks of its
  head, each running the flow over its own vocoder window plus some frames of z_p on each
  side. Each of the first chunks of the lone and the crowded plans is decoded from the same
  z_p with the whole segment's flow and with the flow over a window of the given context.
- `--stage vocoder`: every chunk of the crowded plan (16, 32, 64, then 128 frames) is decoded
  with the given context frames on each side (N, or LEFT/RIGHT); also prints the frames
  decoded per frame kept, what fewer context frames would save.

    python scripts/bench/flow_context.py --contexts 12,16,20,32
    python scripts/bench/flow_context.py --stage vocoder --contexts 4,6,8,10
    python scripts/bench/flow_context.py --stage vocoder --contexts 10/6,6/10,10/8,8/10
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

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


def segment_inputs(voice: PiperVoice) -> Iterator[Any]:
    """Stage A's input for every segment of the built-in prompts, cut as the server cuts them."""
    speaker = voice.voices[0]
    for prompt in BUILTIN_PROMPTS:
        pieces = segment(
            normalize(prompt), first_max_chars=FIRST_SEGMENT_CHARS, max_chars=MAX_SEGMENT_CHARS
        )
        for piece in pieces:
            yield from voice.inputs(piece, speaker, 1.0)


def flow_context(voice: PiperVoice, contexts: list[int], chunks: int) -> None:
    model, runner, hop = voice.model, voice.model.acoustic, voice.model.hop
    found: dict[tuple[str, int, int], list[float]] = {}
    segments = 0
    for item in segment_inputs(voice):
        ((prior, _),) = runner.run_prior([item])
        piper.FLOW_CONTEXT = prior.frames  # a window of everything: the whole flow
        whole = runner.flow(prior, 0, prior.frames)
        segments += 1
        for plan, alone in (("lone", True), ("crowded", False)):
            pos = 0
            for index in range(chunks):
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
        print(
            f"{plan:8} chunk {index} context {context:2}: SNR p50 {statistics.median(values):6.1f} dB, "
            f"worst {min(values):6.1f} dB (n={len(values)})"
        )


def vocoder_context(voice: PiperVoice, contexts: list[str], chunks: int) -> None:
    model, hop = voice.model, voice.model.hop
    found: dict[tuple[str, int], list[float]] = {}
    decoded = dict.fromkeys(contexts, 0)
    kept = 0
    for item in segment_inputs(voice):
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
                found.setdefault((context, min(index, chunks)), []).append(
                    snr_db(whole[start * hop : end * hop], part)
                )
                decoded[context] += hi - lo
                pos, index = end, index + 1
    print(f"{kept} frames kept over the segments of {len(BUILTIN_PROMPTS)} prompts")
    print("left/right | frames decoded per frame kept | SNR per chunk index (median / worst, dB)")
    for context in contexts:
        cells = []
        for index in range(chunks + 1):
            values = found.get((context, index), [])
            if values:
                label = f"{index}+" if index == chunks else str(index)
                cells.append(f"{label}: {statistics.median(values):.1f} / {min(values):.1f}")
        print(f"{context:>10} | {decoded[context] / kept:.3f} | " + "; ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stage", choices=["flow", "vocoder"], default="flow")
    parser.add_argument(
        "--contexts", help="frames of context to try (flow: 12,16,20,32; vocoder: 4,6,8,10)"
    )
    parser.add_argument(
        "--chunks",
        type=int,
        help="flow: head chunks per segment (3); vocoder: chunk indices "
        "reported apart, later ones pooled (4)",
    )
    parser.add_argument(
        "--quiet-noise", action="store_true", help="noise scales 0 (z_p is the mean)"
    )
    args = parser.parse_args()
    voice = PiperVoice.load(TTSConfig())
    if args.quiet_noise:
        voice = PiperVoice(voice.model, CHUNKING, 1.0, noise_scale=0.0, noise_w=0.0)
    if args.stage == "flow":
        flow_context(
            voice, [int(c) for c in (args.contexts or "12,16,20,32").split(",")], args.chunks or 3
        )
    else:
        contexts = [c if "/" in c else f"{c}/{c}" for c in (args.contexts or "4,6,8,10").split(",")]
        vocoder_context(voice, contexts, args.chunks or 4)


if __name__ == "__main__":
    main()
