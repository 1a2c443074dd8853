"""Moonshine base-en on ONNX Runtime: a batch of 16 kHz pieces in, greedy transcripts with
their token log-probabilities out.

The encoder runs on each piece at its own length (pieces of one length together), since
its graph has no mask (`graphs.py`). The decoder runs the whole batch: its first step
reads each piece's frames once, on that piece alone, to make the piece's cross-attention
keys and values; these are padded to the longest piece and masked, and every later step
runs all unfinished pieces in one call. A finished piece leaves the batch, so a short
piece costs nothing once done, and batched tokens equal those of each piece run alone.

With `graphs.py`, the only Moonshine modules that import onnxruntime. Nothing here knows
of requests, scheduling or HTTP, and nothing is downloaded: the graphs and vocabulary are
the files of the `moonshine-cpp` package, whose own Python module (it loads a second
ONNX Runtime) is never imported.
"""

from __future__ import annotations

import importlib.util
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from voxserve.runners.moonshine.graphs import ENCODER_BIAS, PreparedGraphs, prepared_graphs
from voxserve.runners.moonshine.tokenizer import MoonshineTokenizer
from voxserve.runners.options import cpu_options

__all__ = [
    "MAX_SECONDS",
    "MAX_TOKENS",
    "MIN_SAMPLES",
    "SAMPLE_RATE",
    "TOKENS_PER_SECOND",
    "MoonshineOutput",
    "MoonshineRunner",
    "bundled_model_dir",
    "token_limit",
]

SAMPLE_RATE = 16000
MIN_SAMPLES = 1600
"""0.1 s: the encoder's shortest input with frames enough to read (Moonshine's own bound)."""
MAX_SECONDS = 64.0
"""Moonshine's bound on one piece; it is trained on pieces of up to ~30 s."""
TOKENS_PER_SECOND = 6.5
"""Token budget per second of audio. Fast English speech runs ~3-4 tokens a second, so a
piece that reaches the budget is looping on itself, and its decoding stops there."""
MAX_TOKENS = 194
"""The absolute cap on one piece's tokens: the budget of a 30 s piece."""
MIN_TOKEN_LIMIT = 4
"""The least budget of a piece, so that a short word in a short piece fits."""

START_TOKEN = 1
EOS_TOKEN = 2
LAYERS = 8
KV_HEADS = 8
HEAD_DIM = 52
HIDDEN = 416


@dataclass(frozen=True)
class MoonshineOutput:
    """One piece's greedy transcript."""

    tokens: list[int]
    """The chosen tokens, without the start token and the end of text."""
    logprobs: list[float]
    """Each chosen token's log-probability (log-softmax of its step's logits)."""
    text: str
    hit_limit: bool
    """Whether decoding stopped at the piece's token budget without reaching the end of
    text: the transcript may be cut short, and is usually a loop."""

    @property
    def avg_logprob(self) -> float:
        """Mean log-probability of the tokens; 0.0 for no tokens."""
        return sum(self.logprobs) / len(self.logprobs) if self.logprobs else 0.0


def bundled_model_dir() -> Path:
    """`models/base-en` of the installed `moonshine-cpp` package, found without importing
    it: importing it loads its own ONNX Runtime library."""
    spec = importlib.util.find_spec("moonshine_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the moonshine-cpp package is not installed (pip install moonshine-cpp==0.1.4)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "models" / "base-en"


def token_limit(samples: int, max_tokens: int = MAX_TOKENS) -> int:
    """The most tokens a piece of `samples` may decode to."""
    budget = math.ceil(samples / SAMPLE_RATE * TOKENS_PER_SECOND)
    return min(max_tokens, max(MIN_TOKEN_LIMIT, budget))


class _SessionSet:
    """Both graphs' sessions on one intra-op thread count."""

    def __init__(self, graphs: PreparedGraphs, threads: int):
        self.encoder = _session(graphs.encoder, threads)
        self.decoder = _session(graphs.decoder, threads)


def _session(path: Path, threads: int) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), cpu_options(threads), providers=["CPUExecutionProvider"])


