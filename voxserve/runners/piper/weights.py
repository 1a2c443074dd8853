"""Piper voice weights for the torch runner: read once from the voice's ONNX graph, kept
in one `.npz` file of our own layout beside the ONNX split's cache.

A Piper voice is VITS exported to ONNX. Its initializers carry the weights, most of them
under the PyTorch parameter names (`enc_p.encoder.attn_layers.0.conv_q.weight`); the
weight-normed convolutions of the flow's WaveNets were folded on export and appear as
anonymous `onnx::Conv_NNNN` tensors, so every convolution's weight and bias is taken from
the node that uses it and named after that node (`/flow/flows.6/enc/in_layers.0/Conv` ->
`flow.flows.6.enc.in_layers.0`). The node also gives what the shapes do not: stride,
padding, dilation and groups. Sizes, layer counts and the kind of HiFi-GAN residual
block are read from the weights, not assumed (only the bundled medium voice is tested).
Three tensors are not named for their module: the
phoneme embedding (the data of `/enc_p/emb/Gather`), and the duration predictor's first
flow, an elementwise affine whose `exp(-logs)` was folded into a constant (the factor of
`/dp/flows.0/Mul`).

The cache file is keyed by the model file's sha256 and `TORCH_LAYOUT`, written
atomically, float32 (the torch runner's parity with ONNX Runtime needs every bit), and
uncompressed so that it loads fast: the bundled voice's is 63 MB, its weights and no
graph. This module needs numpy and onnx only; it imports no runtime.
"""

from __future__ import annotations

import io
import json
import logging
import zipfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from voxserve.runners.files import (
    default_cache_dir,
    initializer_array,
    owned_arrays,
    write_atomically,
)
from voxserve.runners.piper.onnx_runner import file_sha256

if TYPE_CHECKING:
    import onnx

__all__ = ["TORCH_LAYOUT", "ConvSpec", "PiperWeights", "convert", "load_weights", "read_weights", "write_weights"]

log = logging.getLogger(__name__)

TORCH_LAYOUT = "t1"
"""Names the converted file's layout; a file of another layout is converted again."""

EMBEDDING_NODE = "/enc_p/emb/Gather"
DP_AFFINE_NODE = "/dp/flows.0/Mul"
"""The duration predictor's elementwise affine flow, reversed: (z - m) * exp(-logs)."""
TAIL_NODE_SUFFIX = "/GreaterOrEqual"
"""The spline flows' first test, z >= -tail_bound: the node that gives the tail bound."""


@dataclass(frozen=True)
class ConvSpec:
    """What a convolution's weight shape does not say, from its ONNX node."""

    stride: int
    padding: int
    dilation: int
    groups: int
    transposed: bool


@dataclass
class PiperWeights:
    """A converted voice: tensors named as the torch modules' state dict
    (`runners/piper/model.py`), each convolution's `ConvSpec`, and the spline flows' tail
    bound."""

    tensors: dict[str, np.ndarray]
    convs: dict[str, ConvSpec]
    tail_bound: float

    def __post_init__(self) -> None:
        self.tensors = owned_arrays(self.tensors)  # torch takes them as they are

    def meta(self) -> dict[str, Any]:
        return {
            "layout": TORCH_LAYOUT,
            "convs": {name: asdict(spec) for name, spec in self.convs.items()},
            "tail_bound": self.tail_bound,
        }


def _module_path(node_name: str) -> str:
    """`/flow/flows.6/enc/in_layers.0/Conv` -> `flow.flows.6.enc.in_layers.0`."""
    return node_name.strip("/").rsplit("/", 1)[0].replace("/", ".")


