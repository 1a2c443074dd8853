"""`voxserve serve | speak | transcribe | voices | bench`: the command line.

Engine and server flags are generated from the config dataclasses (`voxserve.flags`);
this module says which configs each command has, names the few flags whose names differ
from their fields, and builds the configs from the parsed arguments. The `VOXSERVE_*`
variables come from `voxserve.env`, read once when the server's config is built.
`speak`, `transcribe` and `voices` run through the serving layer
(`voxserve.serving.offline`), never the engines directly.

One naming rule: a flag is its field's name behind the prefix of what it sets, the
engine (`--tts-workers`, `--asr-runtime`), a model family that alone reads it
(`--piper-voice-dir`), the sessions (`--ws-`, `--realtime-`) or the Ray layout
(`--ray-tts-replicas`), with its unit in the name (`-s`, `-ms`, `-mb`, `-bytes`,
`-per-s`), so that a flag means one thing on every command and says what it takes.
The one bare engine flag, `--device`, sets every engine the command runs (a device name
means the same to both); an engine's own `--tts-device` or `--asr-device` wins over it.
Old spellings that keep their meaning (`RENAMED`) are accepted with a warning until the
next release; those whose meaning would change, and flags that became constants, are
refused with what to write instead.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from voxserve.audio.encode import wav_file
from voxserve.config import (
    DEVICES,
    TTS_DEVICES,
    ASRConfig,
    RayConfig,
    RealtimeConfig,
    ServerConfig,
    TTSConfig,
    WSConfig,
)
from voxserve.env import Environment
from voxserve.flags import ConfigFlags, add_old_spellings

__all__ = [
    "RENAMED", "build_parser", "main", "ray_config", "serve_flags", "server_config", "speak_flags",
    "transcribe_flags",
]  # fmt: skip


_PIPER_ONLY = ("voice_dir", "fixed_prior", "noise_scale", "noise_w")
"""TTS fields that only the Piper model reads: their flags name the family, not the engine."""


@functools.cache
def _tts_flags() -> ConfigFlags[TTSConfig]:
    return ConfigFlags(
        TTSConfig,
        "TTS engine (--piper-*: settings of the Piper model alone)",
        prefix="tts-",
        rename={name: "piper-" + name.replace("_", "-") for name in _PIPER_ONLY},
    )


_SERVING_ONLY_ASR = ("enabled", "max_upload_mb", "max_buffered_upload_mb", "max_buffered_audio_s",
                     "max_requests", "max_queue", "queue_timeout_s")  # fmt: skip
"""ASR fields that only a server uses: `transcribe` reads one local file, with no queue."""


@functools.cache
def _asr_flags(serving: bool) -> ConfigFlags[ASRConfig]:
    return ConfigFlags(
        ASRConfig,
        "ASR engine",
        prefix="asr-",
        rename={"enabled": "asr", "max_audio_seconds": "asr-max-audio-s"},  # --no-asr; seconds as `-s`
        skip={} if serving else {name: "only `serve` has it" for name in _SERVING_ONLY_ASR},
    )


@functools.cache
def _server_flags() -> ConfigFlags[ServerConfig]:
    return ConfigFlags(
        ServerConfig,
        "Server, connections and browsers (see README: Security)",
        metavars={"min_upload_bytes_per_s": "BYTES_PER_S", "allowed_origins": "ORIGINS", "allowed_hosts": "HOSTS"},
        skip={
            "tts": "the TTS engine's flags",
            "asr": "the ASR engine's flags",
            "ws": "the WebSocket sessions' flags",
            "realtime": "the live transcription sessions' flags",
            "api_key": "--api-key",
        },
    )


@functools.cache
def _ws_flags() -> ConfigFlags[WSConfig]:
    return ConfigFlags(WSConfig, "WebSocket sessions", prefix="ws-")


@functools.cache
def _realtime_flags() -> ConfigFlags[RealtimeConfig]:
    return ConfigFlags(RealtimeConfig, "live transcription sessions (WS /v1/realtime)", prefix="realtime-")


@functools.cache
def _ray_flags() -> ConfigFlags[RayConfig]:
    replicas = {"count": "replicas", "min": "min-replicas", "max": "max-replicas", "target": "target-requests"}
    return ConfigFlags(
        RayConfig,
        "Ray Serve (scale out; needs `pip install voxserve[ray]`, see docs/SCALING.md)",
        prefix="ray-",
        prefixes={"tts": "tts-", "asr": "asr-"},
        rename={f"{side}.{field}": f"ray-{side}-{name}" for side in ("tts", "asr") for field, name in replicas.items()},
        metavars={f"{side}.{field}": "N" for side in ("tts", "asr") for field in replicas},
        skip={"address": "--ray"},
    )


def serve_flags() -> tuple[ConfigFlags[Any], ...]:
    """Every config's flags that `voxserve serve` has."""
    return (_server_flags(), _ws_flags(), _realtime_flags(), _tts_flags(), _asr_flags(True), _ray_flags())


