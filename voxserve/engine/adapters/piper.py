"""Piper behind the voice-model seam (`voxserve.engine.voices.VoiceModel`).

It wraps a loaded voice, `runners.piper.PiperModel` (ONNX Runtime, the CPU default) or
`runners.piper.torch_runner.TorchPiperModel` (torch, on a CPU or a GPU: the TTS runtime
resolved to torch, `engine.devices.resolve_device`), and `text.phonemize.Phonemizer`.
Both give the same stage runners; only the chosen runtime is imported, so the ONNX path
never loads torch. Piper's particulars live here: its noise and
length scales, speaker ids, the OpenAI voice names spread over its speakers, and the
request model id it claims (`tts-1`). It reads no request and schedules nothing.

A stage A call on several threads is one the engine found alone with cores to spare: a
lone stream waiting for its first audio. Its flow (half of stage A) is then left to the
vocoder calls (`_DeferredFlow`): the first three chunks each run it over their own window,
the fourth over the rest of the segment. The first audio waits for the prior and the flow
of the first chunk's window only; the flow's work grows by the windows' context
(`FLOW_CONTEXT` frames on each side).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from voxserve.config import TTSConfig
from voxserve.engine.adapters.base import VoiceAdapter
from voxserve.engine.scheduler import IDLE_THREADS
from voxserve.engine.threads import in_native_background
from voxserve.engine.voices import OPENAI_VOICES, Span, Voice, find_voice
from voxserve.engine.words import word_frames
from voxserve.engine.work import Latent, ModelProfile, VocoderChunking, plan_chunk
from voxserve.errors import InvalidRequest
from voxserve.runners.piper.onnx_runner import (
    FLOW_CONTEXT,
    AcousticInput,
    AcousticRunner,
    PiperModel,
    Prior,
    VoiceFiles,
    bundled_voice,
)
from voxserve.runners.piper.onnx_runner import find_voice as find_voice_files
from voxserve.runners.piper.prior_graph import PRIOR_LENGTHS
from voxserve.text.phonemize import Phonemizer

if TYPE_CHECKING:
    from voxserve.runners.piper.sim_runner import SimPiperAcoustic, SimPiperModel
    from voxserve.runners.piper.torch_runner import TorchAcousticRunner, TorchPiperModel

__all__ = ["CHUNKING", "OUTPUT_GAIN", "WINDOW_BUCKETS", "PiperItem", "PiperVoice"]

CHUNKING = VocoderChunking(
    first_chunk_frames=16,
    idle_first_chunk_frames=12,
    chunk_frames=32,
    max_chunk_frames=128,
    left_context=10,
    right_context=10,
)
"""Piper's chunk plan. The first chunk is 16 frames (186 ms), so that it leaves before the
second is due; 12 for a stream that arrives alone, which leaves sooner and still gives
the second chunk time to arrive on the free cores. Chunks then
double up to 128 frames, where the context frames cost 1.16x the frames kept; 10 frames of
context on each side make the joins seamless. Figures: docs/BENCHMARKS.md."""

WINDOW_BUCKETS = (26, 52, 84, 116, 148, 164)
"""Window sizes (frames, context included) a batched device decodes Piper's chunks in
(`ModelProfile.window_buckets`): the plan's first three windows (16, 32 and 64 frames
with their context), its full 128-frame window, one between for a sentence's last
chunk, and the largest a last chunk can be (128 + 15 frames merged + 20 of context).
Piper's decoder is convolutional, so the extra context frames leave a chunk's own
samples as they were."""

OUTPUT_GAIN = 1.15
"""Fixed gain on the raw vocoder output, the same for every sentence so that a chunk can
leave at once: it keeps the bundled voice's sentence peaks below full scale."""


@dataclass(frozen=True)
class PiperItem(AcousticInput):
    """One stage A item with its words, for word timings."""

    words: tuple[tuple[str, int, int], ...] = field(default=())
    """Each word and the range of `ids` it produced."""


def _voice_files(config: TTSConfig) -> VoiceFiles:
    """The voice in `config.voice_dir`, or the bundled joe voice."""
    return find_voice_files(config.voice_dir) if config.voice_dir else bundled_voice()


def _flow_head(chunking: VocoderChunking) -> int:
    """Where the third chunk's window ends, alone or not (`plan_chunk`)."""
    big = 1 << 20
    heads = []
    for alone in (False, True):
        pos = 0
        for index in range(3):
            _, hi, _, pos = plan_chunk(big, pos, index, chunking, alone)
        heads.append(hi)
    return max(heads)


class _DeferredFlow:
    """A segment's latent whose flow has not run yet. A chunk within the segment's head
    (the first three chunks, `head` frames) runs the flow on its own window only (exact
    there, to the int16 output's rounding: `FLOW_CONTEXT` frames of window on each side),
    so the first audio waits for the first chunk's frames alone, and the early chunks,
    whose audio is due soon, never wait for the flow of frames they do not play. The
    first chunk past the head, due later, runs it once from its own start to the
    segment's end (under a lock: chunks in flight together may both ask), kept for the
    rest."""

    def __init__(self, runner: AcousticRunner | TorchAcousticRunner | SimPiperAcoustic, prior: Prior, head: int):
        self._runner = runner
        self._prior = prior
        self._head = head
        self._z: np.ndarray | None = None
        self._z_from = 0
        """The frame `_z` starts at."""
        self._lock = threading.Lock()

    def frames(self, lo: int, hi: int, threads: int) -> np.ndarray:
        """z [192, hi - lo]."""
        if hi <= self._head and hi + FLOW_CONTEXT < self._prior.frames:  # a window saves work
            return self._runner.flow(self._prior, lo, hi, threads)
        with self._lock:
            if self._z is None or lo < self._z_from:
                self._z = self._runner.flow(self._prior, lo, self._prior.frames, threads)
                self._z_from = lo
            return self._z[:, lo - self._z_from : hi - self._z_from]


