"""Kokoro-82M as a `VoiceModel`: `tts-1-hd` and `kokoro`, 54 voices in 9 languages.

Text goes through `voxserve.text.kokoro_g2p` in the voice's language, or the request's:
espeak-ng mapped to Kokoro's phonemes, or for Mandarin and Japanese the readers Kokoro's
own pipeline uses (`text/kokoro_zh.py`, `text/kokoro_ja.py`). Stage A is Kokoro's encoder (durations, aligned
text features, pitch and energy), run on whole sentences (`SENTENCE_CHARS`), so that
pauses and final lengthening fall where the model puts them for the sentence. Stage B,
its decoder, renders each sentence in growing windows with context (`CHUNKING`),
crossfaded at the joins (`CROSSFADE`), which are placed where the predicted energy is
lowest. Stage B skips most of a sentence's leading pad (`LEAD_FRAMES`) and its silent
tail (`TAIL_FRAMES`, sent as zeros).

Voices are Kokoro's own names (`af_heart`), OpenAI's names mapped to the closest Kokoro
voice (see `ALIASES`), or a blend written as Kokoro-FastAPI does, `af_bella(2)+af_sky(1)`:
the style rows are mixed by weight.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from voxserve.config import TTSConfig
from voxserve.engine.adapters.base import VoiceAdapter
from voxserve.engine.voices import OPENAI_VOICES, Span, Voice
from voxserve.engine.words import word_frames
from voxserve.engine.work import Latent, ModelProfile, VocoderChunking
from voxserve.errors import InvalidRequest, NotFound
from voxserve.runners.kokoro.onnx_runner import (
    HOP,
    SAMPLE_RATE,
    DecoderInput,
    KokoroFrames,
    KokoroInput,
    KokoroModel,
    VoiceInfo,
    style_row,
)
from voxserve.text.kokoro_g2p import KokoroG2P, kokoro_language, load_readers
from voxserve.text.kokoro_vocab import KOKORO_VOCAB, MAX_PHONEMES

__all__ = [
    "ALIASES",
    "CHUNKING",
    "CROSSFADE",
    "GROWTH",
    "LEAD_FRAMES",
    "SENTENCE_CHARS",
    "STEP_FRAMES",
    "TAIL_FRAMES",
    "WINDOW_BUCKETS",
    "KokoroRuntime",
    "KokoroSegment",
    "KokoroVoice",
    "speech_end",
]

NAME = "kokoro-82m-v1.0"

SENTENCE_CHARS = 300
"""Kokoro speaks each sentence whole: stage A plans its durations, pitch and energy over
all of it, as the model was trained to. Only a sentence longer than this is cut, at its
clauses: its stage A would hold a worker for over half a second before first audio, and
it nears the model's 510-phoneme context."""

CHUNKING = VocoderChunking(
    first_chunk_frames=48,
    idle_first_chunk_frames=56,
    chunk_frames=48,
    max_chunk_frames=256,
    left_context=12,
    right_context=12,
)
"""Stage B renders a sentence in windows, so that first audio does not wait for the whole
sentence's decode. The first window holds 48 frames (1.2 s of audio), or 56 for a stream
that starts alone: its first window runs on both threads, and its second, 1.25x as
large, on one beside the next sentence's stage A, so the first must hold the time that
takes. Each is decoded
with 12 frames of context either side, so a window costs up to 1.5x its audio's worth of
decoding, and one thread decodes at ~1.8x real time here: a stream with one worker to
itself keeps ahead of its player only while each window is at most what that thread
decodes while the windows before it play (`GROWTH`). The decoder normalizes over its
window, so a window is not bit-exact with the whole decode; docs/KOKORO.md gives the
distance, and why this context."""

GROWTH = 1.25
"""Each window after the second is this many times the one before: two streams on two
workers then stay continuous at up to 0.6 of real time per thread, where doubling
stalls them (tests/test_kokoro_plan.py)."""

WINDOW_BUCKETS = (60, 72, 104, 152, 224, 304)
"""Window sizes (frames, context included) a batched device decodes Kokoro's chunks in
(`ModelProfile.window_buckets`): the plan's first two windows (48 frames with one and
two contexts), then steps of about 1.45x up to the largest window, a 256-frame chunk
with a merged 23-frame tail and both contexts. Sentences end at arbitrary frames, so
most windows past the second are a sentence's rest; six sizes let streams at any point
of their plans share a step, at under half a bucket step of extra context each. The
decoder masks a span's padding, and extra real context only widens the window its
statistics are taken over."""

