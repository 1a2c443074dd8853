"""CAM++ (3D-Speaker's `CAMPPlus`, 192-d embedding) written out as an ONNX graph from its
state dict, for a fixed number of input frames.

The network: a 2-D convolutional front (FCM: a 3x3 stem, two stages of two residual
blocks, a strided 3x3 conv) over 80 log-mel bands; a strided TDNN layer; three densely
connected blocks (12, 24 and 16 layers, growth 32, dilations 1, 2, 2) whose layers are
"context-aware masked" (a local 3-tap conv gated by a sigmoid of the utterance's mean
plus the mean of its 100-frame segment); a transition layer after each block;
mean-and-standard-deviation pooling; a dense layer with a batch norm without affine
parameters. Batch norms stay `BatchNormalization` nodes: ONNX Runtime folds those that
follow a convolution into it.

With the frame count fixed, the context pooling is one constant matrix (T' x T') applied
by `MatMul`, so the graph has no shape arithmetic. The batch dimension is free.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["BLOCKS", "EMBEDDING_DIM", "MEL_BANDS", "build_campplus", "pooled_frames"]

MEL_BANDS = 80
EMBEDDING_DIM = 192
BLOCKS = ((12, 1), (24, 2), (16, 2))
"""(layers, dilation) of each densely connected block; every layer's kernel is 3."""
SEGMENT_FRAMES = 100
"""The CAM layers' context segment, in frames after the strided TDNN layer."""
BN_EPS = 1e-5
OPSET = 17


def pooled_frames(frames: int) -> int:
    """Frames after the TDNN layer (kernel 5, stride 2, padding 2)."""
    return (frames + 4 - 5) // 2 + 1


def _context_matrix(t: int) -> np.ndarray:
    """x @ M = the utterance mean plus the mean of each frame's 100-frame segment (the
    last segment averaged over the frames it has)."""
    m = np.full((t, t), 1.0 / t, dtype=np.float64)
    for start in range(0, t, SEGMENT_FRAMES):
        end = min(t, start + SEGMENT_FRAMES)
        m[start:end, start:end] += 1.0 / (end - start)
    return m.astype(np.float32)


class _Builder:
    def __init__(self, state: dict[str, np.ndarray]):
        self.state = state
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, hint: str, value: np.ndarray) -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def weight(self, key: str) -> str:
        return self.const(key, self.state[key].astype(np.float32))

    def node(self, op: str, inputs: list[str], hint: str, **attrs: Any) -> str:
        out = self.name(hint)
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def conv(self, x: str, key: str, stride: int | tuple[int, int] = 1, pad: int | tuple[int, int] = 0,
             dilation: int = 1, bias: bool = False) -> str:
        w = self.state[f"{key}.weight"]
        dims = w.ndim - 2
        strides = list(stride) if isinstance(stride, tuple) else [stride] * dims
        pads = list(pad) if isinstance(pad, tuple) else [pad] * dims
        inputs = [x, self.weight(f"{key}.weight")]
        if bias:
            inputs.append(self.weight(f"{key}.bias"))
        return self.node("Conv", inputs, key, strides=strides, pads=pads + pads,
                         dilations=[dilation] * dims, kernel_shape=list(w.shape[2:]))

    def bn(self, x: str, key: str) -> str:
        mean = self.state[f"{key}.running_mean"].astype(np.float32)
        scale = self.state.get(f"{key}.weight", np.ones_like(mean)).astype(np.float32)
        shift = self.state.get(f"{key}.bias", np.zeros_like(mean)).astype(np.float32)
        inputs = [x, self.const(f"{key}.s", scale), self.const(f"{key}.b", shift),
                  self.const(f"{key}.m", mean), self.const(f"{key}.v", self.state[f"{key}.running_var"].astype(np.float32))]
        return self.node("BatchNormalization", inputs, key, epsilon=BN_EPS)

    def relu(self, x: str) -> str:
        return self.node("Relu", [x], "relu")


