"""CUDA graphs for a batched call at fixed shapes: one per (batch bucket, item shape).

A TTS step on a GPU is bound by kernel launches while its batch is small (a Piper
vocoder chunk: 2.3 ms eager, 0.43 ms replayed from a graph). A graph replays fixed
buffers, so each input shape gets its own, captured on first use and kept. The batch is
padded up to a power of two (`bucket`), so that a step of 37 chunks and one of 40 share a
graph; the padding rows are copies of the first item, and every item's output depends
only on its own input. The item's own shape (a window's frames) is never padded: the
scheduler hands a batched device windows of the plan's exact sizes, and padding a window
in time would change its audio. On the CPU the call runs as it is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

__all__ = ["BUCKETS", "BatchGraphs", "bucket"]

log = logging.getLogger(__name__)

BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
"""Batch sizes graphs are captured at; a larger batch runs in steps of the largest."""

MAX_GRAPHS = 96
"""Graphs kept at once (buckets times window sizes); past it the least recently used goes."""


def bucket(n: int) -> int:
    """The smallest bucket that holds `n` items (the largest bucket for more)."""
    for size in BUCKETS:
        if size >= n:
            return size
    return BUCKETS[-1]


class _Graph:
    def __init__(self, fn: Callable[..., Tensor], inputs: tuple[Tensor, ...], pool: Any):
        self.inputs = tuple(t.clone() for t in inputs)
        self.graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up: kernels choose their algorithms outside the graph
                fn(*self.inputs)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(self.graph, pool=pool):
            self.output = fn(*self.inputs)

    def run(self, inputs: tuple[Tensor, ...]) -> Tensor:
        n = inputs[0].shape[0]
        for static, given in zip(self.inputs, inputs, strict=True):
            static[:n].copy_(given)
            if n < static.shape[0]:
                static[n:].copy_(given[:1].expand_as(static[n:]))
        self.graph.replay()
        return self.output[:n].clone()


class BatchGraphs:
    """`fn(*inputs)`, each input [B, ...] and the output [B, ...], replayed from CUDA graphs
    on a CUDA device (captured per bucket and item shapes on first use), called as it is
    elsewhere. One call at a time replays: a graph's buffers are shared."""

    def __init__(self, fn: Callable[..., Tensor], enabled: bool = True):
        self.fn = fn
        self.enabled = enabled
        self._graphs: dict[tuple[object, ...], _Graph] = {}
        self._lock = threading.Lock()
        self._pool: Any = None

    def __call__(self, *inputs: Tensor) -> Tensor:
        if not self.enabled or inputs[0].device.type != "cuda":
            return self.fn(*inputs)
        n = inputs[0].shape[0]
        largest = BUCKETS[-1]
        if n > largest:
            return torch.cat([self(*(t[i : i + largest] for t in inputs)) for i in range(0, n, largest)])
        size = bucket(n)
        key = (size, *((tuple(t.shape[1:]), t.dtype) for t in inputs))
        with self._lock:
            graph = self._graphs.pop(key, None)
            if graph is None:
                if len(self._graphs) >= MAX_GRAPHS:
                    self._graphs.pop(next(iter(self._graphs)))
                if self._pool is None:
                    self._pool = torch.cuda.graph_pool_handle()
                padded = tuple(torch.cat([t, t[:1].expand(size - n, *t.shape[1:])]) for t in inputs)
                try:
                    graph = _Graph(self.fn, padded, self._pool)
                except RuntimeError as exc:  # the call cannot be captured (a host sync in it)
                    log.warning("running %s eagerly: CUDA graph capture failed: %s", self.fn, exc)
                    self.enabled = False
                    return self.fn(*inputs)
            self._graphs[key] = graph  # most recently used last
            return graph.run(inputs)

    def __len__(self) -> int:
        return len(self._graphs)
