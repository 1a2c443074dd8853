"""Frozen configuration for every component.

Each component receives only its own slice. Every field has a docstring: it is the help of
the field's command-line flag, which `voxserve.flags` generates. This module reads no
environment variable: `voxserve.env` reads the `VOXSERVE_*` ones, once, and `voxserve.cli`
passes them into `ServerConfig`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

DEVICES = ("auto", "cpu", "cuda")
"""Where a model may run; auto picks CUDA when torch sees a GPU."""
TTS_DEVICES = (*DEVICES, "sim")
"""Where speech may run: also `sim`, a simulated H200 whose stand-ins make no speech
(`runners/sim`: capacity planning and CI); auto never picks it."""
SIM_SPEEDS = (0.01, 1000.0)
"""The range of `--tts-sim-speed`: a hundredth of the H200 to a thousand times it, where the
device's share of a step is microseconds and only the host's is left."""
ASR_DEVICES = (*DEVICES, "sim")
"""Where transcription may run: also `sim`, the simulated H200, whose stand-in answers
`[sim]` and made-up words of a plausible number; auto never picks it."""
ASR_RUNTIMES = ("auto", "ct2", "torch")
TTS_RUNTIMES = ("auto", "onnx", "torch")
TTS_PRECISIONS = ("float32", "bfloat16", "float16")
CPU_MAX_STREAMS = 24
"""Speech streams decoded at once on a CPU unless `--tts-max-streams` says: about what two
cores sustain of Piper, and past the measured capacity admission holds newcomers anyway."""
GPU_MAX_STREAMS = 1024
"""The same on a GPU, where batched steps carry about a thousand real-time streams."""


def default_cores() -> int:
    """CPU cores this process may use (respects affinity masks and cgroup pinning)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def precision_refusal(precision: str) -> str:
    """Why a reduced TTS precision cannot run on ONNX Runtime, and what to do instead."""
    return (
        f"--tts-precision {precision} applies to the torch runners only; ONNX Runtime runs its own "
        "graphs (int8 or float32): use --tts-runtime torch, or leave --tts-precision at float32"
    )


