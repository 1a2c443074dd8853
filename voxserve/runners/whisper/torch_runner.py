"""The Whisper runner on torch: the same interface as `runners/whisper/ct2_runner.py`, on a CPU or a
GPU. Batch in, batch out.

It serves where CTranslate2 cannot (a GPU machine without CUDA 12's libraries) and lets a
CPU check the GPU path: `--asr-runtime torch`. Weights come from the same folders as the
CTranslate2 runner's (or a Hugging Face Whisper folder), converted once and cached
(`runners/whisper/weights.py`). Decoding follows CTranslate2's (`runners/whisper/search.py`)
and so does alignment (`runners/whisper/align.py`), so both runners give the same text
and times on the same weights.

On a CPU it computes in float32, eagerly. On CUDA it computes in float16, makes the
log-mel on the device (`runners/whisper/mel.py`) and replays a CUDA graph of the decoder
step per batch shape (`runners/whisper/graphs.py`); greedy decoding replays a graph of
eight whole steps at a time, the host asking only whether every row has ended; calls are serialized, because the
graphs own their buffers and the GPU runs one batch at a time anyway.

This module and its helpers are the only ones that import torch. It knows nothing of
requests, scheduling or HTTP.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import tokenizers
import torch
from torch import Tensor

from voxserve.runners.whisper.align import alignment_matrix, negative_dtw
from voxserve.runners.whisper.graphs import GreedyLoop, StepGraphs
from voxserve.runners.whisper.interface import (
    MAX_LENGTH,
    TIME_PRECISION,
    Alignment,
    AudioInput,
    DecodeInput,
    DecodeOptions,
    DecodeOutput,
    TokenizerSide,
    bundled_model,
)
from voxserve.runners.whisper.mel import TorchLogMel
from voxserve.runners.whisper.model import Cache, Whisper
from voxserve.runners.whisper.search import Hypothesis, TokenRules, beam_search, sample
from voxserve.runners.whisper.tokens import WhisperTokens
from voxserve.runners.whisper.weights import Weights, load_weights

__all__ = ["TorchWhisperRunner"]

log = logging.getLogger(__name__)


class TorchWhisperRunner(TokenizerSide[WhisperTokens]):
    """Whisper on torch behind the runner interface the engine uses (`WhisperModel`)."""
    def __init__(
        self,
        model_dir: Path | None = None,
        device: str = "cpu",
        workers: int = 1,
        name: str | None = None,
        graphs: bool = True,
        fixed_steps: bool = False,
    ):
        """`graphs`: on CUDA, replay captured decoder steps. `fixed_steps`: run the steps
        a graph captures (full-length masked attention over the static cache) eagerly,
        wherever the runner is: a CPU checks the graphs' arithmetic with it."""
        if model_dir is None:
            model_dir, default_name = bundled_model()
        else:
            default_name = model_dir.resolve().name.removesuffix(".npz")
        self.name = name or default_name
        self.model_dir = model_dir
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.dtype = torch.float16 if self.cuda else torch.float32
        weights = load_weights(model_dir)
        self.weights_meta = weights
        self.model = _build(weights, self.device, self.dtype)
        self.dims = weights.dims
        self.n_mels = weights.dims.n_mels
        multilingual = weights.dims.vocab >= 51865
        self._hf = hf = tokenizers.Tokenizer.from_str(weights.tokenizer_json.decode("utf-8"))
        super().__init__(multilingual, lambda task, language: WhisperTokens(hf, multilingual, task, language))
        self.languages: tuple[str, ...] = (
            tuple(str(self._hf.id_to_token(t))[2:-2] for t in weights.lang_ids) if self.multilingual else ("en",)
        )
        base = self.tokenizer("transcribe", None)
        self._eot, self._sot, self._no_speech = base.eot, base.sot, base.no_speech
        self._no_timestamps = base.no_timestamps
        self._suppress = tuple(weights.suppress_ids)
        self._suppress_begin = tuple(weights.suppress_ids_begin)
        self._heads = list(weights.alignment_heads)
        self._graphs = StepGraphs(self.model.decoder) if self.cuda and graphs else None
        self._fixed_steps = fixed_steps
        self._mel = TorchLogMel(self.n_mels, self.device)
        # One batch at a time on a GPU (the graphs own their buffers). On a CPU, workers
        # decode side by side, each on one intra-op thread, as the CTranslate2 replicas
        # do: on a loaded 2-core machine, two OpenMP threads per call made one clip 5x
        # slower (4.8 s against 0.86 s) while each waited for the other at every barrier.
        self._lock: contextlib.AbstractContextManager[object] = threading.Lock() if self.cuda else contextlib.nullcontext()
        if not self.cuda:
            torch.set_num_threads(1)

    # -- what the engine reads ---------------------------------------------------------
    def log_mel(self) -> TorchLogMel:
        """The features this model takes, computed on the runner's device."""
        return TorchLogMel(self.n_mels, self.device)

    # -- inference ---------------------------------------------------------------------
    def run(self, inputs: Sequence[DecodeInput], opts: DecodeOptions, threads: int = 1) -> list[DecodeOutput]:
        """Encode, (detect languages,) generate and (align) a batch that shares `opts`.
        `threads` is accepted for the engine's sake; torch's thread count is process-wide."""
        features = torch.from_numpy(np.stack([x.features for x in inputs]))
        return self.decode(features, [x.frames for x in inputs], [x.align for x in inputs], opts)

    def run_audio(self, inputs: Sequence[AudioInput], opts: DecodeOptions) -> list[DecodeOutput]:
        """`run` on raw pieces of any lengths: one upload of the batch's samples, zero-padded
        to the longest, its log-mel made on the device (`TorchLogMel.pieces`) in the
        widest piece's window, and the whole batch encoded in that window."""
        longest = max(len(x.samples) for x in inputs)
        host = np.zeros((len(inputs), max(1, longest)), dtype=np.float32)
        for row, x in zip(host, inputs, strict=True):
            row[: len(x.samples)] = x.samples
        width = max(x.window for x in inputs)
        with self._lock, torch.inference_mode():
            audio = torch.from_numpy(host).to(self.device, non_blocking=True)
            lengths = torch.tensor([len(x.samples) for x in inputs], device=self.device)
            features = self._mel.pieces(audio, lengths, width)
            encoded = self.model.encoder(features.to(self.dtype))
            return self._decode(encoded, [x.frames for x in inputs], [x.align for x in inputs], opts)

    def decode(
        self, features: Tensor, frames: Sequence[int], align: Sequence[bool], opts: DecodeOptions
    ) -> list[DecodeOutput]:
        """`run` on features [batch, n_mels, frames] already made (on any device)."""
        with self._lock, torch.inference_mode():
            audio = self.model.encoder(features.to(self.device, self.dtype))
            return self._decode(audio, frames, align, opts)

    def encode(self, features: Tensor) -> Tensor:
        """The encoder's output for features on the device (offline measurement)."""
        with self._lock, torch.inference_mode():
            audio: Tensor = self.model.encoder(features.to(self.device, self.dtype))
            return audio

    def _decode(
        self, audio: Tensor, frames: Sequence[int], align: Sequence[bool], opts: DecodeOptions
    ) -> list[DecodeOutput]:
        """Detect languages, generate and align, on encoded audio [batch, frames, width]."""
        batch = audio.shape[0]
        sots = [list(opts.sot_sequence) for _ in range(batch)]
        languages: list[str | None] = [None] * batch
        if opts.detect_language:
            for i, token in enumerate(self._detect(audio)):
                languages[i] = str(self._hf.id_to_token(token))[2:-2]
                sots[i][1] = token
        tail = [self._no_timestamps] if opts.without_timestamps else []
        prompts = [list(opts.previous) + sot + tail for sot in sots]
        sampling = opts.temperature > 0
        per_piece = opts.best_of if sampling else opts.beam_size
        hyps, no_speech = self._generate(audio, prompts, len(opts.previous), per_piece, opts)
        outputs = []
        for i, hyp in enumerate(hyps):
            outputs.append(DecodeOutput(hyp.tokens, hyp.avg_logprob, no_speech[i], languages[i], None))
        aligned: list[Alignment | None] = [None] * batch
        wanted = [i for i in range(batch) if align[i] and any(t < self._eot for t in hyps[i].tokens)]
        if wanted:
            texts = [[t for t in hyps[i].tokens if t < self._eot] for i in wanted]
            for i, found in zip(wanted, self._align(audio[wanted], [sots[i] for i in wanted], texts, [frames[i] for i in wanted]), strict=True):
                aligned[i] = found
        return [
            DecodeOutput(o.tokens, o.avg_logprob, o.no_speech_prob, o.language, al)
            for o, al in zip(outputs, aligned, strict=True)
        ]

    def _detect(self, audio: Tensor) -> list[int]:
        """Each piece's most likely language token, from the logits after `<|startoftranscript|>`."""
        decoder = self.model.decoder
        cache = decoder.new_cache(audio)
        sot = torch.full((audio.shape[0], 1), self._sot, dtype=torch.long, device=self.device)
        logits = decoder(sot, 0, cache)[:, 0].float()
        ids = torch.tensor(self.weights_meta.lang_ids, device=self.device)
        best = logits.index_select(1, ids).argmax(dim=-1)
        return [int(t) for t in ids[best].cpu()]

    def _generate(
        self, audio: Tensor, prompts: list[list[int]], sot_index: int, per_piece: int, opts: DecodeOptions
    ) -> tuple[list[Hypothesis], list[float]]:
        """The best hypothesis and the no-speech probability of each piece: the prompt but
        its last token runs at once (its logits at `<|startoftranscript|>` give the
        no-speech probability), then the search from the last token, one step at a time."""
        decoder = self.model.decoder
        rows = audio.shape[0] * per_piece
        graph = self._graphs.get(audio, rows) if self._graphs is not None else None
        cache = graph.start(audio, per_piece) if graph is not None else decoder.new_cache(audio, repeat=per_piece)
        prefix = torch.tensor([p[:-1] for p in prompts], dtype=torch.long, device=self.device)
        prefix = prefix.repeat_interleave(per_piece, dim=0)
        start = torch.tensor([p[-1] for p in prompts], dtype=torch.long, device=self.device)
        start = start.repeat_interleave(per_piece)
        length = len(prompts[0]) - 1
        no_speech: list[float] = []

        def keep_no_speech(logits: Tensor) -> None:
            probs = torch.softmax(logits[::per_piece].float(), dim=-1)[:, self._no_speech]
            no_speech.extend(float(p) for p in probs.cpu())

        first_logits: Callable[[Tensor], None] | None = keep_no_speech
        if length:
            logits = decoder(prefix, 0, cache)
            keep_no_speech(logits[:, sot_index])
            first_logits = None
        step_fn = self._step_function(cache, graph, length)
        rules = self._rules(opts)
        max_steps = min(MAX_LENGTH // 2, MAX_LENGTH - length)
        if opts.temperature > 0:
            hyps = sample(step_fn, start, per_piece, opts.temperature, max_steps, rules, first_logits=first_logits)
        elif per_piece == 1 and not rules.timestamps and (graph is not None or self._fixed_steps):
            loop = (
                graph.greedy_loop(self._eot, max_steps)
                if graph is not None
                else GreedyLoop(decoder, cache, self._eot, max_steps, capture=False)
            )
            hyps = loop.decode(lambda tokens: step_fn(tokens, 0), start, length, max_steps, rules, first_logits)
        else:
            # A beam of one (greedy) always continues its own row: nothing to reorder.
            reorder: Callable[[Tensor, int], None] = (
                (lambda rows, i: None) if per_piece == 1 else (lambda rows, i: cache.reorder(rows, length + i + 1))
            )
            hyps = beam_search(step_fn, reorder, start, per_piece, max_steps, rules, first_logits=first_logits)
        return hyps, no_speech

    def _rules(self, opts: DecodeOptions) -> TokenRules:
        """What the search may emit at each step, for this model and these options."""
        return TokenRules(
            vocab=self.dims.vocab,
            eot=self._eot,
            suppress=self._suppress,
            suppress_begin=self._suppress_begin,
            timestamps=not opts.without_timestamps,
            no_timestamps=self._no_timestamps,
            max_initial_timestamp=round(opts.max_initial_timestamp / TIME_PRECISION),
        )

    def _step_function(self, cache: Cache, graph: object, length: int) -> Callable[[Tensor, int], Tensor]:
        """The search's step: a graph replay, the fixed-shape step run eagerly, or the eager
        step that reads only the positions written so far."""
        decoder = self.model.decoder
        if graph is not None:
            from voxserve.runners.whisper.graphs import StepGraph

            assert isinstance(graph, StepGraph)
            return lambda tokens, i: graph.step(tokens, length + i)
        if self._fixed_steps:
            position = torch.zeros(1, dtype=torch.long, device=self.device)

            def fixed(tokens: Tensor, i: int) -> Tensor:
                position.fill_(length + i)
                return decoder.step(tokens[:, None], position, cache)

            return fixed
        return lambda tokens, i: decoder(tokens[:, None], length + i, cache)[:, 0]

    def _align(
        self, audio: Tensor, sots: list[list[int]], texts: list[list[int]], frames: list[int]
    ) -> Iterator[Alignment]:
        """Each text's alignment to its audio: a teacher-forced pass over
        [sot sequence, <|notimestamps|>, text, <|endoftext|>] (rows padded with end of
        text), the alignment heads' cross-attention and dynamic time warping."""
        sequences = [sot + [self._no_timestamps] + text + [self._eot] for sot, text in zip(sots, texts, strict=True)]
        longest = max(len(s) for s in sequences)
        padded = torch.tensor([s + [self._eot] * (longest - len(s)) for s in sequences], device=self.device)
        logits, scores = self.model.decoder.align(padded, audio, self._heads)
        # Each text token's probability at its position, for every row in one gather and
        # one read of the device.
        offsets = [len(sot) for sot in sots]
        at = torch.tensor([[o + i for i in range(len(t))] + [0] * (longest - len(t)) for o, t in zip(offsets, texts, strict=True)], device=self.device)
        ids = torch.tensor([t + [0] * (longest - len(t)) for t in texts], device=self.device)
        text_logits = logits[..., : self._eot].float()
        picked = text_logits.gather(1, at[..., None].expand(-1, -1, text_logits.shape[-1]))
        probs = torch.softmax(picked, dim=-1).gather(2, ids[..., None])[..., 0].cpu().numpy()
        scores_np = scores.float().cpu().numpy()
        for b, (sequence, text) in enumerate(zip(sequences, texts, strict=True)):
            offset = offsets[b]
            matrix = alignment_matrix(scores_np[b, :, : len(sequence)], frames[b] // 2)
            rows, cols = negative_dtw(matrix[offset : len(sequence) - 1])
            yield Alignment(rows, cols, [float(p) for p in probs[b, : len(text)]])


def _build(weights: Weights, device: torch.device, dtype: torch.dtype) -> Whisper:
    """The module with `weights` loaded, on `device` in `dtype`, for inference."""
    model = Whisper(weights.dims)
    state = {name: torch.from_numpy(value) for name, value in weights.tensors.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    # Linear layers without a bias in the source (none in Whisper's layout) keep zeros.
    if unexpected or any(not name.endswith(".bias") for name in missing):
        raise ValueError(f"weights do not fit the model: missing {missing}, unexpected {unexpected}")
    for name in missing:
        model.get_parameter(name).data.zero_()
    return model.to(device=device, dtype=dtype).eval()
