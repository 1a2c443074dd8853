"""Whisper weights for the torch runner: read once from a CTranslate2 or a Hugging Face
folder, kept in one `.npz` file of our own layout.

The torch runner never reads `model.bin` or safetensors at serving time: `load_weights`
converts a source folder the first time it sees it and caches the result under
`~/.cache/voxserve/whisper` (or `$XDG_CACHE_HOME/voxserve/whisper`), keyed by the source's
path, size and modification time. A cached file holds fp16 matrices, uncompressed, so it
loads fast. `export_weights` writes the compact copy that travels to another machine: each
matrix in int8 with one fp16 scale per row, zlib-compressed (tiny.en: about 28 MiB). Both
carry the model's dimensions, its alignment heads, its token lists and its tokenizer.

The layout is this module's own (`Weights.tensors`, named like the torch module's state
dict in `runners/whisper/model.py`):
- CTranslate2 (`model.bin`, spec `WhisperSpec`): self-attention `linear_0` is q, k and v
  fused (k's bias is zero), cross-attention `linear_0` is q and `linear_1` k and v fused;
  int8 matrices come with a `weight_scale` per row (the value is `q / scale`).
- Hugging Face (`model.safetensors` and `config.json`, with `generation_config.json` for
  the alignment heads and suppressed tokens): q, k and v are fused here the same way.

This module needs numpy only; it imports no runtime.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from voxserve.runners.files import owned_arrays, write_atomically

__all__ = [
    "Dims",
    "Weights",
    "cache_root",
    "export_weights",
    "from_ct2",
    "from_hf",
    "hf_config",
    "load_weights",
    "read_npz",
    "to_hf",
    "write_npz",
    "write_safetensors",
]

FORMAT = 1
"""Version of the `.npz` layout; a cached file of another version is converted again."""

_CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
"""CTranslate2's type ids in `model.bin` (bfloat16, id 5, is read through its bits)."""


@dataclass(frozen=True)
class Dims:
    """The shape of one Whisper model."""

    n_mels: int
    width: int
    """Model width (d_model), the same in the encoder and the decoder."""
    encoder_layers: int
    encoder_heads: int
    decoder_layers: int
    decoder_heads: int
    vocab: int
    audio_ctx: int
    """Encoder positions (1500 for a 30 s window)."""
    text_ctx: int
    """Decoder positions (448)."""


@dataclass
class Weights:
    """A converted model: tensors in the torch module's names, and what decoding needs."""

    dims: Dims
    tensors: dict[str, np.ndarray]
    alignment_heads: list[tuple[int, int]]
    """(decoder layer, head) pairs whose cross-attention follows the words in time."""
    suppress_ids: list[int]
    """Tokens never generated (OpenAI's non-speech list)."""
    suppress_ids_begin: list[int]
    """Tokens not generated first (the blank and end of text)."""
    lang_ids: list[int] = field(default_factory=list)
    """Language tokens, for detection; empty for an English-only model."""
    tokenizer_json: bytes = b""
    """The model's `tokenizer.json`, verbatim."""

    def __post_init__(self) -> None:
        self.tensors = owned_arrays(self.tensors)  # torch takes them as they are

    def meta(self) -> dict[str, Any]:
        """Everything but the tensors and the tokenizer, as JSON-ready values."""
        return {
            "format": FORMAT,
            "dims": asdict(self.dims),
            "alignment_heads": [list(h) for h in self.alignment_heads],
            "suppress_ids": self.suppress_ids,
            "suppress_ids_begin": self.suppress_ids_begin,
            "lang_ids": self.lang_ids,
        }