class PiperVoice(VoiceAdapter["PiperModel | TorchPiperModel | SimPiperModel"]):
    """A loaded Piper voice as a `VoiceModel[PiperItem]`."""

    MODEL_IDS = ("tts-1",)

    def __init__(
        self,
        model: PiperModel | TorchPiperModel | SimPiperModel,
        chunking: VocoderChunking | None,
        output_gain: float,
        noise_scale: float | None = None,
        noise_w: float | None = None,
        name: str | None = None,
        model_ids: tuple[str, ...] | None = None,
    ):
        """`noise_scale` and `noise_w` of None use the voice's own; `name` defaults to the
        voice's (`en_US-joe-medium`), `model_ids` to `MODEL_IDS`. `chunking=None` decodes
        whole sentences."""
        name = name or model.name
        profile = ModelProfile(
            name, model.hop, model.sample_rate, chunking,
            window_buckets=WINDOW_BUCKETS if chunking is not None else (),
        )
        code = model.config.get("language", {}).get("code")
        language = code.replace("_", "-") if isinstance(code, str) else None
        voices = [Voice(s.name, name, s.speaker_id, language) for s in model.speakers]
        aliases = {alias: voices[i % len(voices)] for i, alias in enumerate(OPENAI_VOICES)}
        super().__init__(model, name, profile, output_gain, voices, aliases, model_ids)
        self.phonemizer = Phonemizer(model.config)
        self._flow_head = 0 if chunking is None else _flow_head(chunking)
        """The segment's head whose chunks run a deferred flow on their own windows: up to
        where the third chunk's window ends (see `_DeferredFlow`); 0 without chunking."""
        self._noise_scale = model.noise_scale if noise_scale is None else noise_scale
        self._noise_w = model.noise_w if noise_w is None else noise_w

    # -- loading (`VoiceAdapter.load` chooses the runtime) ------------------------------
    @classmethod
    def onnx_model(cls, config: TTSConfig) -> PiperModel:
        model = PiperModel(_voice_files(config), config.cache_dir)
        if config.fixed_prior:
            # Native work (onnxsim, ONNX Runtime) for ~1 s after start (~8 s on a fresh
            # cache): a stop in that time must not finalize the process under it.
            in_native_background(model.fixed_prior_in_background(PRIOR_LENGTHS, {1, IDLE_THREADS}))
        return model

    @classmethod
    def torch_model(cls, config: TTSConfig, device: str) -> TorchPiperModel:
        """Its weights converted from the voice's graph on first use (`runners.piper.weights`)."""
        from voxserve.runners.piper.torch_runner import TorchPiperModel

        return TorchPiperModel(_voice_files(config), device, config.cache_dir, config.precision)

    @classmethod
    def sim_model(cls, config: TTSConfig) -> SimPiperModel:
        from voxserve.runners.piper.sim_runner import SimPiperModel

        return SimPiperModel(_voice_files(config), config.sim_graphs, config.sim_speed)

    @classmethod
    def around(cls, model: PiperModel | TorchPiperModel | SimPiperModel, config: TTSConfig) -> PiperVoice:
        return cls(model, CHUNKING, OUTPUT_GAIN, config.noise_scale, config.noise_w)

    # -- VoiceModel (the rest: `VoiceAdapter`) ------------------------------------------
    def resolve_voice(self, name: str) -> Voice:
        return find_voice(name, self._voices, self._aliases)

    def with_language(self, voice: Voice, language: str) -> Voice:
        """A Piper voice speaks its own language only: `en` or `en-US` for this one."""
        own = (voice.language or "").lower()
        asked = language.strip().lower().replace("_", "-")
        if own and asked in (own, own.split("-")[0]):
            return voice
        raise InvalidRequest(
            f"voice {voice.name!r} of model {self._name} speaks {voice.language or 'one language'} "
            f"only, not {language!r}; leave language out, or use model tts-1-hd for other languages",
            param="language",
            code="unsupported_language",
        )

    def inputs(self, text: str, voice: Voice, speed: float) -> list[PiperItem]:
        length_scale = self.model.length_scale / speed
        return [
            PiperItem(s.ids, self._noise_scale, length_scale, self._noise_w, voice.speaker_id, s.words)
            for s in self.phonemizer.sentences(text)
        ]

    def acoustic(self, batch: Sequence[PiperItem], threads: int = 1) -> list[Latent]:
        """z and, from `w_ceil` (frames per id; `speed` is in its length scale), the words'
        frames. On several threads (a lone stream), the prior only: the flow is deferred
        to the vocoder calls."""
        runner = self.model.acoustic
        if threads > 1:
            return [
                Latent(_DeferredFlow(runner, prior, self._flow_head), prior.frames, durations,
                       word_frames(item.words, durations))
                for item, (prior, durations) in zip(batch, runner.run_prior(batch, threads), strict=True)
            ]
        return [
            Latent(z, int(z.shape[-1]), durations, word_frames(item.words, durations))
            for item, (z, durations) in zip(batch, runner.run_timed(batch, threads), strict=True)
        ]

    def decode(self, batch: Sequence[Span], threads: int = 1) -> list[np.ndarray]:
        spans = [self._frames(span, threads) for span in batch]
        return self.model.vocoder.run(spans, threads)

    @staticmethod
    def _frames(span: Span, threads: int) -> np.ndarray:
        features = span.latent.features
        if isinstance(features, _DeferredFlow):
            return features.frames(span.lo, span.hi, threads)
        return np.asarray(features[:, span.lo : span.hi])