@dataclass(frozen=True)
class TTSConfig:
    """The TTS models and how their two stages are served."""

    models: tuple[str, ...] = ("piper", "kokoro")
    """Voice models to load: piper (tts-1), kokoro (tts-1-hd; about 150 MB more memory,
    up to 430 MB while it decodes a long segment, and 3 s more start-up). The first is
    the default: OpenAI's model names that no loaded model claims (gpt-4o-mini-tts) mean it."""
    device: str = "auto"
    """Where speech is synthesized: cpu, cuda, auto (cuda when torch sees a GPU), or sim: a
    simulated H200 for capacity planning and CI, with the real server, engine and text
    front end but stand-ins for the model calls that take an H200's time and make a
    quiet tone, never speech (docs/SCALING.md)."""
    runtime: str = "auto"
    """What runs the voice models: onnx (ONNX Runtime, the CPU default), torch (the torch
    runners, converted once from the same ONNX graphs), or auto (torch on a GPU, else onnx)."""
    precision: str = "float32"
    """The torch runners' decoder precision: float32, bfloat16 or float16 (stage A, the
    harmonic source, the STFTs and the normalization stay float32). A GPU's speed lever;
    ONNX Runtime refuses anything but float32."""
    voice_dir: Path | None = None
    """Folder with a Piper `.onnx` + `.onnx.json` pair; None uses the bundled joe voice."""
    cache_dir: Path | None = None
    """Where the split stage A / stage B graphs are cached; None uses the user cache dir."""
    fixed_prior: bool = True
    """Run a Piper sentence of up to 96 phoneme ids on a copy of stage A's prior fixed to
    its length, 15-30 % faster than the dynamic graph. The copies cost ~90 MB and ~1 s of
    CPU after start-up (~8 s the first time, to build them into `cache_dir`): turn them
    off where memory or start-up time counts for more."""
    workers: int = field(default_factory=default_cores)
    """Inference threads; each runs single-threaded ONNX sessions (a lone stream's unit
    may hold several workers and their threads)."""
    noise_scale: float | None = None
    """Stage A noise scale; None uses the voice's own (0 makes synthesis deterministic)."""
    noise_w: float | None = None
    """Duration-predictor noise; None uses the voice's own."""
    max_streams: int | None = None
    """Streams decoded at once; more wait in the admission queue. None: 24 on a CPU, 1024
    on a GPU, whose measured capacity (admission) is the limit that counts there."""
    max_queue: int = 64
    """Streams that may wait for admission; past it, new requests get 429."""
    queue_timeout_s: float = 30.0
    """Longest wait in the admission queue before answering 429."""
    text_workers: int = 1
    """Threads for text preprocessing (the phonemizer is serialized anyway)."""
    audio_workers: int = field(default_factory=lambda: min(default_cores(), 2))
    """Threads that encode compressed formats (mp3, opus, aac, flac)."""
    max_input_chars: int = 4096
    """Longest accepted `input`, in characters (OpenAI's limit is 4096)."""
    saved_voices_dir: Path | None = None
    """Where saved voices (`POST /v1/audio/voices`) persist, one file each; None uses
    `$XDG_DATA_HOME/voxserve/voices`. Ray replicas on several nodes need it on storage they
    all mount to see one set."""
    max_saved_voices: int = 256
    """Most saved voices the server keeps."""
    sim_graphs: bool = True
    """On the sim device: time each step as a replayed CUDA graph (as the torch runners
    intend), or with `--no-tts-sim-graphs` as an eager call, whose launches hold the GIL."""
    sim_speed: float = 1.0
    """On the sim device: its speed as a multiple of the H200 it models. Each speech step's
    device share is divided by it; the host share (launches, replays, the server's own
    Python) stays as it is. A large factor leaves only the host: what the server and the
    machine cost before any GPU does (docs/SIMULATION.md)."""
    gpu_batch: int = 128
    """Most units (stage A items, or vocoder chunks of one size) one GPU step runs; a step
    runs as many as are ready, so few streams get small, fast steps. On cuda only."""

    def stream_limit(self, gpu: bool) -> int:
        """`max_streams`, or its default for a GPU or a CPU."""
        if self.max_streams is not None:
            return self.max_streams
        return GPU_MAX_STREAMS if gpu else CPU_MAX_STREAMS

    def __post_init__(self) -> None:
        if min(self.workers, self.stream_limit(True), self.max_input_chars, self.gpu_batch) < 1:
            raise ValueError("workers, max_streams, max_input_chars and gpu_batch must be >= 1")
        if not self.models:
            raise ValueError("load at least one TTS model (--tts-models piper)")
        if self.device not in TTS_DEVICES:
            raise ValueError(f"unknown TTS device {self.device!r}: use one of {', '.join(TTS_DEVICES)}")
        if self.runtime not in TTS_RUNTIMES:
            raise ValueError(f"unknown TTS runtime {self.runtime!r}: use one of {', '.join(TTS_RUNTIMES)}")
        if self.device == "cuda" and self.runtime == "onnx":
            raise ValueError("ONNX Runtime runs speech on the CPU only here: use the torch runtime with cuda")
        if self.device == "sim" and self.runtime != "auto":
            raise ValueError(f"the sim device runs its own stand-ins, not {self.runtime}: leave --tts-runtime auto")
        if not SIM_SPEEDS[0] <= self.sim_speed <= SIM_SPEEDS[1]:
            raise ValueError(f"--tts-sim-speed must be from {SIM_SPEEDS[0]:g} to {SIM_SPEEDS[1]:g}, not {self.sim_speed:g}")
        if self.precision not in TTS_PRECISIONS:
            raise ValueError(f"unknown TTS precision {self.precision!r}: use one of {', '.join(TTS_PRECISIONS)}")
        if self.runtime == "onnx" and self.precision != "float32":
            raise ValueError(precision_refusal(self.precision))
        if self.max_queue < 0 or self.queue_timeout_s < 0:
            raise ValueError("max_queue and queue_timeout_s must be >= 0")


