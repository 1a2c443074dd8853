"""Turn an ONNX graph quantized by ONNX Runtime's `quantize_dynamic` back into float32.

`quantize_dynamic` replaces each float Conv / MatMul / LSTM with integer kernels that
quantize their activations at run time:

    x -> DynamicQuantizeLinear -> ConvInteger | MatMulInteger -> [Add int32 bias] -> Cast -> Mul
    x -> DynamicQuantizeLSTM (int8 weights, transposed)

On CPUs without fast int8 dot products the integer convolutions are slower than float ones,
so this module rebuilds the float graph: weights dequantized once, (w - zero_point) * scale,
and the float operator put back under the name of the chain's last output. The rebuilt graph
computes with the dequantized weights exactly, without the rounding of activations, so its
output differs slightly from the int8 graph's. Pure graph surgery on an in-memory
`onnx.ModelProto`: no I/O, no onnxruntime.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from voxserve.runners.files import initializer_array

__all__ = ["DequantizeError", "dequantize", "quantized_weights"]


class DequantizeError(ValueError):
    """The graph holds a quantized pattern this module does not know."""


class _Graph:
    def __init__(self, graph: onnx.GraphProto):
        self.graph = graph
        self.inits = {t.name: t for t in graph.initializer}
        self.producer: dict[str, onnx.NodeProto] = {o: n for n in graph.node for o in n.output}
        self.consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
        for node in graph.node:
            for name in node.input:
                self.consumers[name].append(node)

    def array(self, name: str) -> np.ndarray:
        if name not in self.inits:
            raise DequantizeError(f"{name} is not an initializer")
        return initializer_array(self.inits[name])

    def only_consumer(self, name: str, op_type: str) -> onnx.NodeProto:
        users = self.consumers.get(name, [])
        if len(users) != 1 or users[0].op_type != op_type:
            found = [u.op_type for u in users]
            raise DequantizeError(f"{name} should feed exactly one {op_type}, feeds {found}")
        return users[0]

    def made_by(self, name: str, op_type: str) -> onnx.NodeProto:
        node = self.producer.get(name)
        if node is None or node.op_type != op_type:
            raise DequantizeError(f"{name} should come from a {op_type}")
        return node


def _dequantized(q: np.ndarray, zero_point: np.ndarray, scale: np.ndarray, axis: int) -> np.ndarray:
    """(q - zero_point) * scale, per tensor or per channel along `axis`."""
    shape = [1] * q.ndim
    shape[axis] = -1

    def expand(v: np.ndarray) -> np.ndarray:
        return v.reshape(shape) if v.size > 1 else v.reshape(())

    w = (q.astype(np.float32) - expand(zero_point).astype(np.float32)) * expand(scale).astype(np.float32)
    return w.astype(np.float32)


def _weight_scale(g: _Graph, scale_product: str, x_scale: str) -> np.ndarray:
    """The weight's scale: the other factor of Mul(x_scale, w_scale)."""
    mul = g.made_by(scale_product, "Mul")
    others = [name for name in mul.input if name != x_scale]
    if len(others) != 1:
        raise DequantizeError(f"{mul.name} does not multiply {x_scale} by a weight scale")
    return g.array(others[0])


def _float_bias(g: _Graph, quantized: str) -> str:
    """The float bias behind Reshape(Cast(Floor(Div(bias, scale))))."""
    reshape = g.made_by(quantized, "Reshape")
    cast = g.made_by(reshape.input[0], "Cast")
    floor = g.made_by(cast.input[0], "Floor")
    div = g.made_by(floor.input[0], "Div")
    if div.input[0] not in g.inits:
        raise DequantizeError(f"{div.name} does not divide an initializer")
    return str(div.input[0])


