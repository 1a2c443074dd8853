"""CUDA graphs of the Whisper decoder's step, one per batch shape.

A decode step of a small Whisper is bound by kernel launches, not arithmetic: replaying
a captured graph launches them all at once. A graph replays fixed buffers, so each shape
(rows, audio frames) gets its own static cache, token and position tensors, captured on
first use and kept; exact shapes are captured, never padded to a larger one, so a piece's
result does not depend on the batch it shares. Only CUDA uses this module.
"""

from __future__ import annotations

import threading

import torch
from torch import Tensor

from voxserve.runners.whisper.model import Cache, Decoder

__all__ = ["StepGraph", "StepGraphs"]

MAX_GRAPHS = 48
"""Shapes kept at once (batch sizes times window widths); past it the oldest goes. One
graph of 640 rows (128 pieces x 5 beams) holds about 7 GB of tiny.en caches."""


class StepGraph:
    """One captured step: copy the batch's state in, then `step` replays."""

    def __init__(self, decoder: Decoder, audio: Tensor, rows: int):
        self.decoder = decoder
        self.cache = decoder.new_cache(audio[:1].expand(rows, -1, -1).contiguous())
        self.tokens = torch.zeros(rows, dtype=torch.long, device=audio.device)
        self.position = torch.zeros(1, dtype=torch.long, device=audio.device)
        self.graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up: kernels choose their algorithms outside the graph
                decoder.step(self.tokens[:, None], self.position, self.cache)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(self.graph):
            self.logits = decoder.step(self.tokens[:, None], self.position, self.cache)

    def start(self, audio: Tensor, repeat: int) -> Cache:
        """Take `audio`'s keys and values (each piece's row repeated `repeat` times);
        returns the graph's cache, on which the caller runs the prompt (eager) and then
        the steps."""
        self.decoder.fill_audio(self.cache, audio, repeat)
        return self.cache

    def step(self, tokens: Tensor, position: int) -> Tensor:
        """Logits of `tokens` at `position`: the inputs copied in, the graph replayed; the
        result is the graph's own buffer, valid until the next replay."""
        self.tokens.copy_(tokens)
        self.position.fill_(position)
        self.graph.replay()
        return self.logits


class StepGraphs:
    """Graphs by (rows, audio frames), captured on first use."""

    def __init__(self, decoder: Decoder):
        self.decoder = decoder
        self._graphs: dict[tuple[int, int], StepGraph] = {}
        self._lock = threading.Lock()

    def get(self, audio: Tensor, rows: int) -> StepGraph:
        """The graph for `rows` over `audio`'s frame count, captured now if new."""
        key = (rows, audio.shape[1])
        with self._lock:
            graph = self._graphs.pop(key, None)
            if graph is None:
                if len(self._graphs) >= MAX_GRAPHS:
                    self._graphs.pop(next(iter(self._graphs)))
                graph = StepGraph(self.decoder, audio, rows)
            self._graphs[key] = graph  # most recently used last
            return graph