@dataclass(frozen=True)
class ASRConfig:
    """The speech-to-text model, its audio pipeline and how its batches are formed."""

    enabled: bool = True
    """Load the ASR model and serve `/v1/audio/transcriptions` and `/translations`."""
    models: tuple[str, ...] = ("whisper-tiny.en", "whisper-base")
    """The speech recognizers to load, the default first (the one OpenAI's model names
    mean): bundled ones by name (whisper-tiny.en, whisper-base, moonshine-base-en) or a
    CTranslate2 Whisper folder. Each takes its own memory (logged at start-up and listed
    in /v1/models); a request names one, or is routed to one that can serve it."""
    compute_type: str = "int8"
    """CTranslate2 compute type (int8 is the fast one on CPU)."""
    device: str = "auto"
    """Where transcription runs: cpu, cuda, sim (a simulated H200: real server and
    batching, the model's time from its measured costs, `[sim]` text), or auto (CUDA
    when torch is installed and sees a GPU, else the CPU)."""
    runtime: str = "auto"
    """What runs the Whisper model: ct2 (CTranslate2, CPU only), torch (the `gpu` extra;
    on a CPU it checks the GPU path), or auto (torch on CUDA, ct2 on the CPU)."""
    gpu_batch: int = 64
    """Most segments decoded in one call on a GPU, which runs one batch at a time (on one
    decoding thread): a 30 s window costs a GPU little more in a batch of 64 than alone.
    (On a CPU a call takes at most `engine/asr.py: CPU_MAX_BATCH`.)"""
    workers: int = field(default_factory=default_cores)
    """Decoding threads, each with a single-threaded model replica (CTranslate2 releases the GIL)."""
    solo_threads: int = field(default_factory=lambda: min(default_cores(), 4))
    """Intra-op threads for a batch that runs alone (no other transcription, no speech
    stream open), on one more model replica (tiny.en: ~85 MB more), so a lone short clip
    uses the idle cores; 1 turns it off."""
    batch_wait_ms: float = 5.0
    """How long a ready segment may wait for others to share its batch."""
    beam_size: int = 5
    """Beam width at temperature 0 (1 is greedy: faster, a little less accurate)."""
    audio_workers: int = 0
    """Threads that decode uploads, resample, cut and (on a CPU) compute log-mel features.
    0: two on a CPU (the decoding workers hold the other cores); on a batched device
    (cuda, sim) every core but two, one for the event loop and one for the device's
    worker: 5,000x real time needs about 6 cores of upload decoding for WAV and 13 for
    MP3 (docs/BENCHMARKS.md, "The host side")."""
    max_upload_mb: float = 25.0
    """Largest accepted request body, in MiB; larger ones get 413 while still uploading."""
    max_buffered_upload_mb: float = 256.0
    """Upload bytes held by all transcriptions together, from the first byte read until the
    audio is decoded. An upload that would pass it gets 429 at once. Uploads are read in
    full before a transcription slot is taken, so this bounds what stalled and slow
    clients can hold."""
    max_audio_seconds: float = 3600.0
    """Longest accepted audio (1 h); longer uploads get 400 `audio_too_long` as soon as
    decoding passes it. It is also one request's share of `max_buffered_audio_s`."""
    max_buffered_audio_s: float = 3 * 3600.0
    """Decoded audio held by all transcriptions together, in seconds (230 MB per hour); an
    upload whose decoding would pass it gets 429. Keep it at 2 x `max_audio_seconds` or
    more (the server warns otherwise)."""
    max_requests: int = 0
    """Transcriptions in progress at once, upload to response (each holds its decoded
    audio). 0: 32 on a CPU; on a batched device (cuda, sim) twice `gpu_batch`, so that a
    batch can fill with the pieces of that many uploads while the next one gathers."""
    max_queue: int = 64
    """Transcriptions that may wait for a slot, unread; past it, 429."""
    queue_timeout_s: float = 30.0
    """Longest wait for a slot before answering 429."""
    nice: int = 10
    """How much lower than speech the decoding and audio threads run (a Unix nice
    increment; 0 for the same priority). Speech must not underrun; a transcription can
    take a little longer, so under overload the cores go to speech first."""

    def __post_init__(self) -> None:
        if not 0 <= self.nice <= 19:
            raise ValueError("the ASR nice increment must be within 0..19")
        if self.workers < 1 or self.audio_workers < 0 or self.solo_threads < 1:
            raise ValueError("ASR workers and solo threads must be at least 1, audio workers at least 0 (auto)")
        if min(self.gpu_batch, self.beam_size) < 1 or self.max_requests < 0:
            raise ValueError("gpu_batch and beam_size must be >= 1, max_requests >= 0 (auto)")
        if self.device not in ASR_DEVICES:
            raise ValueError(f"unknown ASR device {self.device!r}: use one of {', '.join(ASR_DEVICES)}")
        if self.runtime not in ASR_RUNTIMES:
            raise ValueError(f"unknown ASR runtime {self.runtime!r}: use one of {', '.join(ASR_RUNTIMES)}")
        if self.device == "sim" and self.runtime != "auto":
            raise ValueError("--asr-device sim runs the simulated runner: leave --asr-runtime at auto")
        if self.device == "cuda" and self.runtime == "ct2":
            raise ValueError("CTranslate2 runs on the CPU only here: use --asr-runtime torch (or auto) with --asr-device cuda")
        if self.batch_wait_ms < 0 or self.max_upload_mb <= 0 or self.max_audio_seconds <= 0:
            raise ValueError("batch wait must be >= 0 and the upload and audio limits > 0")
        if self.max_buffered_audio_s < self.max_audio_seconds:
            raise ValueError(
                "the buffered-audio budget must hold at least one file of the longest "
                "accepted length (max_buffered_audio_s >= max_audio_seconds)"
            )
        if self.max_buffered_upload_mb < self.max_upload_mb:
            raise ValueError(
                "the upload budget must hold at least one upload of the largest accepted "
                "size (max_buffered_upload_mb >= max_upload_mb)"
            )


