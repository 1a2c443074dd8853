"""Whisper as torch modules: the audio encoder and a text decoder with a static KV cache.

Written from the published architecture: two 1-D convolutions (the second with stride 2)
and GELU, then pre-norm transformer blocks over learned positions; a decoder of pre-norm
blocks (causal self-attention, cross-attention to the audio, an MLP) whose output is
multiplied by the token embedding. Parameter names match `runners/whisper/weights.py`.

The decoder keeps its self-attention keys and values in buffers of a fixed size (the
batch rows times the 448 text positions), written at the step's position, and the audio
side of cross-attention once per batch (`Cache`). A step therefore has the same shapes at
every position, which is what a CUDA graph needs (`runners/whisper/graphs.py`). Eager
steps read only the positions written so far.

This module holds no decoding policy (no search, no token rules) and no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from voxserve.runners.whisper.weights import Dims

__all__ = ["Cache", "Decoder", "Encoder", "Whisper"]

LAYER_NORM_EPS = 1e-5


class _SelfAttention(nn.Module):
    """Multi-head self-attention with q, k and v in one matrix (CTranslate2's layout)."""
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def split(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q, k, v as [batch, heads, time, head width]."""
        b, t, _ = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        return qkv[0], qkv[1], qkv[2]

    def merge(self, x: Tensor) -> Tensor:
        """Heads back side by side, through the output projection."""
        b, _, t, _ = x.shape
        out: Tensor = self.out(x.transpose(1, 2).reshape(b, t, -1))
        return out


class _EncoderBlock(nn.Module):
    """Pre-norm self-attention and MLP, each added to the residual stream."""
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.attn_norm = nn.LayerNorm(width, eps=LAYER_NORM_EPS)
        self.attn = _SelfAttention(width, heads)
        self.mlp_norm = nn.LayerNorm(width, eps=LAYER_NORM_EPS)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.attn.split(self.attn_norm(x))
        x = x + self.attn.merge(F.scaled_dot_product_attention(q, k, v))
        mlp: Tensor = self.fc2(F.gelu(self.fc1(self.mlp_norm(x))))
        return x + mlp


class Encoder(nn.Module):
    """Log-mel to audio states: two convolutions (the second halves the frames), learned
    positions, the blocks and a final norm."""
    def __init__(self, dims: Dims):
        super().__init__()
        self.conv1 = nn.Conv1d(dims.n_mels, dims.width, 3, padding=1)
        self.conv2 = nn.Conv1d(dims.width, dims.width, 3, stride=2, padding=1)
        self.positions = nn.Parameter(torch.zeros(dims.audio_ctx, dims.width), requires_grad=False)
        self.blocks = nn.ModuleList(_EncoderBlock(dims.width, dims.encoder_heads) for _ in range(dims.encoder_layers))
        self._blocks: list[_EncoderBlock] = list(self.blocks)  # type: ignore[arg-type]
        self.norm = nn.LayerNorm(dims.width, eps=LAYER_NORM_EPS)

    def forward(self, mel: Tensor) -> Tensor:
        """[batch, n_mels, frames] -> [batch, frames / 2, width]. A window shorter than
        30 s uses the first positions only."""
        x = F.gelu(self.conv1(mel))
        x = F.gelu(self.conv2(x)).transpose(1, 2)
        x = x + self.positions[: x.shape[1]]
        for block in self._blocks:
            x = block(x)
        out: Tensor = self.norm(x)
        return out


class _CrossAttention(nn.Module):
    """Attention from the text to the audio states; k and v in one matrix."""
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(width, width)
        self.kv = nn.Linear(width, 2 * width)
        self.out = nn.Linear(width, width)

    def keys_values(self, audio: Tensor) -> tuple[Tensor, Tensor]:
        """The audio's keys and values, [rows, heads, frames, head width]: computed once per
        batch, read at every step."""
        b, t, _ = audio.shape
        kv = self.kv(audio).view(b, t, 2, self.heads, -1).permute(2, 0, 3, 1, 4)
        return kv[0].contiguous(), kv[1].contiguous()


class _DecoderBlock(nn.Module):
    """Pre-norm causal self-attention (cached), cross-attention to the audio and MLP."""
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.attn_norm = nn.LayerNorm(width, eps=LAYER_NORM_EPS)
        self.attn = _SelfAttention(width, heads)
        self.cross_norm = nn.LayerNorm(width, eps=LAYER_NORM_EPS)
        self.cross = _CrossAttention(width, heads)
        self.mlp_norm = nn.LayerNorm(width, eps=LAYER_NORM_EPS)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def _cross_q(self, x: Tensor) -> Tensor:
        """Cross-attention queries [rows, heads, t, head width] of the residual stream."""
        b, t, _ = x.shape
        q: Tensor = self.cross.q(self.cross_norm(x))
        return q.view(b, t, self.heads, -1).transpose(1, 2)

    def forward(
        self,
        x: Tensor,
        cache_k: Tensor,
        cache_v: Tensor,
        cross_k: Tensor,
        cross_v: Tensor,
        positions: Tensor,
        length: int,
        mask: Tensor | None,
    ) -> Tensor:
        """`x` [rows, t, width] at `positions` (t of them); its keys and values go into the
        cache there; attention reads cache positions [0, length) under `mask`."""
        q, k, v = self.attn.split(self.attn_norm(x))
        cache_k.index_copy_(2, positions, k)
        cache_v.index_copy_(2, positions, v)
        keys, values = cache_k[:, :, :length], cache_v[:, :, :length]
        x = x + self.attn.merge(F.scaled_dot_product_attention(q, keys, values, attn_mask=mask))
        x = x + self.cross.out(_merge(F.scaled_dot_product_attention(self._cross_q(x), cross_k, cross_v)))
        mlp: Tensor = self.fc2(F.gelu(self.fc1(self.mlp_norm(x))))
        return x + mlp

    def cross_scores(self, x: Tensor, cross_k: Tensor) -> Tensor:
        """Pre-softmax cross-attention scores [rows, heads, t, frames] for `x` (the input
        of this block's cross-attention: the residual stream after self-attention)."""
        q = self._cross_q(x)
        scores: Tensor = (q @ cross_k.transpose(-1, -2)) * q.shape[-1] ** -0.5
        return scores

    def full(self, x: Tensor, causal: Tensor, cross_k: Tensor, cross_v: Tensor) -> tuple[Tensor, Tensor]:
        """The whole sequence at once, without the cache (alignment): the block's output
        and its cross-attention scores."""
        q, k, v = self.attn.split(self.attn_norm(x))
        x = x + self.attn.merge(F.scaled_dot_product_attention(q, k, v, attn_mask=causal))
        scores = self.cross_scores(x, cross_k)
        weights = torch.softmax(scores.float(), dim=-1).to(cross_v.dtype)
        x = x + self.cross.out(_merge(weights @ cross_v))
        mlp: Tensor = self.fc2(F.gelu(self.fc1(self.mlp_norm(x))))
        return x + mlp, scores


def _merge(x: Tensor) -> Tensor:
    """[rows, heads, t, head width] -> [rows, t, width]."""
    b, _, t, _ = x.shape
    return x.transpose(1, 2).reshape(b, t, -1)


@dataclass
class Cache:
    """One batch's decoder state: self-attention keys and values per layer in fixed-size
    buffers [rows, heads, text_ctx, head width], and the audio's cross-attention keys and
    values [rows, heads, frames, head width]."""

    self_k: list[Tensor]
    self_v: list[Tensor]
    cross_k: list[Tensor]
    cross_v: list[Tensor]

    @property
    def rows(self) -> int:
        """Decoding rows: pieces times beams (or samples)."""
        return self.self_k[0].shape[0]

    def reorder(self, rows: Tensor, written: int) -> None:
        """Rows take the state of `rows` (beam search keeps the best continuations), in
        place, so the buffers keep their addresses; only the first `written` positions
        hold anything, so only they are copied."""
        for buffer in (*self.self_k, *self.self_v):
            part = buffer[:, :, :written]
            part.copy_(part.index_select(0, rows))



class Decoder(nn.Module):
    """Tokens to next-token logits over the audio states; the output projection is the
    token embedding, transposed."""
    def __init__(self, dims: Dims):
        super().__init__()
        self.dims = dims
        self.embedding = nn.Parameter(torch.zeros(dims.vocab, dims.width), requires_grad=False)
        self.positions = nn.Parameter(torch.zeros(dims.text_ctx, dims.width), requires_grad=False)
        self.blocks = nn.ModuleList(_DecoderBlock(dims.width, dims.decoder_heads) for _ in range(dims.decoder_layers))
        self._blocks: list[_DecoderBlock] = list(self.blocks)  # type: ignore[arg-type]
        self.norm = nn.LayerNorm(dims.width, eps=LAYER_NORM_EPS)

    def new_cache(self, audio: Tensor, repeat: int = 1) -> Cache:
        """A cache for `audio` [batch, frames, width], each row repeated `repeat` times
        (beams or samples of one piece sit next to each other)."""
        rows = audio.shape[0] * repeat
        heads = self.dims.decoder_heads
        head_width = self.dims.width // heads
        shape = (rows, heads, self.dims.text_ctx, head_width)
        cross = [block.cross.keys_values(audio) for block in self._blocks]
        if repeat > 1:
            cross = [(k.repeat_interleave(repeat, dim=0), v.repeat_interleave(repeat, dim=0)) for k, v in cross]
        return Cache(
            self_k=[audio.new_zeros(shape) for _ in self._blocks],
            self_v=[audio.new_zeros(shape) for _ in self._blocks],
            cross_k=[k for k, _ in cross],
            cross_v=[v for _, v in cross],
        )

    def fill_audio(self, cache: Cache, audio: Tensor, repeat: int = 1) -> None:
        """Write `audio`'s cross-attention keys and values into an existing cache's
        buffers (a graph's), each row repeated `repeat` times."""
        for i, block in enumerate(self._blocks):
            k, v = block.cross.keys_values(audio)
            cache.cross_k[i].view(-1, repeat, *k.shape[1:]).copy_(k.unsqueeze(1))
            cache.cross_v[i].view(-1, repeat, *v.shape[1:]).copy_(v.unsqueeze(1))

    def forward(self, tokens: Tensor, start: int, cache: Cache) -> Tensor:
        """Logits [rows, t, vocab] of `tokens` [rows, t] at positions start..start+t-1,
        eager: attention reads only the positions written so far."""
        t = tokens.shape[1]
        positions = torch.arange(start, start + t, device=tokens.device)
        mask = None
        if t > 1:
            mask = torch.ones(t, start + t, dtype=torch.bool, device=tokens.device).tril(start)
        return self._run(tokens, positions, start + t, mask, cache)

    def step(self, tokens: Tensor, position: Tensor, cache: Cache) -> Tensor:
        """Logits [rows, vocab] of one token per row at `position` (a 1-element tensor),
        with fixed shapes: attention reads every cache position, masked past `position`.
        This is the call a CUDA graph captures."""
        ctx = self.dims.text_ctx
        mask = torch.arange(ctx, device=tokens.device) <= position
        return self._run(tokens, position, ctx, mask.view(1, ctx), cache)[:, 0]

    def _run(self, tokens: Tensor, positions: Tensor, length: int, mask: Tensor | None, cache: Cache) -> Tensor:
        """Embed at `positions`, run the blocks over the cache's first `length` positions."""
        x = F.embedding(tokens, self.embedding) + self.positions[positions]
        for i, block in enumerate(self._blocks):
            x = block(x, cache.self_k[i], cache.self_v[i], cache.cross_k[i], cache.cross_v[i], positions, length, mask)
        out: Tensor = self.norm(x)
        return out @ self.embedding.t()

    def align(self, tokens: Tensor, audio: Tensor, heads: list[tuple[int, int]]) -> tuple[Tensor, Tensor]:
        """Teacher-forced pass over whole sequences [rows, t] (no cache): the logits
        [rows, t, vocab] and the pre-softmax cross-attention scores of the alignment
        `heads`, [rows, len(heads), t, frames]."""
        t = tokens.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril()
        x = F.embedding(tokens, self.embedding) + self.positions[:t]
        wanted: list[Tensor] = []
        for i, block in enumerate(self._blocks):
            k, v = block.cross.keys_values(audio)
            x, scores = block.full(x, causal, k, v)
            wanted.extend(scores[:, h] for layer, h in heads if layer == i)
        return self.norm(x) @ self.embedding.t(), torch.stack(wanted, dim=1)


class Whisper(nn.Module):
    """The encoder and the decoder; its state dict is `Weights.tensors`."""
    def __init__(self, dims: Dims):
        super().__init__()
        self.dims = dims
        self.encoder = Encoder(dims)
        self.decoder = Decoder(dims)
