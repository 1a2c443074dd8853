"""Kokoro-82M weights for the torch runner, read once from the int8 ONNX model and kept in
compact files of our own layout.

The ONNX graph holds every weight the torch modules (`runners/kokoro/model.py`) need:

- the 87 ConvInteger, 148 MatMulInteger and 6 DynamicQuantizeLSTM weights, int8 or
  uint8 with a zero point and a scale (per tensor, per output column or per direction);
  the float weight is `(q - zero_point) * scale`, exactly what `runners/kokoro/dequantize.py`
  puts in the float32 graph that the parity tests run;
- the three embeddings, int8 behind a DequantizeLinear;
- float tensors: biases, layer norms, the Snake `alpha`s, the depthwise and upsampling
  ConvTranspose weights, `conv_post`, the source's linear layer, the STFT window and the
  inverse STFT's basis and window sum.

Each weight is named after the torch module that owns it, as the graph's node names give
it (`decoder.decode.3.conv1`, `predictor.F0.1.pool`, `bert.encoder.albert_layer_groups.0
.albert_layers.0.attention.query`), with the ONNX layout kept (matrices [in, out], LSTM
weights [dirs, in, 4 * hidden] with gates i, o, f, c); `torch_state` turns them into the
modules' state dict.

The files keep the quantized integers and their scales, not float32, so that they travel
to a GPU machine in transfers of at most ~60 MB: the stage A weights (`acoustic`) and the
stage B weights (`decoder`) are two files of ~25 and ~55 MB (float32 would be 330 MB).
They sit beside the joined model in the Kokoro cache, named by the model's sha256 (the
folder) and `LAYOUT`, written atomically, and made on first use in ~3 s.

This module needs numpy and onnx (to read the graph once); it imports no runtime.
"""

from __future__ import annotations

import logging
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from voxserve.runners.files import initializer_array, owned_arrays, write_atomically

if TYPE_CHECKING:
    import onnx

__all__ = [
    "LAYOUT",
    "PARTS",
    "convert",
    "dequantized",
    "load_weights",
    "read_weights",
    "torch_state",
    "weights_files",
    "write_weights",
]

log = logging.getLogger(__name__)

LAYOUT = "kokoro-torch-1"
"""Version of the files' layout: a file of another layout is converted again."""

PARTS = ("acoustic", "decoder")
"""The two files: stage A's modules (everything but `decoder.`) and stage B's."""

_QUANT = ("#q", "#zero_point", "#scale")
_LSTM_GATES = (0, 2, 3, 1)
"""ONNX LSTM gate blocks (i, o, f, c) in torch's order (i, f, g, o)."""


def _canonical(path: str) -> str:
    """A graph path (`encoder.F0.1.conv1`, `decoder.decoder.decode.0.conv1`) as the torch
    module's name (`predictor.F0.1.conv1`, `decoder.decode.0.conv1`)."""
    if path.startswith("decoder.decoder."):
        return "decoder." + path.removeprefix("decoder.decoder.")
    path = path.removeprefix("encoder.")
    if re.match(r"(F0|N)(\.|_proj)|shared$", path):
        path = "predictor." + path
    return path


def _module_of(node_name: str) -> str:
    """The module a node belongs to, from its name (`/encoder/text_encoder/cnn.0/cnn.0.0/
    Conv_quant` -> `text_encoder.cnn.0.0`): a Sequential's index repeats its name, once."""
    parts: list[str] = []
    for part in node_name.strip("/").split("/")[:-1]:
        if parts and part.startswith(parts[-1] + "."):
            parts[-1] = part
        else:
            parts.append(part)
    return _canonical(".".join(parts))