@dataclass(frozen=True)
class WSConfig:
    """Limits on every WebSocket session, whatever its client sends or fails to read."""

    max_sessions: int = 64
    """Sessions open at once; one more is refused with an error event and close code 1013."""
    max_message_bytes: int = 64 * 1024
    """Largest message a client may send (after decompression); larger ones close the
    session with code 1009. Ample for text: a fragment holds at most `max_input_chars`."""
    max_pending_chars: int = 16 * 1024
    """Text received but not yet spoken, in characters. Past it the session ends with an
    error event: the client is sending text faster than speech can use it."""
    idle_timeout_s: float = 900.0
    """A session that receives no message and has nothing to speak for this long is
    closed, with close code 1000 and no error event (clients reconnect after it). An idle
    session holds only its place under `max_sessions`."""
    messages_per_s: float = 100.0
    """Sustained message rate a session may send (a token bucket)."""
    message_burst: int = 400
    """Messages a session may send at once above the sustained rate."""
    send_timeout_s: float = 15.0
    """A client that takes no audio or event for this long while the server has some to
    send is gone: the session ends and its stream slot is freed."""
    max_contexts: int = 8
    """Context ids a speech session may have open at once (replies waiting or speaking);
    one more is refused with a `too_many_contexts` error event, and the session goes on."""

    def __post_init__(self) -> None:
        counts = (self.max_sessions, self.max_message_bytes, self.max_pending_chars, self.message_burst)
        if min(*counts, self.max_contexts) < 1:
            raise ValueError("WebSocket session, message, pending-text, burst and context limits must be >= 1")
        if min(self.idle_timeout_s, self.messages_per_s, self.send_timeout_s) <= 0:
            raise ValueError("WebSocket timeouts and message rate must be positive")


