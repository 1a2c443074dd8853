"""Fit the simulated device's duration model to the real voice models.

Runs the real stage A (ONNX Runtime, on the CPU) of Piper's bundled voice and of Kokoro
over the bench's English prompts, and writes each phoneme id's mean frames (and, for
Kokoro, its mean energy) to `voxserve/runners/sim/durations.json`:

    .venv/bin/python scripts/fit_sim_durations.py [--out PATH]

Each prompt is cut into segments as the engine cuts it. Kokoro is fitted on the voice the
bench and the warm-up use (af_alloy, OpenAI's "alloy"), at speed 1: other voices speak up
to about 10 % faster or slower. Piper is fitted on its one speaker at the voice's own
scales (its duration noise included, as served).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

import numpy as np

from voxserve.bench.prompts import BUILTIN_PROMPTS
from voxserve.config import TTSConfig
from voxserve.engine.adapters.kokoro import KokoroVoice
from voxserve.engine.adapters.piper import PiperVoice
from voxserve.engine.tts import FIRST_SEGMENT_CHARS, MAX_SEGMENT_CHARS
from voxserve.runners.kokoro.onnx_runner import KokoroInput
from voxserve.runners.sim.durations import TABLE_FILE
from voxserve.text.kokoro_vocab import KOKORO_VOCAB
from voxserve.text.split import normalize, segment

KOKORO_VOICES = ("af_alloy",)


def _table(frames: dict[int, list[float]], levels: dict[int, list[float]], vocabulary: int) -> dict[str, object]:
    ids = {
        str(i): [round(float(np.mean(v)), 4), round(float(np.mean(levels[i])) if levels[i] else 0.0, 4), len(v)]
        for i, v in sorted(frames.items())
    }
    return {"vocabulary": vocabulary, "ids": ids}


def _segments(prompts: list[str], sentence_chars: int | None) -> list[str]:
    """The prompts cut as `TTSEngine.prepare` cuts them for a model whose profile has
    `sentence_chars`."""
    return [
        piece
        for text in prompts
        for piece in segment(
            normalize(text),
            first_max_chars=FIRST_SEGMENT_CHARS if sentence_chars is None else None,
            max_chars=MAX_SEGMENT_CHARS if sentence_chars is None else sentence_chars,
        )
    ]


def fit_piper(prompts: list[str]) -> dict[str, object]:
    voice = PiperVoice.load(TTSConfig(models=("piper",), device="cpu", runtime="onnx", fixed_prior=False))
    speaker = voice.voices[0]
    frames: dict[int, list[float]] = defaultdict(list)
    levels: dict[int, list[float]] = defaultdict(list)
    for text in _segments(prompts, voice.profile.sentence_chars):
        items = voice.inputs(text, speaker, 1.0)
        for item, (_, durations) in zip(items, voice.model.acoustic.run_timed(items), strict=True):
            for i, d in zip(item.ids.tolist(), durations.tolist(), strict=True):
                frames[int(i)].append(float(d))
    size = int(voice.model.config.get("num_symbols") or max(frames) + 1)
    return {**_table(frames, levels, size), "fitted_on": f"{len(prompts)} prompts, {voice.name}"}


def fit_kokoro(prompts: list[str]) -> dict[str, object]:
    voice = KokoroVoice.load(TTSConfig(models=("kokoro",), device="cpu", runtime="onnx"))
    runner, _ = voice.model.runners(1)
    frames: dict[int, list[float]] = defaultdict(list)
    levels: dict[int, list[float]] = defaultdict(list)
    lead: list[float] = []
    tail: list[float] = []
    pad_levels: list[float] = []
    for name in KOKORO_VOICES:
        ref = voice.resolve_voice(name)
        for text in _segments(prompts, voice.profile.sentence_chars):
            items = voice.inputs(text, ref, 1.0)
            out = runner.run([KokoroInput(i.ids, i.style, i.speed) for i in items])
            for item, result in zip(items, out, strict=True):
                durations = result.durations
                ends = np.concatenate(([0], np.cumsum(durations)))
                noise = result.decoder_input.noise
                energy = [float(np.mean(noise[2 * a : 2 * b])) if b > a else 0.0
                          for a, b in pairwise(ends)]
                lead.append(float(durations[0]))
                tail.append(float(durations[-1]))
                pad_levels += [energy[0], energy[-1]]
                for i, d, e in zip(item.ids.tolist(), durations[1:-1].tolist(), energy[1:-1], strict=True):
                    frames[int(i)].append(float(d))
                    levels[int(i)].append(e)
    return {
        **_table(frames, levels, max(KOKORO_VOCAB.values()) + 1),
        "lead": round(float(np.mean(lead)), 4),
        "tail": round(float(np.mean(tail)), 4),
        "pad_level": round(float(np.mean(pad_levels)), 4),
        "fitted_on": f"{len(prompts)} prompts x voices {', '.join(KOKORO_VOICES)}, speed 1",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=TABLE_FILE)
    args = parser.parse_args()
    prompts = list(BUILTIN_PROMPTS)
    tables = {"piper": fit_piper(prompts), "kokoro": fit_kokoro(prompts)}
    args.out.write_text(json.dumps(tables, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