def convert(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Every weight of the int8 graph, by name: float tensors under their name, quantized
    ones as three tensors `name#q`, `name#zero_point` and `name#scale` (see `dequantized`).
    The ALBERT layer is applied 12 times in the graph: its weights are taken once."""
    from voxserve.runners.kokoro.dequantize import quantized_weights

    inits = {t.name: t for t in model.graph.initializer}
    quantized = quantized_weights(model)
    dequantize_of = {n.input[0]: n for n in model.graph.node if n.op_type == "DequantizeLinear"}
    out: dict[str, np.ndarray] = {}
    seen: set[str] = set()

    def array(name: str) -> np.ndarray:
        return initializer_array(inits[name])

    def put_quantized(name: str, parts: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        for suffix, value in zip(_QUANT, parts, strict=True):
            out[name + suffix] = value

    for node in model.graph.node:
        module = _module_of(node.name)
        weight = node.input[1] if len(node.input) > 1 else ""
        if node.op_type in ("ConvInteger", "MatMulInteger", "DynamicQuantizeLSTM"):
            if weight in seen:
                continue
            seen.add(weight)
            if node.op_type == "DynamicQuantizeLSTM":
                put_quantized(module + ".W", quantized[node.name + ":W"])
                put_quantized(module + ".R", quantized[node.name + ":R"])
                out[module + ".B"] = array(node.input[3])
            else:
                put_quantized(module + ".weight", quantized[node.name])
        elif node.op_type in ("Conv", "ConvTranspose", "MatMul") and weight in inits:
            if module.endswith(".istft.stft"):
                out["decoder.generator.istft.inverse_basis"] = array(weight)
            else:
                out[module + ".weight"] = array(weight)
        elif node.op_type == "STFT":
            out["decoder.generator.stft.window"] = array(node.input[2])
        elif node.op_type == "Gather" and node.input[0] in inits and node.output[0] in dequantize_of:
            _, scale, zero_point = dequantize_of[node.output[0]].input
            put_quantized(module + ".weight", (array(node.input[0]), array(zero_point), array(scale)))
    out.update(_float_initializers(inits))
    return owned_arrays(out)


def _float_initializers(inits: Mapping[str, onnx.TensorProto]) -> dict[str, np.ndarray]:
    """The graph's float32 initializers of the encoder and the decoder that no node
    above took, under their module names."""
    out: dict[str, np.ndarray] = {}
    for name, tensor in inits.items():
        if not name.startswith(("encoder.", "decoder.")) or name.endswith(("_scale", "_zero_point", "_quantized")):
            continue
        value = initializer_array(tensor)
        if value.dtype != np.float32:
            continue
        if name.endswith("stft.window_sum"):
            out["decoder.generator.istft.window_sum"] = value
        elif not name.endswith("inverse_basis"):
            out[_canonical(name)] = value
    return out


def dequantized(weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Float32 tensors by name, in the graph's layout: `(q - zero_point) * scale` for
    the quantized ones."""
    out: dict[str, np.ndarray] = {}
    for key, value in weights.items():
        if key.endswith("#q"):
            name = key.removesuffix("#q")
            q = value.astype(np.float32)
            zero_point = weights[name + "#zero_point"].astype(np.float32)
            scale = weights[name + "#scale"].astype(np.float32)
            out[name] = ((q - zero_point) * scale).astype(np.float32)
        elif "#" not in key:
            out[key] = np.asarray(value, dtype=np.float32)
    return out


def _lstm(prefix: str, w: np.ndarray, r: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    """torch's bidirectional LSTM parameters from ONNX's W, R [dirs, in, 4H] (as
    DynamicQuantizeLSTM stores them: transposed) and B [dirs, 8H]."""
    hidden = r.shape[1]

    def gates(m: np.ndarray) -> np.ndarray:  # [4H, ...] in i, o, f, c -> i, f, g, o
        return np.concatenate([m[k * hidden : (k + 1) * hidden] for k in _LSTM_GATES])

    out = {}
    for d, suffix in enumerate(("", "_reverse")):
        out[f"{prefix}.weight_ih_l0{suffix}"] = gates(w[d].T)
        out[f"{prefix}.weight_hh_l0{suffix}"] = gates(r[d].T)
        out[f"{prefix}.bias_ih_l0{suffix}"] = gates(b[d, : 4 * hidden])
        out[f"{prefix}.bias_hh_l0{suffix}"] = gates(b[d, 4 * hidden :])
    return out


def torch_state(weights: Mapping[str, np.ndarray], linears: frozenset[str]) -> dict[str, np.ndarray]:
    """The torch modules' state dict (contiguous float32) from the graph's weights:
    `linears` names the modules whose weight is a matrix the graph applies as `x @ W`
    (stored [in, out]; nn.Linear keeps [out, in]); LSTMs get torch's gate order."""
    floats = dequantized(weights)
    out: dict[str, np.ndarray] = {}
    lstms = {k.removesuffix(".W") for k in floats if k.endswith(".W")}
    for prefix in lstms:
        out.update(_lstm(prefix, floats[prefix + ".W"], floats[prefix + ".R"], floats[prefix + ".B"]))
    for name, value in floats.items():
        module, _, leaf = name.rpartition(".")
        if module in lstms:
            continue
        if leaf == "weight" and module in linears:
            value = value.T
        out[name] = np.ascontiguousarray(value, dtype=np.float32)
    return out


# -- files -----------------------------------------------------------------------------
def weights_files(folder: Path) -> dict[str, Path]:
    """Where the two parts live in a Kokoro cache folder."""
    return {part: folder / f"torch-{LAYOUT}-{part}.npz" for part in PARTS}


def _part(name: str) -> str:
    return "decoder" if name.startswith("decoder.") else "acoustic"


def write_weights(weights: Mapping[str, np.ndarray], folder: Path) -> dict[str, Path]:
    """Write the two parts, each compressed and atomically; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    files = weights_files(folder)
    for part, path in files.items():
        arrays = {k: v for k, v in weights.items() if _part(k) == part}
        arrays["__layout__"] = np.array(LAYOUT)

        def save(tmp: str, arrays: dict[str, np.ndarray] = arrays) -> None:
            with open(tmp, "wb") as f:
                np.savez_compressed(f, allow_pickle=False, **arrays)

        write_atomically(path, save)
    return files


def read_weights(files: Mapping[str, Path]) -> dict[str, np.ndarray]:
    """The weights of the parts, as written; ValueError for a file of another layout."""
    out: dict[str, np.ndarray] = {}
    for path in files.values():
        with np.load(path, allow_pickle=False) as data:
            if str(data["__layout__"]) != LAYOUT:
                raise ValueError(f"{path} has layout {data['__layout__']}, not {LAYOUT}")
            out.update({k: data[k] for k in data.files if k != "__layout__"})
    return owned_arrays(out)


def load_weights(model_path: Path) -> dict[str, np.ndarray]:
    """The converted weights of the joined model at `model_path`, converted and cached
    beside it the first time (the folder is named by the model's sha256)."""
    files = weights_files(model_path.parent)
    if all(p.exists() for p in files.values()):
        try:
            return read_weights(files)
        except (ValueError, OSError, zipfile.BadZipFile, KeyError) as exc:
            log.warning("converting the Kokoro weights again: %s", exc)
    import onnx

    log.info("converting %s into torch weights under %s", model_path.name, model_path.parent)
    weights = convert(onnx.load(str(model_path)))
    write_weights(weights, model_path.parent)
    return weights
