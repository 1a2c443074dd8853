"""`bench offline --model kokoro`: Kokoro-82M at full load with no HTTP, its limit.

Imports the engine's pieces, as `offline` does for Piper. The work unit here is one
sentence, stage A then stage B over the whole sentence, through the same `VoiceModel`
calls the engine makes (`inputs`, `acoustic`, `decode`): the model's own limit. The
engine renders a sentence in windows with context (docs/KOKORO.md), which costs up to
1.5x that per second of audio. Two modes:
- `full`: N threads share one model with single-threaded sessions, as the engine's N
  workers do;
- `intra`: one thread on sessions with N intra-op threads, what a lone stream would get
  from the whole machine (measured only for N > 1).
Text goes through the engine's own `TTSEngine.prepare` (normalization, sentences,
G2P) before timing starts; the engine itself is never started.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from voxserve.bench.offline import OfflinePoint, run_threads
from voxserve.config import TTSConfig
from voxserve.engine.adapters.kokoro import KokoroItem, KokoroVoice
from voxserve.engine.tts import TTSEngine
from voxserve.engine.voices import Span
from voxserve.runners.kokoro.onnx_runner import KokoroModel

__all__ = ["DEFAULT_VOICE", "KOKORO_MODES", "load_kokoro_workload", "run_offline_kokoro", "speak_segment"]

KOKORO_MODES = ("full", "intra")
DEFAULT_VOICE = "af_heart"
"""Kokoro's reference voice (US English, female)."""


def load_kokoro_workload(voice: KokoroVoice, prompts: list[str], voice_name: str = DEFAULT_VOICE,
                         seed: int = 0) -> list[KokoroItem]:
    """The prompts in a seeded shuffled order, cut into the engine's segments."""
    engine = TTSEngine(TTSConfig(models=("kokoro",), workers=1), models=[voice])
    ref = voice.resolve_voice(voice_name)
    order = list(prompts)
    random.Random(seed).shuffle(order)
    items: list[KokoroItem] = []
    for text in order:
        for item in engine.prepare(text, ref).segments:
            assert isinstance(item, KokoroItem)
            items.append(item)
    return items


def speak_segment(voice: KokoroVoice, item: KokoroItem, threads: int = 1) -> int:
    """Samples of one segment: stage A, then stage B over all its frames, on sessions of
    `threads` intra-op threads."""
    latent = voice.acoustic([item], threads=threads)[0]
    if latent.frames == 0:
        return 0
    return len(voice.decode([Span(latent, 0, latent.frames)], threads=threads)[0])


def _point(voice: KokoroVoice, workload: list[KokoroItem], mode: str, threads: int,
           workers: int, seconds: float) -> OfflinePoint:
    intra = 1 if mode == "full" else threads
    samples, wall, count = run_threads(
        lambda n: speak_segment(voice, workload[n % len(workload)], intra), workers, seconds)
    return OfflinePoint(mode, threads, samples / voice.model.sample_rate, wall, count)


def run_offline_kokoro(prompts: list[str], thread_counts: list[int], seconds: float,
                       modes: tuple[str, ...] = KOKORO_MODES, voice_name: str = DEFAULT_VOICE,
                       report: Callable[[str], Any] = print) -> list[OfflinePoint]:
    """Load Kokoro (int8), warm it up, and measure every (mode, threads) point."""
    unknown = [m for m in modes if m not in KOKORO_MODES]
    if unknown:
        raise ValueError(f"Kokoro is measured on whole sentences: --mode takes {', '.join(KOKORO_MODES)} "
                         f"for it, not {', '.join(unknown)}")
    single = KokoroVoice(KokoroModel(threads=1))
    workload = load_kokoro_workload(single, prompts, voice_name)
    points = []
    for mode in modes:
        for threads in thread_counts:
            if mode == "intra" and threads == 1:
                continue  # the same as `full` with one thread
            # `intra` uses the same model's sessions of `threads` threads (made on first use).
            speak_segment(single, workload[0], 1 if mode == "full" else threads)  # first-run costs
            workers = threads if mode == "full" else 1
            point = _point(single, workload, mode, threads, workers, seconds)
            report(f"kokoro {mode:>5} threads={threads}: {point.audio_per_s:6.2f} audio-s/s "
                   f"({point.audio_s:.1f} s of audio in {point.wall_s:.2f} s, "
                   f"{point.segments} segments)")
            points.append(point)
    return points
