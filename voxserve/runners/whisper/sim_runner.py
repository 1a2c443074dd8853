"""Whisper on the simulated GPU: the torch runner's interface with the model replaced by
its H200 costs (`runners/sim/costs.py: WhisperCost`), for measuring the engine's batching
and the host's share without a GPU.

Everything around the model is real: the tokenizer (the bundled tiny.en's), the decoding
options, the segments the engine builds. A batch's log-mel, encoder and decoder steps are
device time on the process's one simulated device, waited for with the GIL released; the
Python a real runner runs between kernels (launches, replays, and the search's own share
as measured from the torch runner's search) is host time, spent holding the GIL. The text
is not a transcript: `[sim]` and then words of a plausible number and length for the
piece's duration, so that nothing downstream mistakes it for one (the benches refuse to
score it).

No torch here: the sim runs wherever the CPU package does.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tokenizers

from voxserve.runners.sim.costs import WHISPER_TINY, WhisperCost
from voxserve.runners.sim.device import SimDevice, host_work, sim_device
from voxserve.runners.whisper.interface import (
    HOP,
    N_FRAMES,
    Alignment,
    AudioInput,
    DecodeInput,
    DecodeOptions,
    DecodeOutput,
    FeatureMaker,
    TokenizerSide,
    bundled_model,
)
from voxserve.runners.whisper.tokens import WhisperTokens

__all__ = ["SIM_MARK", "SimWhisperRunner", "sim_words"]

SIM_MARK = "[sim]"
"""What every simulated transcript starts with."""
RATE = 16000
WORDS_PER_SECOND = 2.6
"""Words of read English per second of audio (about 155 a minute): how many words the
stand-in says for a piece."""
_VOCABULARY = (
    "the of and to in is was for on that with as by at from it this be are an or had "
    "which their were one all been has more when there can other new some time people "
    "about after first many years would those could should under between through during "
    "morning evening station weather garden kitchen window morning village river market "
    "history science library children journey mountain question important different "
    "together remember following building afternoon community information especially"
)
_WORDS = _VOCABULARY.split()


def sim_words(seconds: float, seed: int) -> str:
    """`[sim]` and about `WORDS_PER_SECOND` words a second, drawn from common English
    words of 2-11 letters (deterministic for a seed)."""
    count = max(1, round(seconds * WORDS_PER_SECOND))
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(_WORDS), size=count)
    return " ".join([SIM_MARK, *(_WORDS[i] for i in picks)]) + "."


class SimWhisperRunner(TokenizerSide[WhisperTokens]):
    """The simulated Whisper runner (`BatchedWhisperModel`)."""

    def __init__(
        self,
        model_dir: Path | None = None,
        device: SimDevice | None = None,
        costs: WhisperCost = WHISPER_TINY,
        graphs: bool = True,
    ):
        """`graphs`: cost the decoder steps as replayed graphs (the CUDA runner's default),
        else as eager launches."""
        bundled, bundled_name = bundled_model()
        self.model_dir = model_dir or bundled
        self.name = bundled_name if model_dir is None else model_dir.resolve().name
        with open(self.model_dir / "tokenizer.json", encoding="utf-8") as f:
            self._hf = tokenizers.Tokenizer.from_str(f.read())
        self._tok = tok = WhisperTokens(self._hf, False, "transcribe", "en")
        super().__init__(False, lambda task, language: tok)
        self.languages: tuple[str, ...] = ("en",)
        self.n_mels = 80
        self.device = device or sim_device()
        self.costs = costs
        self.graphs = graphs

    def log_mel(self) -> FeatureMaker:
        """Host features are never made on a batched device; this stands in for the
        interface's sake (zeros of the right shape)."""
        return SimLogMel(self.n_mels)

    def run(self, inputs: Sequence[DecodeInput], opts: DecodeOptions, threads: int = 1) -> list[DecodeOutput]:
        """Host features in (a warm-up's or a probe's): costed as raw pieces of their frames."""
        pieces = [
            AudioInput(np.zeros(x.frames * HOP, dtype=np.float32), x.features.shape[-1], x.align) for x in inputs
        ]
        return self.run_audio(pieces, opts)

    def run_audio(self, inputs: Sequence[AudioInput], opts: DecodeOptions) -> list[DecodeOutput]:
        """Decode a batch: its text made up front (it fixes the number of decoder steps),
        then the batch's device and host time spent as the cost model says."""
        texts = [sim_words(len(x.samples) / RATE, _seed(x.samples)) for x in inputs]
        tokens = [self._tok.encode(" " + t) for t in texts]
        rows = len(inputs) * (opts.best_of if opts.temperature > 0 else opts.beam_size)
        width = max(x.window for x in inputs)
        steps = max(len(t) for t in tokens) + 1 + len(opts.previous)
        cost = self.costs.batch(
            len(inputs), rows, width, steps, self.graphs, any(x.align for x in inputs),
            sampling=opts.temperature > 0, timestamps=not opts.without_timestamps,
        )
        # The kernels are queued at once and run while the host does its share (launches,
        # the search's bookkeeping): the call ends when both have.
        end = self.device.reserve(cost.device_s, "whisper", len(inputs))
        host_work(cost.host_s)
        self.device.wait_until(end)
        return [
            DecodeOutput(t, -0.25, 0.01, None, _diagonal(t, x.frames) if x.align else None)
            for t, x in zip(tokens, inputs, strict=True)
        ]


class SimLogMel:
    """Zeros in the features' shape: the sim's host-feature stand-in."""

    def __init__(self, n_mels: int):
        self.n_mels = n_mels

    def __call__(self, samples: np.ndarray) -> tuple[np.ndarray, int]:
        frames = max(1, min(N_FRAMES, len(samples) // HOP))
        return np.zeros((self.n_mels, N_FRAMES), dtype=np.float32), frames


def _seed(samples: np.ndarray) -> int:
    """A seed from the piece's audio, so the same clip gets the same words."""
    return zlib.crc32(np.ascontiguousarray(samples[:4000]).tobytes()) ^ len(samples)


def _diagonal(tokens: list[int], frames: int) -> Alignment:
    """Words spread evenly over the piece: the sim has no attention to align with."""
    n = len(tokens)
    times = (np.arange(n + 1) * (frames // 2) // max(1, n + 1)).astype(np.int64)
    return Alignment(np.arange(n + 1), times, [0.9] * n)

