"""`voxserve serve | speak | voices | bench`: the command line, mirroring the config
dataclasses. Environment variables are read here, once."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import wave
from dataclasses import replace
from pathlib import Path

from voxserve.config import ServerConfig, TTSConfig, VocoderChunking, default_cores

__all__ = ["main"]


def _add_tts_args(p: argparse.ArgumentParser) -> None:
    d = TTSConfig()
    c = VocoderChunking()
    g = p.add_argument_group("TTS engine")
    g.add_argument("--voice-dir", type=Path, help="folder with a Piper .onnx + .onnx.json pair (default: bundled en_US-joe-medium)")
    g.add_argument("--cache-dir", type=Path, help="where split model stages are cached (default: ~/.cache/voxserve)")
    g.add_argument("--workers", type=int, default=default_cores(), help="inference threads (default: CPU cores)")
    g.add_argument("--first-chunk-frames", type=int, default=c.first_chunk_frames, help="frames in a stream's first chunk")
    g.add_argument("--chunk-frames", type=int, default=c.chunk_frames, help="frames in later chunks (256 samples each)")
    g.add_argument("--context-frames", type=int, default=c.left_context, help="vocoder context frames on each side")
    g.add_argument("--output-gain", type=float, default=d.output_gain, help="fixed gain on vocoder output")
    g.add_argument("--credits", type=int, default=d.credits, help="chunks a stream may hold untaken")
    g.add_argument("--max-streams", type=int, default=d.max_streams, help="streams decoded at once")
    g.add_argument("--max-queue", type=int, default=d.max_queue, help="streams waiting for a slot before 429")
    g.add_argument("--queue-timeout", type=float, default=d.queue_timeout_s, help="seconds a stream may wait for a slot")


def _tts_config(args: argparse.Namespace) -> TTSConfig:
    chunking = VocoderChunking(
        first_chunk_frames=args.first_chunk_frames,
        chunk_frames=args.chunk_frames,
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
        credits=args.credits,
        max_streams=args.max_streams,
        max_queue=args.max_queue,
        queue_timeout_s=args.queue_timeout,
    )


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from voxserve.api.app import create_app

    config = ServerConfig(host=args.host, port=args.port, log_level=args.log_level, tts=_tts_config(args))
    app = create_app(config)
    uvicorn.run(
        app,
        host=config.host,
        port=config.port,
        log_level=config.log_level,
        loop="uvloop",
        http="httptools",
        timeout_graceful_shutdown=2,
        access_log=args.access_log,
    )
    return 0


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
    with wave.open(str(args.output), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    print(f"wrote {args.output}: {len(pcm) / rate:.2f} s at {rate} Hz")
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
    _add_tts_args(serve)
    serve.set_defaults(func=_serve)

    speak = sub.add_parser("speak", help="synthesize text to a WAV file, no server")
    speak.add_argument("text", help="text to speak, or - for stdin")
    speak.add_argument("-o", "--output", type=Path, default=Path("speech.wav"))
    speak.add_argument("--voice", default="alloy")
    speak.add_argument("--speed", type=float, default=1.0)
    speak.add_argument("--sample-rate", type=int, default=None, help="default: the voice's own rate")
    _add_tts_args(speak)
    speak.set_defaults(func=_speak)

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
