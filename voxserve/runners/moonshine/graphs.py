"""Moonshine's two graphs made ready for batched serving, from the ORT-format files shipped
with `moonshine-cpp`.

The shipped files keep most weights as uint8 with a Cast -> Mul -> Add chain in front of
them, and ONNX Runtime does not fold constants in an ORT-format model: it would dequantize
every weight on every call, most of a decoder step's time. Each file is read
back as ONNX and its chains are rewritten once:

- The encoder's MatMul weights become `MatMulNBits` (8 bits, `BLOCK` rows a block, one scale
  and zero point per block: the tensor's own, since the shipped ones are per tensor) on the
  shipped int8 values shifted to uint8, so the weights stay one byte each and the kernel
  dequantizes them inside the product, with float activations (accuracy level 0).
- Everything else is folded into float32 initializers (the same float32 arithmetic the
  graph does): the encoder's convolutions, and every decoder weight. A decoder step has
  one row a piece; the 8-bit kernels that are fast there quantize the activations, and a
  piece's log-probabilities then move with the batch it runs in (up to 0.05), while
  `MatMulNBits` with float activations takes several times a float32 step's time.

Neither graph takes a mask. The decoder gets one here: `ENCODER_BIAS` [batch, frames],
0 on a piece's frames and -inf past its end, added to every cross-attention's scores
before their softmax, so a piece padded to the batch's longest reads only its own frames.
The encoder stays as shipped: its first normalization takes its statistics over the whole
input and its attention is bidirectional, so padding changes every frame; it runs on
each piece at its own length.

The rewritten graphs are kept in the runners' cache (`prepared_graphs`), named by the
shipped files' digest, so that a start reads them instead of rewriting them.
This module and `onnx_runner.py` are the only Moonshine modules that import onnxruntime.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from voxserve.runners.files import default_cache_dir, write_atomically

__all__ = [
    "ENCODER_BIAS",
    "PreparedGraphs",
    "decoder_graph",
    "encoder_graph",
    "fold_dequantized_weights",
    "pack_matmul_weights",
    "prepared_graphs",
    "read_ort",
]

ENCODER_BIAS = "encoder_attention_bias"
"""The decoder's added input: float32 [batch, encoder frames], 0 to attend, -inf to skip."""
_BIAS_4D = "encoder_attention_bias_4d"
BLOCK = 128
"""`MatMulNBits` rows a block. The encoder's widths (416, 1664) pad to 512 and 1664; the
fewest blocks keep the fewest scales, and smaller blocks are no faster."""
LAYOUT = "m2"
"""Names what the rewrite does: a cached graph of another layout is not read."""
ENCODER_FILE = "encoder_model.ort"
DECODER_FILE = "decoder_model_merged.ort"


@dataclass(frozen=True)
class PreparedGraphs:
    """The rewritten graphs of one model, as ONNX files."""

    encoder: Path
    decoder: Path


def prepared_graphs(model_dir: Path, cache_dir: Path | None = None) -> PreparedGraphs:
    """The rewritten graphs of the model in `model_dir` (`ENCODER_FILE` and `DECODER_FILE`),
    from the cache, or made and cached first."""
    digest = hashlib.sha256(LAYOUT.encode())
    for name in (ENCODER_FILE, DECODER_FILE):
        with (model_dir / name).open("rb") as f:
            digest.update(hashlib.file_digest(f, "sha256").digest())
    folder = (cache_dir or default_cache_dir()) / "moonshine" / digest.hexdigest()[:16]
    graphs = PreparedGraphs(folder / "encoder.onnx", folder / "decoder.onnx")
    for target, make, source in (
        (graphs.encoder, encoder_graph, ENCODER_FILE),
        (graphs.decoder, decoder_graph, DECODER_FILE),
    ):
        if not target.is_file():
            write_atomically(target, _writer(make(model_dir / source)))
    return graphs


def _writer(data: bytes) -> Callable[[str], None]:
    def write(path: str) -> None:
        Path(path).write_bytes(data)

    return write