# -- CTranslate2 -----------------------------------------------------------------------
def _ct2_variables(path: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Every variable of a CTranslate2 `model.bin` by name, and its aliases."""
    variables: dict[str, np.ndarray] = {}
    aliases: dict[str, str] = {}
    with open(path, "rb") as f:

        def number(fmt: str) -> int:
            return int(struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0])

        def string() -> str:
            return f.read(number("H"))[:-1].decode("utf-8")

        version = number("I")
        if version < 5:
            raise ValueError(f"{path}: CTranslate2 binary version {version} is too old; convert it again")
        spec = string()
        if spec != "WhisperSpec":
            raise ValueError(f"{path} holds a {spec}, not a Whisper model")
        number("I")  # the spec's revision
        for _ in range(number("I")):
            name = string()
            shape = tuple(number("I") for _ in range(number("B")))
            type_id = number("B")
            data = f.read(number("I"))
            if type_id == 5:  # bfloat16: the high half of a float32
                wide = np.frombuffer(data, dtype=np.uint16).astype(np.uint32) << 16
                variables[name] = wide.view(np.float32).reshape(shape)
                continue
            variables[name] = np.frombuffer(data, dtype=_CT2_DTYPES[type_id]).reshape(shape)
        for _ in range(number("I")):
            alias = string()
            aliases[alias] = string()
    return variables, aliases


def _ct2_dequantized(variables: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    """A variable in float32: int8 rows divided by their scales, int16 by its one scale."""
    value = variables[name]
    scale = variables.get(name + "_scale")
    if value.dtype == np.int8 and scale is not None:
        return value.astype(np.float32) / scale.astype(np.float32).reshape(-1, 1)
    if value.dtype == np.int16 and scale is not None:
        return value.astype(np.float32) / float(scale.reshape(-1)[0])
    return value.astype(np.float32)


def _layers(variables: Mapping[str, np.ndarray], prefix: str) -> int:
    """How many layers the encoder or decoder has (their FFN weights are counted)."""
    n = 0
    while f"{prefix}/layer_{n}/ffn/linear_0/weight" in variables:
        n += 1
    return n


def from_ct2(folder: Path) -> Weights:
    """Convert a CTranslate2 Whisper folder (`model.bin`, `config.json`, `tokenizer.json`)."""
    variables, _ = _ct2_variables(folder / "model.bin")

    def get(name: str) -> np.ndarray:
        return _ct2_dequantized(variables, name)

    out: dict[str, np.ndarray] = {}

    def norm(dst: str, src: str) -> None:
        out[dst + ".weight"], out[dst + ".bias"] = get(src + "/gamma"), get(src + "/beta")

    def linear(dst: str, src: str) -> None:
        out[dst + ".weight"] = get(src + "/weight")
        if src + "/bias" in variables:
            out[dst + ".bias"] = get(src + "/bias")

    for i in (1, 2):
        out[f"encoder.conv{i}.weight"] = get(f"encoder/conv{i}/weight")
        out[f"encoder.conv{i}.bias"] = get(f"encoder/conv{i}/bias")
    out["encoder.positions"] = get("encoder/position_encodings/encodings")
    norm("encoder.norm", "encoder/layer_norm")
    encoder_layers = _layers(variables, "encoder")
    for i in range(encoder_layers):
        src, dst = f"encoder/layer_{i}", f"encoder.blocks.{i}"
        norm(f"{dst}.attn_norm", f"{src}/self_attention/layer_norm")
        linear(f"{dst}.attn.qkv", f"{src}/self_attention/linear_0")
        linear(f"{dst}.attn.out", f"{src}/self_attention/linear_1")
        norm(f"{dst}.mlp_norm", f"{src}/ffn/layer_norm")
        linear(f"{dst}.fc1", f"{src}/ffn/linear_0")
        linear(f"{dst}.fc2", f"{src}/ffn/linear_1")
    out["decoder.embedding"] = get("decoder/embeddings/weight")
    out["decoder.positions"] = get("decoder/position_encodings/encodings")
    norm("decoder.norm", "decoder/layer_norm")
    decoder_layers = _layers(variables, "decoder")
    for i in range(decoder_layers):
        src, dst = f"decoder/layer_{i}", f"decoder.blocks.{i}"
        norm(f"{dst}.attn_norm", f"{src}/self_attention/layer_norm")
        linear(f"{dst}.attn.qkv", f"{src}/self_attention/linear_0")
        linear(f"{dst}.attn.out", f"{src}/self_attention/linear_1")
        norm(f"{dst}.cross_norm", f"{src}/attention/layer_norm")
        linear(f"{dst}.cross.q", f"{src}/attention/linear_0")
        linear(f"{dst}.cross.kv", f"{src}/attention/linear_1")
        linear(f"{dst}.cross.out", f"{src}/attention/linear_2")
        norm(f"{dst}.mlp_norm", f"{src}/ffn/layer_norm")
        linear(f"{dst}.fc1", f"{src}/ffn/linear_0")
        linear(f"{dst}.fc2", f"{src}/ffn/linear_1")

    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    vocab, width = out["decoder.embedding"].shape
    dims = Dims(
        n_mels=out["encoder.conv1.weight"].shape[1],
        width=width,
        encoder_layers=encoder_layers,
        encoder_heads=int(variables["encoder/num_heads"].reshape(-1)[0]),
        decoder_layers=decoder_layers,
        decoder_heads=int(variables["decoder/num_heads"].reshape(-1)[0]),
        vocab=vocab,
        audio_ctx=out["encoder.positions"].shape[0],
        text_ctx=out["decoder.positions"].shape[0],
    )
    return Weights(
        dims=dims,
        tensors=out,
        alignment_heads=[(int(a), int(b)) for a, b in config.get("alignment_heads", [])],
        suppress_ids=[int(t) for t in config.get("suppress_ids", [])],
        suppress_ids_begin=[int(t) for t in config.get("suppress_ids_begin", [])],
        lang_ids=[int(t) for t in config.get("lang_ids", [])] if vocab >= 51865 else [],
        tokenizer_json=_tokenizer_json(folder),
    )


# -- Hugging Face ----------------------------------------------------------------------
_SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "I8": np.int8, "I32": np.int32, "I64": np.int64}


def _safetensors(path: Path) -> Iterator[tuple[str, np.ndarray]]:
    """Each tensor of a `.safetensors` file (an 8-byte header size, a JSON header, data)."""
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        raw = data[start:end]
        if info["dtype"] == "BF16":
            wide = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            array = wide.view(np.float32)
        else:
            array = np.frombuffer(raw, dtype=_SAFETENSORS_DTYPES[info["dtype"]])
        yield name, array.reshape(info["shape"])


def from_hf(folder: Path) -> Weights:
    """Convert a Hugging Face Whisper folder (`model.safetensors` or its shards,
    `config.json`, `tokenizer.json`, optionally `generation_config.json`)."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder} has no .safetensors file")
    hf: dict[str, np.ndarray] = {}
    for path in files:
        for name, array in _safetensors(path):
            hf[name.removeprefix("model.")] = array.astype(np.float32)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    generation_path = folder / "generation_config.json"
    generation = json.loads(generation_path.read_text(encoding="utf-8")) if generation_path.is_file() else {}
    out: dict[str, np.ndarray] = {}

    def copy(dst: str, src: str) -> None:
        out[dst + ".weight"] = hf[src + ".weight"]
        if src + ".bias" in hf:
            out[dst + ".bias"] = hf[src + ".bias"]

    def fused(dst: str, src: str, names: tuple[str, ...]) -> None:
        out[dst + ".weight"] = np.concatenate([hf[f"{src}.{n}_proj.weight"] for n in names])
        biases = []
        for n in names:
            rows = hf[f"{src}.{n}_proj.weight"].shape[0]
            biases.append(hf.get(f"{src}.{n}_proj.bias", np.zeros(rows, dtype=np.float32)))
        out[dst + ".bias"] = np.concatenate(biases)

    for i in (1, 2):
        copy(f"encoder.conv{i}", f"encoder.conv{i}")
    out["encoder.positions"] = hf["encoder.embed_positions.weight"]
    copy("encoder.norm", "encoder.layer_norm")
    for i in range(int(config["encoder_layers"])):
        src, dst = f"encoder.layers.{i}", f"encoder.blocks.{i}"
        copy(f"{dst}.attn_norm", f"{src}.self_attn_layer_norm")
        fused(f"{dst}.attn.qkv", f"{src}.self_attn", ("q", "k", "v"))
        copy(f"{dst}.attn.out", f"{src}.self_attn.out_proj")
        copy(f"{dst}.mlp_norm", f"{src}.final_layer_norm")
        copy(f"{dst}.fc1", f"{src}.fc1")
        copy(f"{dst}.fc2", f"{src}.fc2")
    out["decoder.embedding"] = hf["decoder.embed_tokens.weight"]
    out["decoder.positions"] = hf["decoder.embed_positions.weight"]
    copy("decoder.norm", "decoder.layer_norm")
    for i in range(int(config["decoder_layers"])):
        src, dst = f"decoder.layers.{i}", f"decoder.blocks.{i}"
        copy(f"{dst}.attn_norm", f"{src}.self_attn_layer_norm")
        fused(f"{dst}.attn.qkv", f"{src}.self_attn", ("q", "k", "v"))
        copy(f"{dst}.attn.out", f"{src}.self_attn.out_proj")
        copy(f"{dst}.cross_norm", f"{src}.encoder_attn_layer_norm")
        copy(f"{dst}.cross.q", f"{src}.encoder_attn.q_proj")
        fused(f"{dst}.cross.kv", f"{src}.encoder_attn", ("k", "v"))
        copy(f"{dst}.cross.out", f"{src}.encoder_attn.out_proj")
        copy(f"{dst}.mlp_norm", f"{src}.final_layer_norm")
        copy(f"{dst}.fc1", f"{src}.fc1")
        copy(f"{dst}.fc2", f"{src}.fc2")
    vocab = int(config["vocab_size"])
    dims = Dims(
        n_mels=int(config["num_mel_bins"]),
        width=int(config["d_model"]),
        encoder_layers=int(config["encoder_layers"]),
        encoder_heads=int(config["encoder_attention_heads"]),
        decoder_layers=int(config["decoder_layers"]),
        decoder_heads=int(config["decoder_attention_heads"]),
        vocab=vocab,
        audio_ctx=int(config["max_source_positions"]),
        text_ctx=int(config["max_target_positions"]),
    )
    lang_ids = sorted(int(v) for v in generation.get("lang_to_id", {}).values())
    return Weights(
        dims=dims,
        tensors=out,
        alignment_heads=[(int(a), int(b)) for a, b in generation.get("alignment_heads", [])],
        suppress_ids=[int(t) for t in generation.get("suppress_tokens", config.get("suppress_tokens") or [])],
        suppress_ids_begin=[int(t) for t in generation.get("begin_suppress_tokens", config.get("begin_suppress_tokens") or [])],
        lang_ids=lang_ids if vocab >= 51865 else [],
        tokenizer_json=_tokenizer_json(folder),
    )