def convert(model: Path) -> PiperWeights:
    """Read a Piper ONNX graph's weights into our layout. Raises ValueError for a graph
    that is not a single-speaker Piper voice."""
    import onnx
    from onnx import helper

    graph = onnx.load(str(model)).graph
    if "sid" in [i.name for i in graph.input]:
        raise ValueError(
            f"{model.name} has several speakers; the torch runtime serves single-speaker Piper "
            "voices: use --tts-runtime onnx for it"
        )
    values: dict[str, np.ndarray] = {i.name: initializer_array(i) for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = initializer_array(node.attribute[0].t)
    tensors: dict[str, np.ndarray] = {}
    convs: dict[str, ConvSpec] = {}
    tail_bound: float | None = None
    for node in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type in ("Conv", "ConvTranspose"):
            path = _module_path(node.name)
            convs[path] = _conv_spec(node, attrs)
            tensors[f"{path}.weight"] = values[node.input[1]]
            if len(node.input) > 2 and node.input[2]:
                tensors[f"{path}.bias"] = values[node.input[2]]
        elif node.name == EMBEDDING_NODE:
            tensors["enc_p.emb.weight"] = values[node.input[0]]
        elif node.name == DP_AFFINE_NODE:
            tensors["dp.flows.0.scale"] = values[node.input[1]]
        elif tail_bound is None and node.name.startswith("/dp/flows.") and node.name.endswith(TAIL_NODE_SUFFIX):
            tail_bound = -float(values[node.input[1]])
    for name, value in values.items():
        if name.startswith(("enc_p.encoder.", "dp.")) and not name.endswith((".weight", ".bias")):
            tensors[name] = value  # relative position embeddings, layer norms, the affine's m
    if tail_bound is None or "enc_p.emb.weight" not in tensors or "dp.flows.0.scale" not in tensors:
        raise ValueError(f"{model.name} does not look like a Piper (VITS) voice")
    return PiperWeights(
        {name: np.ascontiguousarray(value, dtype=np.float32) for name, value in tensors.items()},
        convs,
        tail_bound,
    )


def _conv_spec(node: onnx.NodeProto, attrs: dict[str, Any]) -> ConvSpec:
    """A 1-D `Conv` or `ConvTranspose` node's settings, from its attributes `attrs`."""
    pads = list(attrs.get("pads", [0, 0]))
    if len(pads) != 2 or pads[0] != pads[1]:
        raise ValueError(f"{node.name}: unequal or non-1-D padding {pads}")
    return ConvSpec(
        stride=int(attrs.get("strides", [1])[0]),
        padding=int(pads[0]),
        dilation=int(attrs.get("dilations", [1])[0]),
        groups=int(attrs.get("group", 1)),
        transposed=node.op_type == "ConvTranspose",
    )


def write_weights(weights: PiperWeights, path: Path) -> None:
    """Write `weights` to `path` (an `.npz`: float32 tensors and a JSON meta), to a
    temporary name and then renamed, so that a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {
        "__meta__": np.frombuffer(json.dumps(weights.meta()).encode("utf-8"), dtype=np.uint8),
        **weights.tensors,
    }
    def save(tmp: str) -> None:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as archive:
            for name, value in arrays.items():
                buffer = io.BytesIO()
                np.lib.format.write_array(buffer, np.ascontiguousarray(value), allow_pickle=False)
                archive.writestr(name + ".npy", buffer.getvalue())

    write_atomically(path, save, ".npz.tmp")


def read_weights(path: Path) -> PiperWeights:
    """Read a file written by `write_weights`; ValueError if its layout is not ours."""
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(bytes(data["__meta__"]).decode("utf-8"))
        if meta.get("layout") != TORCH_LAYOUT:
            raise ValueError(f"{path}: layout {meta.get('layout')!r}, expected {TORCH_LAYOUT!r}")
        tensors = {key: np.asarray(data[key]) for key in data.files if key != "__meta__"}
    convs: Mapping[str, Mapping[str, Any]] = meta["convs"]
    return PiperWeights(
        tensors,
        {name: ConvSpec(**spec) for name, spec in convs.items()},
        float(meta["tail_bound"]),
    )


def weights_path(model: Path, cache_dir: Path | None = None) -> Path:
    """Where the converted weights of `model` are cached: beside the ONNX split, under
    `piper-torch/`, named by the model file's sha256 and `TORCH_LAYOUT`."""
    root = cache_dir or default_cache_dir()
    return root / "piper-torch" / f"{file_sha256(model)[:32]}-{TORCH_LAYOUT}.npz"


def load_weights(model: Path, cache_dir: Path | None = None) -> PiperWeights:
    """The torch weights of the Piper voice `model`, converted on first use and cached."""
    path = weights_path(model, cache_dir)
    if path.is_file():
        try:
            return read_weights(path)
        except (ValueError, OSError, KeyError, zipfile.BadZipFile):
            log.warning("converting %s again: its cached weights could not be read", model.name)
    log.info("converting %s for the torch runtime into %s", model.name, path)
    weights = convert(model)
    write_weights(weights, path)
    return weights
