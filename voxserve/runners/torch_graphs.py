"""CUDA graphs for a batched call at fixed shapes: one per key (batch bucket, item shapes,
the call's host-decided flags).

A TTS step on a GPU is bound by kernel launches while its batch is small: eager, the host
launches its many small kernels one by one, and a graph launches them as one. A graph
replays fixed buffers, so each key gets its own. The batch is padded up to a power of two
(`bucket`), so that a step of 37 windows and one of 40 share a graph; the padding rows are copies of
the first item, and every item's output depends only on its own input. The item's own
shape (a window's frames) is what the caller gives: the scheduler hands a batched device
windows of a few bucketed sizes, and the decoders mask what lies past each item's end.

How a capture is kept safe:
- keys are captured at warm-up (`capture`), or in traffic only once a key has been seen
  `HITS_TO_CAPTURE` times, and at most `MAX_GRAPHS` are kept: rare shapes run eagerly;
- every capture holds `DEVICE_LOCK` (one for the process: a capture must not overlap
  another thread's allocation or sync on the device) and runs in thread-local error
  mode, on this cache's own side stream, so that another thread's work is neither
  recorded nor broken by it;
- a capture that fails restores the caller's stream, marks its key eager and nothing
  else: other keys keep their graphs.

On the CPU the call runs as it is.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Hashable
from typing import Any

import torch
from torch import Tensor

__all__ = ["BUCKETS", "DEVICE_LOCK", "HITS_TO_CAPTURE", "MAX_GRAPHS", "BatchGraphs", "bucket", "padded_width"]

log = logging.getLogger(__name__)

BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
"""Batch sizes graphs are captured at; a larger batch runs in steps of the largest."""

MAX_GRAPHS = 96
"""Graphs one cache keeps (window buckets times batch buckets times flags); past it the
least recently used goes."""

HITS_TO_CAPTURE = 3
"""Calls of a key not captured at warm-up before it is captured in traffic: a shape seen
once or twice runs eagerly instead of costing two eager runs and a capture."""

DEVICE_LOCK = threading.RLock()
"""Held by every capture (of every model's cache) and by the calls of runners that share
the device with one: a capture must not see another thread allocate or sync."""


def padded_width(frames: int, widths: tuple[int, ...]) -> int:
    """The width a call of windows up to `frames` long runs at: the smallest of `widths`
    (ascending; the window sizes captured at warm-up) that holds them, so that a step
    whose windows all fell short of their bucket (windows at sentence ends) still replays
    a graph; `frames` itself when none does. The runners mask what lies past each
    window's end, so the padding changes no window's audio."""
    for width in widths:
        if width >= frames:
            return width
    return frames


def bucket(n: int) -> int:
    """The smallest bucket that holds `n` items (the largest bucket for more)."""
    for size in BUCKETS:
        if size >= n:
            return size
    return BUCKETS[-1]


class _Graph:
    """One captured call: its static inputs, its graph and its static output."""

    def __init__(self, fn: Callable[..., Tensor], inputs: tuple[Tensor, ...], pool: Any, stream: Any):
        self.inputs = tuple(t.clone() for t in inputs)
        self.graph = torch.cuda.CUDAGraph()
        caller = torch.cuda.current_stream()
        stream.wait_stream(caller)
        try:
            with torch.cuda.stream(stream):
                for _ in range(2):  # warm-up: kernels choose their algorithms outside the graph
                    fn(*self.inputs)
            caller.wait_stream(stream)
            with torch.cuda.graph(self.graph, pool=pool, stream=stream, capture_error_mode="thread_local"):
                self.output = fn(*self.inputs)
        finally:
            # torch.cuda.graph ends the capture before it gives the stream back: after a
            # failed capture the thread could be left on the side stream
            torch.cuda.set_stream(caller)

    def run(self, inputs: tuple[Tensor, ...]) -> Tensor:
        n = inputs[0].shape[0]
        for static, given in zip(self.inputs, inputs, strict=True):
            static[:n].copy_(given)
            if n < static.shape[0]:
                static[n:].copy_(given[:1].expand_as(static[n:]))
        self.graph.replay()
        return self.output[:n].clone()


class BatchGraphs:
    """`fn(*inputs, **flags)`, each input [B, ...] and the output [B, ...], replayed from
    CUDA graphs on a CUDA device, called as it is elsewhere. `flags` are host values
    (bools, ints) the call's control flow depends on: part of the key, never read from
    the device. One call at a time replays: a graph's buffers are shared."""

    def __init__(self, fn: Callable[..., Tensor], enabled: bool = True):
        self.fn = fn
        self.enabled = enabled
        self._graphs: dict[Hashable, _Graph] = {}
        self._eager: set[Hashable] = set()
        """Keys whose capture failed: they run eagerly from then on, the others do not."""
        self._hits: Counter[Hashable] = Counter()
        self._lock = threading.Lock()
        self._pool: Any = None
        self._stream: Any = None

    @staticmethod
    def key(size: int, inputs: tuple[Tensor, ...], flags: dict[str, Hashable]) -> Hashable:
        """What a graph is captured for: the bucket, each input's item shape and dtype, the flags."""
        return (size, *((tuple(t.shape[1:]), t.dtype) for t in inputs), tuple(sorted(flags.items())))

    def __call__(self, *inputs: Tensor, **flags: Hashable) -> Tensor:
        call = self._call(flags)
        if not self.enabled or inputs[0].device.type != "cuda":
            return call(*inputs)
        n = inputs[0].shape[0]
        largest = BUCKETS[-1]
        if n > largest:
            return torch.cat([self(*(t[i : i + largest] for t in inputs), **flags) for i in range(0, n, largest)])
        size = bucket(n)
        key = self.key(size, inputs, flags)
        with self._lock:
            graph = self._graphs.pop(key, None)
            if graph is None:
                if len(self._hits) >= 4 * MAX_GRAPHS:  # many rare shapes: start counting again
                    self._hits.clear()
                self._hits[key] += 1
                if key in self._eager or self._hits[key] < HITS_TO_CAPTURE:
                    return call(*inputs)
                graph = self._capture(key, size, inputs, call)
                if graph is None:
                    return call(*inputs)
            self._graphs[key] = graph  # most recently used last
            return graph.run(inputs)

    def capture(self, *inputs: Tensor, **flags: Hashable) -> bool:
        """Capture the key of `inputs` (padded to its bucket) now, as warm-up does; whether
        a graph is kept for it. On the CPU nothing is captured."""
        if not self.enabled or inputs[0].device.type != "cuda":
            return False
        size = bucket(inputs[0].shape[0])
        key = self.key(size, inputs, flags)
        with self._lock:
            if key not in self._graphs:
                graph = self._capture(key, size, inputs, self._call(flags))
                if graph is None:
                    return False
                self._graphs[key] = graph
            return True

    def _call(self, flags: dict[str, Hashable]) -> Callable[..., Tensor]:
        if not flags:
            return self.fn
        return lambda *inputs: self.fn(*inputs, **flags)

    def _capture(
        self, key: Hashable, size: int, inputs: tuple[Tensor, ...], call: Callable[..., Tensor]
    ) -> _Graph | None:
        """A graph for `key`, or None (the key then runs eagerly for good). Holds this
        cache's lock; takes the device's."""
        n = inputs[0].shape[0]
        padded = tuple(torch.cat([t, t[:1].expand(size - n, *t.shape[1:])]) for t in inputs)
        with DEVICE_LOCK:
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
                self._stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
            try:
                graph = _Graph(call, padded, self._pool, self._stream)
            except RuntimeError as exc:  # a host sync in the call, or out of memory
                log.warning("running %s eagerly for %s: CUDA graph capture failed: %s", self.fn, key, exc)
                self._eager.add(key)
                self._hits.pop(key, None)
                return None
        while len(self._graphs) >= MAX_GRAPHS:
            self._graphs.pop(next(iter(self._graphs)))
        self._hits.pop(key, None)
        return graph

    def __len__(self) -> int:
        return len(self._graphs)