def to_hf(weights: Weights) -> dict[str, np.ndarray]:
    """`weights` as a Hugging Face `WhisperForConditionalGeneration` state dict (q, k and
    v split again, k without its bias), so that a peer runs the very same weights."""
    t = weights.tensors
    out: dict[str, np.ndarray] = {}

    def copy(dst: str, src: str) -> None:
        out[dst + ".weight"] = t[src + ".weight"]
        if src + ".bias" in t:
            out[dst + ".bias"] = t[src + ".bias"]

    def split(dst: str, src: str, names: tuple[str, ...]) -> None:
        weight, bias = t[src + ".weight"], t[src + ".bias"]
        rows = weight.shape[0] // len(names)
        for n, name in enumerate(names):
            out[f"{dst}.{name}_proj.weight"] = weight[n * rows : (n + 1) * rows]
            if name != "k":
                out[f"{dst}.{name}_proj.bias"] = bias[n * rows : (n + 1) * rows]

    for i in (1, 2):
        copy(f"model.encoder.conv{i}", f"encoder.conv{i}")
    out["model.encoder.embed_positions.weight"] = t["encoder.positions"]
    copy("model.encoder.layer_norm", "encoder.norm")
    for i in range(weights.dims.encoder_layers):
        dst, src = f"model.encoder.layers.{i}", f"encoder.blocks.{i}"
        copy(f"{dst}.self_attn_layer_norm", f"{src}.attn_norm")
        split(f"{dst}.self_attn", f"{src}.attn.qkv", ("q", "k", "v"))
        copy(f"{dst}.self_attn.out_proj", f"{src}.attn.out")
        copy(f"{dst}.final_layer_norm", f"{src}.mlp_norm")
        copy(f"{dst}.fc1", f"{src}.fc1")
        copy(f"{dst}.fc2", f"{src}.fc2")
    out["model.decoder.embed_tokens.weight"] = t["decoder.embedding"]
    out["model.decoder.embed_positions.weight"] = t["decoder.positions"]
    copy("model.decoder.layer_norm", "decoder.norm")
    for i in range(weights.dims.decoder_layers):
        dst, src = f"model.decoder.layers.{i}", f"decoder.blocks.{i}"
        copy(f"{dst}.self_attn_layer_norm", f"{src}.attn_norm")
        split(f"{dst}.self_attn", f"{src}.attn.qkv", ("q", "k", "v"))
        copy(f"{dst}.self_attn.out_proj", f"{src}.attn.out")
        copy(f"{dst}.encoder_attn_layer_norm", f"{src}.cross_norm")
        copy(f"{dst}.encoder_attn.q_proj", f"{src}.cross.q")
        split(f"{dst}.encoder_attn", f"{src}.cross.kv", ("k", "v"))
        copy(f"{dst}.encoder_attn.out_proj", f"{src}.cross.out")
        copy(f"{dst}.final_layer_norm", f"{src}.mlp_norm")
        copy(f"{dst}.fc1", f"{src}.fc1")
        copy(f"{dst}.fc2", f"{src}.fc2")
    out["proj_out.weight"] = t["decoder.embedding"]
    return out