def _replace_integer_op(
    g: _Graph, node: onnx.NodeProto, new_inits: list[onnx.TensorProto]
) -> tuple[onnx.NodeProto, list[onnx.NodeProto]]:
    """The float node that replaces one ConvInteger / MatMulInteger chain, and the chain."""
    quantize = g.made_by(node.input[0], "DynamicQuantizeLinear")
    x, x_scale = quantize.input[0], quantize.output[1]
    chain = [node]
    out = node.output[0]
    bias: str | None = None
    nxt = g.consumers.get(out, [])
    if len(nxt) == 1 and nxt[0].op_type == "Add":
        add = nxt[0]
        bias = _float_bias(g, next(name for name in add.input if name != out))
        chain.append(add)
        out = add.output[0]
    cast = g.only_consumer(out, "Cast")
    mul = g.only_consumer(cast.output[0], "Mul")
    chain += [cast, mul]
    scale_product = next(name for name in mul.input if name != cast.output[0])
    w_scale = _weight_scale(g, scale_product, x_scale)
    q, zero_point = g.array(node.input[1]), g.array(node.input[3])
    is_conv = node.op_type == "ConvInteger"
    weight = _dequantized(q, zero_point, w_scale, axis=0 if is_conv else q.ndim - 1)
    weight_name = f"{node.input[1]}_float"
    if weight_name not in g.inits and all(t.name != weight_name for t in new_inits):
        new_inits.append(numpy_helper.from_array(weight, weight_name))
    inputs = [x, weight_name]
    if bias is not None:
        if not is_conv:
            raise DequantizeError(f"{node.name}: a MatMulInteger with an int32 bias")
        inputs.append(bias)
    name = f"{node.name.removesuffix('_quant') or mul.output[0]}_float"
    if is_conv:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        replacement = helper.make_node("Conv", inputs, [mul.output[0]], name=name, **attrs)
    else:
        replacement = helper.make_node("MatMul", inputs, [mul.output[0]], name=name)
    return replacement, chain


def _replace_lstm(g: _Graph, node: onnx.NodeProto, new_inits: list[onnx.TensorProto]) -> onnx.NodeProto:
    """A float LSTM for one DynamicQuantizeLSTM (whose W and R are [dirs, in, 4*hidden])."""
    x, w_q, r_q, b, seq, h0, c0, p, w_scale, w_zp, r_scale, r_zp = (list(node.input) + [""] * 12)[:12]
    weights = []
    for q_name, scale_name, zp_name in ((w_q, w_scale, w_zp), (r_q, r_scale, r_zp)):
        q = g.array(q_name)
        scale, zero_point = g.array(scale_name), g.array(zp_name)
        # Per direction, or per direction and gate column: broadcast over the input axis.
        scale = scale.reshape(scale.shape[0], 1, -1) if scale.ndim == 2 else scale.reshape(-1, 1, 1)
        zero_point = (
            zero_point.reshape(zero_point.shape[0], 1, -1)
            if zero_point.ndim == 2
            else zero_point.reshape(-1, 1, 1)
        )
        w = (q.astype(np.float32) - zero_point.astype(np.float32)) * scale.astype(np.float32)
        name = f"{q_name}_float"
        new_inits.append(numpy_helper.from_array(np.ascontiguousarray(w.transpose(0, 2, 1)), name))
        weights.append(name)
    inputs = [x, weights[0], weights[1], b, seq, h0, c0, p]
    while inputs and not inputs[-1]:
        inputs.pop()
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return helper.make_node(
        "LSTM",
        inputs,
        list(node.output),
        name=f"{node.name.removesuffix('_quant') or node.output[0]}_float",
        **attrs,
    )


def _prune(graph: onnx.GraphProto) -> None:
    """Drop nodes and initializers that no graph output depends on."""
    producer = {o: n for n in graph.node for o in n.output}
    needed: set[str] = set()
    stack = [o.name for o in graph.output]
    keep_nodes: set[int] = set()
    while stack:
        name = stack.pop()
        if name in needed:
            continue
        needed.add(name)
        node = producer.get(name)
        if node is not None and id(node) not in keep_nodes:
            keep_nodes.add(id(node))
            stack.extend(i for i in node.input if i)
    nodes = [n for n in graph.node if id(n) in keep_nodes]
    inits = [t for t in graph.initializer if t.name in needed]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(inits)


