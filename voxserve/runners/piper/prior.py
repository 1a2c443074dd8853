"""Piper's prior on torch: the text encoder and the stochastic duration predictor.

- `TextEncoder` (`enc_p`): phoneme embedding times sqrt(width), then transformer layers
  of 1x1-convolution multi-head attention with relative position embeddings (a window of
  +-w positions, keys and values), each followed by a channel layer norm of the residual
  sum, and a feed-forward of two convolutions ("same" padding, ReLU between); a 1x1
  projection gives the prior's mean m and log-scale logs.
- `DurationPredictor` (`dp`): VITS's stochastic duration predictor, reversed. A stack of
  dilated depthwise-separable convolutions (`_DDSConv`) conditions spline flows that turn
  noise (2 channels per phoneme) into log-durations: flip, a rational-quadratic spline
  coupling (`_SplineFlow`, linear tails), repeated, then an elementwise affine.

Written from the architecture the voice's ONNX graph shows; every input is masked, so
padded phonemes never reach an item's output. No I/O and no noise policy: the noise is
an argument.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from voxserve.runners.piper.layers import ChannelNorm, conv_from, count, indices, parameter
from voxserve.runners.piper.weights import PiperWeights

__all__ = ["DurationPredictor", "TextEncoder", "inverse_spline"]

MIN_BIN = 1e-3
"""The splines' smallest bin width, bin height and knot derivative."""
SEARCH_EPS = 1e-6
"""Added to the last knot when searching an input's bin, so that the tail bound itself
falls in the last bin."""