def read_ort(path: Path) -> onnx.ModelProto:
    """The ORT-format model at `path` as an ONNX model, written out by ONNX Runtime itself
    with no optimization applied, so that it is the shipped graph node for node."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "model.onnx"
        opts.optimized_model_filepath = str(out)
        ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        return onnx.load(str(out))


def fold_dequantized_weights(graph: onnx.GraphProto) -> int:
    """Replace each Cast(uint8 initializer) -> Mul(initializer) -> Add(initializer) chain of
    `graph`'s top level by one float32 initializer with the chain's value; returns how many."""
    chains, _ = _chains(graph)
    folded: list[onnx.NodeProto] = []
    for c in chains:
        value = c.q.astype(np.float32) * c.scale + c.offset
        graph.initializer.append(numpy_helper.from_array(value.astype(np.float32), c.add.output[0]))
        folded += [c.cast, c.mul, c.add]
    for node in folded:
        graph.node.remove(node)
    used = {name for node in _all_nodes(graph) for name in node.input}
    used |= {o.name for o in graph.output}
    for tensor in [t for t in graph.initializer if t.name not in used]:
        graph.initializer.remove(tensor)
    return len(folded) // 3


def pack_matmul_weights(model: onnx.ModelProto, block: int = BLOCK) -> int:
    """Replace each MatMul of `model`'s top level whose weight is a Cast(int8 initializer)
    -> Mul(scale) -> Add(offset) chain, with one scale and offset for the whole tensor,
    by an 8-bit `MatMulNBits` on the same int8 values; returns how many.

    The chain computes q * scale + offset, with offset = -zero_point * scale, and
    `MatMulNBits` computes (u - zero_point') * scale with u = q + 128 and zero_point' =
    zero_point + 128, which is the same value. Rows past the weight's last (to fill the last
    block) hold the zero point, so they weigh 0."""
    graph = model.graph
    chains, users = _chains(graph)
    done: list[onnx.NodeProto] = []
    packed = 0
    for c in chains:
        cast, add, q, scale, offset = c.cast, c.add, c.q, c.scale, c.offset
        matmuls = users.get(add.output[0], [])
        if (
            q.dtype != np.int8
            or q.ndim != 2
            or scale.size != 1
            or offset.size != 1
            or not matmuls
            or any(m.op_type != "MatMul" or m.input[1] != add.output[0] for m in matmuls)
            or any(m not in graph.node for m in matmuls)
        ):
            continue
        s = float(scale.reshape(-1)[0])
        zero = round(-float(offset.reshape(-1)[0]) / s) + 128
        k, n = q.shape
        blocks = -(-k // block)
        u = np.full((blocks * block, n), zero, np.uint8)
        u[:k] = (q.astype(np.int16) + 128).astype(np.uint8)
        name = cast.input[0]
        graph.initializer.extend(
            [
                numpy_helper.from_array(
                    np.ascontiguousarray(u.T.reshape(n, blocks, block)), name + "_nbits"
                ),
                numpy_helper.from_array(np.full(n * blocks, s, np.float32), name + "_nbits_scale"),
                numpy_helper.from_array(np.full(n * blocks, zero, np.uint8), name + "_nbits_zero"),
            ]
        )
        for matmul in matmuls:
            at = list(graph.node).index(matmul)
            graph.node.remove(matmul)
            inputs = [matmul.input[0], name + "_nbits", name + "_nbits_scale", name + "_nbits_zero"]
            graph.node.insert(
                at,
                helper.make_node(
                    "MatMulNBits",
                    inputs,
                    list(matmul.output),
                    name=matmul.name,
                    domain="com.microsoft",
                    K=k,
                    N=n,
                    bits=8,
                    block_size=block,
                    accuracy_level=0,
                ),
            )
            packed += 1
        done += [cast, c.mul, add]
    for node in done:
        graph.node.remove(node)
    if packed and not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return packed


def encoder_graph(path: Path) -> bytes:
    """The encoder, its MatMul weights packed (`pack_matmul_weights`) and the rest folded."""
    model = read_ort(path)
    if pack_matmul_weights(model) == 0:
        raise ValueError(f"{path}: no int8 MatMul weight found to pack")
    fold_dequantized_weights(model.graph)
    return bytes(model.SerializeToString())


def decoder_graph(path: Path) -> bytes:
    """The merged decoder, its weights folded and its cross-attention masked by
    `ENCODER_BIAS` in both branches (the first step's and the cached steps')."""
    model = read_ort(path)
    graph = model.graph
    fold_dequantized_weights(graph)
    bias_shape = ["batch_size", "encoder_sequence_length"]
    bias = helper.make_tensor_value_info(ENCODER_BIAS, onnx.TensorProto.FLOAT, bias_shape)
    graph.input.append(bias)
    axes = numpy_helper.from_array(np.array([1, 2], dtype=np.int64), "encoder_attention_bias_axes")
    graph.initializer.append(axes)
    # [batch, frames] -> [batch, 1 (heads), 1 (queries), frames], broadcast over both.
    unsqueeze = helper.make_node(
        "Unsqueeze", [ENCODER_BIAS, axes.name], [_BIAS_4D], name="encoder_bias_unsqueeze"
    )
    if_index = next(i for i, n in enumerate(graph.node) if n.op_type == "If")
    graph.node.insert(if_index, unsqueeze)
    masked = 0
    for attr in graph.node[if_index + 1].attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            attr.g.name = attr.g.name or attr.name  # ONNX Runtime writes branches unnamed
            masked += _mask_cross_attention(attr.g)
    if masked == 0:
        raise ValueError(f"{path}: no cross-attention softmax found to mask")
    return bytes(model.SerializeToString())


def _mask_cross_attention(branch: onnx.GraphProto) -> int:
    """Add the outer scope's bias to the scores in front of each cross-attention softmax."""
    softmaxes = [
        (i, n)
        for i, n in enumerate(branch.node)
        if n.op_type == "Softmax" and "encoder_attn" in n.name
    ]
    for i, softmax in reversed(softmaxes):
        scores = softmax.input[0]
        biased = f"{scores}_masked"
        add = helper.make_node("Add", [scores, _BIAS_4D], [biased], name=f"{softmax.name}_mask")
        softmax.input[0] = biased
        branch.node.insert(i, add)
    return len(softmaxes)


