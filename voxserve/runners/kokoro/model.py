"""Kokoro-82M as torch modules, on padded batches: stage A (text to durations, aligned
text features, pitch and energy) and stage B (the iSTFTNet decoder), computed as the
int8 ONNX graph computes them (`runners/kokoro/onnx_runner.py` cuts it in the same place), with the
weights `runners/kokoro/weights.py` converts from it.

Module names follow the graph's node names, so that the converted weights load as a
state dict: `bert` (ALBERT), `bert_encoder`, `predictor` (durations, pitch, energy),
`text_encoder` and `decoder` (with its `generator`).

Batches. Items of different lengths share one padded tensor; each item must come out as
it would alone, so:
- attention masks the padded keys, and every LSTM runs on a packed sequence;
- every convolution sees zeros past its item's end, as a lone item sees its zero padding
  (`Extent.mask`), and the reflect padding of the source's STFT reflects at each item's
  own end;
- every instance normalization takes its statistics over its item's own points
  (`Extent.weight`), with the decoder's window edges weighted by `left_out`;
- the source's phase is interpolated up to each item's own last point.

No step reads the device to decide what to do: whether every item fills the batch
(`full`), whether any window leaves frames out (`edges`) and every item's length come
from the host, and the source's running phase is summed on the host (`running_phase`).
The decoder is then one fixed sequence of kernels per shape and flags, which a CUDA
graph can capture; stage A copies to the host once, for the durations that set its
frames.

This module imports torch; it knows nothing of files, requests or scheduling.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

__all__ = [
    "HARMONICS",
    "HOP",
    "STYLE",
    "Acoustic",
    "Decoder",
    "Extent",
    "extent",
    "linear_modules",
    "running_phase",
]

STYLE = 128
"""Width of each half of a voice's style row: the decoder reads the first, the prosody
predictor the second."""
HOP = 600
HARMONICS = 9
SAMPLE_RATE = 24000
_UPSAMPLE = 300
"""Samples per F0 point (two points per frame)."""
_EPS = 1e-5
_BERT_EPS = 1e-12
_SQRT2 = 1.4142135381698608
"""sqrt(2) as the graph holds it (float32)."""


@dataclass(frozen=True)
class Extent:
    """The valid points of each item in a padded batch at one time resolution."""

    mask: Tensor | None
    """[B, 1, T]: 1 on the item's points, 0 past its end; None when every item fills T."""
    weight: Tensor | None
    """[B, 1, T], float32: each point's weight in the item's normalization statistics;
    None when every point weighs 1."""

    def masked(self, x: Tensor) -> Tensor:
        """x with zeros past each item's end, as a convolution must see it."""
        return x if self.mask is None else x * self.mask.to(x.dtype)