def speak_flags() -> tuple[ConfigFlags[Any], ...]:
    return (_tts_flags(),)


def transcribe_flags() -> tuple[ConfigFlags[Any], ...]:
    return (_asr_flags(False),)


RENAMED = {
    # Engine flags that had no engine prefix.
    **{f"--{name}": f"--tts-{name}" for name in ("workers", "max-streams", "max-queue", "text-workers",
                                                  "max-input-chars", "cache-dir")},
    **{f"--{name}": f"--asr-{name}" for name in ("audio-workers", "max-upload-mb", "max-buffered-upload-mb")},
    "--queue-timeout": "--tts-queue-timeout-s",
    "--max-audio-seconds": "--asr-max-audio-s",
    # Piper's own settings under the TTS engine's prefix, or under none.
    **{f"--{pre}{name}": f"--piper-{name}" for pre in ("", "tts-")
       for name in ("voice-dir", "fixed-prior", "noise-scale", "noise-w")},
    # Durations in seconds that did not say so, or said it as `-seconds`.
    **{f"--{name}": f"--{name}-s" for name in (
        "header-timeout", "body-idle-timeout", "send-stall-timeout", "request-timeout",
        "ws-idle-timeout", "ws-send-timeout", "realtime-max-buffer", "realtime-max-turn",
        "realtime-idle-timeout", "realtime-active", "tts-queue-timeout", "asr-queue-timeout",
        "asr-max-buffered-audio")},
    "--asr-max-audio-seconds": "--asr-max-audio-s",
    # Ray's deployment sizes under the engines' names, or under none.
    **{f"--{name}": f"--ray-{name}" for name in (
        "tts-replicas", "tts-min-replicas", "tts-max-replicas", "tts-target-requests",
        "asr-replicas", "asr-min-replicas", "asr-max-replicas", "asr-target-requests",
        "frontend-replicas", "frontend-cpus")},
    # A list under a singular name, and a rate under a name without its unit.
    "--asr-model": "--asr-models",
    "--min-upload-rate": "--min-upload-bytes-per-s",
}  # fmt: skip
"""Every old spelling still accepted, with a warning, until the next release: old -> new.
Each command takes those whose new spelling it has (the README lists them all)."""

_CONSTANT = "it is no longer a flag: {} holds it, and docs/BENCHMARKS.md the measurement behind it"

_TTS_CONSTANTS = {
    **{f"--{name}": _CONSTANT.format("engine/adapters/piper.py: CHUNKING")
       for name in ("first-chunk-frames", "idle-first-chunk-frames", "chunk-frames", "max-chunk-frames",
                    "left-context", "right-context", "context-frames")},
    "--output-gain": _CONSTANT.format("engine/adapters/piper.py: OUTPUT_GAIN"),
    "--credits": _CONSTANT.format("engine/scheduler.py: CREDITS"),
    "--first-segment-chars": _CONSTANT.format("engine/tts.py: FIRST_SEGMENT_CHARS"),
    "--max-segment-chars": _CONSTANT.format("engine/tts.py: MAX_SEGMENT_CHARS"),
}  # fmt: skip
"""TTS flags whose values a benchmark chose: constants in the modules that apply them."""

_ASR_CONSTANTS = {
    "--asr-fitted-windows": _CONSTANT.format("engine/asr.py: FITTED_WINDOWS"),
    "--no-asr-fitted-windows": _CONSTANT.format("engine/asr.py: FITTED_WINDOWS"),
    "--asr-even-piece": _CONSTANT.format("engine/asr.py: EVEN_PIECE_S"),
    "--asr-max-batch": _CONSTANT.format("engine/asr.py: CPU_MAX_BATCH (on a GPU, --asr-gpu-batch)"),
    "--asr-segments-ahead": _CONSTANT.format("engine/asr.py: SEGMENTS_AHEAD"),
}
"""ASR flags whose values a benchmark chose."""