def _rewrite(graph: onnx.GraphProto, types: Iterable[str]) -> int:
    g = _Graph(graph)
    wanted = set(types)
    new_inits: list[onnx.TensorProto] = []
    replaced: dict[int, onnx.NodeProto] = {}
    dropped: set[int] = set()
    for node in graph.node:
        if node.op_type not in wanted:
            continue
        if node.op_type == "DynamicQuantizeLSTM":
            replaced[id(node)] = _replace_lstm(g, node, new_inits)
            continue
        replacement, chain = _replace_integer_op(g, node, new_inits)
        # The float node takes the place of the chain's last node, so that it follows
        # every producer of the chain's other inputs.
        replaced[id(chain[-1])] = replacement
        dropped.update(id(n) for n in chain[:-1])
    nodes = [replaced.get(id(n), n) for n in graph.node if id(n) not in dropped]
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(new_inits)
    return len(replaced)


def quantized_weights(model: onnx.ModelProto) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Every integer operator's weight as the graph stores it: (q, zero_point, scale),
    the zero point and scale shaped to broadcast against q, so that the float weight is
    `(q - zero_point) * scale`, exactly what `dequantize` puts in the float graph.

    Keys are node names: a ConvInteger's or MatMulInteger's weight under its own name, a
    DynamicQuantizeLSTM's input and recurrence weights (ONNX layout, [dirs, in, 4 *
    hidden]) under `name:W` and `name:R`. Raises DequantizeError on an unknown chain."""
    g = _Graph(model.graph)
    out: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for node in model.graph.node:
        if node.op_type in ("ConvInteger", "MatMulInteger"):
            quantize = g.made_by(node.input[0], "DynamicQuantizeLinear")
            out_name = node.output[0]
            users = g.consumers.get(out_name, [])
            if len(users) == 1 and users[0].op_type == "Add":
                out_name = users[0].output[0]
            cast = g.only_consumer(out_name, "Cast")
            mul = g.only_consumer(cast.output[0], "Mul")
            product = next(name for name in mul.input if name != cast.output[0])
            scale = _weight_scale(g, product, quantize.output[1])
            q, zero_point = g.array(node.input[1]), g.array(node.input[3])
            axis = 0 if node.op_type == "ConvInteger" else q.ndim - 1
            shape = [1] * q.ndim
            shape[axis] = -1
            out[node.name] = (
                q,
                zero_point.reshape(shape) if zero_point.size > 1 else zero_point.reshape(()),
                scale.reshape(shape) if scale.size > 1 else scale.reshape(()),
            )
        elif node.op_type == "DynamicQuantizeLSTM":
            _, w_q, r_q, _, _, _, _, _, w_scale, w_zp, r_scale, r_zp = (list(node.input) + [""] * 12)[:12]
            for role, q_name, scale_name, zp_name in (("W", w_q, w_scale, w_zp), ("R", r_q, r_scale, r_zp)):
                q, scale, zero_point = g.array(q_name), g.array(scale_name), g.array(zp_name)
                per = (scale.shape[0], 1, -1) if scale.ndim == 2 else (-1, 1, 1)
                out[f"{node.name}:{role}"] = (q, zero_point.reshape(per), scale.reshape(per))
    return out


def dequantize(model: onnx.ModelProto, lstm: bool = True) -> onnx.ModelProto:
    """A float32 copy of a dynamically quantized model (the argument is left as it was).

    Replaces every ConvInteger and MatMulInteger chain, and with `lstm` every
    DynamicQuantizeLSTM, then drops the quantization nodes and int8 weights that nothing
    uses any more. Raises DequantizeError on a quantized pattern it does not know.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    types = ["ConvInteger", "MatMulInteger"] + (["DynamicQuantizeLSTM"] if lstm else [])
    _rewrite(out.graph, types)
    _prune(out.graph)
    left = sorted({n.op_type for n in out.graph.node if n.op_type in types or "Integer" in n.op_type})
    if left:
        raise DequantizeError(f"quantized operators left after the rewrite: {left}")
    return out
