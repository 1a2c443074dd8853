"""Every converter hands out arrays that own their memory and may be written: the Piper,
Kokoro and Whisper weights for torch, and the quantized tensors read from an ONNX graph.
A read-only view of a model file's bytes makes `torch.from_numpy` warn (an error under
the suite's settings), and the first run on an empty cache is the one that converts."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx

from voxserve.runners.files import initializer_array, owned, owns_memory
from voxserve.runners.kokoro import weights as kokoro_weights
from voxserve.runners.kokoro.dequantize import quantized_weights
from voxserve.runners.kokoro.onnx_runner import model_file
from voxserve.runners.piper import weights as piper_weights
from voxserve.runners.piper.onnx_runner import bundled_voice
from voxserve.runners.whisper import weights as whisper_weights
from voxserve.runners.whisper.interface import bundled_model


def _all_owned(arrays: Iterable[np.ndarray]) -> bool:
    return all(owns_memory(a) for a in arrays)


def test_owned_copies_only_what_it_must() -> None:
    mine = np.arange(12, dtype=np.float32)
    assert owned(mine) is mine
    view = mine.reshape(3, 4)[1:]
    assert owned(view) is view  # a view of numpy's own memory may be written as it is
    borrowed = np.frombuffer(bytes(16), dtype=np.float32)
    copy = owned(borrowed)
    assert copy is not borrowed and owns_memory(copy) and np.array_equal(copy, borrowed)
    frozen = np.zeros(3)
    frozen.flags.writeable = False
    assert owns_memory(owned(frozen))
    tensor = onnx.numpy_helper.from_array(np.arange(6, dtype=np.int8).reshape(2, 3), "w")
    assert not owns_memory(onnx.numpy_helper.to_array(tensor))  # what the converters used to pass on
    value = initializer_array(tensor)
    assert owns_memory(value) and value.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_piper_weights_are_owned() -> None:
    weights = piper_weights.convert(bundled_voice().model)
    assert weights.tensors and _all_owned(weights.tensors.values())


def test_whisper_weights_are_owned() -> None:
    weights = whisper_weights.from_ct2(bundled_model()[0])
    assert weights.tensors and _all_owned(weights.tensors.values())


def test_kokoro_weights_and_quantized_tensors_are_owned() -> None:
    model = onnx.load(str(model_file()))
    quantized = quantized_weights(model)
    assert quantized and _all_owned(a for parts in quantized.values() for a in parts)
    weights = kokoro_weights.convert(model)
    assert len(weights) > 100 and _all_owned(weights.values())