def hf_config(weights: Weights) -> tuple[dict[str, Any], dict[str, Any]]:
    """`config.json` and `generation_config.json` for `to_hf`'s state dict."""
    d = weights.dims
    tok = json.loads(weights.tokenizer_json.decode("utf-8"))
    special = {entry["content"]: entry["id"] for entry in tok.get("added_tokens", [])}
    eot = special["<|endoftext|>"]
    config = {
        "architectures": ["WhisperForConditionalGeneration"],
        "model_type": "whisper",
        "vocab_size": d.vocab,
        "num_mel_bins": d.n_mels,
        "d_model": d.width,
        "encoder_layers": d.encoder_layers,
        "encoder_attention_heads": d.encoder_heads,
        "encoder_ffn_dim": 4 * d.width,
        "decoder_layers": d.decoder_layers,
        "decoder_attention_heads": d.decoder_heads,
        "decoder_ffn_dim": 4 * d.width,
        "max_source_positions": d.audio_ctx,
        "max_target_positions": d.text_ctx,
        "activation_function": "gelu",
        "scale_embedding": False,
        "tie_word_embeddings": True,
        "bos_token_id": eot,
        "eos_token_id": eot,
        "pad_token_id": eot,
        "decoder_start_token_id": special["<|startoftranscript|>"],
        "torch_dtype": "float16",
    }
    generation: dict[str, Any] = {
        "alignment_heads": [list(h) for h in weights.alignment_heads],
        "begin_suppress_tokens": weights.suppress_ids_begin,
        "suppress_tokens": weights.suppress_ids,
        "bos_token_id": eot,
        "eos_token_id": eot,
        "pad_token_id": eot,
        "decoder_start_token_id": special["<|startoftranscript|>"],
        "no_timestamps_token_id": special["<|notimestamps|>"],
        "max_length": d.text_ctx,
        "is_multilingual": bool(weights.lang_ids),
    }
    if weights.lang_ids:
        generation["lang_to_id"] = {
            name: i for name, i in special.items() if i in set(weights.lang_ids)
        }
        generation["task_to_id"] = {"transcribe": special["<|transcribe|>"], "translate": special["<|translate|>"]}
    return config, generation