STEP_FRAMES = 8192
"""The most frames (windows times their bucket) one batched decoder step holds
(`ModelProfile.step_frames`): 136 windows of the first bucket, 36 of the fifth, 26 of the
largest. A step holds the device for as long as its frames take, and two steps are in
flight (`engine/tts.py: STEPS_IN_FLIGHT`), so a new stream's first window and an urgent
chunk can wait behind two whole steps: the bound keeps a step of large windows short
enough that first audio does not wait on it, and leaves steps large enough to stay
cheap per unit: a smaller bound splits the same units over more steps, each paying a
step's fixed cost. Its figures: docs/BENCHMARKS.md ("A decoder step holds at most 8192
frames")."""

CROSSFADE = HOP
"""Samples (one frame, 25 ms) over which two windows of a sentence are crossfaded: a hard
cut between two windows decoded with different statistics can click; the crossfade
keeps the join below the speech either side."""

LEAD_FRAMES = 6
"""Frames of each sentence's leading pad that stage B decodes (150 ms): the speech onset
starts about 3 frames before the pad's end, so fewer would clip it."""

TAIL_FRAMES: int | None = 14
"""Frames stage B decodes from the start of a sentence's last spoken phoneme (350 ms,
more below speed 1). The rest of the sentence (the last phoneme's lengthening, the final
punctuation, the trailing pad: ~20 frames below -70 dB) is sent as zeros of the same
length, so pauses and word timings stay. None decodes it all. The frames left out at
either end keep their weight in the decoder's normalization statistics
(`KokoroFrames.crop`)."""


class _StageA(Protocol):
    def run(self, batch: Sequence[KokoroInput]) -> list[KokoroFrames]: ...


class _StageB(Protocol):
    def run(self, batch: Sequence[DecoderInput]) -> list[np.ndarray]: ...


class KokoroRuntime(Protocol):
    """A loaded Kokoro model: `runners.kokoro.KokoroModel` (ONNX Runtime) or
    `runners.kokoro.torch_runner.TorchKokoroModel` (torch, on a CPU or a GPU). Each runner runs
    its whole batch in one call."""

    @property
    def sample_rate(self) -> int: ...

    @property
    def voices(self) -> Mapping[str, VoiceInfo]: ...

    def voice(self, name: str) -> np.ndarray: ...

    def runners(self, threads: int = 1) -> tuple[_StageA, _StageB]: ...


@dataclass(frozen=True)
class KokoroSegment:
    """A sentence's stage B input: `decoded` covers its first frames, silence the rest."""

    decoded: DecoderInput
    """Frames [0, decoded.frames) of the sentence, as stage B decodes them."""
    frames: int
    """The sentence's frames; those from `decoded.frames` on are zeros."""

    def window(self, lo: int, hi: int) -> DecoderInput | None:
        """Stage B's input for frames [lo, hi): the decoded part whole (with the weight of
        what it leaves out), a window of it, or None for a span inside the silent tail."""
        if (lo, hi) == (0, self.frames):
            return self.decoded
        if lo >= self.decoded.frames:
            return None
        return self.decoded.window(lo, hi)


def speech_end(durations: np.ndarray, words: Sequence[tuple[str, int, int]], tail: int) -> int:
    """The frame (of a segment whose tokens are `[lead, *ids, pad]`, `durations` frames
    each) `tail` frames after its last spoken phoneme starts, at most the segment's end.
    `words` are (text, first, last) ranges of ids; with none spoken, the segment's end."""
    total = int(np.sum(durations))
    spoken = [last for _, first, last in words if last > first]
    if not spoken:
        return total
    start = int(np.sum(durations[: max(spoken)]))  # token max(spoken) is ids[max(spoken) - 1]
    return min(total, start + tail)


ALIASES = {
    "alloy": "af_alloy",
    "nova": "af_nova",
    "echo": "am_echo",
    "onyx": "am_onyx",
    "fable": "bm_fable",
    # OpenAI's names with no Kokoro voice of that name: a voice of the same gender, as
    # OpenAI describes it.
    "ash": "am_adam",
    "ballad": "bm_george",
    "coral": "af_heart",
    "sage": "af_sarah",
    "shimmer": "af_sky",
    "verse": "am_michael",
    "marin": "af_jessica",
    "cedar": "am_puck",
}
"""OpenAI's voice names under `tts-1-hd`, each a Kokoro voice."""

MAX_BLEND = 8
"""Voices one blend may mix."""

_BLEND_PART = re.compile(r"([a-z]{2}_[a-z]{1,20})(?:\((\d{1,3}(?:\.\d{1,3})?)\))?")