@dataclass(frozen=True)
class RealtimeConfig:
    """Live transcription sessions (`WS /v1/realtime`): how many, how big, how fast."""

    max_sessions: int = 8
    """Most live sessions open at once, a hard cap above the measured one: sessions are
    let in while the ASR workers' measured load keeps finals within `final_target_ms`
    (`engine/live.py: live_capacity`, shown as `voxserve_realtime_capacity_sessions`).
    One past either gets an error event and close code 1013. They also count under
    `--ws-max-sessions`."""
    max_message_bytes: int = 256 * 1024
    """Largest message a client may send; larger ones end the session (1009). 256 KiB of
    base64 holds 4 s of 24 kHz PCM."""
    messages_per_s: float = 200.0
    """Sustained message rate a session may send (a token bucket)."""
    message_burst: int = 1000
    """Messages a session may send at once above the sustained rate."""
    max_buffer_s: float = 60.0
    """Audio held uncommitted, in seconds. With manual commits (no turn detection), past
    it the oldest uncommitted audio is dropped to make room, silence first (anything the
    VAD does not hear as speech, beyond the prefix padding around speech), so a turn
    keeps its start: the newest speech is always kept. Memory stays at this many seconds
    per session."""
    max_turn_s: float = 30.0
    """Under server VAD, a turn that has lasted this long is committed even while the
    user goes on speaking (one Whisper window), and the next turn starts at once."""
    max_pending_turns: int = 4
    """Committed turns of one session being transcribed at once; past it the server stops
    reading that session until one finishes."""
    final_target_ms: float = 400.0
    """A turn's transcript is due this long after the end of its speech is known: its
    deadline in the ASR batcher, where live turns go before file pieces."""
    idle_timeout_s: float = 900.0
    """A session that sends nothing for this long, with no turn being transcribed, is
    closed, with close code 1000 and no error event (clients reconnect after it). A
    session counts against the live capacity only while it is active (`active_s`); an
    idle one holds only its place under `max_sessions`."""
    active_s: float = 60.0
    """A session is active, and counts against the measured live capacity, from its
    opening and from each turn it starts or commits until this long after."""
    noise_reduction: str | None = None
    """Noise reduction for sessions that do not ask for any: `near_field` or `far_field`
    (`docs/REALTIME.md` says what each does); unset leaves their audio unfiltered. A
    session's own `noise_reduction`, null included, overrides it."""

    def __post_init__(self) -> None:
        if min(self.max_sessions, self.max_message_bytes, self.message_burst, self.max_pending_turns) < 1:
            raise ValueError("realtime session, message, burst and pending-turn limits must be >= 1")
        if min(self.messages_per_s, self.max_buffer_s, self.max_turn_s, self.idle_timeout_s) <= 0:
            raise ValueError("realtime message rate, buffer, turn length and idle timeout must be positive")
        if self.final_target_ms < 0:
            raise ValueError("the realtime final target must be >= 0")
        if self.max_turn_s > self.max_buffer_s:
            raise ValueError("max_turn_s must not exceed max_buffer_s")
        if self.noise_reduction not in (None, "near_field", "far_field"):
            raise ValueError(f"noise_reduction must be near_field or far_field, not {self.noise_reduction!r}")