def write_safetensors(tensors: Mapping[str, np.ndarray], path: Path, dtype: Any = np.float16) -> None:
    """Write `tensors` as a `.safetensors` file (an 8-byte header size, a JSON header of
    names, types, shapes and offsets, then the data), in `dtype`."""
    kind = {np.dtype(np.float16): "F16", np.dtype(np.float32): "F32"}[np.dtype(dtype)]
    header: dict[str, Any] = {}
    blobs: list[bytes] = []
    at = 0
    for name, value in tensors.items():
        data = np.ascontiguousarray(value, dtype=dtype).tobytes()
        header[name] = {"dtype": kind, "shape": list(value.shape), "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    text = json.dumps(header).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.writelines(blobs)


def _tokenizer_json(folder: Path) -> bytes:
    """The folder's `tokenizer.json`: the runner's tokenizer travels with the weights."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{folder} has no tokenizer.json; copy it from the original model")
    return path.read_bytes()


# -- our file --------------------------------------------------------------------------
def _is_matrix(name: str, array: np.ndarray) -> bool:
    """Matrices quantized in the compact copy: linear weights and the token embedding.
    Convolutions, norms, biases and positions stay fp16 (small, and sensitive)."""
    return array.ndim == 2 and "positions" not in name


def write_npz(weights: Weights, path: Path, compact: bool = False) -> None:
    """Write `weights` to `path`: fp16 and uncompressed, or (`compact`) int8 matrices with
    an fp16 scale per row, compressed. Written to a temporary name, then renamed, so a
    reader never sees half a file."""
    arrays: dict[str, np.ndarray] = {
        "__meta__": np.frombuffer(json.dumps(weights.meta()).encode("utf-8"), dtype=np.uint8),
        "__tokenizer__": np.frombuffer(weights.tokenizer_json, dtype=np.uint8),
    }
    for name, value in weights.tensors.items():
        if compact and _is_matrix(name, value):
            amax = np.abs(value).max(axis=1, keepdims=True)
            scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float16)
            arrays[name + "#q"] = np.clip(np.round(value / scale.astype(np.float32)), -127, 127).astype(np.int8)
            arrays[name + "#scale"] = scale.reshape(-1)
        else:
            arrays[name] = value.astype(np.float16)
    def save(tmp: str) -> None:
        with open(tmp, "wb") as f:
            _save(f, arrays, compact)

    write_atomically(path, save, ".npz.tmp")


def _save(f: BinaryIO, arrays: Mapping[str, np.ndarray], compress: bool) -> None:
    """An `.npz` (a zip of `.npy` files) that numpy's `load` reads, compressed or not."""
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(f, "w", method, compresslevel=9 if compress else None) as archive:
        for name, value in arrays.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.ascontiguousarray(value), allow_pickle=False)
            archive.writestr(name + ".npy", buffer.getvalue())


