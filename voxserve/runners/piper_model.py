"""Piper's VITS as torch modules, written from the architecture its ONNX graph shows.

- `TextEncoder` (`enc_p`): phoneme embedding times sqrt(width), then transformer layers
  of 1x1-convolution multi-head attention with relative position embeddings (a window of
  +-w positions, keys and values), each followed by a channel layer norm of the residual
  sum, and a feed-forward of two convolutions ("same" padding, ReLU between); a 1x1
  projection gives the prior's mean m and log-scale logs.
- `DurationPredictor` (`dp`): VITS's stochastic duration predictor, reversed. A stack of
  dilated depthwise-separable convolutions (`_DDSConv`) conditions spline flows that turn
  noise (2 channels per phoneme) into log-durations: flip, a rational-quadratic spline
  coupling (`_SplineFlow`, linear tails), repeated, then an elementwise affine.
- `Flow` (`flow`): mean-only residual coupling layers with WaveNet blocks, reversed: z_p
  to z.
- `Generator` (`dec`): HiFi-GAN: a convolution, then per upsampling a leaky ReLU, a
  transposed convolution and the mean of parallel residual blocks; a last leaky ReLU
  (slope 0.01), convolution and tanh.

Every item of a batch is masked: padded phonemes and frames never reach an item's
output, so an item gives the same durations and frames in a padded batch as alone.
Module and parameter names match `runners/piper_weights.py`, which reads them from the
graph. This module holds no I/O and no noise policy: the noise is an argument.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from voxserve.runners.piper_weights import PiperWeights

__all__ = ["DurationPredictor", "Flow", "Generator", "PiperVits", "TextEncoder", "build"]

LAYER_NORM_EPS = 1e-5
LRELU_SLOPE = 0.1
"""HiFi-GAN's leaky ReLU slope inside the generator; the last one uses torch's 0.01."""
MIN_BIN = 1e-3
"""The splines' smallest bin width, bin height and knot derivative."""
SEARCH_EPS = 1e-6
"""Added to the last knot when searching an input's bin, so that the tail bound itself
falls in the last bin."""


def _conv(weights: PiperWeights, name: str) -> nn.Module:
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


def _parameter(weights: PiperWeights, name: str) -> nn.Parameter:
    return nn.Parameter(torch.empty(weights.tensors[name].shape, device="meta"), requires_grad=False)


def _count(weights: PiperWeights, prefix: str, suffix: str) -> int:
    """How many consecutive `prefix{i}suffix` tensors there are."""
    n = 0
    while f"{prefix}{n}{suffix}" in weights.tensors:
        n += 1
    return n


def _indices(weights: PiperWeights, prefix: str, suffix: str) -> list[int]:
    """The i of every `prefix{i}suffix` tensor, highest first (the order flows reverse in)."""
    found = set()
    for name in weights.tensors:
        if name.startswith(prefix) and name.endswith(suffix):
            middle = name[len(prefix) : len(name) - len(suffix)]
            if middle.isdigit():
                found.add(int(middle))
    return sorted(found, reverse=True)


