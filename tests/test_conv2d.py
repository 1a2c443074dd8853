"""1-D convolutions run as 2-D ones (`voxserve.runners.piper.conv2d`): same outputs, on a graph
built here and on the split Piper voice."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from voxserve.runners.options import cpu_options
from voxserve.runners.piper.conv2d import convs_as_2d, upsamplers_as_convs
from voxserve.runners.piper.onnx_runner import LATENT_TENSOR, PiperModel, bundled_voice


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], threads: int = 1) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), cpu_options(threads), providers=["CPUExecutionProvider"])
    return [np.asarray(out) for out in session.run(None, feeds)]


def _graph(opset: int) -> onnx.ModelProto:
    """x [1, 16, T] -> a padded, strided, dilated, grouped and a biased 1-D Conv, one
    weight shared by two convs and also read by a Mul, and a Conv with one output
    channel (left 1-D: the blocked form would compute a whole block of channels)."""
    rng = np.random.default_rng(7)
    inits = [
        numpy_helper.from_array(rng.standard_normal((32, 16, 5)).astype(np.float32), "w_a"),
        numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b_a"),
        numpy_helper.from_array(rng.standard_normal((32, 8, 3)).astype(np.float32), "w_grouped"),
        numpy_helper.from_array(rng.standard_normal((16, 32, 1)).astype(np.float32), "w_shared"),
        numpy_helper.from_array(rng.standard_normal((1, 16, 7)).astype(np.float32), "w_mono"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w_a", "b_a"], ["a"], name="a", pads=[2, 2], dilations=[1]),
        helper.make_node("Conv", ["a", "w_grouped"], ["g"], name="g", group=4, pads=[2, 2], dilations=[2], strides=[2]),
        helper.make_node("Relu", ["g"], ["r"]),
        helper.make_node("Conv", ["r", "w_shared"], ["s1"], name="s1"),
        helper.make_node("Conv", ["a", "w_shared"], ["s2"], name="s2"),
        helper.make_node("Conv", ["s2", "w_mono"], ["mono"], name="mono", pads=[3, 3]),
        helper.make_node("Mul", ["w_shared", "w_shared"], ["w_squared"]),
        helper.make_node("ReduceSum", ["w_squared"], ["w_sum"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, "T"])],
        [
            helper.make_tensor_value_info("s1", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("s2", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("w_sum", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("mono", TensorProto.FLOAT, None),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("opset", [11, 15])
def test_rewritten_graph_gives_the_same_outputs(opset: int) -> None:
    model = _graph(opset)
    x = np.random.default_rng(1).standard_normal((1, 16, 41)).astype(np.float32)
    want = _run(model, {"x": x})
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert convs_as_2d(rewritten) == 4
    convs = [n for n in rewritten.graph.node if n.op_type == "Conv"]
    assert all(len(helper.get_attribute_value(a)) == 2 for n in convs for a in n.attribute if a.name == "kernel_shape")
    weights = {i.name: i for i in rewritten.graph.initializer}
    assert list(weights["w_shared"].dims) == [16, 32, 1]  # the Mul still reads the 1-D weight
    assert list(weights["w_a"].dims) == [32, 16, 1, 5]
    assert list(weights["w_mono"].dims) == [1, 16, 7]
    for threads in (1, 2):
        got = _run(rewritten, {"x": x}, threads)
        for a, b in zip(want, got, strict=True):
            assert a.shape == b.shape
            # Float32 sums in another order: within rounding of the output's scale.
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * float(np.abs(a).max()))


def test_a_graph_without_1d_convs_is_left_alone() -> None:
    model = _graph(15)
    convs_as_2d(model)
    again = onnx.ModelProto()
    again.CopyFrom(model)
    assert convs_as_2d(again) == 0
    assert len(again.graph.node) == len(model.graph.node)


def _upsampler(stride: int, kernel: int, bias: bool, opset: int = 15) -> onnx.ModelProto:
    rng = np.random.default_rng(stride + kernel)
    inits = [numpy_helper.from_array(rng.standard_normal((24, 16, kernel)).astype(np.float32), "w")]
    inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b"))
        inputs.append("b")
    pad = (kernel - stride) // 2
    node = helper.make_node("ConvTranspose", inputs, ["y"], strides=[stride], pads=[pad, pad], kernel_shape=[kernel])
    graph = helper.make_graph(
        [node, helper.make_node("Relu", ["y"], ["out"])],
        "up",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 24, "T"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize(("stride", "bias", "opset"), [(2, True, 15), (4, False, 15), (8, True, 11)])
def test_upsamplers_become_phase_convolutions_with_the_same_output(stride: int, bias: bool, opset: int) -> None:
    model = _upsampler(stride, 2 * stride, bias, opset)
    x = np.random.default_rng(2).standard_normal((1, 24, 37)).astype(np.float32)
    (want,) = _run(model, {"x": x})
    assert upsamplers_as_convs(model) == 1
    assert not [n for n in model.graph.node if n.op_type == "ConvTranspose"]
    for threads in (1, 2):
        (got,) = _run(model, {"x": x}, threads)
        assert got.shape == want.shape == (1, 16, 37 * stride)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(np.abs(want).max()))


def test_other_transposed_convolutions_are_left_alone() -> None:
    model = _upsampler(4, 6, True)  # kernel not twice the stride
    assert upsamplers_as_convs(model) == 0
    assert [n.op_type for n in model.graph.node] == ["ConvTranspose", "Relu"]


def test_piper_split_runs_2d_convs_on_one_thread_and_the_exported_graph_on_several() -> None:
    model = PiperModel(bundled_voice())
    graphs = model.graphs

    def conv_kernels(path: object) -> set[int]:
        graph = onnx.load(str(path))
        return {
            len(helper.get_attribute_value(a))
            for n in graph.graph.node
            if n.op_type == "Conv"
            for a in n.attribute
            if a.name == "kernel_shape"
        }

    assert conv_kernels(graphs.flow) == {2} and conv_kernels(graphs.vocoder) == {1, 2}  # its last: 1 channel
    assert conv_kernels(graphs.pooled_vocoder) == {1} and conv_kernels(graphs.prior) == {1}
    ops = {n.op_type for n in onnx.load(str(graphs.vocoder)).graph.node}
    assert "ConvTranspose" not in ops  # the upsamplers run as phase convolutions
    sessions = model.vocoder._sessions
    assert sessions.get(1)._model_path == str(graphs.vocoder)
    assert sessions.get(2)._model_path == str(graphs.pooled_vocoder)
    z = np.random.default_rng(3).standard_normal((1, 192, 40)).astype(np.float32)
    one = sessions.get(1).run(None, {LATENT_TENSOR: z})[0].reshape(-1)
    two = sessions.get(2).run(None, {LATENT_TENSOR: z})[0].reshape(-1)
    np.testing.assert_allclose(one, two, rtol=0, atol=1e-5)