_SERVE_CONSTANTS = {
    "--realtime-early-final-ms": _CONSTANT.format("engine/turns.py: EARLY_FINAL_MS"),
    "--realtime-delta-interval-ms": _CONSTANT.format("engine/turns.py: DELTA_INTERVAL_MS"),
    "--routing-stats-period": _CONSTANT.format("ray/launcher.py: ROUTING_STATS_PERIOD_S"),
}
"""Realtime and Ray flags whose values a benchmark chose."""

_SERVE_RUNTIME = (
    "on serve it named the ASR runtime only; name each engine's: --asr-runtime (ct2, torch or "
    "auto) and --tts-runtime (onnx, torch or auto)"
)


def _old_spellings(parser: argparse.ArgumentParser, renamed: Mapping[str, str], refused: Mapping[str, str]) -> None:
    """Accept `RENAMED`'s old spellings of the flags `parser` has, and `renamed`; refuse `refused`."""
    options = parser._option_string_actions
    add_old_spellings(parser, {**{o: n for o, n in RENAMED.items() if n in options}, **renamed}, refused)


def _add_device(parser: argparse.ArgumentParser, engines: str, choices: tuple[str, ...] = DEVICES) -> None:
    sim = (
        "; sim: a simulated H200 that makes no speech and no transcript (capacity planning and CI)"
        if "sim" in choices
        else ""
    )
    parser.add_argument(
        "--device", choices=choices,
        help=f"where {engines} runs: cpu, cuda, or auto (cuda when torch sees a GPU){sim}; "
        "an engine's own --tts-device or --asr-device wins over it",
    )  # fmt: skip


def _tts_config(args: argparse.Namespace) -> TTSConfig:
    flags = _tts_flags()
    if ("device",) not in flags.given(args) and args.device is not None:
        return flags.build(args, device=args.device)
    return flags.build(args)


def _asr_config(args: argparse.Namespace, serving: bool) -> ASRConfig:
    flags = _asr_flags(serving)
    given = flags.given(args)
    fields: dict[str, Any] = {}
    if ("device",) not in given and args.device is not None:
        fields["device"] = args.device
    if not serving:
        # No buffered-audio flag here: the budget grows to hold the one file when it must.
        longest = given.get(("max_audio_seconds",), ASRConfig.max_audio_seconds)
        fields["max_buffered_audio_s"] = max(ASRConfig.max_buffered_audio_s, longest)
    return flags.build(args, **fields)


_MAX_KEY_FILE = 4096
"""Largest API key file read, in bytes."""


def _api_key(args: argparse.Namespace, env: Environment) -> str | None:
    """`--api-key`, else `--api-key-file`, else $VOXSERVE_API_KEY, else $VOXSERVE_API_KEY_FILE.

    A file keeps the key out of `ps` and of the environment of child processes. Raises
    ValueError for both flags at once, and for a file that cannot be read, is empty or is
    too long to hold a key (so a wrong path such as /dev/zero fails at once)."""
    if args.api_key is not None and args.api_key_file is not None:
        raise ValueError("give --api-key or --api-key-file, not both")
    if args.api_key is not None:
        return str(args.api_key)
    if args.api_key_file is None and env.api_key is not None:
        return env.api_key
    path = args.api_key_file or env.api_key_file
    if not path:
        return None
    try:
        with open(path, "rb") as file:
            raw = file.read(_MAX_KEY_FILE + 1)
        if len(raw) > _MAX_KEY_FILE:
            raise ValueError(f"the API key file {path} is over {_MAX_KEY_FILE} bytes; it should hold only the key")
        key = raw.decode("utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the API key file {path}: {exc}") from exc
    if not key:
        raise ValueError(f"the API key file {path} is empty")
    return key