@dataclass(frozen=True)
class ServerConfig:
    """HTTP server settings."""

    host: str = "127.0.0.1"
    """Interface to bind (`VOXSERVE_HOST` when no flag gives it)."""
    port: int = 8000
    """TCP port to bind (`VOXSERVE_PORT` when no flag gives it)."""
    log_level: str = "info"
    """uvicorn log level."""
    default_sample_rate: int = 24000
    """Rate of `pcm` and every other format unless the request names `sample_rate`."""
    tts: TTSConfig = field(default_factory=TTSConfig)
    """The TTS engine's slice."""
    asr: ASRConfig = field(default_factory=ASRConfig)
    """The ASR engine's slice."""
    api_key: str | None = field(default=None, repr=False)
    """When set, every `/v1` route needs `Authorization: Bearer <api_key>` (401 otherwise);
    None serves without auth. Kept out of the repr so that it never reaches a log."""
    metrics_require_key: bool = False
    """Also require the key on `/metrics`; `/health` always stays open."""
    ws: WSConfig = field(default_factory=WSConfig)
    """Limits on WebSocket sessions."""
    realtime: RealtimeConfig = field(default_factory=RealtimeConfig)
    """Live transcription sessions."""
    allowed_origins: tuple[str, ...] = ()
    """Browser origins (`https://app.example.com`) allowed to open a WebSocket or send a
    request other than GET, HEAD or OPTIONS, besides the server's own; `*` allows any. A
    request with no `Origin` (not a browser) is allowed."""
    allowed_hosts: tuple[str, ...] = ()
    """`Host` header values accepted (`voxserve.example.com`, `localhost:8000`), against DNS
    rebinding; empty accepts any."""
    header_timeout_s: float = 10.0
    """Longest a client may take to send a request's headers; then the connection closes."""
    body_idle_timeout_s: float = 10.0
    """An upload that sends no byte for this long gets 408 and its connection is closed."""
    min_upload_bytes_per_s: int = 1024
    """Slowest average upload rate accepted once a body has taken `body_idle_timeout_s`;
    slower uploads get 408."""
    send_stall_timeout_s: float = 30.0
    """A client that reads nothing of its response for this long is gone: its stream is
    cut off and its slot freed."""
    limit_concurrency: int = 1024
    """Connections served at once; more get 503 from uvicorn at once."""
    backlog: int = 2048
    """Connections the kernel may queue before they are accepted."""
    request_timeout_s: float = 600.0
    """Longest an HTTP request may take, from its first byte to the last byte of its
    response. An upload still arriving then gets 408; a response not started gets 504; a
    stream already playing is cut off. Generous by default: a 4096-character input is
    about five minutes of audio, read by a client that plays it in real time."""

    def __post_init__(self) -> None:
        key = self.api_key
        if key is not None and (not key or not key.isascii() or not key.isprintable() or " " in key):
            raise ValueError("the API key must be non-empty printable ASCII without spaces")
        if self.request_timeout_s <= 0:
            raise ValueError("the request timeout must be positive")
        if min(self.header_timeout_s, self.body_idle_timeout_s, self.send_stall_timeout_s) <= 0:
            raise ValueError("header, body and send-stall timeouts must be positive")
        if self.min_upload_bytes_per_s < 0 or min(self.limit_concurrency, self.backlog) < 1:
            raise ValueError("min_upload_bytes_per_s >= 0, limit_concurrency and backlog >= 1")
        for origin in self.allowed_origins:
            scheme, sep, rest = origin.partition("://")
            host = rest.rstrip("/")
            if origin not in ("*", "null") and not (sep and scheme.isalpha() and host and "/" not in host):
                raise ValueError(
                    f"allowed origin {origin!r} must be scheme://host[:port] (https://app.example.com), null or *"
                )
        if self.metrics_require_key and key is None:
            raise ValueError("metrics_require_key needs an API key (--api-key or VOXSERVE_API_KEY)")


@dataclass(frozen=True)
class Replicas:
    """How many replicas a Ray Serve deployment runs: a fixed count, or autoscaling bounds."""

    count: int = 1
    """Replicas to run when no bounds are set."""
    min: int | None = None
    """Autoscaling lower bound; give the upper bound with it, and the fixed count is ignored."""
    max: int | None = None
    """Autoscaling upper bound."""
    target: int = 8
    """Autoscaling aims at this many requests in flight per replica."""

    def __post_init__(self) -> None:
        if (self.min is None) != (self.max is None):
            raise ValueError("give both the minimum and the maximum replica count, or neither")
        if self.min is not None and self.max is not None and not 0 <= self.min <= self.max:
            raise ValueError("replica bounds must satisfy 0 <= min <= max")
        if self.max == 0 or (self.min is None and self.count < 1):
            raise ValueError("a deployment needs at least one replica")
        if self.target < 1:
            raise ValueError("the autoscaling target must be at least 1")

    @property
    def autoscaling(self) -> bool:
        return self.min is not None


@dataclass(frozen=True)
class RayConfig:
    """How `voxserve serve --ray` lays voxserve out on a Ray cluster (`voxserve.ray`)."""

    address: str | None = None
    """Cluster to join (what `ray start --head` prints); None starts a local one."""
    tts: Replicas = field(default_factory=Replicas)
    """TTS engine replicas; each runs its own scheduler, admission and workers."""
    asr: Replicas = field(default_factory=lambda: Replicas(target=4))
    """ASR engine replicas."""
    frontend_replicas: int = 1
    """HTTP front ends behind Serve's proxy (validation, auth, errors, metrics). With more
    than one, `--ws-max-sessions` still caps the cluster's sessions: the front ends take a
    lease per session from one keeper (`voxserve.ray.leases`)."""
    frontend_cpus: float = 0.5
    """Logical CPUs each front end reserves; it only parses, validates and relays bytes."""

    def __post_init__(self) -> None:
        if self.frontend_replicas < 1 or self.frontend_cpus < 0:
            raise ValueError("frontend_replicas >= 1 and frontend_cpus >= 0")
