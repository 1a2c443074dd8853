"""Run a graph's 1-D convolutions as 2-D ones over a height of 1.

ONNX Runtime's CPU provider has two convolution paths. A 2-D `Conv` whose channels are a
multiple of the vector width is rewritten by its layout optimizer into the blocked NCHWc
form, with kernels tuned for it; a 1-D `Conv` (input [N, C, T]) is not, and runs as
im2col and a matrix product. The two compute the same sums, in another order.

`convs_as_2d` rewrites each 1-D `Conv` with a constant weight as Unsqueeze (height 1) ->
2-D `Conv` (kernel 1 x K) -> Squeeze, so every tensor between the other nodes keeps its
shape and name. On the Piper voice (one thread, this 2-core machine) that made the
vocoder 0.87-0.90x and the flow 0.89-0.95x of their time, with outputs within float32
rounding (vocoder PCM 2.4e-7 at most, the flow's z 1.1e-5); `docs/BENCHMARKS.md`.

Pure graph code: a ModelProto in, the same one changed; no sessions, no files.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["convs_as_2d"]

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
    axes_as_input = _opset(model) >= 13
    if axes_as_input and _AXES not in weights:
        graph.initializer.append(numpy_helper.from_array(np.array([2], np.int64), _AXES))

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
        if axes_as_input:
            nodes.append(helper.make_node("Unsqueeze", [source, _AXES], [tall_in], name=f"{node.name}_unsqueeze"))
        else:
            nodes.append(helper.make_node("Unsqueeze", [source], [tall_in], name=f"{node.name}_unsqueeze", axes=[2]))
        conv = helper.make_node("Conv", [tall_in, converted[name], *node.input[2:]], [tall_out], name=node.name)
        conv.attribute.extend(_attributes_2d(node))
        nodes.append(conv)
        if axes_as_input:
            nodes.append(helper.make_node("Squeeze", [tall_out, _AXES], [target], name=f"{node.name}_squeeze"))
        else:
            nodes.append(helper.make_node("Squeeze", [tall_out], [target], name=f"{node.name}_squeeze", axes=[2]))
        count += 1
    del graph.node[:]
    graph.node.extend(nodes)
    return count