@dataclass(frozen=True)
class KokoroVoiceRef(Voice):
    """A Kokoro voice or a blend of them: (voice, weight) pairs, weights summing to 1."""

    blend: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class KokoroItem:
    """One stage A item: phoneme ids, the style for their count, the speed."""

    ids: np.ndarray
    style: np.ndarray
    speed: float
    words: tuple[tuple[str, int, int], ...] = field(default=())
    """Each word and the range of `ids` it produced, for word timings."""


class KokoroVoice(VoiceAdapter[KokoroRuntime]):
    """A loaded Kokoro model as a `VoiceModel[KokoroItem]`."""

    MODEL_IDS = ("tts-1-hd", "kokoro")

    def __init__(self, model: KokoroRuntime, output_gain: float = 1.0):
        profile = ModelProfile(
            NAME,
            HOP,
            SAMPLE_RATE,
            CHUNKING,
            acoustic_s_per_id=2e-3,
            sentence_chars=SENTENCE_CHARS,
            chunk_growth=GROWTH,
            ramp=GROWTH,
            crossfade=CROSSFADE,
            window_buckets=WINDOW_BUCKETS,
            step_frames=STEP_FRAMES,
        )
        voices = [
            KokoroVoiceRef(v.name, NAME, None, v.language, v.gender, ((v.name, 1.0),))
            for v in model.voices.values()
        ]
        by_name = {v.name: v for v in voices}
        aliases = {alias: by_name[target] for alias, target in ALIASES.items() if target in by_name}
        assert set(aliases) == set(OPENAI_VOICES), "every OpenAI voice name needs a Kokoro voice"
        super().__init__(model, NAME, profile, output_gain, voices, aliases)
        self._by_name = by_name
        self._g2p = KokoroG2P(KOKORO_VOCAB)
        # The Mandarin and Japanese dictionaries load now, not in a first request: about
        # 2 s and 145 MB (docs/KOKORO.md). A reader that cannot load refuses its language.
        load_readers()
        self._styles: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    # -- loading (`VoiceAdapter.load` chooses the runtime) ------------------------------
    @classmethod
    def onnx_model(cls, config: TTSConfig) -> KokoroRuntime:
        return KokoroModel(cache_dir=config.cache_dir)

    @classmethod
    def torch_model(cls, config: TTSConfig, device: str) -> KokoroRuntime:
        from voxserve.runners.kokoro.torch_runner import TorchKokoroModel

        return TorchKokoroModel(device=device, dtype=config.precision, cache_dir=config.cache_dir)

    @classmethod
    def sim_model(cls, config: TTSConfig) -> KokoroRuntime:
        from voxserve.runners.kokoro.sim_runner import SimKokoroModel

        return SimKokoroModel(config.sim_graphs, speed=config.sim_speed)

    @classmethod
    def around(cls, model: KokoroRuntime, config: TTSConfig) -> KokoroVoice:
        return cls(model)

    # -- VoiceModel (the rest: `VoiceAdapter`) ------------------------------------------
    def resolve_voice(self, name: str) -> Voice:
        """A voice's own name, an OpenAI name, or a blend `a(2)+b(1)` (weights default 1)."""
        found = self._by_name.get(name) or self._aliases.get(name.lower())
        if found is not None:
            return found
        if "+" in name or "(" in name:
            return self._blend(name)
        known = ", ".join([v.name for v in self._voices] + list(self._aliases))
        raise NotFound(f"voice {name!r} does not exist for {NAME}; use one of: {known}", param="voice")

    def _blend(self, spec: str) -> KokoroVoiceRef:
        parts = spec.split("+")
        if len(parts) > MAX_BLEND or len(spec) > 400:
            raise InvalidRequest(f"a blend mixes at most {MAX_BLEND} voices", param="voice")
        weights: dict[str, float] = {}
        for part in parts:
            m = _BLEND_PART.fullmatch(part.strip())
            if m is None:
                raise InvalidRequest(
                    f"voice blend {spec[:100]!r}: write voices as name(weight) joined by '+', "
                    "for example af_bella(2)+af_sky(1)",
                    param="voice",
                )
            name, weight = m.group(1), float(m.group(2) or 1)
            if name not in self._by_name:
                raise NotFound(f"voice {name!r} in the blend does not exist for {NAME}", param="voice")
            weights[name] = weights.get(name, 0.0) + weight
        total = sum(weights.values())
        if total <= 0:
            raise InvalidRequest("a blend's weights must not all be 0", param="voice")
        first = self._by_name[next(iter(weights))]
        blend = tuple((n, w / total) for n, w in weights.items())
        return KokoroVoiceRef(spec, NAME, None, first.language, first.gender, blend)

    def with_language(self, voice: Voice, language: str) -> Voice:
        kokoro_language(language)  # 400 for a language Kokoro cannot speak here
        assert isinstance(voice, KokoroVoiceRef)
        return KokoroVoiceRef(voice.name, NAME, None, language.strip().lower(), voice.gender, voice.blend)

    def _style_rows(self, voice: KokoroVoiceRef) -> np.ndarray:
        with self._lock:
            key = "+".join(f"{n}:{w:.6f}" for n, w in voice.blend)
            rows = self._styles.get(key)
            if rows is None:
                rows = sum((w * self.model.voice(n) for n, w in voice.blend), np.zeros((1, 1), np.float32))
                rows = np.asarray(rows, dtype=np.float32)
                if len(self._styles) < 256:
                    self._styles[key] = rows
            return rows

    def inputs(self, text: str, voice: Voice, speed: float) -> list[KokoroItem]:
        assert isinstance(voice, KokoroVoiceRef)
        language = kokoro_language(voice.language or voice.name[0])
        result = self._g2p(text, language.code)
        ids = np.asarray(result.ids, dtype=np.int64)
        if not len(ids):
            return []
        rows = self._style_rows(voice)
        words = [(w.text, w.first, w.last) for w in result.words]
        items: list[KokoroItem] = []
        for lo, hi in _cuts(len(ids), [(w[1], w[2]) for w in words]):
            piece = ids[lo:hi]
            kept = tuple((t, a - lo, b - lo) for t, a, b in words if a >= lo and b <= hi)
            items.append(KokoroItem(piece, style_row(rows, len(piece)), speed, kept))
        return items

    def acoustic(self, batch: Sequence[KokoroItem], threads: int = 1) -> list[Latent]:
        """Stage A on sessions of `threads` intra-op threads; each latent starts
        `LEAD_FRAMES` before the first phoneme, and stage B will decode it up to
        `TAIL_FRAMES` after the last one's start (`KokoroSegment`). Its `level` is the
        prosody predictor's energy, so that windows join where the speech is quiet."""
        runner, _ = self.model.runners(threads)
        frames = runner.run([KokoroInput(i.ids, i.style, i.speed) for i in batch])
        latents = []
        for item, whole in zip(batch, frames, strict=True):
            f = whole.trim_lead(LEAD_FRAMES)
            stop = f.frames
            if TAIL_FRAMES is not None:  # at speed < 1 the last phoneme sounds for longer
                stop = speech_end(f.durations, item.words, math.ceil(TAIL_FRAMES / min(1.0, item.speed)))
            segment = KokoroSegment(f.crop(0, stop).decoder_input, f.frames)
            words = word_frames(item.words, f.durations[1:-1], int(f.durations[0]))
            level = np.full(f.frames, -np.inf, np.float32)  # the silent tail is quietest
            level[:stop] = f.decoder_input.noise[: 2 * stop].reshape(stop, 2).mean(axis=1)
            latents.append(Latent(segment, f.frames, f.durations[1:-1], words, level))
        return latents

    def decode(self, batch: Sequence[Span], threads: int = 1) -> list[np.ndarray]:
        """Stage B on sessions of `threads` intra-op threads; a segment's silent tail
        comes back as zeros. A window the runner returned whole is passed on as it is:
        padding would copy it (12-24 us a window on a 2-core VM) under the server's GIL."""
        _, runner = self.model.runners(threads)
        inputs: list[DecoderInput | None] = []
        for s in batch:
            segment: KokoroSegment = s.latent.features
            inputs.append(segment.window(s.lo, s.hi))
        pcm = iter(runner.run([item for item in inputs if item is not None]))
        out = []
        for s, item in zip(batch, inputs, strict=True):
            audio = next(pcm) if item is not None else np.zeros(0, np.float32)
            size = (s.hi - s.lo) * HOP
            out.append(audio if len(audio) == size else np.pad(audio, (0, size - len(audio))))
        return out


def _cuts(n: int, words: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Cut n ids into pieces of at most MAX_PHONEMES, at word ends where possible."""
    cuts: list[tuple[int, int]] = []
    lo = 0
    while n - lo > MAX_PHONEMES:
        limit = lo + MAX_PHONEMES
        ends = [b for _, b in words if lo < b <= limit]
        hi = max(ends) if ends else limit
        cuts.append((lo, hi))
        lo = hi
    cuts.append((lo, n))
    return cuts
