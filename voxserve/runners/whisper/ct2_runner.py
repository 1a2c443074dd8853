"""The Whisper runner: one CTranslate2 model, one call on a batch. Batch in, batch out.

This is the only ASR module that imports ctranslate2. It knows the model's own details
(multilingual or not, its mel size, its tokenizer, how a language token sits in the
prompt) and nothing of requests, scheduling or HTTP. `inter_threads` replicas with one
intra-op thread each let that many Python threads decode at once: CTranslate2 releases
the GIL, and several single-threaded replicas beat one multi-threaded one on this CPU.
A call may ask for more intra-op threads (`run(..., threads=N)`, for a piece that runs
alone while cores idle): that uses a separate replica with N threads, loaded on first
use and then kept. The caller decides when; this module only holds the replicas.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import ctranslate2
import numpy as np
import tokenizers
from faster_whisper.tokenizer import _LANGUAGE_CODES, Tokenizer

from voxserve.audio.mel import LogMel
from voxserve.runners.whisper.interface import (
    MAX_LENGTH,
    TIME_PRECISION,
    Alignment,
    DecodeInput,
    DecodeOptions,
    DecodeOutput,
    TokenizerSide,
    bundled_model,
)

__all__ = [
    "Alignment",
    "DecodeInput",
    "DecodeOptions",
    "DecodeOutput",
    "WhisperRunner",
    "bundled_model",
]

log = logging.getLogger(__name__)


class WhisperRunner(TokenizerSide[Tokenizer]):
    def __init__(
        self,
        model_dir: Path | None = None,
        compute_type: str = "int8",
        workers: int = 1,
        name: str | None = None,
    ):
        if model_dir is None:
            model_dir, default_name = bundled_model()
        else:
            default_name = model_dir.resolve().name
        if not (model_dir / "model.bin").is_file():
            raise FileNotFoundError(f"{model_dir} is not a CTranslate2 Whisper folder (no model.bin)")
        self.name = name or default_name
        self.model_dir = model_dir
        self.compute_type = compute_type
        self.model = self._load(intra_threads=1, inter_threads=workers)
        self._wide: dict[int, ctranslate2.models.Whisper] = {}
        """Replicas with several intra-op threads, by thread count (one replica each)."""
        self._wide_lock = threading.Lock()
        multilingual: bool = self.model.is_multilingual
        self.n_mels: int = self.model.n_mels
        self._hf = hf = _load_tokenizer(model_dir)
        # faster-whisper's tokenizer helper, for each task and language
        super().__init__(
            multilingual, lambda task, language: Tokenizer(hf, multilingual, task=task, language=language or "en")
        )
        self.languages: tuple[str, ...] = tuple(_LANGUAGE_CODES) if self.multilingual else ("en",)
        self._eot = self._token_id("<|endoftext|>")
        self._no_timestamps = self._token_id("<|notimestamps|>")

    def _load(self, intra_threads: int, inter_threads: int) -> ctranslate2.models.Whisper:
        return ctranslate2.models.Whisper(
            str(self.model_dir),
            device="cpu",
            compute_type=self.compute_type,
            intra_threads=intra_threads,
            inter_threads=inter_threads,
        )

    def replica(self, threads: int = 1) -> ctranslate2.models.Whisper:
        """The model to run a call on `threads` intra-op threads. Loading one with more
        than one thread reads the weights again (tiny.en int8: ~40 MB more) and starts its
        threads from the calling thread, so they inherit its priority."""
        if threads <= 1:
            return self.model
        with self._wide_lock:
            model = self._wide.get(threads)
            if model is None:
                model = self._wide[threads] = self._load(intra_threads=threads, inter_threads=1)
            return model

    def _token_id(self, token: str) -> int:
        found = self._hf.token_to_id(token)
        if found is None:
            raise ValueError(f"{self.model_dir}: tokenizer.json has no {token} token")
        return int(found)

    def log_mel(self) -> LogMel:
        """The features this model takes, computed in numpy (faster-whisper's extractor)."""
        return LogMel(self.n_mels)

    # -- inference ---------------------------------------------------------------------
    def run(self, inputs: Sequence[DecodeInput], opts: DecodeOptions, threads: int = 1) -> list[DecodeOutput]:
        """Encode, (detect languages,) generate and (align) a batch that shares `opts`, on
        `threads` intra-op threads (1: one of the single-threaded replicas)."""
        model = self.replica(threads)
        batch = np.stack([x.features for x in inputs])
        encoded = model.encode(ctranslate2.StorageView.from_array(batch), to_cpu=False)
        sots = [list(opts.sot_sequence) for _ in inputs]
        languages: list[str | None] = [None] * len(inputs)
        if opts.detect_language:
            for i, found in enumerate(model.detect_language(encoded)):
                token = found[0][0]  # like "<|de|>"
                languages[i] = token[2:-2]
                sots[i][1] = self._token_id(token)
        tail = [self._no_timestamps] if opts.without_timestamps else []
        prompts = [list(opts.previous) + sot + tail for sot in sots]
        outputs = self._generate(model, encoded, prompts, opts)
        texts = [[t for t in o.tokens if t < self._eot] for o in outputs]
        aligned: list[Alignment | None] = [None] * len(inputs)
        if any(x.align for x in inputs):
            wanted = [t if x.align else [] for t, x in zip(texts, inputs, strict=True)]
            aligned = self._align(model, encoded, sots, wanted, [x.frames for x in inputs])
        return [
            DecodeOutput(o.tokens, o.avg_logprob, o.no_speech_prob, lang, al)
            for o, lang, al in zip(outputs, languages, aligned, strict=True)
        ]

    def _generate(
        self,
        model: ctranslate2.models.Whisper,
        encoded: ctranslate2.StorageView,
        prompts: list[list[int]],
        opts: DecodeOptions,
    ) -> list[DecodeOutput]:
        """Each piece's tokens (end of text left out), average log-probability and
        no-speech probability: a beam search, or sampling at a temperature above 0."""
        if opts.temperature > 0:
            sampling = {
                "beam_size": 1,
                "num_hypotheses": opts.best_of,
                "sampling_topk": 0,
                "sampling_temperature": opts.temperature,
            }
        else:
            sampling = {"beam_size": opts.beam_size}
        results = model.generate(
            encoded,
            prompts,
            max_length=MAX_LENGTH,
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
            suppress_tokens=[-1],  # the model's own list, from its config.json
            max_initial_timestamp_index=round(opts.max_initial_timestamp / TIME_PRECISION),
            **sampling,
        )
        outputs: list[DecodeOutput] = []
        for result in results:
            tokens = [t for t in result.sequences_ids[0] if t != self._eot]
            # CTranslate2 returns the length-normalised score; recover the average log prob.
            avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
            outputs.append(DecodeOutput(tokens, avg_logprob, result.no_speech_prob, None, None))
        return outputs

    def _align(
        self,
        model: ctranslate2.models.Whisper,
        encoded: ctranslate2.StorageView,
        sots: list[list[int]],
        texts: list[list[int]],
        frames: list[int],
    ) -> list[Alignment | None]:
        out: list[Alignment | None] = [None] * len(texts)
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, start in enumerate(sots):
            if texts[i]:
                groups.setdefault(tuple(start), []).append(i)
        whole = len(groups) == 1 and sum(len(g) for g in groups.values()) == len(texts)
        array = np.asarray(encoded) if not whole else np.zeros(0)
        for start_sequence, idx in groups.items():
            enc = encoded if whole else ctranslate2.StorageView.from_array(np.ascontiguousarray(array[idx]))
            results = model.align(
                enc,
                list(start_sequence),
                [texts[i] for i in idx],
                [frames[i] for i in idx],
                median_filter_width=7,
            )
            for i, res in zip(idx, results, strict=True):
                pairs = np.asarray(res.alignments, dtype=np.int64).reshape(-1, 2)
                out[i] = Alignment(pairs[:, 0], pairs[:, 1], list(res.text_token_probs))
        return out


def _load_tokenizer(model_dir: Path) -> tokenizers.Tokenizer:
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{model_dir} has no tokenizer.json; copy it from the original model")
    return tokenizers.Tokenizer.from_file(str(path))