class _ChannelNorm(nn.Module):
    """Layer norm over the channels of [B, C, T]."""

    def __init__(self, weights: PiperWeights, name: str):
        super().__init__()
        self.gamma = _parameter(weights, f"{name}.gamma")
        self.beta = _parameter(weights, f"{name}.beta")

    def forward(self, x: Tensor) -> Tensor:
        y = F.layer_norm(x.transpose(1, 2), (x.shape[1],), self.gamma, self.beta, LAYER_NORM_EPS)
        return y.transpose(1, 2)


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
        self.conv_q = _conv(weights, f"{name}.conv_q")
        self.conv_k = _conv(weights, f"{name}.conv_k")
        self.conv_v = _conv(weights, f"{name}.conv_v")
        self.conv_o = _conv(weights, f"{name}.conv_o")
        self.emb_rel_k = _parameter(weights, f"{name}.emb_rel_k")
        self.emb_rel_v = _parameter(weights, f"{name}.emb_rel_v")
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
        self.conv_1 = _conv(weights, f"{name}.conv_1")
        self.conv_2 = _conv(weights, f"{name}.conv_2")
        kernel = int(weights.tensors[f"{name}.conv_1.weight"].shape[-1])
        self.pad = ((kernel - 1) // 2, kernel // 2)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        x = torch.relu(self.conv_1(F.pad(x * mask, self.pad)))
        return self.conv_2(F.pad(x * mask, self.pad)) * mask  # type: ignore[no-any-return]


class _Encoder(nn.Module):
    def __init__(self, weights: PiperWeights, name: str):
        super().__init__()
        layers = _count(weights, f"{name}.attn_layers.", ".conv_q.weight")
        self.attn_layers = nn.ModuleList(_RelativeAttention(weights, f"{name}.attn_layers.{i}") for i in range(layers))
        self.norm_layers_1 = nn.ModuleList(_ChannelNorm(weights, f"{name}.norm_layers_1.{i}") for i in range(layers))
        self.ffn_layers = nn.ModuleList(_FeedForward(weights, f"{name}.ffn_layers.{i}") for i in range(layers))
        self.norm_layers_2 = nn.ModuleList(_ChannelNorm(weights, f"{name}.norm_layers_2.{i}") for i in range(layers))

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
        self.weight = _parameter(weights, f"{name}.weight")


class TextEncoder(nn.Module):
    """Phoneme ids -> (hidden [B, C, T], m [B, C', T], logs [B, C', T])."""

    def __init__(self, weights: PiperWeights):
        super().__init__()
        _, self.width = weights.tensors["enc_p.emb.weight"].shape
        self.emb = _Table(weights, "enc_p.emb")
        self.encoder = _Encoder(weights, "enc_p.encoder")
        self.proj = _conv(weights, "enc_p.proj")

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
        n = _count(weights, f"{name}.convs_sep.", ".weight")
        self.convs_sep = nn.ModuleList(_conv(weights, f"{name}.convs_sep.{i}") for i in range(n))
        self.convs_1x1 = nn.ModuleList(_conv(weights, f"{name}.convs_1x1.{i}") for i in range(n))
        self.norms_1 = nn.ModuleList(_ChannelNorm(weights, f"{name}.norms_1.{i}") for i in range(n))
        self.norms_2 = nn.ModuleList(_ChannelNorm(weights, f"{name}.norms_2.{i}") for i in range(n))

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
        self.pre = _conv(weights, f"{name}.pre")
        self.convs = _DDSConv(weights, f"{name}.convs")
        self.proj = _conv(weights, f"{name}.proj")
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
        self.m = _parameter(weights, f"{name}.m")
        self.scale = _parameter(weights, f"{name}.scale")

    def forward(self, z: Tensor, mask: Tensor) -> Tensor:
        return (z - self.m) * self.scale * mask


class DurationPredictor(nn.Module):
    """The stochastic duration predictor, reversed: (encoder hidden, mask, noise
    [B, 2, T], noise_w [B, 1, 1]) -> log-durations [B, 1, T]."""

    def __init__(self, weights: PiperWeights):
        super().__init__()
        self.pre = _conv(weights, "dp.pre")
        self.convs = _DDSConv(weights, "dp.convs")
        self.proj = _conv(weights, "dp.proj")
        self.order = [str(i) for i in _indices(weights, "dp.flows.", ".pre.weight")]
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


class _WaveNet(nn.Module):
    """Gated dilated convolutions (tanh x sigmoid) with residual and skip outputs."""

    def __init__(self, weights: PiperWeights, name: str):
        super().__init__()
        n = _count(weights, f"{name}.in_layers.", ".weight")
        self.in_layers = nn.ModuleList(_conv(weights, f"{name}.in_layers.{i}") for i in range(n))
        self.res_skip_layers = nn.ModuleList(_conv(weights, f"{name}.res_skip_layers.{i}") for i in range(n))
        self.hidden = int(weights.tensors[f"{name}.in_layers.0.weight"].shape[1])

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        out = torch.zeros_like(x)
        h = self.hidden
        last = len(self.in_layers) - 1
        for i, (conv, res_skip) in enumerate(zip(self.in_layers, self.res_skip_layers, strict=True)):
            a = conv(x)
            y = res_skip(torch.tanh(a[:, :h]) * torch.sigmoid(a[:, h:]))
            if i < last:
                x = (x + y[:, :h]) * mask
                out = out + y[:, h:]
            else:
                out = out + y
        return out * mask


class _Coupling(nn.Module):
    """A residual coupling layer, reversed: the second half of z minus (mean-only, or
    scaled by exp(-logs)) what a WaveNet makes of the first half."""

    def __init__(self, weights: PiperWeights, name: str):
        super().__init__()
        self.pre = _conv(weights, f"{name}.pre")
        self.enc = _WaveNet(weights, f"{name}.enc")
        self.post = _conv(weights, f"{name}.post")
        self.cut = int(weights.tensors[f"{name}.pre.weight"].shape[1])
        """Channels of the first part, which conditions the second."""
        self.mean_only = int(weights.tensors[f"{name}.post.weight"].shape[0]) == self.cut

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        x0, x1 = x[:, : self.cut], x[:, self.cut :]
        stats = self.post(self.enc(self.pre(x0) * mask, mask)) * mask
        if self.mean_only:
            x1 = (x1 - stats) * mask
        else:
            m, logs = stats.chunk(2, dim=1)
            x1 = (x1 - m) * torch.exp(-logs) * mask
        return torch.cat([x0, x1], dim=1)


class Flow(nn.Module):
    """z_p -> z: each coupling layer, last first, after a flip of the channels."""

    def __init__(self, weights: PiperWeights):
        super().__init__()
        self.order = [str(i) for i in _indices(weights, "flow.flows.", ".pre.weight")]
        self.flows = nn.ModuleDict({i: _Coupling(weights, f"flow.flows.{i}") for i in self.order})

    def forward(self, z_p: Tensor, mask: Tensor) -> Tensor:
        x = z_p
        for i in self.order:
            x = self.flows[i](x.flip(1), mask)
        return x


class _ResBlock(nn.Module):
    """HiFi-GAN's residual block: per dilation, leaky ReLU and a convolution added back
    (`convs`, type 2), or two of each (`convs1` then `convs2`, type 1)."""

    def __init__(self, weights: PiperWeights, name: str):
        super().__init__()
        if f"{name}.convs.0.weight" in weights.tensors:
            n = _count(weights, f"{name}.convs.", ".weight")
            self.convs = nn.ModuleList(_conv(weights, f"{name}.convs.{i}") for i in range(n))
            self.convs2: nn.ModuleList | None = None
        else:
            n = _count(weights, f"{name}.convs1.", ".weight")
            self.convs1 = nn.ModuleList(_conv(weights, f"{name}.convs1.{i}") for i in range(n))
            self.convs2 = nn.ModuleList(_conv(weights, f"{name}.convs2.{i}") for i in range(n))

    def forward(self, x: Tensor) -> Tensor:
        if self.convs2 is None:
            for conv in self.convs:
                x = conv(F.leaky_relu(x, LRELU_SLOPE)) + x
            return x
        for conv1, conv2 in zip(self.convs1, self.convs2, strict=True):
            x = conv2(F.leaky_relu(conv1(F.leaky_relu(x, LRELU_SLOPE)), LRELU_SLOPE)) + x
        return x


class Generator(nn.Module):
    """z [B, C, T] -> PCM [B, 1, T * hop] in [-1, 1]."""

    def __init__(self, weights: PiperWeights):
        super().__init__()
        self.conv_pre = _conv(weights, "dec.conv_pre")
        ups = _count(weights, "dec.ups.", ".weight")
        self.ups = nn.ModuleList(_conv(weights, f"dec.ups.{i}") for i in range(ups))
        blocks = len({n.split(".")[2] for n in weights.tensors if n.startswith("dec.resblocks.")})
        self.resblocks = nn.ModuleList(_ResBlock(weights, f"dec.resblocks.{i}") for i in range(blocks))
        self.kernels = blocks // ups
        self.conv_post = _conv(weights, "dec.conv_post")
        self.hop = int(np.prod([weights.convs[f"dec.ups.{i}"].stride for i in range(ups)]))

    def forward(self, z: Tensor) -> Tensor:
        x = self.conv_pre(z)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, LRELU_SLOPE))
            blocks = self.resblocks[i * self.kernels : (i + 1) * self.kernels]
            total = blocks[0](x)
            for block in blocks[1:]:
                total = total + block(x)
            x = total / float(self.kernels)
        return torch.tanh(self.conv_post(F.leaky_relu(x)))