@dataclass(frozen=True)
class _Chain:
    """Cast(quantized initializer) -> Mul(scale initializer) -> Add(offset initializer):
    how the shipped graphs dequantize a weight on every call."""

    cast: onnx.NodeProto
    mul: onnx.NodeProto
    add: onnx.NodeProto
    q: np.ndarray
    scale: np.ndarray
    offset: np.ndarray


def _chains(graph: onnx.GraphProto) -> tuple[list[_Chain], dict[str, list[onnx.NodeProto]]]:
    """The dequantizing chains of `graph`'s top level, and the nodes that read each value
    (of the subgraphs too)."""
    inits = {t.name: t for t in graph.initializer}
    users: dict[str, list[onnx.NodeProto]] = {}
    for node in _all_nodes(graph):
        for name in node.input:
            users.setdefault(name, []).append(node)
    chains = []
    for cast in list(graph.node):
        if cast.op_type != "Cast" or cast.input[0] not in inits:
            continue
        mul = _single_user(users, cast.output[0], "Mul")
        add = mul and _single_user(users, mul.output[0], "Add")
        if mul is None or not add:
            continue
        scale, offset = _other_input(mul, cast.output[0]), _other_input(add, mul.output[0])
        if scale not in inits or offset not in inits:
            continue
        arrays = (numpy_helper.to_array(inits[n]) for n in (cast.input[0], scale, offset))
        chains.append(_Chain(cast, mul, add, *arrays))
    return chains, users


def _single_user(
    users: dict[str, list[onnx.NodeProto]], name: str, op: str
) -> onnx.NodeProto | None:
    nodes = users.get(name, [])
    return nodes[0] if len(nodes) == 1 and nodes[0].op_type == op else None


def _other_input(node: onnx.NodeProto, name: str) -> str:
    return str(next(i for i in node.input if i != name))


def _all_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The nodes of `graph` and of every subgraph in it: a branch may read an initializer
    of the outer scope."""
    nodes = list(graph.node)
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                nodes += _all_nodes(attr.g)
    return nodes
