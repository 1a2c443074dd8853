"""Dequantizing a dynamically quantized graph gives the float graph back, on a small model
quantized by ONNX Runtime's own tool and on Kokoro's int8 graph."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

from voxserve.runners.kokoro.dequantize import DequantizeError, dequantize
from voxserve.runners.kokoro.onnx_runner import model_file

QUANTIZED_OPS = {"ConvInteger", "MatMulInteger", "DynamicQuantizeLinear", "DynamicQuantizeLSTM"}


def _small_model(path: Path) -> np.ndarray:
    """Conv -> MatMul -> LSTM in float32, saved at path; returns an input for it.

    Every weight lies on the grid the quantizer will pick for it (uint8 spanning the range
    for Conv and MatMul, int8 symmetric per direction for LSTM), so quantizing the weights
    loses nothing and the dequantized graph must compute what the float one does."""
    rng = np.random.default_rng(0)

    def uint8_grid(*shape: int) -> np.ndarray:
        steps = rng.integers(0, 256, size=shape)
        steps.flat[:2] = (0, 255)  # both ends of the range occur
        return (steps - 128) / 256

    def int8_grid(*shape: int) -> np.ndarray:
        steps = rng.integers(-127, 128, size=shape)
        steps[:, 0, 0], steps[:, 0, 1] = -127, 127  # in every direction
        return steps / 256

    weights = {
        "conv_w": uint8_grid(16, 8, 3),
        "conv_b": rng.normal(size=(16,)),
        "mm_w": uint8_grid(16, 12),
        "lstm_w": int8_grid(2, 4 * 6, 12),
        "lstm_r": int8_grid(2, 4 * 6, 6),
    }
    nodes = [
        helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["c"], pads=[1, 1], kernel_shape=[3]),
        helper.make_node("Transpose", ["c"], ["ct"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["ct", "mm_w"], ["m"]),
        helper.make_node("Transpose", ["m"], ["mt"], perm=[1, 0, 2]),
        helper.make_node("LSTM", ["mt", "lstm_w", "lstm_r"], ["y"], hidden_size=6, direction="bidirectional"),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w.astype(np.float32), name) for name, w in weights.items()],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return rng.normal(size=(1, 8, 20)).astype(np.float32)


def _run(model: onnx.ModelProto | Path, x: np.ndarray) -> np.ndarray:
    source = str(model) if isinstance(model, Path) else model.SerializeToString()
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"x": x})[0])


def test_a_quantized_model_comes_back_to_float(tmp_path: Path) -> None:
    x = _small_model(tmp_path / "float.onnx")
    quantize_dynamic(
        str(tmp_path / "float.onnx"),
        str(tmp_path / "int8.onnx"),
        weight_type=QuantType.QUInt8,
        op_types_to_quantize=["Conv", "MatMul", "LSTM"],
    )
    quantized = onnx.load(str(tmp_path / "int8.onnx"))
    assert QUANTIZED_OPS <= {n.op_type for n in quantized.graph.node}
    restored = dequantize(quantized)
    assert not QUANTIZED_OPS & {n.op_type for n in restored.graph.node}
    assert {"DynamicQuantizeLinear"} <= {n.op_type for n in quantized.graph.node}  # left as it was

    reference, int8, back = _run(tmp_path / "float.onnx", x), _run(quantized, x), _run(restored, x)
    np.testing.assert_allclose(back, reference, rtol=0, atol=1e-5)
    assert np.abs(int8 - reference).max() > 1e-3  # the int8 graph rounds its activations


def test_kokoro_dequantizes_completely() -> None:
    model = onnx.load(str(model_file()))
    ops = collections.Counter(n.op_type for n in dequantize(model).graph.node)
    assert not QUANTIZED_OPS & set(ops)
    assert ops["Conv"] == 87 + 1 and ops["MatMul"] == 148 + 26 and ops["LSTM"] == 6


def test_an_unknown_pattern_is_refused() -> None:
    graph = helper.make_graph(
        [helper.make_node("ConvInteger", ["x", "w"], ["y"])],
        "odd",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(np.ones((1, 1, 1), np.uint8), "w")],
    )
    with pytest.raises(DequantizeError):
        dequantize(helper.make_model(graph))
