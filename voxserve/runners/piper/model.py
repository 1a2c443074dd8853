"""Piper's VITS as torch modules, written from the architecture its ONNX graph shows:
the prior's text encoder and duration predictor (`runners/piper/prior.py`), and here

- `Flow` (`flow`): mean-only residual coupling layers with WaveNet blocks, reversed: z_p
  to z;
- `Generator` (`dec`): HiFi-GAN: a convolution, then per upsampling a leaky ReLU, a
  transposed convolution and the mean of parallel residual blocks; a last leaky ReLU
  (slope 0.01), convolution and tanh;
- `PiperVits`, the whole voice: stage A as the ONNX split has it (`prior`, then `latent`,
  the flow) and stage B (`forward`, the generator).

Every item of a batch is masked: padded phonemes and frames never reach an item's
output, so an item gives the same durations and frames in a padded batch as alone. The
generator, given each window's frames (`masked`), zeros every convolution's input past
the window's own end, as a window alone sees its zero padding: windows of different
lengths then share one call, each with its own audio.
Module and parameter names match `runners/piper/weights.py`, which reads them from the
graph. This module holds no I/O and no noise policy: the noise is an argument.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from voxserve.runners.piper.layers import conv_from, count, indices
from voxserve.runners.piper.prior import DurationPredictor, TextEncoder
from voxserve.runners.piper.weights import PiperWeights

__all__ = ["Flow", "Generator", "PiperVits", "build"]

LRELU_SLOPE = 0.1
"""HiFi-GAN's leaky ReLU slope inside the generator; the last one uses torch's 0.01."""


class _WaveNet(nn.Module):
    """Gated dilated convolutions (tanh x sigmoid) with residual and skip outputs."""

    def __init__(self, weights: PiperWeights, name: str):
        super().__init__()
        n = count(weights, f"{name}.in_layers.", ".weight")
        self.in_layers = nn.ModuleList(conv_from(weights, f"{name}.in_layers.{i}") for i in range(n))
        self.res_skip_layers = nn.ModuleList(conv_from(weights, f"{name}.res_skip_layers.{i}") for i in range(n))
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
        self.pre = conv_from(weights, f"{name}.pre")
        self.enc = _WaveNet(weights, f"{name}.enc")
        self.post = conv_from(weights, f"{name}.post")
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
        self.order = [str(i) for i in indices(weights, "flow.flows.", ".pre.weight")]
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
            n = count(weights, f"{name}.convs.", ".weight")
            self.convs = nn.ModuleList(conv_from(weights, f"{name}.convs.{i}") for i in range(n))
            self.convs2: nn.ModuleList | None = None
        else:
            n = count(weights, f"{name}.convs1.", ".weight")
            self.convs1 = nn.ModuleList(conv_from(weights, f"{name}.convs1.{i}") for i in range(n))
            self.convs2 = nn.ModuleList(conv_from(weights, f"{name}.convs2.{i}") for i in range(n))

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """`mask` [B, 1, T] (1 within each item, 0 past its end) zeros every
        convolution's input past the item's end; None where every item fills T."""

        def act(y: Tensor) -> Tensor:
            y = F.leaky_relu(y, LRELU_SLOPE)
            return y if mask is None else y * mask

        if self.convs2 is None:
            for conv in self.convs:
                x = conv(act(x)) + x
            return x
        for conv1, conv2 in zip(self.convs1, self.convs2, strict=True):
            x = conv2(act(conv1(act(x)))) + x
        return x


class Generator(nn.Module):
    """z [B, C, T] -> PCM [B, 1, T * hop] in [-1, 1]."""

    def __init__(self, weights: PiperWeights):
        super().__init__()
        self.conv_pre = conv_from(weights, "dec.conv_pre")
        ups = count(weights, "dec.ups.", ".weight")
        self.ups = nn.ModuleList(conv_from(weights, f"dec.ups.{i}") for i in range(ups))
        blocks = len({n.split(".")[2] for n in weights.tensors if n.startswith("dec.resblocks.")})
        self.resblocks = nn.ModuleList(_ResBlock(weights, f"dec.resblocks.{i}") for i in range(blocks))
        self.kernels = blocks // ups
        self.conv_post = conv_from(weights, "dec.conv_post")
        self.strides = [int(weights.convs[f"dec.ups.{i}"].stride) for i in range(ups)]
        self.hop = int(np.prod(self.strides))

    def forward(self, z: Tensor, frames: Tensor | None = None) -> Tensor:
        """`frames` [B]: each item's frames, where they differ (None: all fill T)."""

        def mask_at(scale: int) -> Tensor | None:
            if frames is None:
                return None
            t = torch.arange(z.shape[2] * scale, device=z.device)
            return (t[None, None, :] < (frames * scale)[:, None, None]).to(z.dtype)

        def masked(y: Tensor, mask: Tensor | None) -> Tensor:
            return y if mask is None else y * mask

        mask = mask_at(1)
        x = self.conv_pre(masked(z, mask))
        scale = 1
        for i, (up, stride) in enumerate(zip(self.ups, self.strides, strict=True)):
            x = up(masked(F.leaky_relu(x, LRELU_SLOPE), mask))
            scale *= stride
            mask = mask_at(scale)
            blocks = self.resblocks[i * self.kernels : (i + 1) * self.kernels]
            total = blocks[0](x, mask)
            for block in blocks[1:]:
                total = total + block(x, mask)
            x = total / float(self.kernels)
        return torch.tanh(self.conv_post(masked(F.leaky_relu(x), mask)))


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

    def forward(self, z: Tensor, frames: Tensor, *, masked: bool = False) -> Tensor:
        """Stage B: PCM [B, T * hop] from z [B, C, T]; with `masked` (decided on the host:
        the items' lengths differ), item b's audio is that of its first `frames[b]` frames,
        then zeros' worth of garbage the caller crops."""
        return self.dec(z, frames if masked else None)[:, 0]  # type: ignore[no-any-return]


def build(weights: PiperWeights, device: torch.device) -> PiperVits:
    """The voice's modules with its weights on `device`, in eval mode, without grads.
    Built on the meta device and assigned, so no memory is filled twice."""
    model = PiperVits(weights)
    state = {name: torch.tensor(value) for name, value in weights.tensors.items()}
    model.load_state_dict(state, strict=True, assign=True)
    return model.to(device).eval().requires_grad_(False)