def server_config(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> ServerConfig:
    """The server's config from `serve` arguments, and from the `VOXSERVE_*` variables in
    `env` (default: this process's environment) for what the flags leave out.

    Raises ValueError for settings that do not fit together.
    """
    environment = Environment.read(env)
    from_env: dict[str, Any] = {}
    if args.host is None and environment.host is not None:
        from_env["host"] = environment.host
    if args.port is None and environment.port is not None:
        from_env["port"] = environment.port
    return _server_flags().build(
        args,
        tts=_tts_config(args),
        asr=_asr_config(args, serving=True),
        ws=_ws_flags().build(args),
        realtime=_realtime_flags().build(args),
        api_key=_api_key(args, environment),
        **from_env,
    )


def ray_config(args: argparse.Namespace) -> RayConfig:
    """Where and how `serve --ray` deploys. Raises ValueError for bounds that do not fit."""
    return _ray_flags().build(args, address=args.ray or None)


def _serve(args: argparse.Namespace) -> int:
    from voxserve.api.app import create_app
    from voxserve.api.server import serve
    from voxserve.engine.memory import tune_allocator
    from voxserve.engine.threads import single_threaded_blas, stragglers

    try:
        config = server_config(args)
        layout = ray_config(args) if args.ray is not None else None
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if config.api_key is not None:
        logging.getLogger("voxserve").info("API key required on /v1 routes")
    tune_allocator()  # before create_app starts any thread
    single_threaded_blas()
    if layout is not None:
        from voxserve.ray.environment import prepare_local  # imports no ray

        # Ray reads its settings when imported: a local instance is set up first.
        local = prepare_local(config.host) if layout.address is None else None
        from voxserve.ray.launcher import serve_on_ray  # imports ray: only on this path

        return serve_on_ray(config, layout, local)
    code = 0 if serve(create_app(config), config, access_log=args.access_log) else 3
    if stragglers():
        # A worker is still in a native inference call whose result nobody wants; the
        # exit hook would wait for it, and finalizing under it can crash. Leave now.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _speak(args: argparse.Namespace) -> int:
    from voxserve.errors import VoxError
    from voxserve.serving.offline import OfflineTTS

    try:
        config = _tts_config(args)
        if config.device == "sim":
            raise ValueError("speak writes a speech file, and the sim device makes no speech (its file would "
                             "still pass for one): use --device cpu, cuda or auto")
        offline = OfflineTTS(config, args.model)
    except (ValueError, RuntimeError) as exc:  # a device or runtime this machine lacks
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with offline as tts:
        text = sys.stdin.read() if args.text == "-" else args.text
        try:
            spoken = tts.speak(text, args.voice, args.speed, args.sample_rate)
        except (VoxError, ValueError) as exc:  # a bad voice, speed or sample rate
            print(f"error: {getattr(exc, 'message', exc)}", file=sys.stderr)
            return 2
    pcm = np.frombuffer(spoken.pcm, dtype="<i2")
    rate = spoken.sample_rate
    Path(args.output).write_bytes(wav_file(pcm, rate))
    print(f"wrote {args.output}: {len(pcm) / rate:.2f} s at {rate} Hz")
    return 0


def _transcribe(args: argparse.Namespace) -> int:
    import json
    import time

    from voxserve.api.formats import as_json, as_srt, as_text, as_verbose_json, as_vtt
    from voxserve.errors import VoxError
    from voxserve.serving.offline import OfflineASR

    try:
        config = _asr_config(args, serving=False)
        if config.device == "sim":
            raise ValueError("transcribe writes a transcript, and the sim device makes none (its `[sim]` "
                             "words stand for timing only): use --device cpu, cuda or auto")
        asr = OfflineASR(config)
    except (ValueError, RuntimeError) as exc:  # a device or runtime this machine lacks
        print(f"error: {exc}", file=sys.stderr)
        return 2
    data = Path(args.file).read_bytes()
    with asr:
        started = time.perf_counter()
        try:
            transcript = asr.transcribe(
                data,
                task=args.task,
                language=args.language,
                prompt=args.prompt,
                temperature=args.temperature,
                timings=args.response_format in ("srt", "vtt", "verbose_json"),
            )
        except VoxError as exc:
            print(f"error: {exc.message}", file=sys.stderr)
            return 2
        elapsed = time.perf_counter() - started
    fmt = args.response_format
    if fmt in ("json", "verbose_json"):
        body = as_json(transcript) if fmt == "json" else as_verbose_json(
            transcript, args.word_timestamps, True, args.task
        )
        out = json.dumps(body, ensure_ascii=False, indent=2) + "\n"
    else:
        out = {"text": as_text, "srt": as_srt, "vtt": as_vtt}[fmt](transcript)
    if args.output:
        Path(args.output).write_text(out, encoding="utf-8")
    else:
        sys.stdout.write(out)
    rtfx = transcript.duration / elapsed if elapsed > 0 else 0.0
    print(f"{transcript.duration:.1f} s of audio in {elapsed:.2f} s (RTFx {rtfx:.1f})", file=sys.stderr)
    return 0


def _voices(args: argparse.Namespace) -> int:
    from voxserve.serving.offline import voice_catalog

    try:
        catalog = voice_catalog(args.piper_voice_dir, args.tts_cache_dir)
    except (FileNotFoundError, ValueError) as exc:  # no such folder, or no voice in it
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"model {catalog.model} ({catalog.sample_rate} Hz)")
    for voice in catalog.voices:
        if voice["alias_of"] is None:
            print(f"  {voice['name']}")
    print("OpenAI voice names:")
    for voice in catalog.voices:
        if voice["alias_of"] is not None:
            print(f"  {voice['name']} -> {voice['alias_of']}")
    return 0


