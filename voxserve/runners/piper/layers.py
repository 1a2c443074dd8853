"""Building blocks shared by Piper's torch modules (`runners/piper/prior.py`,
`runners/piper/model.py`): convolutions shaped from their converted weights and ONNX
nodes, parameters to be assigned, and VITS's channel layer norm.

Modules are made on the meta device: `piper_model.build` assigns the converted weights,
so no memory is filled twice and no random initialization runs. No I/O here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from voxserve.runners.piper.weights import PiperWeights

__all__ = ["LAYER_NORM_EPS", "ChannelNorm", "conv_from", "count", "indices", "parameter"]

LAYER_NORM_EPS = 1e-5


def conv_from(weights: PiperWeights, name: str) -> nn.Module:
    """The convolution `name` with its shape from its weight and the rest from its node,
    on the meta device (`build` assigns the weights)."""
    weight = weights.tensors[f"{name}.weight"]
    spec = weights.convs[name]
    bias = f"{name}.bias" in weights.tensors
    kernel = int(weight.shape[-1])
    if spec.transposed:
        return nn.ConvTranspose1d(
            int(weight.shape[0]), int(weight.shape[1]) * spec.groups, kernel, spec.stride, spec.padding,
            groups=spec.groups, bias=bias, dilation=spec.dilation, device="meta",
        )
    return nn.Conv1d(
        int(weight.shape[1]) * spec.groups, int(weight.shape[0]), kernel, spec.stride, spec.padding,
        dilation=spec.dilation, groups=spec.groups, bias=bias, device="meta",
    )


def parameter(weights: PiperWeights, name: str) -> nn.Parameter:
    return nn.Parameter(torch.empty(weights.tensors[name].shape, device="meta"), requires_grad=False)


def count(weights: PiperWeights, prefix: str, suffix: str) -> int:
    """How many consecutive `prefix{i}suffix` tensors there are."""
    n = 0
    while f"{prefix}{n}{suffix}" in weights.tensors:
        n += 1
    return n


def indices(weights: PiperWeights, prefix: str, suffix: str) -> list[int]:
    """The i of every `prefix{i}suffix` tensor, highest first (the order flows reverse in)."""
    found = set()
    for name in weights.tensors:
        if name.startswith(prefix) and name.endswith(suffix):
            middle = name[len(prefix) : len(name) - len(suffix)]
            if middle.isdigit():
                found.add(int(middle))
    return sorted(found, reverse=True)


class ChannelNorm(nn.Module):
    """Layer norm over the channels of [B, C, T]."""

    def __init__(self, weights: PiperWeights, name: str):
        super().__init__()
        self.gamma = parameter(weights, f"{name}.gamma")
        self.beta = parameter(weights, f"{name}.beta")

    def forward(self, x: Tensor) -> Tensor:
        y = F.layer_norm(x.transpose(1, 2), (x.shape[1],), self.gamma, self.beta, LAYER_NORM_EPS)
        return y.transpose(1, 2)