class MoonshineRunner:
    """Moonshine base-en. `run` is safe to call from several threads at once: the sessions
    are shared, each call keeps its own state."""

    name = "moonshine-base-en"
    languages = ("en",)
    sample_rate = SAMPLE_RATE

    def __init__(
        self, model_dir: Path | None = None, threads: int = 1, cache_dir: Path | None = None
    ):
        """`model_dir`: the shipped files (default: `bundled_model_dir()`); `threads`: the
        intra-op threads of the sessions made now, what `run` uses by default; `cache_dir`:
        where the rewritten graphs are kept (default: the runners' cache)."""
        model_dir = model_dir or bundled_model_dir()
        self.tokenizer = MoonshineTokenizer.from_file(model_dir / "tokenizer.bin")
        self._graphs = prepared_graphs(model_dir, cache_dir)
        self._lock = threading.Lock()
        self._sessions = {threads: _SessionSet(self._graphs, threads)}
        self._default_threads = threads

    def sessions(self, threads: int | None = None) -> _SessionSet:
        """The sessions on `threads` intra-op threads, made on first use and then kept."""
        threads = threads or self._default_threads
        if threads < 1:
            raise ValueError("a session needs at least one thread")
        found = self._sessions.get(threads)
        if found is None:
            with self._lock:
                found = self._sessions.get(threads)
                if found is None:
                    found = _SessionSet(self._graphs, threads)
                    self._sessions[threads] = found
        return found

    def run(
        self, batch: Sequence[np.ndarray], threads: int | None = None, max_tokens: int = MAX_TOKENS
    ) -> list[MoonshineOutput]:
        """Transcribe each piece of `batch`: float32 mono samples at 16 kHz, 0.1-64 s each.
        `max_tokens` caps every piece's tokens on top of its budget (`token_limit`)."""
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1; got {max_tokens}")
        if not batch:
            return []
        pieces = [_checked(piece, i) for i, piece in enumerate(batch)]
        sessions = self.sessions(threads)
        frames = _encode(sessions.encoder, pieces)
        limits = [token_limit(len(p), max_tokens) for p in pieces]
        tokens, logprobs, hit = _greedy(sessions.decoder, frames, limits)
        return [
            MoonshineOutput(t, lp, self.tokenizer.decode(t), h)
            for t, lp, h in zip(tokens, logprobs, hit, strict=True)
        ]


def _checked(piece: np.ndarray, index: int) -> np.ndarray:
    if piece.ndim != 1:
        raise ValueError(f"piece {index} must be mono samples (1-D); got shape {piece.shape}")
    if not MIN_SAMPLES <= len(piece) <= MAX_SECONDS * SAMPLE_RATE:
        raise ValueError(
            f"piece {index} is {len(piece) / SAMPLE_RATE:.3f} s; Moonshine reads pieces of "
            f"{MIN_SAMPLES / SAMPLE_RATE}-{MAX_SECONDS:g} s: cut longer audio, pad shorter"
        )
    return np.ascontiguousarray(piece, dtype=np.float32)


def _encode(encoder: ort.InferenceSession, pieces: list[np.ndarray]) -> list[np.ndarray]:
    """Each piece's encoder frames [frames, HIDDEN]; pieces of one length run together."""
    out: list[np.ndarray | None] = [None] * len(pieces)
    by_length: dict[int, list[int]] = {}
    for i, piece in enumerate(pieces):
        by_length.setdefault(len(piece), []).append(i)
    for rows in by_length.values():
        hidden = encoder.run(None, {"input_values": np.stack([pieces[i] for i in rows])})[0]
        for r, i in enumerate(rows):
            out[i] = hidden[r]
    return [h for h in out if h is not None]


