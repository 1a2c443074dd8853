"""The CUDA graph cache and what it captures, proven on the CPU.

- Batch buckets; on the CPU a call runs as it is, its host flags passed through.
- On a CUDA device (skipped elsewhere): a padded graph gives each item what it gives
  alone; a key is captured at warm-up or after a few hits; a key whose capture fails
  runs eagerly and the others keep their graphs, the caller's stream restored.
- Every step the cache captures (the Kokoro decoder, the Piper vocoder) traces whole
  under `torch.export` and runs without reading the device from the host: a `.item()`,
  a `bool()` of a tensor or a copy to the host in it fails here, as it would fail a
  capture on a GPU. Stage A of either model is not captured (its output shapes come from
  its durations) and is not checked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from voxserve.config import TTSConfig
from voxserve.engine.adapters.piper import PiperVoice
from voxserve.runners.kokoro.model import HARMONICS, Decoder, running_phase
from voxserve.runners.piper.torch_runner import TorchPiperModel
from voxserve.runners.torch_graphs import (
    BUCKETS,
    HITS_TO_CAPTURE,
    BatchGraphs,
    bucket,
    padded_width,
)

pytestmark = pytest.mark.timeout(120)

HOST_READS = {
    torch.Tensor.cpu,
    torch.Tensor.numpy,
    torch.Tensor.item,
    torch.Tensor.tolist,
    torch.Tensor.__bool__,
    torch.Tensor.__int__,
    torch.Tensor.__float__,
    torch.Tensor.__index__,
}
"""Tensor methods that make the host wait for the device (a capture fails on them)."""


class _NoHostReads(TorchFunctionMode):
    """Fails a call that reads a tensor on the host or moves one there."""

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        device = kwargs.get("device", args[1] if func is torch.Tensor.to and len(args) > 1 else None)
        if func in HOST_READS or (func is torch.Tensor.to and str(device) == "cpu"):
            raise AssertionError(f"a captured step reads the device from the host: {func.__name__}")
        return func(*args, **kwargs)


def assert_capturable(
    module: torch.nn.Module, args: tuple[torch.Tensor, ...], flags: dict[str, bool], export: bool = True
) -> torch.Tensor:
    """`module(*args, **flags)` runs with no host read and (`export`) exports as one
    graph that computes the same; its output."""
    with torch.inference_mode(), _NoHostReads():
        out = module(*args, **flags)
    if not export:
        return out  # type: ignore[no-any-return]
    exported = torch.export.export(module, args, kwargs=flags)
    assert sum(node.op == "call_function" for node in exported.graph.nodes) > 10
    with torch.inference_mode():
        again = exported.module()(*args, **flags)
    assert torch.allclose(again, out, atol=1e-5)
    return out  # type: ignore[no-any-return]


def test_a_batch_takes_the_smallest_bucket_that_holds_it() -> None:
    assert [bucket(n) for n in (1, 2, 3, 5, 37, 64, 65, 512, 1000)] == [1, 2, 4, 8, 64, 64, 128, 512, 512]
    assert list(BUCKETS) == sorted(BUCKETS)


def test_on_the_cpu_the_call_runs_unchanged_with_its_flags() -> None:
    conv = torch.nn.Conv1d(4, 2, 3, padding=1)
    calls: list[bool] = []

    def step(x: torch.Tensor, *, flip: bool) -> torch.Tensor:
        calls.append(flip)
        return conv(x.flip(2) if flip else x)  # type: ignore[no-any-return]

    graphs = BatchGraphs(step)
    x = torch.randn(3, 4, 10)
    with torch.inference_mode():
        assert torch.equal(graphs(x, flip=False), conv(x))
        assert torch.equal(graphs(x, flip=True), conv(x.flip(2)))
        assert not graphs.capture(x, flip=True)  # nothing captured off a GPU
    assert calls == [False, True] and len(graphs) == 0


def test_the_kokoro_decoder_step_holds_no_host_read() -> None:
    """Random weights at a small width: the trace, not the audio, is what counts. Steps
    of windows of mixed lengths leaving frames out (exported: it takes ~10 s) and of one
    length, as the runner's flags make them. The float32 step: a reduced precision runs
    the same operations under autocast."""
    torch.manual_seed(0)
    decoder = Decoder().eval().requires_grad_(False)
    rng = np.random.default_rng(0)
    b, width = 2, 4
    f0 = rng.uniform(80, 300, (b, 2 * width)).astype(np.float32)
    phases = running_phase(f0, np.zeros((b, HARMONICS), np.float32))
    args = (
        torch.randn(b, 512, width),
        torch.from_numpy(f0),
        torch.randn(b, 2 * width),
        torch.randn(b, 256),
        torch.from_numpy(phases),
        torch.tensor([width, width - 1]),
        torch.tensor([[0.0, 0.0], [3.0, 2.0]]),
    )
    out = assert_capturable(decoder, args, {"full": False, "edges": True})
    assert out.shape == (b, 600 * width) and not out[1, 600 * (width - 1) :].any()
    full = (*args[:5], torch.tensor([width, width]), torch.zeros(b, 2))
    assert_capturable(decoder, full, {"full": True, "edges": False}, export=False)  # a subset of the same ops


def test_the_piper_vocoder_step_holds_no_host_read() -> None:
    voice = PiperVoice.load(TTSConfig(models=("piper",), device="cpu", runtime="torch"))
    assert isinstance(voice.model, TorchPiperModel)
    voice.capture_graphs([32, 52], 128)  # warm-up's call: nothing to capture on the CPU
    assert len(voice.model.vocoder._graphs) == 0
    vits = voice.model.vocoder._device.vits
    z = torch.randn(2, vits.channels, 6)
    out = assert_capturable(vits, (z, torch.tensor([6, 4])), {"masked": True})
    assert out.shape == (2, 6 * vits.dec.hop)
    assert_capturable(vits, (z, torch.tensor([6, 6])), {"masked": False})


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
def test_a_padded_graph_gives_each_item_what_it_gives_alone() -> None:
    conv = torch.nn.Conv1d(4, 2, 3, padding=1).cuda()
    graphs = BatchGraphs(conv)
    x = torch.randn(5, 4, 10, device="cuda")
    with torch.inference_mode():
        assert graphs.capture(x) and len(graphs) == 1  # warm-up: the bucket of 8
        out = graphs(x)
        assert out.shape == (5, 2, 10) and torch.allclose(out, conv(x), atol=1e-5)
        for _ in range(HITS_TO_CAPTURE - 1):  # the bucket of 4: eager until seen often enough
            assert torch.allclose(graphs(x[:3]), conv(x[:3]), atol=1e-5)
            assert len(graphs) == 1
        assert torch.allclose(graphs(x[:3]), conv(x[:3]), atol=1e-5)
    assert len(graphs) == 2


@cuda
def test_a_key_that_cannot_be_captured_runs_eagerly_and_the_others_keep_their_graphs() -> None:
    conv = torch.nn.Conv1d(4, 2, 3, padding=1).cuda()

    def step(x: torch.Tensor, *, sync: bool) -> torch.Tensor:
        y: torch.Tensor = conv(x)
        return y * float(y.sum()) if sync else y  # float(): a host read, which a capture refuses

    graphs = BatchGraphs(step)
    x = torch.randn(4, 4, 10, device="cuda")
    stream = torch.cuda.current_stream()
    with torch.inference_mode():
        assert not graphs.capture(x, sync=True)
        assert torch.cuda.current_stream() == stream
        expected = conv(x)
        assert torch.allclose(graphs(x, sync=True), expected * float(expected.sum()), rtol=1e-4)
        assert graphs.capture(x, sync=False) and len(graphs) == 1
        assert torch.allclose(graphs(x, sync=False), expected, atol=1e-5)


def test_a_step_pads_its_windows_up_to_the_smallest_captured_width() -> None:
    assert padded_width(40, (26, 52, 84)) == 52
    assert padded_width(52, (26, 52, 84)) == 52
    assert padded_width(90, (26, 52, 84)) == 90
    assert padded_width(17, ()) == 17
