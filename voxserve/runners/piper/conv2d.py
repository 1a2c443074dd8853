"""Run a graph's 1-D convolutions as 2-D ones over a height of 1.

ONNX Runtime's CPU provider has two convolution paths. A 2-D `Conv` whose channels are a
multiple of the vector width is rewritten by its layout optimizer into the blocked NCHWc
form, with kernels tuned for it; a 1-D `Conv` (input [N, C, T]) is not, and runs as
im2col and a matrix product. The two compute the same sums, in another order.

- `convs_as_2d` rewrites each 1-D `Conv` with a constant weight as Unsqueeze (height 1)
  -> 2-D `Conv` (kernel 1 x K) -> Squeeze, so every tensor between the other nodes keeps
  its shape and name;
- `upsamplers_as_convs` rewrites HiFi-GAN's upsampling `ConvTranspose` (which has no
  blocked form) as two 2-D convolutions over its output phases and an interleave.

On the Piper voice (one thread, this 2-core machine) the first made the vocoder
0.87-0.90x and the flow 0.89-0.95x of their time, and the second the vocoder 0.95-0.96x
more, with outputs within float32 rounding (vocoder PCM 1.4e-7 at most, the flow's z
1.1e-5); `docs/BENCHMARKS.md`.

Pure graph code: a ModelProto in, the same one changed; no sessions, no files.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["convs_as_2d", "upsamplers_as_convs"]

MIN_BLOCK = 8
"""A Conv is rewritten only if its output channels are a multiple of this: ONNX Runtime
pads them to its block (8 or 16 channels) in the blocked form, so Piper's last conv (one
output channel) would compute 16 channels for one: 1.34 ms instead of ~0.3 ms."""
_AXES = "conv2d_height_axis"
"""The initializer holding [2], the height axis, for Unsqueeze and Squeeze (opset 13+)."""


def _opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    raise ValueError("the model imports no default-domain opset")


def _attributes_2d(node: onnx.NodeProto) -> list[onnx.AttributeProto]:
    """The node's attributes for a kernel of height 1: each per-axis list gains a
    leading 1 (pads: a leading 0 at each end)."""
    out = []
    for attribute in node.attribute:
        value = helper.get_attribute_value(attribute)
        if attribute.name in ("kernel_shape", "strides", "dilations"):
            value = [1, *value]
        elif attribute.name == "pads":
            begin, end = value
            value = [0, begin, 0, end]
        out.append(helper.make_attribute(attribute.name, value))
    return out


def convs_as_2d(model: onnx.ModelProto) -> int:
    """Rewrite every 1-D `Conv` of the main graph whose weight is an initializer (3-D) as
    a 2-D one over height 1, in place; returns how many. A weight that another node also
    reads is copied, not changed."""
    graph = model.graph
    weights = {init.name: init for init in graph.initializer}
    other_readers = set()
    """Tensors read by a node other than as a Conv's weight."""
    for node in graph.node:
        for index, name in enumerate(node.input):
            if not (node.op_type == "Conv" and index == 1):
                other_readers.add(name)
    axes = _axes(model)

    converted: dict[str, str] = {}
    """1-D weight -> its 2-D initializer."""
    nodes: list[onnx.NodeProto] = []
    count = 0
    for node in graph.node:
        weight = weights.get(node.input[1]) if node.op_type == "Conv" and len(node.input) > 1 else None
        if (
            node.domain not in ("", "ai.onnx")
            or weight is None
            or len(weight.dims) != 3
            or weight.dims[0] % MIN_BLOCK
        ):
            nodes.append(node)
            continue
        name = weight.name
        if name not in converted:
            array = numpy_helper.to_array(weight)[:, :, np.newaxis, :]
            if name not in other_readers:
                weight.CopyFrom(numpy_helper.from_array(array, name))
                converted[name] = name
            else:
                copy = f"{name}_2d"
                graph.initializer.append(numpy_helper.from_array(array, copy))
                converted[name] = copy
        source, target = node.input[0], node.output[0]
        tall_in, tall_out = f"{target}_2d_in", f"{target}_2d_out"
        nodes.append(_reshaping("Unsqueeze", source, tall_in, f"{node.name}_unsqueeze", axes))
        conv = helper.make_node("Conv", [tall_in, converted[name], *node.input[2:]], [tall_out], name=node.name)
        conv.attribute.extend(_attributes_2d(node))
        nodes.append(conv)
        nodes.append(_reshaping("Squeeze", tall_out, target, f"{node.name}_squeeze", axes))
        count += 1
    del graph.node[:]
    graph.node.extend(nodes)
    return count


def _axes(model: onnx.ModelProto) -> list[str]:
    """The Unsqueeze/Squeeze axes input ([2]) where the opset takes one, made once."""
    if _opset(model) < 13:
        return []
    if not any(init.name == _AXES for init in model.graph.initializer):
        model.graph.initializer.append(numpy_helper.from_array(np.array([2], np.int64), _AXES))
    return [_AXES]


def _reshaping(op: str, source: str, target: str, name: str, axes: list[str]) -> onnx.NodeProto:
    """Unsqueeze or Squeeze at the height axis: its axes an input (`axes`, opset 13+) or
    an attribute."""
    if axes:
        return helper.make_node(op, [source, *axes], [target], name=name)
    return helper.make_node(op, [source], [target], name=name, axes=[2])