class PiperVits(nn.Module):
    """The whole voice. `prior` and `latent` are stage A (the ONNX split's prior and
    flow), `forward` (the generator) is stage B."""

    def __init__(self, weights: PiperWeights):
        super().__init__()
        self.enc_p = TextEncoder(weights)
        self.dp = DurationPredictor(weights)
        self.flow = Flow(weights)
        self.dec = Generator(weights)
        self.channels = int(weights.tensors["enc_p.proj.weight"].shape[0]) // 2

    def prior(
        self,
        ids: Tensor,
        lengths: Tensor,
        scales: Tensor,
        dp_noise: Tensor,
        z_noise: Tensor | None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(z_p [B, C, T], frame mask [B, 1, T], frames [B], durations [B, ids]) for ids
        [B, ids] (padded; `lengths` [B]) and per-item `scales` [B, 3] (noise, length,
        noise_w). `dp_noise` [B, 2, >= ids]: the predictor's standard normal noise;
        `z_noise` [B, C, >= T] the prior's, or None to draw it here (T is known only
        here)."""
        b, n = ids.shape
        x_mask = (torch.arange(n, device=ids.device)[None, :] < lengths[:, None]).unsqueeze(1).to(torch.float32)
        hidden, m, logs = self.enc_p(ids, x_mask)
        noise_scale, length_scale, noise_w = (scales[:, i].view(b, 1, 1) for i in range(3))
        logw = self.dp(hidden, x_mask, dp_noise[:, :, :n], noise_w)
        w_ceil = torch.ceil(torch.exp(logw) * x_mask * length_scale)
        frames = torch.clamp_min(w_ceil.sum(dim=(1, 2)), 1).long()
        t = int(frames.max())
        positions = torch.arange(t, device=ids.device, dtype=torch.float32)
        y_mask = (positions[None, :] < frames[:, None]).unsqueeze(1).to(torch.float32)
        ends = torch.cumsum(w_ceil, dim=-1)  # [B, 1, ids]: where each phoneme's frames end
        owner = (ends.view(b, n, 1) <= positions.view(1, 1, t)).sum(dim=1).clamp(max=n - 1)  # [B, T]
        spoken = (positions[None, None, :] < ends[:, :, -1:]).to(torch.float32)  # within the durations
        index = owner.unsqueeze(1).expand(b, m.shape[1], t)
        m_p, logs_p = m.gather(2, index) * spoken, logs.gather(2, index) * spoken
        if z_noise is None:
            z_noise = torch.randn(m_p.shape, device=m_p.device)
        z_p = m_p + z_noise[:, :, :t] * torch.exp(logs_p) * noise_scale
        return z_p, y_mask, frames, w_ceil[:, 0].long()

    def latent(self, z_p: Tensor, mask: Tensor) -> Tensor:
        """z [B, C, T] from z_p and its frame mask: the flow, masked."""
        return self.flow(z_p, mask) * mask  # type: ignore[no-any-return]

    def forward(self, z: Tensor) -> Tensor:
        """Stage B: PCM [B, T * hop]."""
        return self.dec(z)[:, 0]  # type: ignore[no-any-return]


def build(weights: PiperWeights, device: torch.device) -> PiperVits:
    """The voice's modules with its weights on `device`, in eval mode, without grads.
    Built on the meta device and assigned, so no memory is filled twice."""
    model = PiperVits(weights)
    state = {name: torch.tensor(value) for name, value in weights.tensors.items()}
    model.load_state_dict(state, strict=True, assign=True)
    return model.to(device).eval().requires_grad_(False)