def _res_block(b: _Builder, x: str, key: str, stride: int) -> str:
    out = b.relu(b.bn(b.conv(x, f"{key}.conv1", (stride, 1), 1), f"{key}.bn1"))
    out = b.bn(b.conv(out, f"{key}.conv2", 1, 1), f"{key}.bn2")
    if f"{key}.shortcut.0.weight" in b.state:
        short = b.bn(b.conv(x, f"{key}.shortcut.0", (stride, 1), 0), f"{key}.shortcut.1")
    else:
        short = x
    return b.relu(b.node("Add", [out, short], "res"))


def _cam_layer(b: _Builder, x: str, key: str, dilation: int, context: str) -> str:
    h = b.relu(b.bn(x, f"{key}.nonlinear1.batchnorm"))
    h = b.conv(h, f"{key}.linear1")
    h = b.relu(b.bn(h, f"{key}.nonlinear2.batchnorm"))
    local = b.conv(h, f"{key}.cam_layer.linear_local", 1, dilation, dilation)
    ctx = b.node("MatMul", [h, context], "context")
    gate = b.relu(b.conv(ctx, f"{key}.cam_layer.linear1", bias=True))
    gate = b.node("Sigmoid", [b.conv(gate, f"{key}.cam_layer.linear2", bias=True)], "gate")
    return b.node("Mul", [local, gate], "masked")


def build_campplus(state: dict[str, np.ndarray], frames: int) -> onnx.ModelProto:
    """The graph: input `fbank` [batch, frames, 80] (mean-normalised log-mel), output
    `embedding` [batch, 192]."""
    b = _Builder(state)
    x = b.node("Transpose", ["fbank"], "bands_first", perm=[0, 2, 1])
    x = b.node("Unsqueeze", [x, b.const("axis1", np.array([1], np.int64))], "image")
    x = b.relu(b.bn(b.conv(x, "head.conv1", 1, 1), "head.bn1"))
    for stage in ("layer1", "layer2"):
        x = _res_block(b, x, f"head.{stage}.0", 2)
        x = _res_block(b, x, f"head.{stage}.1", 1)
    x = b.relu(b.bn(b.conv(x, "head.conv2", (2, 1), 1), "head.bn2"))
    channels = state["head.conv2.weight"].shape[0] * math.ceil(MEL_BANDS / 8)
    x = b.node("Reshape", [x, b.const("flat", np.array([0, channels, frames], np.int64))], "fcm")
    x = b.relu(b.bn(b.conv(x, "xvector.tdnn.linear", 2, 2), "xvector.tdnn.nonlinear.batchnorm"))
    t = pooled_frames(frames)
    context = b.const("context", _context_matrix(t))
    for i, (layers, dilation) in enumerate(BLOCKS, start=1):
        for j in range(1, layers + 1):
            out = _cam_layer(b, x, f"xvector.block{i}.tdnnd{j}", dilation, context)
            x = b.node("Concat", [x, out], "dense", axis=1)
        x = b.relu(b.bn(x, f"xvector.transit{i}.nonlinear.batchnorm"))
        x = b.conv(x, f"xvector.transit{i}.linear")
    x = b.relu(b.bn(x, "xvector.out_nonlinear.batchnorm"))
    mean = b.node("ReduceMean", [x], "mean", axes=[2], keepdims=1)
    dev = b.node("Sub", [x, mean], "dev")
    sq = b.node("ReduceSum", [b.node("Mul", [dev, dev], "sq"), b.const("axes2", np.array([2], np.int64))], "ss", keepdims=1)
    std = b.node("Sqrt", [b.node("Div", [sq, b.const("n1", np.array(t - 1, np.float32))], "var")], "std")
    stats = b.node("Concat", [mean, std], "stats", axis=1)
    x = b.bn(b.conv(stats, "xvector.dense.linear"), "xvector.dense.nonlinear.batchnorm")
    b.nodes.append(helper.make_node("Squeeze", [x, b.const("axes_last", np.array([2], np.int64))], ["embedding"]))
    graph = helper.make_graph(
        b.nodes, "campplus",
        [helper.make_tensor_value_info("fbank", TensorProto.FLOAT, ["batch", frames, MEL_BANDS])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", EMBEDDING_DIM])],
        b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