def upsamplers_as_convs(model: onnx.ModelProto) -> int:
    """Rewrite each 1-D `ConvTranspose` that upsamples by s with a kernel of 2s and s/2
    of padding (HiFi-GAN's, Piper's vocoder) as two 2-D convolutions over its input, one
    per half of the s output phases, then an interleave; in place, returns how many.

    With kernel 2s, output sample n = j*s + r (phase r) takes two input samples: for
    r < s/2, x[j - 1] through tap r + s/2 + s and x[j] through tap r + s/2; for r >= s/2,
    x[j] through tap r + s/2 and x[j + 1] through tap r - s/2. Each half is one 2-tap
    convolution with (s/2 * out) channels (padded on the left, or on the right), and
    their channels, (phase, out) in order, are reshaped and transposed into time. ONNX
    Runtime runs the convolutions in its blocked form; its ConvTranspose has none."""
    graph = model.graph
    weights = {init.name: init for init in graph.initializer}
    axes = _axes(model)
    nodes: list[onnx.NodeProto] = []
    count = 0
    for node in graph.node:
        if _is_upsampler(node, weights):
            nodes += _as_phase_convs(graph, node, weights, axes)
            count += 1
        else:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return count


def _phase_taps(kernel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two 2-tap kernels [s/2, out, in, 1, 2] of a ConvTranspose's `kernel` [in, out,
    2s] (`upsamplers_as_convs`): the early phases' (taps on x[j - 1], x[j]) and the late
    phases' (x[j], x[j + 1])."""
    ins, outs, stride = kernel.shape[0], kernel.shape[1], kernel.shape[2] // 2
    half = stride // 2
    early = np.zeros((half, outs, ins, 1, 2), np.float32)
    late = np.zeros((half, outs, ins, 1, 2), np.float32)
    for r in range(half):
        early[r, :, :, 0, 0] = kernel[:, :, r + half + stride].T
        early[r, :, :, 0, 1] = kernel[:, :, r + half].T
        late[r, :, :, 0, 0] = kernel[:, :, r + stride].T
        late[r, :, :, 0, 1] = kernel[:, :, r].T
    return early, late


def _as_phase_convs(
    graph: onnx.GraphProto, node: onnx.NodeProto, weights: dict[str, onnx.TensorProto], axes: list[str]
) -> list[onnx.NodeProto]:
    """The nodes that replace one upsampling `node` (`upsamplers_as_convs`); their
    weights go into `graph`'s initializers."""
    kernel = numpy_helper.to_array(weights[node.input[1]])  # [in, out, 2s]
    ins, outs, stride = kernel.shape[0], kernel.shape[1], kernel.shape[2] // 2
    half = stride // 2  # also the padding
    early, late = _phase_taps(kernel)
    bias = numpy_helper.to_array(weights[node.input[2]]) if len(node.input) > 2 and node.input[2] else None
    base = f"{node.output[0]}_phases"
    tall = f"{base}_in"
    nodes = [_reshaping("Unsqueeze", node.input[0], tall, f"{base}_unsqueeze", axes)]
    halves = []
    for tag, taps, pads in (("early", early, [0, 1, 0, 0]), ("late", late, [0, 0, 0, 1])):
        inputs = [tall, f"{base}_{tag}_w"]
        graph.initializer.append(numpy_helper.from_array(taps.reshape(half * outs, ins, 1, 2), inputs[1]))
        if bias is not None:
            inputs.append(f"{base}_{tag}_b")
            graph.initializer.append(numpy_helper.from_array(np.tile(bias, half).astype(np.float32), inputs[2]))
        halves.append(f"{base}_{tag}")
        nodes.append(helper.make_node("Conv", inputs, [halves[-1]], name=halves[-1], kernel_shape=[1, 2], pads=pads))
    shapes = (f"{base}_by_phase", f"{base}_in_time")
    graph.initializer.append(numpy_helper.from_array(np.array([0, stride, outs, -1], np.int64), shapes[0]))
    graph.initializer.append(numpy_helper.from_array(np.array([0, outs, -1], np.int64), shapes[1]))
    return nodes + [
        helper.make_node("Concat", halves, [f"{base}_all"], name=f"{base}_concat", axis=1),
        helper.make_node("Reshape", [f"{base}_all", shapes[0]], [f"{base}_split"], name=f"{base}_split"),
        helper.make_node(
            "Transpose", [f"{base}_split"], [f"{base}_interleaved"], name=f"{base}_interleave", perm=[0, 2, 3, 1]
        ),
        helper.make_node("Reshape", [f"{base}_interleaved", shapes[1]], [node.output[0]], name=f"{base}_join"),
    ]


def _is_upsampler(node: onnx.NodeProto, weights: dict[str, onnx.TensorProto]) -> bool:
    """A 1-D ConvTranspose with a constant weight, kernel 2s, stride s (even), padding
    s/2 at each end, and nothing else set; its phases' channels fill whole blocks."""
    if node.op_type != "ConvTranspose" or node.domain not in ("", "ai.onnx"):
        return False
    weight = weights.get(node.input[1])
    if weight is None or len(weight.dims) != 3:
        return False
    if len(node.input) > 2 and node.input[2] and node.input[2] not in weights:
        return False
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if set(attrs) - {"strides", "pads", "kernel_shape", "dilations", "group"}:
        return False  # output_padding, output_shape, auto_pad
    stride = list(attrs.get("strides", [1]))
    if len(stride) != 1 or stride[0] < 2 or stride[0] % 2:
        return False
    s = stride[0]
    return (
        int(attrs.get("group", 1)) == 1
        and list(attrs.get("dilations", [1])) == [1]
        and list(attrs.get("pads", [0, 0])) == [s // 2, s // 2]
        and int(weight.dims[2]) == 2 * s
        and (s // 2 * int(weight.dims[1])) % MIN_BLOCK == 0
    )