def _past_names() -> list[tuple[str, str]]:
    """(input, output) names of the decoder's cache, in the decoder's output order."""
    return [
        (f"past_key_values.{layer}.{part}.{kv}", f"present.{layer}.{part}.{kv}")
        for layer in range(LAYERS)
        for part in ("decoder", "encoder")
        for kv in ("key", "value")
    ]


def _log_softmax_at(logits: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """log softmax(logits)[row, chosen[row]] for each row of [rows, vocab] float32 logits."""
    top = logits.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(logits - top).sum(axis=-1)) + top[:, 0]
    picked = np.take_along_axis(logits, chosen[:, None], axis=-1)[:, 0]
    return np.asarray(picked - lse, dtype=np.float64)


def _first_step(
    decoder: ort.InferenceSession, frames: list[np.ndarray], names: list[tuple[str, str]], longest: int
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The first step, one piece at a time: every piece's logits [pieces, vocab] and the
    batch's cache by input name, the cross-attention keys and values of each piece's
    frames padded to the `longest` piece's."""
    empty = np.zeros((1, KV_HEADS, 0, HEAD_DIM), np.float32)
    first_logits = []
    caches: dict[str, list[np.ndarray]] = {out: [] for _, out in names}
    for f in frames:
        feeds = {
            "input_ids": np.full((1, 1), START_TOKEN, np.int64),
            "encoder_hidden_states": f[None],
            "use_cache_branch": np.array([False]),
            ENCODER_BIAS: np.zeros((1, len(f)), np.float32),
        }
        feeds.update({past: empty for past, _ in names})
        logits, *present = decoder.run(None, feeds)
        first_logits.append(logits[:, -1])
        for (_, out), value in zip(names, present, strict=True):
            if ".encoder." in out and value.shape[2] < longest:
                value = np.pad(value, ((0, 0), (0, 0), (0, longest - value.shape[2]), (0, 0)))
            caches[out].append(value)
    return np.concatenate(first_logits), {p: np.concatenate(caches[out]) for p, out in names}


def _greedy(
    decoder: ort.InferenceSession, frames: list[np.ndarray], limits: list[int]
) -> tuple[list[list[int]], list[list[float]], list[bool]]:
    """Greedy decoding of every piece, batched after each piece's own first step."""
    n = len(frames)
    names = _past_names()
    tokens: list[list[int]] = [[] for _ in range(n)]
    logprobs: list[list[float]] = [[] for _ in range(n)]
    hit = [False] * n
    longest = max(len(f) for f in frames)
    logits, past = _first_step(decoder, frames, names, longest)
    bias = np.zeros((n, longest), np.float32)
    for i, f in enumerate(frames):
        bias[i, len(f):] = -np.inf
    # Unread in the cached branch, but its shape must hold: frames of zeros, shared.
    hidden = np.zeros((n, longest, HIDDEN), np.float32)

    rows = np.arange(n)  # the pieces still decoding, in the batch's order
    while True:
        chosen = logits.argmax(axis=-1)
        scores = _log_softmax_at(logits, chosen)
        keep = []
        for k, (row, token) in enumerate(zip(rows.tolist(), chosen.tolist(), strict=True)):
            if token == EOS_TOKEN:
                continue
            tokens[row].append(int(token))
            logprobs[row].append(float(scores[k]))
            if len(tokens[row]) >= limits[row]:
                hit[row] = True
                continue
            keep.append(k)
        if not keep:
            return tokens, logprobs, hit
        if len(keep) < len(rows):
            index = np.array(keep)
            rows, chosen = rows[index], chosen[index]
            past = {name: value[index] for name, value in past.items()}
        feeds = {
            "input_ids": chosen[:, None].astype(np.int64),
            "encoder_hidden_states": hidden[: len(rows)],
            "use_cache_branch": np.array([True]),
            ENCODER_BIAS: bias[rows],
        }
        feeds.update(past)
        logits, *present = decoder.run(None, feeds)
        logits = logits[:, -1]
        for (p, out), value in zip(names, present, strict=True):
            if ".decoder." in out:
                past[p] = value