def _add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve", help="run the HTTP server")
    serve.add_argument("--access-log", action="store_true", help="log every request")
    serve.add_argument(
        "--api-key",
        help="require 'Authorization: Bearer KEY' on /v1 routes (default: $VOXSERVE_API_KEY, else none); "
        "visible in ps, so prefer --api-key-file",
    )
    serve.add_argument(
        "--api-key-file", type=Path,
        help="read the API key from this file (default: $VOXSERVE_API_KEY_FILE)",
    )
    serve.add_argument(
        "--ray", nargs="?", const="", metavar="ADDRESS",
        help="serve on a Ray cluster: join ADDRESS (what `ray start --head` prints), or start a local one",
    )
    _add_device(serve, "every engine", TTS_DEVICES)
    for flags in serve_flags():
        flags.add_to(serve)
    refused = {"--runtime": _SERVE_RUNTIME, **_TTS_CONSTANTS, **_ASR_CONSTANTS, **_SERVE_CONSTANTS}
    _old_spellings(serve, {}, refused)
    serve.set_defaults(func=_serve)


def _add_speak(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    speak = sub.add_parser("speak", help="synthesize text to a WAV file, no server")
    speak.add_argument("text", help="text to speak, or - for stdin")
    speak.add_argument("-o", "--output", type=Path, default=Path("speech.wav"))
    speak.add_argument("--model", default="tts-1", help="a speech model id, as a request names it (tts-1-hd: Kokoro)")
    speak.add_argument("--voice", default="alloy")
    speak.add_argument("--speed", type=float, default=1.0)
    speak.add_argument("--sample-rate", type=int, default=None, help="default: the voice's own rate")
    _add_device(speak, "speech", TTS_DEVICES)
    for flags in speak_flags():
        flags.add_to(speak)
    _old_spellings(speak, {"--runtime": "--tts-runtime"}, _TTS_CONSTANTS)
    speak.set_defaults(func=_speak)


def _add_transcribe(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    transcribe = sub.add_parser("transcribe", help="transcribe an audio file, no server")
    transcribe.add_argument("file", type=Path, help="any audio or video file that FFmpeg reads")
    transcribe.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    transcribe.add_argument(
        "-f", "--response-format", default="text", choices=("json", "text", "srt", "verbose_json", "vtt")
    )
    transcribe.add_argument("--language", help="ISO-639-1 code of the audio (default: detect, or en)")
    transcribe.add_argument("--prompt", help="text that primes every 30 s piece")
    transcribe.add_argument("--temperature", type=float, default=0.0)
    transcribe.add_argument("--task", default="transcribe", choices=("transcribe", "translate"))
    transcribe.add_argument("--word-timestamps", action="store_true", help="add word timings (verbose_json)")
    _add_device(transcribe, "transcription")
    for flags in transcribe_flags():
        flags.add_to(transcribe)
    _old_spellings(transcribe, {"--runtime": "--asr-runtime"}, _ASR_CONSTANTS)
    transcribe.set_defaults(func=_transcribe)


def _add_voices(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    voices = sub.add_parser("voices", help="list voices")
    voices.add_argument("--piper-voice-dir", type=Path, help="a folder with a Piper voice (default: the bundled one)")
    voices.add_argument("--tts-cache-dir", type=Path, help="where converted graphs are kept")
    _old_spellings(voices, {}, {})
    voices.set_defaults(func=_voices)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="voxserve", description="Real-time speech serving")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_serve, _add_speak, _add_transcribe, _add_voices):
        add(sub)
    try:
        from voxserve.bench.cli import add_bench_parser
    except ImportError:
        pass
    else:
        add_bench_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