def extent(frames: Tensor, points: Tensor, width: int, left_out: Tensor | None = None, *, full: bool) -> Extent:
    """The extent of items of `frames` frames holding `points` points each ([B] int64),
    padded to `width`; `full` says (from the host) that every item holds `width` points.
    With `left_out` ([B, 2]: a, b; None where no item leaves frames out), the points of an item's first
    frame weigh 1 + a and those of its last frame 1 + b, as the decoder graph's
    normalization does: a tensor of T points over F frames gives point i to frame
    floor(i * F / T), so the first frame holds ceil(T / F) points and the last starts at
    ceil((F - 1) * T / F)."""
    if full and left_out is None:
        return Extent(None, None)
    t = torch.arange(width, device=frames.device)[None, :]
    valid = t < points[:, None]
    weight = valid.to(torch.float32)
    if left_out is not None:
        head = t < ((points + frames - 1) // frames)[:, None]
        tail = valid & (t >= (((frames - 1) * points + frames - 1) // frames)[:, None])
        weight = weight + left_out[:, :1] * head + left_out[:, 1:] * tail
    return Extent(None if full else valid[:, None, :].to(torch.float32), weight[:, None, :])


def float32(x: Tensor) -> contextlib.AbstractContextManager[object]:
    """A region computed in float32 whatever the autocast: autocast off where it is on
    (entered only then: an export of the float32 step then holds no autocast region)."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.autocast(x.device.type, enabled=False)
    return contextlib.nullcontext()


def _instance_norm(x: Tensor, weight: Tensor | None) -> Tensor:
    """(x - mean) / sqrt(var + eps) per item and channel, over time, the statistics
    weighted by `weight` (None: plain means), in float32 whatever the autocast."""
    dtype = x.dtype
    with float32(x):
        x = x.float()
        if weight is None:
            var, mean = torch.var_mean(x, dim=2, keepdim=True, correction=0)
            return ((x - mean) / torch.sqrt(var + _EPS)).to(dtype)
        w = weight.transpose(1, 2)  # [B, T, 1]: the weighted sums as batched products
        total = w.sum(dim=1, keepdim=True)
        d = x - torch.bmm(x, w) / total
        var = torch.bmm(d * d, w) / total
        return (d / torch.sqrt(var + _EPS)).to(dtype)


def _lstm(lstm: nn.LSTM, x: Tensor, lengths: Tensor) -> Tensor:
    """A batch-first LSTM over each item's own length (`lengths` [B] on the host): zeros past it."""
    width = x.shape[1]
    if int(lengths.min()) == width:
        out: Tensor = lstm(x)[0]
        return out
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, _ = pad_packed_sequence(lstm(packed)[0], batch_first=True, total_length=width)
    return out


def _bilstm(inputs: int) -> nn.LSTM:
    return nn.LSTM(inputs, 256, batch_first=True, bidirectional=True)


# -- shared blocks ---------------------------------------------------------------------
class AdaIN1d(nn.Module):
    """Instance norm whose scale and shift come from the style: (1 + gamma) x + beta."""

    def __init__(self, channels: int):
        super().__init__()
        self.fc = nn.Linear(STYLE, 2 * channels)

    def forward(self, x: Tensor, s: Tensor, ext: Extent) -> Tensor:
        gamma, beta = self.fc(s)[:, :, None].chunk(2, dim=1)
        out: Tensor = torch.addcmul(beta, gamma + 1, _instance_norm(x, ext.weight))
        return out


class AdainResBlk1d(nn.Module):
    """Two AdaIN-LeakyReLU-conv steps and a shortcut, summed and scaled by 1/sqrt(2); with
    `upsample`, a depthwise transposed convolution doubles the residual's time axis and
    the shortcut repeats each point twice."""

    def __init__(self, dim_in: int, dim_out: int, upsample: bool = False):
        super().__init__()
        self.norm1 = AdaIN1d(dim_in)
        self.norm2 = AdaIN1d(dim_out)
        self.conv1 = nn.Conv1d(dim_in, dim_out, 3, padding=1)
        self.conv2 = nn.Conv1d(dim_out, dim_out, 3, padding=1)
        self.conv1x1 = nn.Conv1d(dim_in, dim_out, 1, bias=False) if dim_in != dim_out else None
        self.pool = (
            nn.ConvTranspose1d(dim_in, dim_in, 3, stride=2, padding=1, output_padding=1, groups=dim_in)
            if upsample
            else None
        )

    def forward(self, x: Tensor, s: Tensor, ext_in: Extent, ext_out: Extent) -> Tensor:
        r = F.leaky_relu(self.norm1(x, s, ext_in), 0.2)
        if self.pool is not None:
            r = self.pool(ext_in.masked(r))
        r = self.conv1(ext_out.masked(r))
        r = F.leaky_relu(self.norm2(r, s, ext_out), 0.2)
        r = self.conv2(ext_out.masked(r))
        shortcut = x.repeat_interleave(2, dim=2) if self.pool is not None else x
        if self.conv1x1 is not None:
            shortcut = self.conv1x1(shortcut)
        out: Tensor = (r + shortcut) / _SQRT2
        return out


# -- stage A ---------------------------------------------------------------------------
class _Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.query = nn.Linear(768, 768)
        self.key = nn.Linear(768, 768)
        self.value = nn.Linear(768, 768)
        self.dense = nn.Linear(768, 768)
        self.LayerNorm = nn.LayerNorm(768, eps=_BERT_EPS)

    def forward(self, h: Tensor, bias: Tensor) -> Tensor:
        b, t, _ = h.shape
        scale = math.sqrt(1 / math.sqrt(64))  # the graph scales q and k by 64 ** -0.25 each
        q = self.query(h).view(b, t, 12, 64).transpose(1, 2) * scale
        k = self.key(h).view(b, t, 12, 64).permute(0, 2, 3, 1) * scale
        v = self.value(h).view(b, t, 12, 64).transpose(1, 2)
        p = torch.softmax(q @ k + bias, dim=-1)
        context = (p @ v).transpose(1, 2).reshape(b, t, 768)
        return self.LayerNorm(h + self.dense(context))  # type: ignore[no-any-return]


class _AlbertLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = _Attention()
        self.ffn = nn.Linear(768, 2048)
        self.ffn_output = nn.Linear(2048, 768)
        self.full_layer_layer_norm = nn.LayerNorm(768, eps=_BERT_EPS)

    def forward(self, h: Tensor, bias: Tensor) -> Tensor:
        a = self.attention(h, bias)
        f = self.ffn_output(F.gelu(self.ffn(a), approximate="tanh"))
        return self.full_layer_layer_norm(f + a)  # type: ignore[no-any-return]


class _AlbertGroup(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.albert_layers = nn.ModuleList([_AlbertLayer()])


class _AlbertEmbeddings(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(178, 128)
        self.position_embeddings = nn.Embedding(512, 128)
        self.token_type_embeddings = nn.Embedding(2, 128)
        self.LayerNorm = nn.LayerNorm(128, eps=_BERT_EPS)


class _AlbertEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding_hidden_mapping_in = nn.Linear(128, 768)
        self.albert_layer_groups = nn.ModuleList([_AlbertGroup()])


class Albert(nn.Module):
    """The phoneme-level ALBERT: 12 applications of one shared layer, 12 heads."""

    def __init__(self) -> None:
        super().__init__()
        self.embeddings = _AlbertEmbeddings()
        self.encoder = _AlbertEncoder()

    def forward(self, tokens: Tensor, valid: Tensor) -> Tensor:
        e = self.embeddings
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = e.word_embeddings(tokens) + e.token_type_embeddings(torch.zeros_like(tokens)) + e.position_embeddings(positions)
        hidden: Tensor = self.encoder.embedding_hidden_mapping_in(e.LayerNorm(x))
        bias = torch.where(valid, 0.0, torch.finfo(hidden.dtype).min)[:, None, None, :].to(hidden.dtype)
        h = hidden
        group = self.encoder.albert_layer_groups[0]
        assert isinstance(group, _AlbertGroup)
        layer = group.albert_layers[0]
        for _ in range(12):
            h = layer(h, bias)
        return h


class _LinearNorm(nn.Module):
    def __init__(self, inputs: int, outputs: int):
        super().__init__()
        self.linear_layer = nn.Linear(inputs, outputs)


class AdaLayerNorm(nn.Module):
    """Layer norm over channels (no affine) whose scale and shift come from the style."""

    def __init__(self, channels: int):
        super().__init__()
        self.channels = channels
        self.fc = nn.Linear(STYLE, 2 * channels)

    def forward(self, x: Tensor, s: Tensor) -> Tensor:
        gamma, beta = self.fc(s)[:, None, :].chunk(2, dim=2)
        out: Tensor = (gamma + 1) * F.layer_norm(x, (self.channels,), eps=_EPS) + beta
        return out


class DurationEncoder(nn.Module):
    """Three BiLSTM + AdaLayerNorm steps over the ALBERT features with the style
    appended; the style is appended again to the output ([B, T, 640])."""

    def __init__(self) -> None:
        super().__init__()
        self.lstms = nn.ModuleList()
        for _ in range(3):
            self.lstms.append(_bilstm(512 + STYLE))
            self.lstms.append(AdaLayerNorm(512))

    def forward(self, x: Tensor, s: Tensor, lengths: Tensor, valid: Tensor) -> Tensor:
        style = s[:, None, :].expand(-1, x.shape[1], -1)
        x = torch.cat([x, style], dim=2)
        for i in range(0, len(self.lstms), 2):
            lstm = self.lstms[i]
            assert isinstance(lstm, nn.LSTM)
            x = _lstm(lstm, x, lengths)
            x = torch.cat([self.lstms[i + 1](x, s), style], dim=2)
        return x * valid[:, :, None]


class Predictor(nn.Module):
    """Durations from the phoneme features; pitch and energy from the aligned ones."""

    def __init__(self) -> None:
        super().__init__()
        self.text_encoder = DurationEncoder()
        self.lstm = _bilstm(512 + STYLE)
        self.duration_proj = _LinearNorm(512, 50)
        self.shared = _bilstm(512 + STYLE)
        self.F0 = nn.ModuleList([AdainResBlk1d(512, 512), AdainResBlk1d(512, 256, upsample=True), AdainResBlk1d(256, 256)])
        self.N = nn.ModuleList([AdainResBlk1d(512, 512), AdainResBlk1d(512, 256, upsample=True), AdainResBlk1d(256, 256)])
        self.F0_proj = nn.Conv1d(256, 1, 1)
        self.N_proj = nn.Conv1d(256, 1, 1)

    def pitch_energy(self, en: Tensor, s: Tensor, frames: Tensor, host_frames: Tensor) -> tuple[Tensor, Tensor]:
        """F0 and energy [B, 2F] from the aligned features en [B, 640, F]; `frames` [B]
        on the device, `host_frames` the same on the host."""
        x = _lstm(self.shared, en.transpose(1, 2), host_frames).transpose(1, 2)
        width = x.shape[2]
        full = int(host_frames.min()) == width
        ext1, ext2 = extent(frames, frames, width, full=full), extent(frames, 2 * frames, 2 * width, full=full)
        out = []
        for blocks, proj in ((self.F0, self.F0_proj), (self.N, self.N_proj)):
            y = blocks[0](x, s, ext1, ext1)
            y = blocks[1](y, s, ext1, ext2)
            y = blocks[2](y, s, ext2, ext2)
            out.append(ext2.masked(proj(y))[:, 0])
        return out[0], out[1]


class TextEncoder(nn.Module):
    """Embedding, three conv-LayerNorm-LeakyReLU steps and a BiLSTM: [B, 512, T]."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(178, 512)
        self.cnn = nn.ModuleList([_ConvNorm() for _ in range(3)])
        self.lstm = _bilstm(512)

    def forward(self, tokens: Tensor, lengths: Tensor, valid: Tensor) -> Tensor:
        mask = valid[:, None, :].to(torch.float32)
        x = self.embedding(tokens).transpose(1, 2)
        for block in self.cnn:
            x = block(x * mask)
        return _lstm(self.lstm, x.transpose(1, 2), lengths).transpose(1, 2)


class _LayerNormChannels(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x.transpose(1, 2), self.gamma.shape, self.gamma, self.beta, _EPS).transpose(1, 2)


class _ConvNorm(nn.Sequential):
    def __init__(self) -> None:
        super().__init__(nn.Conv1d(512, 512, 5, padding=2), _LayerNormChannels(512), nn.LeakyReLU(0.2))


@dataclass(frozen=True)
class AcousticOut:
    """Stage A on a padded batch."""

    durations: Tensor
    """[B, T] int64 frames per token (0 past each item's tokens)."""
    frames: Tensor
    """[B] int64 on the host: each item's frames."""
    asr: Tensor
    """[B, 512, F] (zeros past each item's frames)."""
    f0: Tensor
    """[B, 2F]."""
    noise: Tensor
    """[B, 2F]."""


class Acoustic(nn.Module):
    """Stage A: the ALBERT features, durations, the alignment, pitch and energy."""

    def __init__(self) -> None:
        super().__init__()
        self.bert = Albert()
        self.bert_encoder = nn.Linear(768, 512)
        self.predictor = Predictor()
        self.text_encoder = TextEncoder()

    def forward(self, tokens: Tensor, lengths: Tensor, style: Tensor, speed: Tensor) -> AcousticOut:
        """`tokens` [B, T] (each item padded at both ends, then with zeros to T),
        `lengths` [B] its tokens (int64 on the host), `style` [B, 256], `speed` [B]. The
        duration head runs in float32 whatever the autocast: a rounded duration that moves
        moves every later frame. One copy to the host: the frames, which set the shapes."""
        host_lengths = lengths
        lengths = host_lengths.to(tokens.device)
        valid = torch.arange(tokens.shape[1], device=tokens.device)[None, :] < lengths[:, None]
        s = style[:, STYLE:]
        d_en = self.bert_encoder(self.bert(tokens, valid))
        d = self.predictor.text_encoder(d_en, s, host_lengths, valid)
        h = _lstm(self.predictor.lstm, d, host_lengths)
        with float32(h):
            logits = self.predictor.duration_proj.linear_layer(h.float())
        duration = torch.sigmoid(logits).sum(dim=-1) / speed[:, None]
        durations = torch.round(duration).clamp(min=1).to(torch.int64) * valid
        frames = durations.sum(dim=1)
        host_frames = frames.cpu()
        width = int(host_frames.max())
        # frame f of an item belongs to the token whose cumulated frames first exceed f
        ends = durations.cumsum(dim=1)
        f = torch.arange(width, device=tokens.device)
        token = torch.searchsorted(ends, f[None, :].expand(len(ends), -1).contiguous(), right=True)
        token = token.clamp(max=tokens.shape[1] - 1)
        inside = (f[None, :] < frames[:, None])[:, None, :]
        en = torch.gather(d.transpose(1, 2), 2, token[:, None, :].expand(-1, d.shape[2], -1)) * inside
        t_en = self.text_encoder(tokens, host_lengths, valid)
        asr = torch.gather(t_en, 2, token[:, None, :].expand(-1, t_en.shape[1], -1)) * inside
        f0, noise = self.predictor.pitch_energy(en, s, frames, host_frames)
        return AcousticOut(durations, host_frames, asr, f0, noise)


# -- stage B ---------------------------------------------------------------------------
class AdaINResBlock1(nn.Module):
    """Three steps of AdaIN-Snake-dilated conv (1, 3, 5), AdaIN-Snake-conv, each added
    to its input; Snake is x + sin(alpha x)^2 / alpha per channel."""

    def __init__(self, channels: int, kernel: int):
        super().__init__()
        self.convs1 = nn.ModuleList(
            [nn.Conv1d(channels, channels, kernel, dilation=d, padding=d * (kernel - 1) // 2) for d in (1, 3, 5)]
        )
        self.convs2 = nn.ModuleList([nn.Conv1d(channels, channels, kernel, padding=(kernel - 1) // 2) for _ in range(3)])
        self.adain1 = nn.ModuleList([AdaIN1d(channels) for _ in range(3)])
        self.adain2 = nn.ModuleList([AdaIN1d(channels) for _ in range(3)])
        self.alpha1 = nn.ParameterList([nn.Parameter(torch.ones(1, channels, 1)) for _ in range(3)])
        self.alpha2 = nn.ParameterList([nn.Parameter(torch.ones(1, channels, 1)) for _ in range(3)])

    def forward(self, x: Tensor, s: Tensor, ext: Extent) -> Tensor:
        for c1, c2, n1, n2, a1, a2 in zip(
            self.convs1, self.convs2, self.adain1, self.adain2, self.alpha1, self.alpha2, strict=True
        ):
            xt = n1(x, s, ext)
            xt = xt + (1 / a1) * torch.sin(a1 * xt).pow(2)
            xt = c1(ext.masked(xt))
            xt = n2(xt, s, ext)
            xt = xt + (1 / a2) * torch.sin(a2 * xt).pow(2)
            x = c2(ext.masked(xt)) + x
        return x


class _Source(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l_linear = nn.Linear(HARMONICS, 1)


class _Window(nn.Module):
    window: Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("window", torch.zeros(20))


class _InverseSTFT(nn.Module):
    inverse_basis: Tensor
    window_sum: Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("inverse_basis", torch.zeros(22, 1, 20))
        self.register_buffer("window_sum", torch.zeros(20))


class Generator(nn.Module):
    """The iSTFTNet generator: a 9-harmonic source, two upsamplings (x10, x6) each with
    three Snake resblocks and the source's spectrum mixed in, then 11 magnitudes and
    phases per 5 samples, and their inverse STFT."""

    def __init__(self) -> None:
        super().__init__()
        self.m_source = _Source()
        self.ups = nn.ModuleList(
            [nn.ConvTranspose1d(512, 256, 20, stride=10, padding=5), nn.ConvTranspose1d(256, 128, 12, stride=6, padding=3)]
        )
        self.resblocks = nn.ModuleList([AdaINResBlock1(ch, k) for ch in (256, 128) for k in (3, 7, 11)])
        self.noise_convs = nn.ModuleList([nn.Conv1d(22, 256, 12, stride=6, padding=3), nn.Conv1d(22, 128, 1)])
        self.noise_res = nn.ModuleList([AdaINResBlock1(256, 7), AdaINResBlock1(128, 11)])
        self.conv_post = nn.Conv1d(128, 22, 7, padding=3)
        self.stft = _Window()
        self.istft = _InverseSTFT()

    @staticmethod
    def dft(padded: Tensor, window: Tensor) -> tuple[Tensor, Tensor]:
        """The real and imaginary parts [B, frames, 11] of the padded signal [B, N + 20],
        framed by 20 every 5 and windowed. Near-empty bins (most of the high ones: the
        source's 9 harmonics fill the first two or three bins of 1,200 Hz) keep only
        rounding noise, whose phase differs between FFT implementations: ONNX Runtime's
        Bluestein FFT leaves ~1e-6 where this one leaves 0 (docs/KOKORO.md)."""
        spec = torch.fft.rfft(padded.unfold(1, 20, 5) * window, dim=-1)
        return spec.real, spec.imag

    def source(self, f0: Tensor, points: Tensor, phases: Tensor) -> Tensor:
        """The harmonic source [B, 300 P] from F0 [B, P] (Hz) and its running phase
        `phases` [B, P, 9] (`running_phase`, summed on the host). As the graph computes it:
        the phase times 2 pi 300, interpolated linearly (half-pixel, clamped to the item's
        last point) to the samples; sin, 0.1, voiced where the F0 is over 10 Hz; a linear
        mix of the harmonics and tanh. The export has no noise and no random initial phase."""
        f0 = f0.float()
        width = f0.shape[1]
        rad = phases.float() * 2.0 * math.pi * _UPSAMPLE
        j = torch.arange(width * _UPSAMPLE, device=f0.device, dtype=torch.float32)
        last = (points - 1)[:, None]
        x = torch.minimum(((j + 0.5) / _UPSAMPLE - 0.5).clamp(min=0)[None, :], last.float())
        x1 = torch.minimum(x.to(torch.int64), last)
        x2 = torch.minimum(x1 + 1, last)
        dx1 = (x - x1).abs()
        dx2 = (x - x2).abs()
        same = x1 == x2
        dx1 = torch.where(same, 0.5, dx1)[:, :, None]
        dx2 = torch.where(same, 0.5, dx2)[:, :, None]
        v1 = torch.gather(rad, 1, x1[:, :, None].expand(-1, -1, HARMONICS))
        v2 = torch.gather(rad, 1, x2[:, :, None].expand(-1, -1, HARMONICS))
        voiced = (f0 > 10).repeat_interleave(_UPSAMPLE, dim=1)[:, :, None]
        sines = torch.sin(dx2 * v1 + dx1 * v2) * 0.1 * voiced
        return torch.tanh(self.m_source.l_linear(sines))[:, :, 0]

    def spectrum(self, x: Tensor, samples: Tensor) -> Tensor:
        """Magnitudes and phases [B, 22, N / 5 + 1] of x [B, N], each item reflect-padded
        by 10 at its own ends (`samples` [B]) and framed by 20 every 5 with the Hann
        window; phases are atan(im / re) moved by pi where re < 0, as the graph has them.
        Two cases the graph leaves to its FFT's rounding: an exactly empty bin (a constant,
        unvoiced source) gets 0, and a real negative bin (DC, Nyquist, whose imaginary
        part is exactly 0 here) gets +pi, as atan2 and torch.angle give it: the graph's
        `im > 0` would give -pi, but ONNX Runtime's FFT leaves a small imaginary part
        there, and +pi brings the audio from 9.5 to 19.8 dB SNR of its (docs/KOKORO.md)."""
        b, n = x.shape
        idx = torch.arange(-10, n + 10, device=x.device)[None, :].expand(b, -1)
        end = samples[:, None]
        idx = torch.where(idx < 0, -idx, idx)
        idx = torch.where(idx >= end, 2 * (end - 1) - idx, idx).clamp(0, n - 1)
        re, im = self.dft(torch.gather(x, 1, idx), self.stft.window)
        # 0 / 0 where a bin is exactly empty (a constant source: unvoiced): atan2's 0
        angle = torch.atan(torch.where((re == 0) & (im == 0), 0.0, im / re))
        angle = torch.where(re < 0, torch.where(im >= 0, angle + math.pi, angle - math.pi), angle)
        magnitude = torch.sqrt(re * re + im * im)
        return torch.cat([magnitude, angle], dim=2).transpose(1, 2)

    def inverse(self, magnitude: Tensor, phase: Tensor, ext: Extent) -> Tensor:
        """Samples [B, 5 (frames - 1)] from magnitudes and phases [B, 11, frames]: the
        graph's transposed convolution with the inverse basis, its first 20 samples
        divided by the window sum where it is positive, times 4, 10 cut at each end."""
        spec = ext.masked(torch.cat([magnitude * torch.cos(phase), magnitude * torch.sin(phase)], dim=1))
        y = F.conv_transpose1d(spec, self.istft.inverse_basis, stride=5)[:, 0]
        window_sum = self.istft.window_sum
        positive = window_sum > torch.finfo(torch.float32).tiny
        head = torch.where(positive, y[:, :20] / torch.where(positive, window_sum, 1.0), y[:, :20])
        y = torch.cat([head, y[:, 20:]], dim=1) * 4.0
        return y[:, 10:-10]

    def forward(
        self, x: Tensor, s: Tensor, f0: Tensor, frames: Tensor, phases: Tensor, left_out: Tensor | None, full: bool
    ) -> Tensor:
        width = f0.shape[1] // 2
        ext2 = extent(frames, 2 * frames, 2 * width, left_out, full=full)
        ext20 = extent(frames, 20 * frames, 20 * width, left_out, full=full)
        ext120 = extent(frames, 120 * frames + 1, 120 * width + 1, left_out, full=full)
        with float32(x):
            har = ext120.masked(self.spectrum(self.source(f0, 2 * frames, phases), HOP * frames))
        har = har.to(x.dtype)
        x = self.ups[0](ext2.masked(F.leaky_relu(x, 0.1))) + self.noise_res[0](self.noise_convs[0](har), s, ext20)
        x = (self.resblocks[0](x, s, ext20) + self.resblocks[1](x, s, ext20) + self.resblocks[2](x, s, ext20)) / 3
        x = F.pad(self.ups[1](ext20.masked(F.leaky_relu(x, 0.1))), (1, 0), mode="reflect")
        x = x + self.noise_res[1](self.noise_convs[1](har), s, ext120)
        x = (self.resblocks[3](x, s, ext120) + self.resblocks[4](x, s, ext120) + self.resblocks[5](x, s, ext120)) / 3
        with float32(x):
            # the magnitudes' logs and the phases too: a bfloat16 logit is off by up to 1/256
            x = self.conv_post(ext120.masked(F.leaky_relu(x.float(), 0.01)))
            return self.inverse(torch.exp(x[:, :11]), torch.sin(x[:, 11:]), ext120)


class Decoder(nn.Module):
    """Stage B: aligned text features, F0 and energy -> audio, 600 samples a frame."""

    def __init__(self) -> None:
        super().__init__()
        self.encode = AdainResBlk1d(512 + 2, 1024)
        self.decode = nn.ModuleList(
            [AdainResBlk1d(1024 + 2 + 64, 1024) for _ in range(3)] + [AdainResBlk1d(1024 + 2 + 64, 512, upsample=True)]
        )
        self.F0_conv = nn.Conv1d(1, 1, 3, stride=2, padding=1)
        self.N_conv = nn.Conv1d(1, 1, 3, stride=2, padding=1)
        self.asr_res = nn.Sequential(nn.Conv1d(512, 64, 1))
        self.generator = Generator()

    def forward(
        self,
        asr: Tensor,
        f0: Tensor,
        noise: Tensor,
        style: Tensor,
        phases: Tensor,
        frames: Tensor,
        left_out: Tensor,
        *,
        full: bool,
        edges: bool,
    ) -> Tensor:
        """`asr` [B, 512, F], `f0` and `noise` [B, 2F], `style` [B, 256], `phases` [B, 2F,
        9] (`running_phase`), `frames` [B], `left_out` [B, 2] -> audio [B, 600 F] (zeros
        past each item's). Decided on the host: `full`, every item has F frames; `edges`,
        some item leaves frames out (a `left_out` not 0)."""
        s = style[:, :STYLE]
        width = asr.shape[2]
        weights = left_out if edges else None
        ext1 = extent(frames, frames, width, weights, full=full)
        ext2 = extent(frames, 2 * frames, 2 * width, weights, full=full)
        f0c = self.F0_conv(ext2.masked(f0[:, None]))
        nc = self.N_conv(ext2.masked(noise[:, None]))
        x = self.encode(torch.cat([asr, f0c, nc], dim=1), s, ext1, ext1)
        res = self.asr_res(asr)
        for block in self.decode[:3]:
            x = block(torch.cat([x, res, f0c, nc], dim=1), s, ext1, ext1)
        x = self.decode[3](torch.cat([x, res, f0c, nc], dim=1), s, ext1, ext2)
        audio = self.generator(x, s, f0, frames, phases, weights, full)
        keep = torch.arange(audio.shape[1], device=audio.device)[None, :] < (HOP * frames)[:, None]
        out: Tensor = audio * keep
        return out


def running_phase(f0: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The harmonic source's running phase [B, P, 9] (cycles per 300 samples) from F0
    [B, P] (Hz), each item starting at `start` [B, 9]: per point, frac(f0 * h / 24000)
    summed, in float32, one point after the other, as ONNX Runtime sums it (a parallel
    cumsum rounds otherwise, and the phase reaches ~1e4 rad, where each step's rounding
    is audible). Host work, so that the decoder's step holds no copy to the host."""
    harmonics = np.arange(1, HARMONICS + 1, dtype=np.float32)
    steps = np.asarray(f0, np.float32)[:, :, None] * harmonics / np.float32(SAMPLE_RATE)
    steps = steps - np.floor(steps)
    running = np.add.accumulate(steps, axis=1, dtype=np.float32)
    return np.asarray(running + np.asarray(start, np.float32)[:, None, :], np.float32)


def linear_modules(model: nn.Module) -> frozenset[str]:
    """Names of the modules whose weight the graph applies as `x @ W` (its nn.Linear)."""
    return frozenset(name for name, m in model.named_modules() if isinstance(m, nn.Linear))
