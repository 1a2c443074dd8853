"""`voxserve serve | speak | transcribe | voices | bench`: the command line, mirroring the config
dataclasses. Environment variables are read here, once."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from voxserve.audio.encode import wav_file
from voxserve.config import (
    ASRConfig,
    RayConfig,
    ServerConfig,
    TTSConfig,
    VocoderChunking,
    WSConfig,
    default_cores,
)

__all__ = ["build_parser", "main", "ray_config", "server_config"]


def _add_tts_args(p: argparse.ArgumentParser) -> None:
    d = TTSConfig()
    c = VocoderChunking()
    g = p.add_argument_group("TTS engine")
    g.add_argument("--voice-dir", type=Path, help="folder with a Piper .onnx + .onnx.json pair (default: bundled en_US-joe-medium)")
    g.add_argument("--cache-dir", type=Path, help="where split model stages are cached (default: ~/.cache/voxserve)")
    g.add_argument("--workers", type=int, default=default_cores(), help="inference threads (default: CPU cores)")
    g.add_argument("--first-chunk-frames", type=int, default=c.first_chunk_frames, help="frames in a stream's first chunk")
    g.add_argument("--chunk-frames", type=int, default=c.chunk_frames, help="frames in later chunks (256 samples each)")
    g.add_argument("--max-chunk-frames", type=int, default=c.max_chunk_frames, help="later chunks double up to this many frames")
    g.add_argument("--context-frames", type=int, default=c.left_context, help="vocoder context frames on each side")
    g.add_argument("--noise-scale", type=float, default=None, help="stage A noise (default: the voice's; 0 = deterministic)")
    g.add_argument("--noise-w", type=float, default=None, help="duration noise (default: the voice's; 0 = deterministic)")
    g.add_argument("--output-gain", type=float, default=d.output_gain, help="fixed gain on vocoder output")
    g.add_argument("--credits", type=int, default=d.credits, help="chunks a stream may hold untaken")
    g.add_argument("--max-streams", type=int, default=d.max_streams, help="streams decoded at once")
    g.add_argument("--max-queue", type=int, default=d.max_queue, help="streams waiting for a slot before 429")
    g.add_argument("--queue-timeout", type=float, default=d.queue_timeout_s, help="seconds a stream may wait for a slot")
    g.add_argument("--max-input-chars", type=int, default=d.max_input_chars, help="longest accepted input text")


def _tts_config(args: argparse.Namespace) -> TTSConfig:
    chunking = VocoderChunking(
        first_chunk_frames=args.first_chunk_frames,
        chunk_frames=args.chunk_frames,
        max_chunk_frames=args.max_chunk_frames,
        left_context=args.context_frames,
        right_context=args.context_frames,
    )
    return replace(
        TTSConfig(),
        voice_dir=args.voice_dir,
        cache_dir=args.cache_dir,
        workers=args.workers,
        chunking=chunking,
        output_gain=args.output_gain,
        noise_scale=args.noise_scale,
        noise_w=args.noise_w,
        credits=args.credits,
        max_streams=args.max_streams,
        max_queue=args.max_queue,
        queue_timeout_s=args.queue_timeout,
        max_input_chars=args.max_input_chars,
    )


def _add_asr_args(p: argparse.ArgumentParser, serving: bool = True) -> None:
    d = ASRConfig()
    g = p.add_argument_group("ASR engine")
    if serving:
        g.add_argument("--no-asr", action="store_true", help="do not load the speech-to-text model")
    g.add_argument("--asr-model", type=Path, help="a CTranslate2 Whisper folder (default: bundled tiny.en)")
    g.add_argument("--asr-compute-type", default=d.compute_type, help="CTranslate2 compute type")
    g.add_argument("--asr-workers", type=int, default=d.workers, help="decoding threads (default: CPU cores)")
    g.add_argument("--asr-max-batch", type=int, default=d.max_batch, help="most 30 s pieces per batch")
    g.add_argument("--asr-batch-wait-ms", type=float, default=d.batch_wait_ms, help="how long a piece waits for company")
    g.add_argument("--asr-beam-size", type=int, default=d.beam_size, help="beam width (1 = greedy)")
    g.add_argument("--audio-workers", type=int, default=d.audio_workers, help="threads that decode, cut and featurize uploads")
    g.add_argument("--asr-nice", type=int, default=d.nice,
                   help="how much lower than speech transcription runs (nice increment, 0-19; 0 = same)")
    if serving:
        g.add_argument("--max-upload-mb", type=float, default=d.max_upload_mb, help="largest upload in MiB (413 past it)")
        g.add_argument(
            "--max-buffered-upload-mb", type=float, default=d.max_buffered_upload_mb,
            help="upload bytes held by all transcriptions together, read but not yet decoded (429 past it)",
        )
        g.add_argument("--asr-max-requests", type=int, default=d.max_requests, help="transcriptions in progress at once")
        g.add_argument("--asr-max-queue", type=int, default=d.max_queue, help="transcriptions waiting for a slot before 429")
        g.add_argument(
            "--asr-max-buffered-audio",
            type=float,
            default=d.max_buffered_audio_s,
            help="seconds of decoded audio held by all transcriptions together (429 past it)",
        )
    g.add_argument("--max-audio-seconds", type=float, default=d.max_audio_seconds, help="longest accepted audio")


def _asr_config(args: argparse.Namespace) -> ASRConfig:
    return replace(
        ASRConfig(),
        enabled=not getattr(args, "no_asr", False),
        model_dir=args.asr_model,
        compute_type=args.asr_compute_type,
        workers=args.asr_workers,
        max_batch=args.asr_max_batch,
        batch_wait_ms=args.asr_batch_wait_ms,
        beam_size=args.asr_beam_size,
        audio_workers=args.audio_workers,
        nice=args.asr_nice,
        max_upload_mb=getattr(args, "max_upload_mb", ASRConfig.max_upload_mb),
        max_buffered_upload_mb=getattr(args, "max_buffered_upload_mb", ASRConfig.max_buffered_upload_mb),
        max_requests=getattr(args, "asr_max_requests", ASRConfig.max_requests),
        max_queue=getattr(args, "asr_max_queue", ASRConfig.max_queue),
        max_audio_seconds=args.max_audio_seconds,
        max_buffered_audio_s=getattr(
            args, "asr_max_buffered_audio", max(ASRConfig.max_buffered_audio_s, args.max_audio_seconds)
        ),
    )


def _add_limit_args(p: argparse.ArgumentParser) -> None:
    d = ServerConfig()
    w = WSConfig()
    g = p.add_argument_group("Connections, WebSockets and browsers (see README: Security)")
    g.add_argument("--header-timeout", type=float, default=d.header_timeout_s,
                   help="seconds a client may take to send its request headers")
    g.add_argument("--body-idle-timeout", type=float, default=d.body_idle_timeout_s,
                   help="an upload that sends nothing for this long gets 408")
    g.add_argument("--min-upload-rate", type=int, default=d.min_upload_bytes_per_s, metavar="BYTES_PER_S",
                   help="slowest average upload rate accepted (408 below it)")
    g.add_argument("--send-stall-timeout", type=float, default=d.send_stall_timeout_s,
                   help="a client that reads nothing for this long is cut off and its slot freed")
    g.add_argument("--limit-concurrency", type=int, default=d.limit_concurrency,
                   help="connections served at once (503 past it)")
    g.add_argument("--backlog", type=int, default=d.backlog, help="connections the kernel may queue")
    g.add_argument("--allowed-origins", default=",".join(d.allowed_origins), metavar="ORIGINS",
                   help="comma-separated browser origins that may open WebSockets and send POSTs besides the "
                   "server's own; * for any")
    g.add_argument("--allowed-hosts", default=",".join(d.allowed_hosts), metavar="HOSTS",
                   help="comma-separated Host header values accepted (against DNS rebinding; default: any)")
    g.add_argument("--ws-max-sessions", type=int, default=w.max_sessions, help="WebSocket sessions open at once")
    g.add_argument("--ws-max-message-bytes", type=int, default=w.max_message_bytes,
                   help="largest WebSocket message (close 1009 past it)")
    g.add_argument("--ws-max-pending-chars", type=int, default=w.max_pending_chars,
                   help="text a session may have waiting to be spoken")
    g.add_argument("--ws-idle-timeout", type=float, default=w.idle_timeout_s,
                   help="seconds a WebSocket session may stay silent with nothing to speak")
    g.add_argument("--ws-messages-per-s", type=float, default=w.messages_per_s,
                   help="sustained WebSocket messages per second per session")
    g.add_argument("--ws-message-burst", type=int, default=w.message_burst,
                   help="WebSocket messages a session may send at once above that rate")
    g.add_argument("--ws-send-timeout", type=float, default=w.send_timeout_s,
                   help="a WebSocket client that takes nothing for this long is gone")


def _names(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


_MAX_KEY_FILE = 4096
"""Largest API key file read, in bytes."""


def _api_key(args: argparse.Namespace, env: Mapping[str, str]) -> str | None:
    """`--api-key`, else `--api-key-file`, else $VOXSERVE_API_KEY, else $VOXSERVE_API_KEY_FILE.

    A file keeps the key out of `ps` and of the environment of child processes. Raises
    ValueError for both flags at once, and for a file that cannot be read, is empty or is
    too long to hold a key (so a wrong path such as /dev/zero fails at once)."""
    if args.api_key is not None and args.api_key_file is not None:
        raise ValueError("give --api-key or --api-key-file, not both")
    if args.api_key is not None:
        return str(args.api_key)
    if args.api_key_file is None and "VOXSERVE_API_KEY" in env:
        return env["VOXSERVE_API_KEY"]
    path = args.api_key_file or env.get("VOXSERVE_API_KEY_FILE")
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


def server_config(args: argparse.Namespace, env: Mapping[str, str] = os.environ) -> ServerConfig:
    """The server's config from `serve` arguments.

    Raises ValueError for settings that do not fit together.
    """
    ws = WSConfig(
        max_sessions=args.ws_max_sessions,
        max_message_bytes=args.ws_max_message_bytes,
        max_pending_chars=args.ws_max_pending_chars,
        idle_timeout_s=args.ws_idle_timeout,
        messages_per_s=args.ws_messages_per_s,
        message_burst=args.ws_message_burst,
        send_timeout_s=args.ws_send_timeout,
    )
    return ServerConfig(
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        tts=_tts_config(args),
        asr=_asr_config(args),
        api_key=_api_key(args, env),
        metrics_require_key=args.metrics_require_key,
        request_timeout_s=args.request_timeout,
        ws=ws,
        allowed_origins=_names(args.allowed_origins),
        allowed_hosts=_names(args.allowed_hosts),
        header_timeout_s=args.header_timeout,
        body_idle_timeout_s=args.body_idle_timeout,
        min_upload_bytes_per_s=args.min_upload_rate,
        send_stall_timeout_s=args.send_stall_timeout,
        limit_concurrency=args.limit_concurrency,
        backlog=args.backlog,
    )


def _add_ray_args(p: argparse.ArgumentParser) -> None:
    d = RayConfig()
    g = p.add_argument_group("Ray Serve (scale out; needs `pip install voxserve[ray]`, see docs/SCALING.md)")
    g.add_argument(
        "--ray", nargs="?", const="", metavar="ADDRESS",
        help="serve on a Ray cluster: join ADDRESS (what `ray start --head` prints), or start a local one",
    )
    for name, r in (("tts", d.tts), ("asr", d.asr)):
        up = name.upper()
        g.add_argument(f"--{name}-replicas", type=int, metavar="N", default=r.count, help=f"{up} engine replicas")
        g.add_argument(f"--{name}-min-replicas", type=int, metavar="N", help=f"autoscale {up} replicas from N...")
        g.add_argument(f"--{name}-max-replicas", type=int, metavar="N", help=f"...up to N {up} replicas")
    g.add_argument("--frontend-replicas", type=int, metavar="N", default=d.frontend_replicas, help="HTTP front ends")


def ray_config(args: argparse.Namespace) -> RayConfig:
    """Where and how `serve --ray` deploys. Raises ValueError for bounds that do not fit."""
    d = RayConfig()
    return RayConfig(
        address=args.ray or None,
        tts=replace(d.tts, count=args.tts_replicas, min=args.tts_min_replicas, max=args.tts_max_replicas),
        asr=replace(d.asr, count=args.asr_replicas, min=args.asr_min_replicas, max=args.asr_max_replicas),
        frontend_replicas=args.frontend_replicas,
    )


def _serve(args: argparse.Namespace) -> int:
    from voxserve.api.app import create_app
    from voxserve.api.server import serve
    from voxserve.engine.memory import tune_allocator
    from voxserve.engine.threads import stragglers

    try:
        config = server_config(args)
        layout = ray_config(args) if args.ray is not None else None
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if config.api_key is not None:
        logging.getLogger("voxserve").info("API key required on /v1 routes")
    tune_allocator()  # before create_app starts any thread
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
    from voxserve.engine.tts import TTSEngine

    engine = TTSEngine(_tts_config(args))
    engine.start()
    try:
        text = sys.stdin.read() if args.text == "-" else args.text
        pcm = engine.synthesize(text, engine.resolve_voice(args.voice), args.speed, args.sample_rate)
    finally:
        engine.stop()
    rate = args.sample_rate or engine.sample_rate
    Path(args.output).write_bytes(wav_file(pcm, rate))
    print(f"wrote {args.output}: {len(pcm) / rate:.2f} s at {rate} Hz")
    return 0


def _transcribe(args: argparse.Namespace) -> int:
    import asyncio
    import json
    import time

    from voxserve.api.formats import as_json, as_srt, as_text, as_verbose_json, as_vtt
    from voxserve.engine.asr import ASREngine, TranscribeOptions
    from voxserve.engine.transcribe import Transcript, start_transcription
    from voxserve.errors import VoxError

    config = _asr_config(args)
    engine = ASREngine(config)
    options = TranscribeOptions(
        task=args.task,
        language=args.language,
        prompt=args.prompt,
        temperature=args.temperature,
        timings=args.response_format in ("srt", "vtt", "verbose_json"),
    )
    data = Path(args.file).read_bytes()

    async def run() -> Transcript:
        with engine.audio_pool() as pool:
            transcription = await start_transcription(engine, data, options, pool)
            return await transcription.collect()

    engine.start()
    try:
        started = time.perf_counter()
        transcript = asyncio.run(run())
        elapsed = time.perf_counter() - started
    except VoxError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    finally:
        engine.stop()
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
    from voxserve.engine.tts import OPENAI_VOICES
    from voxserve.runners.piper import PiperModel, bundled_voice, find_voice

    model = PiperModel(find_voice(args.voice_dir) if args.voice_dir else bundled_voice(), args.cache_dir)
    names = [s.name for s in model.speakers]
    print(f"model {model.name} ({model.sample_rate} Hz)")
    for name in names:
        print(f"  {name}")
    print("OpenAI voice names:")
    for i, alias in enumerate(OPENAI_VOICES):
        print(f"  {alias} -> {names[i % len(names)]}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="voxserve", description="Real-time speech serving")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP server")
    serve.add_argument("--host", default=os.environ.get("VOXSERVE_HOST", ServerConfig.host))
    serve.add_argument("--port", type=int, default=int(os.environ.get("VOXSERVE_PORT", ServerConfig.port)))
    serve.add_argument("--log-level", default="info")
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
        "--metrics-require-key", action="store_true", help="require the API key on /metrics too"
    )
    serve.add_argument(
        "--request-timeout",
        type=float,
        default=ServerConfig.request_timeout_s,
        help="seconds a request may take, upload to last byte (408 / 504 / stream cut off)",
    )
    _add_limit_args(serve)
    _add_tts_args(serve)
    _add_asr_args(serve)
    _add_ray_args(serve)
    serve.set_defaults(func=_serve)

    speak = sub.add_parser("speak", help="synthesize text to a WAV file, no server")
    speak.add_argument("text", help="text to speak, or - for stdin")
    speak.add_argument("-o", "--output", type=Path, default=Path("speech.wav"))
    speak.add_argument("--voice", default="alloy")
    speak.add_argument("--speed", type=float, default=1.0)
    speak.add_argument("--sample-rate", type=int, default=None, help="default: the voice's own rate")
    _add_tts_args(speak)
    speak.set_defaults(func=_speak)

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
    _add_asr_args(transcribe, serving=False)
    transcribe.set_defaults(func=_transcribe)

    voices = sub.add_parser("voices", help="list voices")
    voices.add_argument("--voice-dir", type=Path)
    voices.add_argument("--cache-dir", type=Path)
    voices.set_defaults(func=_voices)

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
