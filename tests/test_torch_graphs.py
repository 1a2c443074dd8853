"""Batch buckets of the CUDA graph cache; on the CPU the call runs as it is."""

from __future__ import annotations

import pytest
import torch

from voxserve.runners.torch_graphs import BUCKETS, BatchGraphs, bucket


def test_a_batch_takes_the_smallest_bucket_that_holds_it() -> None:
    assert [bucket(n) for n in (1, 2, 3, 5, 37, 64, 65, 512, 1000)] == [1, 2, 4, 8, 64, 64, 128, 512, 512]
    assert list(BUCKETS) == sorted(BUCKETS)


def test_on_the_cpu_the_call_runs_unchanged() -> None:
    conv = torch.nn.Conv1d(4, 2, 3, padding=1)
    graphs = BatchGraphs(conv)
    x = torch.randn(3, 4, 10)
    with torch.inference_mode():
        assert torch.equal(graphs(x), conv(x))
    assert len(graphs) == 0  # nothing captured off a GPU


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_padded_graph_gives_each_item_what_it_gives_alone() -> None:
    conv = torch.nn.Conv1d(4, 2, 3, padding=1).cuda()
    graphs = BatchGraphs(conv)
    x = torch.randn(5, 4, 10, device="cuda")
    with torch.inference_mode():
        out = graphs(x)  # the bucket of 8: three padding rows
        assert out.shape == (5, 2, 10) and len(graphs) == 1
        assert torch.allclose(out, conv(x), atol=1e-5)
        assert torch.allclose(graphs(x[:3]), conv(x[:3]), atol=1e-5)  # the bucket of 4
    assert len(graphs) == 2