def read_npz(path: Path) -> Weights:
    """Read a file written by `write_npz` (either kind); matrices come back as float32."""
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(bytes(data["__meta__"]).decode("utf-8"))
        if meta.get("format") != FORMAT:
            raise ValueError(f"{path}: weights format {meta.get('format')}, expected {FORMAT}")
        tensors: dict[str, np.ndarray] = {}
        for key in data.files:
            if key.startswith("__") or key.endswith("#scale"):
                continue
            if key.endswith("#q"):
                name = key[:-2]
                scale = data[name + "#scale"].astype(np.float32).reshape(-1, 1)
                tensors[name] = data[key].astype(np.float32) * scale
            else:
                tensors[key] = data[key].astype(np.float32)
        tokenizer = bytes(data["__tokenizer__"])
    return Weights(
        dims=Dims(**meta["dims"]),
        tensors=tensors,
        alignment_heads=[(int(a), int(b)) for a, b in meta["alignment_heads"]],
        suppress_ids=list(meta["suppress_ids"]),
        suppress_ids_begin=list(meta["suppress_ids_begin"]),
        lang_ids=list(meta["lang_ids"]),
        tokenizer_json=tokenizer,
    )


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """Where converted weights are kept: `$XDG_CACHE_HOME/voxserve/whisper`, by default
    `~/.cache/voxserve/whisper`."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "voxserve" / "whisper"


def _source_key(folder: Path) -> str:
    """Names the cached copy of a source folder: its path and its weight files' sizes and
    modification times, so that a changed source is converted again."""
    digest = hashlib.sha256(str(folder.resolve()).encode("utf-8"))
    for path in sorted([*folder.glob("model.bin"), *folder.glob("*.safetensors")]):
        stat = path.stat()
        digest.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def load_weights(source: Path, cache: Path | None = None) -> Weights:
    """The weights of `source`: a file from `write_npz`, or a CTranslate2 or Hugging Face
    folder, converted on first use and cached (under `cache`, default `cache_root()`)."""
    if source.is_file():
        return read_npz(source)
    if (source / "model.bin").is_file():
        convert = from_ct2
    elif any(source.glob("*.safetensors")):
        convert = from_hf
    else:
        raise FileNotFoundError(f"{source} is neither a CTranslate2 nor a Hugging Face Whisper folder")
    path = (cache or cache_root()) / f"{source.resolve().name}-{_source_key(source)}.npz"
    if path.is_file():
        try:
            return read_npz(path)
        except (ValueError, OSError, KeyError, zipfile.BadZipFile):
            pass  # an older layout or a damaged file: convert again
    weights = convert(source)
    write_npz(weights, path)
    return weights


def export_weights(source: Path, path: Path) -> int:
    """Write the compact copy of `source`'s weights to `path`; returns its size in bytes."""
    weights = load_weights(source)
    write_npz(weights, path, compact=True)
    return path.stat().st_size