def _offsets(t: int, window: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """For query i and key j (both < t): the position of offset j - i among the 2w + 1
    relative embeddings (j - i + w, clamped for a gather), and whether it is one."""
    index = torch.arange(t, device=device)[None, :] - torch.arange(t, device=device)[:, None] + window
    return index.clamp(0, 2 * window), (index >= 0) & (index <= 2 * window)


def _keys(t: int, span: int, window: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """For query i and relative offset r - w (r < span): the key i + r - w (clamped for
    a gather), and whether it is one."""
    index = torch.arange(t, device=device)[:, None] + torch.arange(span, device=device)[None, :] - window
    return index.clamp(0, t - 1), (index >= 0) & (index < t)


class _RelativeAttention(nn.Module):
    """Multi-head self-attention with relative position embeddings shared by the heads:
    a query at i scores the key at j by q.k + q.emb_k[j - i] (within the window), and
    takes the values plus sum_j p(i, j) emb_v[j - i]."""

    def __init__(self, weights: PiperWeights, name: str):
        super().__init__()
        self.conv_q = conv_from(weights, f"{name}.conv_q")
        self.conv_k = conv_from(weights, f"{name}.conv_k")
        self.conv_v = conv_from(weights, f"{name}.conv_v")
        self.conv_o = conv_from(weights, f"{name}.conv_o")
        self.emb_rel_k = parameter(weights, f"{name}.emb_rel_k")
        self.emb_rel_v = parameter(weights, f"{name}.emb_rel_v")
        _, span, self.head_width = weights.tensors[f"{name}.emb_rel_k"].shape
        self.window = (int(span) - 1) // 2

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        b, c, t = x.shape
        heads = c // self.head_width

        def split(y: Tensor) -> Tensor:
            return y.view(b, heads, self.head_width, t).transpose(2, 3)

        q = split(self.conv_q(x)) / math.sqrt(self.head_width)
        k, v = split(self.conv_k(x)), split(self.conv_v(x))
        span = 2 * self.window + 1
        scores = q @ k.transpose(-2, -1)
        index, valid = _offsets(t, self.window, x.device)
        by_offset = q @ self.emb_rel_k[0].transpose(0, 1)
        scores = scores + torch.where(valid, by_offset.gather(-1, index.expand(b, heads, t, t)), 0.0)
        scores = scores.masked_fill(mask.unsqueeze(2) * mask.unsqueeze(-1) == 0, -1e4)
        p = torch.softmax(scores, dim=-1)
        out = p @ v
        index, valid = _keys(t, span, self.window, x.device)  # offset r of query i: key i + r - w
        near = torch.where(valid, p.gather(-1, index.expand(b, heads, t, span)), 0.0)
        out = out + near @ self.emb_rel_v[0]
        return self.conv_o(out.transpose(2, 3).reshape(b, c, t))  # type: ignore[no-any-return]


class _FeedForward(nn.Module):
    """Two convolutions with "same" padding and a ReLU between, inputs masked."""

    def __init__(self, weights: PiperWeights, name: str):
        super().__init__()
        self.conv_1 = conv_from(weights, f"{name}.conv_1")
        self.conv_2 = conv_from(weights, f"{name}.conv_2")
        kernel = int(weights.tensors[f"{name}.conv_1.weight"].shape[-1])
        self.pad = ((kernel - 1) // 2, kernel // 2)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        x = torch.relu(self.conv_1(F.pad(x * mask, self.pad)))
        return self.conv_2(F.pad(x * mask, self.pad)) * mask  # type: ignore[no-any-return]


class _Encoder(nn.Module):
    """Post-norm transformer layers: attention, then the feed-forward, each added to its
    input and normalized over the channels."""

    def __init__(self, weights: PiperWeights, name: str):
        super().__init__()
        layers = count(weights, f"{name}.attn_layers.", ".conv_q.weight")
        self.attn_layers = nn.ModuleList(_RelativeAttention(weights, f"{name}.attn_layers.{i}") for i in range(layers))
        self.norm_layers_1 = nn.ModuleList(ChannelNorm(weights, f"{name}.norm_layers_1.{i}") for i in range(layers))
        self.ffn_layers = nn.ModuleList(_FeedForward(weights, f"{name}.ffn_layers.{i}") for i in range(layers))
        self.norm_layers_2 = nn.ModuleList(ChannelNorm(weights, f"{name}.norm_layers_2.{i}") for i in range(layers))

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        x = x * mask
        for attn, norm_1, ffn, norm_2 in zip(
            self.attn_layers, self.norm_layers_1, self.ffn_layers, self.norm_layers_2, strict=True
        ):
            x = norm_1(x + attn(x, mask))
            x = norm_2(x + ffn(x, mask))
        return x * mask


class _Table(nn.Module):
    """An embedding table. nn.Embedding would draw random values on the meta device,
    which costs torch a second of imports."""

    def __init__(self, weights: PiperWeights, name: str):
        super().__init__()
        self.weight = parameter(weights, f"{name}.weight")


class TextEncoder(nn.Module):
    """Phoneme ids -> (hidden [B, C, T], m [B, C', T], logs [B, C', T])."""

    def __init__(self, weights: PiperWeights):
        super().__init__()
        _, self.width = weights.tensors["enc_p.emb.weight"].shape
        self.emb = _Table(weights, "enc_p.emb")
        self.encoder = _Encoder(weights, "enc_p.encoder")
        self.proj = conv_from(weights, "enc_p.proj")

    def forward(self, ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x = F.embedding(ids, self.emb.weight) * math.sqrt(self.width)
        x = self.encoder(x.transpose(1, 2) * mask, mask)
        m, logs = (self.proj(x) * mask).chunk(2, dim=1)
        return x, m, logs


class _DDSConv(nn.Module):
    """Dilated depthwise-separable convolutions (dilation 1, k, k^2...), each followed
    by a layer norm, GELU, a 1x1 convolution, a layer norm and GELU, added back."""

    def __init__(self, weights: PiperWeights, name: str):
        super().__init__()
        n = count(weights, f"{name}.convs_sep.", ".weight")
        self.convs_sep = nn.ModuleList(conv_from(weights, f"{name}.convs_sep.{i}") for i in range(n))
        self.convs_1x1 = nn.ModuleList(conv_from(weights, f"{name}.convs_1x1.{i}") for i in range(n))
        self.norms_1 = nn.ModuleList(ChannelNorm(weights, f"{name}.norms_1.{i}") for i in range(n))
        self.norms_2 = nn.ModuleList(ChannelNorm(weights, f"{name}.norms_2.{i}") for i in range(n))

    def forward(self, x: Tensor, mask: Tensor, g: Tensor | None = None) -> Tensor:
        if g is not None:
            x = x + g
        for sep, norm_1, pointwise, norm_2 in zip(self.convs_sep, self.norms_1, self.convs_1x1, self.norms_2, strict=True):
            y = F.gelu(norm_1(sep(x * mask)))
            x = x + F.gelu(norm_2(pointwise(y)))
        return x * mask


def _knots(unnormalized: Tensor, bound: float) -> tuple[Tensor, Tensor]:
    """A spline's knots on [-bound, bound] from unnormalized bin sizes: (cumulative
    positions, K + 1; bin sizes, K). Every bin is at least `MIN_BIN` of the interval."""
    bins = unnormalized.shape[-1]
    share = float(np.float32(1) - np.float32(MIN_BIN) * np.float32(bins))  # as float32 arithmetic
    sizes = MIN_BIN + share * torch.softmax(unnormalized, dim=-1)
    knots = F.pad(torch.cumsum(sizes, dim=-1), (1, 0), value=0.0) * (2 * bound) - bound
    knots[..., 0] = -bound
    knots[..., -1] = bound
    return knots, knots[..., 1:] - knots[..., :-1]


def inverse_spline(x: Tensor, widths: Tensor, heights: Tensor, derivatives: Tensor, bound: float) -> Tensor:
    """The inverse of a monotonic rational-quadratic spline on [-bound, bound], the
    identity outside it (linear tails). `x` [...]; `widths` and `heights` [..., K]
    unnormalized; `derivatives` [..., K - 1] at the inner knots (the end knots' are
    fixed to 1)."""
    inside = (x >= -bound) & (x <= bound)
    edge = math.log(math.exp(1 - MIN_BIN) - 1)  # softplus(edge) + MIN_BIN = 1
    slopes = MIN_BIN + F.softplus(F.pad(derivatives, (1, 1), value=edge))
    cum_w, bin_w = _knots(widths, bound)
    cum_h, bin_h = _knots(heights, bound)
    search = cum_h.clone()
    search[..., -1] += SEARCH_EPS
    k = heights.shape[-1]
    index = ((x[..., None] >= search).sum(dim=-1, keepdim=True) - 1).clamp(0, k - 1)

    def pick(t: Tensor) -> Tensor:
        return t.gather(-1, index)[..., 0]

    delta = pick(bin_h / bin_w)
    d0, d1, h = pick(slopes), pick(slopes[..., 1:]), pick(bin_h)
    rise = x - pick(cum_h)
    curve = d0 + d1 - 2 * delta
    a = rise * curve + h * (delta - d0)
    b = h * d0 - rise * curve
    c = -delta * rise
    root = (2 * c) / (-b - torch.sqrt(b.pow(2) - 4 * a * c))
    return torch.where(inside, root * pick(bin_w) + pick(cum_w), x)


class _SplineFlow(nn.Module):
    """VITS's ConvFlow reversed: the second half of z through the inverse of a spline
    whose bins come from the first half, conditioned on the predictor's features."""

    def __init__(self, weights: PiperWeights, name: str):
        super().__init__()
        self.pre = conv_from(weights, f"{name}.pre")
        self.convs = _DDSConv(weights, f"{name}.convs")
        self.proj = conv_from(weights, f"{name}.proj")
        filters, cut = weights.tensors[f"{name}.pre.weight"].shape[:2]
        self.cut, self.filters = int(cut), int(filters)
        """Where z splits (its first `cut` channels condition the spline on the rest),
        and the conditioning's channels."""
        self.bins = (int(weights.tensors[f"{name}.proj.weight"].shape[0]) // self.cut + 1) // 3
        self.bound = weights.tail_bound

    def forward(self, z: Tensor, mask: Tensor, g: Tensor) -> Tensor:
        z0, z1 = z[:, : self.cut], z[:, self.cut :]
        h = self.proj(self.convs(self.pre(z0), mask, g)) * mask
        b, c, t = z0.shape
        h = h.reshape(b, c, -1, t).permute(0, 1, 3, 2)
        scale = math.sqrt(self.filters)
        z1 = inverse_spline(
            z1, h[..., : self.bins] / scale, h[..., self.bins : 2 * self.bins] / scale, h[..., 2 * self.bins :], self.bound
        )
        return torch.cat([z0, z1], dim=1) * mask


class _Affine(nn.Module):
    """The predictor's elementwise affine flow, reversed: (z - m) * exp(-logs), with
    exp(-logs) as the graph folded it (`scale`)."""

    def __init__(self, weights: PiperWeights, name: str):
        super().__init__()
        self.m = parameter(weights, f"{name}.m")
        self.scale = parameter(weights, f"{name}.scale")

    def forward(self, z: Tensor, mask: Tensor) -> Tensor:
        return (z - self.m) * self.scale * mask


class DurationPredictor(nn.Module):
    """The stochastic duration predictor, reversed: (encoder hidden, mask, noise
    [B, 2, T], noise_w [B, 1, 1]) -> log-durations [B, 1, T]."""

    def __init__(self, weights: PiperWeights):
        super().__init__()
        self.pre = conv_from(weights, "dp.pre")
        self.convs = _DDSConv(weights, "dp.convs")
        self.proj = conv_from(weights, "dp.proj")
        self.order = [str(i) for i in indices(weights, "dp.flows.", ".pre.weight")]
        """The spline flows in the order they run: VITS's reversed list without the one
        it drops, next to the affine flow."""
        flows: dict[str, nn.Module] = {i: _SplineFlow(weights, f"dp.flows.{i}") for i in self.order}
        flows["0"] = _Affine(weights, "dp.flows.0")
        self.flows = nn.ModuleDict(flows)

    def forward(self, hidden: Tensor, mask: Tensor, noise: Tensor, noise_w: Tensor) -> Tensor:
        g = self.proj(self.convs(self.pre(hidden), mask)) * mask
        z = noise * noise_w
        for i in self.order:
            z = self.flows[i](z.flip(1), mask, g)
        z = self.flows["0"](z.flip(1), mask)
        return z[:, :1]  # type: ignore[no-any-return]
