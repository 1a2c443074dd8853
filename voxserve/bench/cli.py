"""`voxserve bench speech | transcribe | make-asr-set | stream-text | realtime | voice-loop |
soak | overload | compare | plot | offline | kokoro-peer | kokoro-prosody`.

Parses flags, builds the run settings, calls the measuring module and writes the report.
Only `offline`, `kokoro-peer` and `kokoro-prosody` touch the engine, and they are imported lazily so that
the HTTP benches stay free of it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from voxserve.bench.levels import BenchError

if TYPE_CHECKING:
    from voxserve.bench.liveclips import LiveClip
    from voxserve.bench.rtclient import LiveOptions
    from voxserve.bench.speech import SpeechApi

__all__ = ["add_bench_parser"]

DEFAULT_URL = "http://127.0.0.1:8000"


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers like 1,4,16, got {text!r}") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError("every concurrency level must be at least 1")
    return levels


def _add_load_args(p: argparse.ArgumentParser, levels: str) -> None:
    p.add_argument("--base-url", default=DEFAULT_URL,
                   help=f"server root (default {DEFAULT_URL})")
    p.add_argument("--concurrency", type=_levels, default=_levels(levels),
                   help=f"comma-separated levels, each a closed loop of C workers "
                        f"(default {levels})")
    p.add_argument("--request-rate", type=float, default=None,
                   help="Poisson arrivals at this many requests/s, at most C in flight")
    p.add_argument("--warmup", type=int, default=2, help="untimed requests before the first level")
    p.add_argument("--probe-health", action=argparse.BooleanOptionalAction, default=True,
                   help="probe GET /health during the run (default on, where the server "
                        "has one)")
    p.add_argument("--health-interval-ms", type=float, default=50.0)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", "-o", type=Path, default=None,
                   help="result JSON (default bench-KIND-YYYYmmdd-HHMMSS.json)")
    p.add_argument("--plot", type=Path, default=None, help="also draw the run into this PNG")
    p.add_argument("--no-progress", dest="progress", action="store_false")


def _settings(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    from voxserve.bench.report import command_line, git_revision, host_info, now_iso

    return {
        "base_url": args.base_url,
        "git_revision": git_revision(),
        "started_at": now_iso(),
        "concurrency": args.concurrency,
        "request_rate": args.request_rate,
        "warmup": args.warmup,
        "probe_health": args.probe_health,
        "health_interval_s": args.health_interval_ms / 1e3,
        "seed": args.seed,
        "host": host_info(),
        "argv": command_line(),
        **extra,
    }


def _finish(kind: str, args: argparse.Namespace, settings: dict[str, Any],
            measured: dict[str, Any], started: float) -> int:
    from voxserve.bench.report import format_table, load_average, write_json

    settings["duration_s"] = time.perf_counter() - started
    settings["loadavg_at_end"] = load_average()
    result = {"kind": kind, "settings": settings, **measured}
    out = args.output or Path(f"bench-{kind}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    write_json(result, out)
    print(format_table(result))
    print(f"wrote {out}")
    if args.plot is not None:
        from voxserve.bench.plot import plot_results

        plot_results([(str(args.base_url), result)], args.plot)
        print(f"wrote {args.plot}")
    failed = sum(level["summary"]["failed"] for level in result["levels"])
    return 1 if failed and args.fail_on_error else 0


def _models(args: argparse.Namespace) -> list[str]:
    """The models `--model` names, comma-separated, in order."""
    models = [part.strip() for part in (args.model or "tts-1").split(",") if part.strip()]
    if not models or len(set(models)) != len(models):
        raise ValueError(f"--model takes distinct model names, comma-separated, not {args.model!r}")
    return models


def _openai_target(args: argparse.Namespace) -> list[SpeechApi]:
    from voxserve.bench.speech import SpeechTarget

    return [SpeechTarget(args.base_url, model, args.voice or "alloy", args.sample_rate,
                         args.request_sample_rate, args.timeout) for model in _models(args)]


def _piper_target(args: argparse.Namespace) -> list[SpeechApi]:
    from voxserve.bench.piper_http import PiperTarget

    for flag, value in (("--model", args.model), ("--sample-rate", args.sample_rate),
                        ("--request-sample-rate", args.request_sample_rate)):
        if value is not None:
            raise ValueError(f"--api piper takes no {flag}: Piper's server speaks the model it "
                             f"was started with, at the rate its WAV header states")
    return [PiperTarget(args.base_url, args.voice, args.timeout)]


_SPEECH_APIS = {"openai": _openai_target, "piper": _piper_target}
"""`--api` choices: each builds the adapter that speaks that server's wire format."""


def _speech(args: argparse.Namespace) -> int:
    from voxserve.bench.prompts import BUILTIN_PROMPTS, load_prompts, pick
    from voxserve.bench.speech import bench_speech

    targets = _SPEECH_APIS[args.api](args)
    target = targets[0]
    if args.bursts < 0:
        raise ValueError(f"--bursts takes a count of bursts (0: a closed loop), not {args.bursts}")
    if args.bursts:
        args.num_prompts = max(args.concurrency)  # a burst of C sends the first C
    probe = args.probe_health
    if probe is None:
        probe = target.health_path is not None
    elif probe and target.health_path is None:
        raise ValueError(f"--api {args.api} has no health endpoint to probe; "
                         f"drop --probe-health")
    source = str(args.prompts) if args.prompts else "builtin"
    pool = load_prompts(args.prompts) if args.prompts else list(BUILTIN_PROMPTS)
    prompts = pick(pool, args.num_prompts, args.seed)
    extra: dict[str, Any] = {}
    if target.health_path is None:
        extra["health_note"] = (f"n/a: the {args.api} server has no health endpoint, "
                                f"so liveness was not probed")
    # What every request sends besides its text, read back from the adapter itself.
    fields = {k: v for k, v in json.loads(target.body("")).items() if k not in ("input", "text")}
    names = _models(args) if args.api == "openai" else [str(fields.get("model", args.api))]
    settings = _settings(args, api=args.api, url=target.url, request_fields=fields,
                         probe_health=probe, model=",".join(names), voice=fields.get("voice"),
                         bursts=args.bursts,
                         num_prompts=args.num_prompts, prompts_source=source,
                         processes=args.processes,
                         sample_rate_flag=args.sample_rate,
                         request_sample_rate=args.request_sample_rate,
                         underrun_threshold_s=args.underrun_threshold_ms / 1e3, prompts=prompts,
                         **extra)
    started = time.perf_counter()
    measured = asyncio.run(bench_speech(
        targets, prompts, args.concurrency, args.request_rate, args.warmup,
        args.underrun_threshold_ms / 1e3, probe, args.health_interval_ms / 1e3,
        args.progress, args.seed, args.processes, names, args.bursts))
    return _finish("speech", args, settings, measured, started)


def _transcribe(args: argparse.Namespace) -> int:
    from voxserve.bench.transcribe import (
        TranscribeTarget,
        bench_transcribe,
        load_audio_dir,
        load_manifest,
    )

    clips = load_manifest(args.manifest) if args.manifest else load_audio_dir(args.audio_dir)
    count = args.num_requests or len(clips)
    clips = [clips[i % len(clips)] for i in range(count)]
    model = "gpt-4o-transcribe-diarize" if args.diarize else args.model
    target = TranscribeTarget(args.base_url, model, args.language, args.timeout,
                              "diarized_json" if args.diarize else "json")
    settings = _settings(args, model=model, language=args.language, diarize=args.diarize,
                         input=str(args.manifest or args.audio_dir), num_requests=count, bursts=args.bursts,
                         clips=[c.path.name for c in clips])
    started = time.perf_counter()
    measured = asyncio.run(bench_transcribe(
        target, clips, args.concurrency, args.request_rate, args.warmup, args.probe_health,
        args.health_interval_ms / 1e3, args.progress, args.seed, args.bursts))
    if "wer_refused" in measured:
        print(measured["wer_refused"])
    return _finish("transcribe", args, settings, measured, started)


def _make_asr_set(args: argparse.Namespace) -> int:
    from voxserve.bench.asrset import make_asr_set
    from voxserve.bench.prompts import BUILTIN_PROMPTS, load_prompts
    from voxserve.bench.speech import SpeechTarget

    prompts = load_prompts(args.prompts) if args.prompts else list(BUILTIN_PROMPTS)
    if args.num_clips:
        prompts = prompts[: args.num_clips]
    target = SpeechTarget(args.base_url, args.model, args.voice, args.sample_rate,
                          args.request_sample_rate, args.timeout)
    paths = asyncio.run(make_asr_set(target, prompts, args.out, args.concurrency))
    print(f"wrote {len(paths)} clips with references and manifest.jsonl to {args.out}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from voxserve.bench.compare import format_comparison
    from voxserve.bench.report import load_result

    a, b = load_result(args.a), load_result(args.b)
    print(format_comparison(a, b, str(args.a), str(args.b)))
    return 0


def _plot(args: argparse.Namespace) -> int:
    from voxserve.bench.plot import plot_results
    from voxserve.bench.report import load_result

    labels = args.label or []
    runs = [(labels[i] if i < len(labels) else path.name.removesuffix(".gz").removesuffix(".json"), load_result(path))
            for i, path in enumerate(args.results)]
    plot_results(runs, args.out)
    print(f"wrote {args.out}")
    return 0


def _offline(args: argparse.Namespace) -> int:
    from voxserve.bench.prompts import BUILTIN_PROMPTS, load_prompts
    from voxserve.bench.report import git_revision, host_info, now_iso, write_json
    from voxserve.config import default_cores

    prompts = load_prompts(args.prompts) if args.prompts else list(BUILTIN_PROMPTS)
    threads = args.threads or list(range(1, default_cores() + 1))
    extra: dict[str, Any] = {}
    if args.model == "kokoro":
        from voxserve.bench.offline_kokoro import DEFAULT_VOICE, KOKORO_MODES, run_offline_kokoro

        voice = args.voice or DEFAULT_VOICE
        seconds = args.seconds or 30.0
        modes = tuple(args.mode) if args.mode else KOKORO_MODES
        points = run_offline_kokoro(prompts, threads, seconds, modes, voice)
        extra["voice"] = voice
    else:
        from voxserve.bench.offline import MODES, run_offline

        if args.voice is not None or (args.mode and "intra" in args.mode):
            raise ValueError("--voice and --mode intra are for --model kokoro: the Piper voice "
                             "has one speaker, and its offline threads are single-threaded")
        modes = tuple(args.mode) if args.mode else MODES
        seconds = args.seconds or 8.0
        points = run_offline(prompts, threads, seconds, modes)
    if args.output is not None:
        write_json({
            "kind": "offline",
            "settings": {"git_revision": git_revision(), "started_at": now_iso(),
                         "model": args.model, "threads": threads, "seconds": seconds,
                         "host": host_info(), "prompts_source": str(args.prompts or "builtin"),
                         **extra},
            "points": [{"mode": p.mode, "threads": p.threads, "audio_s": p.audio_s,
                        "wall_s": p.wall_s, "segments": p.segments,
                        "audio_per_s": p.audio_per_s} for p in points],
        }, args.output)
        print(f"wrote {args.output}")
    return 0


def _kokoro_peer(args: argparse.Namespace) -> int:
    from voxserve.bench.kokoro_peer import format_peer, records_json, run_kokoro_peer
    from voxserve.bench.prompts import BUILTIN_PROMPTS, load_prompts, pick
    from voxserve.bench.report import (
        command_line,
        git_revision,
        host_info,
        load_average,
        now_iso,
        write_json,
    )
    from voxserve.config import default_cores

    try:
        import kokoro_onnx  # noqa: F401
    except ImportError:
        raise ValueError("kokoro-onnx is not installed: pip install -c constraints.txt "
                         "-e '.[peers]'") from None
    pool = load_prompts(args.prompts) if args.prompts else list(BUILTIN_PROMPTS)
    prompts = pick(pool, args.num_prompts, args.seed)
    threads = args.threads or list(range(1, default_cores() + 1))
    started = time.perf_counter()
    records, summary = run_kokoro_peer(prompts, threads, args.voice, args.base_url, args.model,
                                       args.warmup, report=print if args.progress else _quiet)
    settings = {"git_revision": git_revision(), "started_at": now_iso(), "threads": threads,
                "voice": args.voice, "base_url": args.base_url, "http_model": args.model,
                "warmup": args.warmup, "num_prompts": args.num_prompts, "seed": args.seed,
                "prompts_source": str(args.prompts or "builtin"), "prompts": prompts,
                "host": host_info(), "argv": command_line(),
                "duration_s": time.perf_counter() - started, "loadavg_at_end": load_average()}
    out = args.output or Path(f"bench-kokoro-peer-{time.strftime('%Y%m%d-%H%M%S')}.json")
    write_json({"kind": "kokoro-peer", "settings": settings, **summary,
                "records": records_json(records)}, out)
    print(format_peer(summary))
    print(f"wrote {out}")
    return 1 if any(row["failed"] for row in summary["systems"]) else 0


def _kokoro_prosody(args: argparse.Namespace) -> int:
    from voxserve.bench.kokoro_prosody import PROSODY_TEXTS, format_prosody, run_kokoro_prosody
    from voxserve.bench.prompts import load_prompts
    from voxserve.bench.report import command_line, git_revision, host_info, now_iso, write_json

    if args.peer:
        try:
            import kokoro_onnx  # noqa: F401
        except ImportError:
            raise ValueError("kokoro-onnx is not installed: pip install -c constraints.txt "
                             "-e '.[peers]' (or pass --no-peer)") from None
    texts = load_prompts(args.prompts) if args.prompts else list(PROSODY_TEXTS)
    started = time.perf_counter()
    records, summary = run_kokoro_prosody(texts, args.voices, args.workers, args.peer,
                                          report=print if args.progress else _quiet)
    settings = {"git_revision": git_revision(), "started_at": now_iso(), "voices": args.voices,
                "workers": args.workers, "texts": texts, "host": host_info(),
                "argv": command_line(), "duration_s": time.perf_counter() - started}
    out = args.output or Path(f"bench-kokoro-prosody-{time.strftime('%Y%m%d-%H%M%S')}.json")
    write_json({"kind": "kokoro-prosody", "settings": settings, **summary,
                "records": [vars(r) for r in records]}, out)
    print(format_prosody(summary))
    print(f"wrote {out}")
    return 0


def _quiet(_line: str) -> None:
    pass


def _mixed(kind: str, args: argparse.Namespace) -> int:
    from voxserve.bench.mixed import (
        MixedSettings,
        format_mixed,
        judge_overload,
        judge_soak,
        run_mixed,
    )
    from voxserve.bench.prompts import BUILTIN_PROMPTS, load_prompts
    from voxserve.bench.report import (
        command_line,
        git_revision,
        host_info,
        load_average,
        now_iso,
        write_json,
    )

    prompts = load_prompts(args.prompts) if args.prompts else list(BUILTIN_PROMPTS)
    settings = MixedSettings(
        base_url=args.base_url,
        duration_s=args.duration,
        tts_concurrency=args.tts_concurrency,
        asr_concurrency=args.asr_concurrency,
        prompts=prompts,
        warmup_s=args.warmup_s,
        window_s=args.window_s,
        timeout_s=args.timeout,
        seed=args.seed,
        progress=args.progress,
        hostile=getattr(args, "hostile", 0),
        hostile_hold_s=getattr(args, "hostile_hold", 60.0),
    )
    print(f"{kind}: {args.tts_concurrency} speech + {args.asr_concurrency} transcription clients "
          f"for {args.duration:g} s against {args.base_url}", flush=True)
    result = asyncio.run(run_mixed(settings))
    if kind == "soak":
        problems = judge_soak(result, args.max_rss_growth, args.min_continuity)
    else:
        problems = judge_overload(result, args.rss_limit_mb * 2**20)
    out = args.output or Path(f"bench-{kind}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    meta = {
        "base_url": args.base_url, "git_revision": git_revision(), "started_at": now_iso(),
        "duration_s": args.duration, "tts_concurrency": args.tts_concurrency,
        "asr_concurrency": args.asr_concurrency, "warmup_s": args.warmup_s,
        "window_s": args.window_s, "seed": args.seed, "host": host_info(),
        "argv": command_line(), "loadavg_at_end": load_average(),
    }
    write_json({"kind": kind, "settings": meta, "verdict": problems or "pass", **result}, out)
    print(format_mixed(result))
    print("PASS" if not problems else "FAIL:\n  " + "\n  ".join(problems))
    print(f"wrote {out}")
    return 1 if problems else 0


def _stream_text(args: argparse.Namespace) -> int:
    from voxserve.bench.prompts import BUILTIN_PROMPTS, load_prompts, pick
    from voxserve.bench.report import write_json
    from voxserve.bench.stream_text import bench_stream_text, format_stream_text

    pool = load_prompts(args.prompts) if args.prompts else list(BUILTIN_PROMPTS)
    prompts = pick(pool, args.num_prompts, args.seed)
    settings = _settings(args, tokens_per_s=args.tokens_per_s, split=args.split,
                         num_prompts=args.num_prompts, prompts=prompts)
    started = time.perf_counter()
    measured = asyncio.run(bench_stream_text(args.base_url, prompts, args.concurrency,
                                             args.tokens_per_s, args.split,
                                             args.underrun_threshold_ms / 1e3, args.timeout))
    settings["duration_s"] = time.perf_counter() - started
    out = args.output or Path(f"bench-stream-text-{time.strftime('%Y%m%d-%H%M%S')}.json")
    write_json({"kind": "stream-text", "settings": settings, **measured}, out)
    print(format_stream_text(measured))
    print(f"wrote {out}")
    failed = sum(level["summary"]["failed"] for level in measured["levels"])
    return 1 if failed else 0


def _add_live_args(p: argparse.ArgumentParser, levels: str) -> None:
    """Flags shared by `bench realtime` and `bench voice-loop`."""
    p.add_argument("--base-url", default=DEFAULT_URL, help=f"server root (default {DEFAULT_URL})")
    p.add_argument("--api-key", default=None, help="sent as 'Authorization: Bearer KEY'")
    p.add_argument("--concurrency", type=_levels, default=_levels(levels),
                   help=f"comma-separated levels, each C live sessions at once (default {levels})")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--audio-dir", type=Path,
                        help="16-bit WAV clips with NAME.txt references, as `bench make-asr-set` "
                        "writes (default: the built-in prompts of up to 200 characters, spoken "
                        "by the server's TTS at the start)")
    source.add_argument("--manifest", type=Path,
                        help='JSON lines: {"audio": path, "text": reference}')
    p.add_argument("--num-clips", type=int, default=None, help="only the first N clips")
    p.add_argument("--model", default="whisper-1", help="transcription model (default whisper-1)")
    p.add_argument("--language", default=None, help="transcription language (default: detect)")
    p.add_argument("--turn-detection", choices=("server_vad", "semantic_vad"), default="server_vad",
                   help="how the server ends turns (default server_vad)")
    p.add_argument("--eagerness", choices=("low", "medium", "high", "auto"), default="auto",
                   help="semantic_vad: how soon a turn may end (default auto)")
    p.add_argument("--silence-ms", type=int, default=500,
                   help="server VAD: silence that ends a turn (default 500)")
    p.add_argument("--threshold", type=float, default=0.5, help="server VAD threshold (default 0.5)")
    p.add_argument("--prefix-padding-ms", type=int, default=300,
                   help="server VAD prefix padding (default 300)")
    p.add_argument("--noise-reduction", choices=("near_field", "far_field", "none"), default=None,
                   help="every session's noise_reduction (none: null; default: the server's)")
    p.add_argument("--frame-ms", type=int, choices=(20, 40), default=20,
                   help="audio per input_audio_buffer.append message (default 20)")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="seconds an utterance may take from its end of speech to completed "
                   "(default 30)")
    p.add_argument("--probe-health", action=argparse.BooleanOptionalAction, default=True,
                   help="probe GET /health during the run (default on)")
    p.add_argument("--health-interval-ms", type=float, default=50.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", "-o", type=Path, default=None,
                   help="result JSON (default bench-KIND-YYYYmmdd-HHMMSS.json)")
    p.add_argument("--plot", type=Path, default=None, help="also draw the run into this PNG")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.add_argument("--fail-on-error", action="store_true",
                   help="exit 1 if any utterance or turn failed")
    p.set_defaults(request_rate=None)


def _live_options(args: argparse.Namespace) -> LiveOptions:
    from voxserve.bench.rtclient import LiveOptions, VadSettings

    for flag, value in (("--timeout", args.timeout), ("--health-interval-ms", args.health_interval_ms)):
        if value <= 0:
            raise ValueError(f"{flag} must be positive, got {value:g}")
    return LiveOptions(
        base_url=args.base_url, api_key=args.api_key,
        vad=VadSettings(args.threshold, 300 if args.turn_detection == "semantic_vad" else args.prefix_padding_ms,
                        args.silence_ms, args.turn_detection, args.eagerness),
        model=args.model, language=args.language, frame_s=args.frame_ms / 1e3,
        timeout_s=args.timeout, noise_reduction=args.noise_reduction, seed=args.seed, progress=args.progress,
        probe_health=args.probe_health, health_interval_s=args.health_interval_ms / 1e3)


def _live_clips(args: argparse.Namespace) -> list[LiveClip]:
    from voxserve.bench.liveclips import spoken_clips

    if args.num_clips is not None and args.num_clips < 1:
        raise ValueError(f"--num-clips must be at least 1, got {args.num_clips}")
    return asyncio.run(spoken_clips(args.base_url, args.api_key, args.audio_dir, args.manifest,
                                    args.num_clips))


def _live_settings(args: argparse.Namespace, clips: list[LiveClip], **extra: Any) -> dict[str, Any]:
    settings = _settings(args, model=args.model, language=args.language,
                         turn_detection=args.turn_detection, eagerness=args.eagerness,
                         silence_ms=args.silence_ms, threshold=args.threshold,
                         prefix_padding_ms=args.prefix_padding_ms, frame_ms=args.frame_ms,
                         noise_reduction=args.noise_reduction,
                         timeout_s=args.timeout, api_key_set=args.api_key is not None,
                         input=str(args.manifest or args.audio_dir or "builtin (server TTS)"),
                         clips=[{"name": c.name, "audio_s": c.audio_s, "reference": c.reference}
                                for c in clips], **extra)
    settings.pop("request_rate")
    return settings


def _realtime(args: argparse.Namespace) -> int:
    from voxserve.bench.realtime import bench_realtime, check_plan

    options = _live_options(args)
    check_plan(options, args.utterances, args.gap_s, args.files, args.file_seconds)
    clips = _live_clips(args)
    settings = _live_settings(args, clips, utterances_per_session=args.utterances,
                              gap_s=args.gap_s, files=args.files, file_seconds=args.file_seconds)
    started = time.perf_counter()
    measured = asyncio.run(bench_realtime(options, clips, args.concurrency, args.utterances,
                                          args.gap_s, args.files, args.file_seconds, args.warmup))
    if "wer_refused" in measured:
        print(measured["wer_refused"])
    return _finish("realtime", args, settings, measured, started)


def _voice_loop(args: argparse.Namespace) -> int:
    from voxserve.bench.liveclips import live_prompts
    from voxserve.bench.prompts import load_prompts, pick
    from voxserve.bench.voice_loop import LoopSettings, bench_voice_loop

    options = _live_options(args)
    loop = LoopSettings(turns=args.turns, voice=args.voice, llm_ttft_s=args.llm_ttft_ms / 1e3,
                        tokens_per_s=args.tokens_per_s, chars_per_token=args.chars_per_token,
                        pause_s=args.pause_ms / 1e3,
                        stall_threshold_s=args.stall_threshold_ms / 1e3,
                        barge_in_s=None if args.barge_in_ms is None else args.barge_in_ms / 1e3)
    loop.check()
    pool = load_prompts(args.replies) if args.replies else live_prompts()
    replies = pick(pool, max(args.concurrency) * args.turns, args.seed)
    clips = _live_clips(args)
    settings = _live_settings(args, clips, turns=args.turns, voice=args.voice,
                              llm_ttft_ms=args.llm_ttft_ms, tokens_per_s=args.tokens_per_s,
                              chars_per_token=args.chars_per_token, pause_ms=args.pause_ms,
                              stall_threshold_s=loop.stall_threshold_s, barge_in_ms=args.barge_in_ms,
                              replies_source=str(args.replies or "builtin"), replies=replies)
    started = time.perf_counter()
    measured = asyncio.run(bench_voice_loop(options, loop, clips, replies, args.concurrency,
                                            args.warmup > 0))
    return _finish("voice-loop", args, settings, measured, started)


def _add_mixed_args(p: argparse.ArgumentParser, duration: float, tts: int, asr: int,
                    warmup: float, window: float) -> None:
    p.add_argument("--base-url", default=DEFAULT_URL)
    p.add_argument("--duration", type=float, default=duration, help=f"seconds of load (default {duration:g})")
    p.add_argument("--tts-concurrency", type=int, default=tts, help=f"speech clients (default {tts})")
    p.add_argument("--asr-concurrency", type=int, default=asr, help=f"transcription clients (default {asr})")
    p.add_argument("--warmup-s", type=float, default=warmup,
                   help=f"resource samples before this are warm-up (default {warmup:g})")
    p.add_argument("--window-s", type=float, default=window,
                   help=f"first and last windows compared for growth (default {window:g})")
    p.add_argument("--prompts", type=Path, help="text file, one prompt per line")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", "-o", type=Path, default=None,
                   help="result JSON (default bench-KIND-YYYYmmdd-HHMMSS.json)")
    p.add_argument("--no-progress", dest="progress", action="store_false")


def _guarded(func: Any) -> Any:
    """Turn expected failures (server down, bad input) into a message and exit code 2."""

    def run(args: argparse.Namespace) -> int:
        try:
            return int(func(args))
        except (BenchError, ValueError, FileNotFoundError, IsADirectoryError,
                NotADirectoryError, PermissionError) as exc:
            print(f"voxserve bench: error: {exc}", file=sys.stderr)
            return 2

    return run


def add_bench_parser(subparsers: Any) -> None:
    """Register `bench` and its sub-commands on the `voxserve` sub-parsers object."""
    bench = subparsers.add_parser("bench", help="load-test a speech server and report")
    sub = bench.add_subparsers(dest="bench_command", required=True)

    speech = sub.add_parser("speech", help="streaming TTS load: TTFP, RTF, continuity")
    _add_load_args(speech, "1,4,16,32")
    speech.add_argument("--num-prompts", type=int, default=32,
                        help="requests per level, drawn from the prompts with --seed "
                        "(the same list at every level)")
    speech.add_argument("--prompts", type=Path, help="text file, one prompt per line")
    speech.add_argument("--api", choices=sorted(_SPEECH_APIS), default="openai",
                        help="wire format: openai (streaming POST /v1/audio/speech) or piper "
                        "(python -m piper.http_server: POST /synthesize, one whole WAV, "
                        "no /health) (default openai)")
    speech.add_argument("--model", default=None,
                        help="openai only (default tts-1); several, comma-separated, take the "
                        "requests in turn (tts-1,tts-1-hd: every other request each)")
    speech.add_argument("--voice", default=None,
                        help="voice name (default: alloy for openai; for piper, the voice "
                        "its server was started with)")
    speech.add_argument("--sample-rate", type=int, default=None,
                        help="openai only: PCM rate to assume when the response has no "
                        "x-sample-rate header")
    speech.add_argument("--request-sample-rate", type=int, default=None,
                        help="openai only: ask the server for this rate (sends sample_rate "
                        "in the body)")
    speech.add_argument("--underrun-threshold-ms", type=float, default=100.0,
                        help="a stream is continuous if its max underrun is at most this")
    speech.add_argument("--processes", type=int, default=1, metavar="N",
                        help="run each level's clients in N processes (at most 64), so that "
                             "hundreds of streams are not bound by one client process")
    speech.add_argument("--fail-on-error", action="store_true",
                        help="exit 1 if any request failed")
    speech.add_argument("--bursts", type=int, default=0, metavar="N",
                        help="each level sends N bursts of C requests at once, each after the "
                             "one before has ended, and reads the server's /metrics around "
                             "them: units per step, admission's holds (default: a closed loop)")
    speech.set_defaults(func=_guarded(_speech), probe_health=None)  # None: per --api

    asr = sub.add_parser("transcribe", help="ASR load: RTFx, latency, WER")
    _add_load_args(asr, "1,4")
    source = asr.add_mutually_exclusive_group(required=True)
    source.add_argument("--audio-dir", type=Path, help="audio files with NAME.txt references")
    source.add_argument("--manifest", type=Path,
                        help='JSON lines: {"audio": path, "text": reference}')
    asr.add_argument("--num-requests", type=int, default=None,
                     help="requests per level, cycling the clips (default: each clip once)")
    asr.add_argument("--bursts", type=int, default=0, metavar="N",
                     help="each level sends N bursts of C requests at once, each after the "
                          "one before has ended (default: a closed loop)")
    asr.add_argument("--model", default="whisper-1")
    asr.add_argument("--diarize", action="store_true",
                     help="ask for speaker labels: model gpt-4o-transcribe-diarize, response_format "
                          "diarized_json (instead of --model)")
    asr.add_argument("--language", default=None)
    asr.add_argument("--fail-on-error", action="store_true")
    asr.set_defaults(func=_guarded(_transcribe))

    make = sub.add_parser("make-asr-set", help="speak the built-in prompts into an ASR set")
    make.add_argument("--base-url", default=DEFAULT_URL)
    make.add_argument("--out", type=Path, required=True, help="folder to write into")
    make.add_argument("--prompts", type=Path, help="text file, one prompt per line")
    make.add_argument("--num-clips", type=int, default=None, help="only the first N prompts")
    make.add_argument("--model", default="tts-1")
    make.add_argument("--voice", default="alloy")
    make.add_argument("--sample-rate", type=int, default=None,
                      help="PCM rate to assume when the response has no x-sample-rate header")
    make.add_argument("--request-sample-rate", type=int, default=None,
                      help="ask the server for this rate, e.g. 16000 (sends sample_rate)")
    make.add_argument("--concurrency", type=int, default=2)
    make.add_argument("--timeout", type=float, default=600.0)
    make.set_defaults(func=_guarded(_make_asr_set))

    compare = sub.add_parser("compare", help="two result files side by side, with ratios")
    compare.add_argument("a", type=Path)
    compare.add_argument("b", type=Path)
    compare.set_defaults(func=_guarded(_compare))

    plot = sub.add_parser("plot", help="draw one or more result files into one PNG")
    plot.add_argument("results", type=Path, nargs="+")
    plot.add_argument("--out", "-o", type=Path, required=True)
    plot.add_argument("--label", action="append", help="legend label per result, in order")
    plot.set_defaults(func=_guarded(_plot))

    stream = sub.add_parser("stream-text", help="WebSocket speech fed by a simulated LLM: "
                            "first clause to first audio")
    _add_load_args(stream, "1,4,8")
    stream.add_argument("--num-prompts", type=int, default=16, help="sessions per level")
    stream.add_argument("--prompts", type=Path, help="text file, one prompt per line")
    stream.add_argument("--tokens-per-s", type=float, default=20.0,
                        help="rate the simulated LLM sends tokens at (default 20)")
    stream.add_argument("--split", choices=("clause", "sentence"), default="clause")
    stream.add_argument("--underrun-threshold-ms", type=float, default=100.0)
    stream.set_defaults(func=_guarded(_stream_text))

    realtime = sub.add_parser("realtime", help="live transcription sessions on /v1/realtime: "
                              "end of speech to completed, WER live vs file")
    _add_live_args(realtime, "1,4,8")
    realtime.add_argument("--utterances", type=int, default=4,
                          help="clips each session speaks, in turn (default 4)")
    realtime.add_argument("--gap-s", type=float, default=1.5,
                          help="silence between a session's clips (default 1.5)")
    realtime.add_argument("--files", type=int, default=0, metavar="C",
                          help="also run C loops uploading a long file to "
                          "/v1/audio/transcriptions during each level (default 0)")
    realtime.add_argument("--file-seconds", type=float, default=60.0,
                          help="length of that file: the clips joined, repeated (default 60)")
    realtime.add_argument("--warmup", type=int, default=1,
                          help="clips spoken in an untimed session first (default 1; 0: none)")
    realtime.set_defaults(func=_guarded(_realtime))

    voice = sub.add_parser("voice-loop", help="simulated voice agents: end of the user's speech "
                           "to the first audio of the spoken reply")
    _add_live_args(voice, "1,4,8,16")
    voice.add_argument("--turns", type=int, default=4, help="turns per conversation (default 4)")
    voice.add_argument("--voice", default="alloy", help="voice of the replies (default alloy)")
    voice.add_argument("--llm-ttft-ms", type=float, default=0.0,
                       help="the simulated LLM's time to first token after completed (default 0)")
    voice.add_argument("--tokens-per-s", type=float, default=20.0,
                       help="rate the simulated LLM streams its reply at (default 20)")
    voice.add_argument("--chars-per-token", type=int, default=4,
                       help="characters per LLM token (default 4, as English BPE tokens)")
    voice.add_argument("--pause-ms", type=float, default=500.0,
                       help="the user's pause after a reply has played (default 500)")
    voice.add_argument("--stall-threshold-ms", type=float, default=20.0,
                       help="playback waits up to this long are not counted as stalls (default 20)")
    voice.add_argument("--replies", type=Path, default=None,
                       help="text file, one reply per line (default: the built-in prompts of "
                       "up to 200 characters)")
    voice.add_argument("--barge-in-ms", type=float, default=None,
                       help="the user speaks the next turn this long after a reply's first audio, "
                       "over it, and the agent cancels the reply on speech_started (default: "
                       "the user waits for the reply to play out)")
    voice.add_argument("--warmup", type=int, default=1, choices=(0, 1),
                       help="one untimed turn first (default 1)")
    voice.set_defaults(func=_guarded(_voice_loop))

    soak = sub.add_parser("soak", help="mixed TTS + ASR load for minutes: no errors, no leaks")
    _add_mixed_args(soak, duration=600, tts=8, asr=2, warmup=60, window=60)
    soak.add_argument("--max-rss-growth", type=float, default=0.05,
                      help="largest RSS growth from the first to the last window (default 0.05)")
    soak.add_argument("--min-continuity", type=float, default=0.98,
                      help="least share of streams that must play without a gap (default 0.98)")
    soak.add_argument("--hostile", type=int, default=0, metavar="N",
                      help="also run N hostile clients of each kind: stalled uploads, header "
                      "dribblers, slow readers, vanishing and oversized WebSocket clients")
    soak.add_argument("--hostile-hold", type=float, default=60.0, metavar="S",
                      help="a hostile attempt the server has not ended after S seconds fails the soak")
    soak.set_defaults(func=_guarded(lambda a: _mixed("soak", a)))

    overload = sub.add_parser("overload", help="far past capacity: 429s, bounded RSS, fast /health")
    _add_mixed_args(overload, duration=120, tts=256, asr=32, warmup=20, window=20)
    overload.add_argument("--rss-limit-mb", type=float, default=2048,
                          help="fail if the server's RSS passes this (default 2048: about 450 MB "
                          "of models and buffers, plus whisper's beam-search working set, "
                          "asr-workers x asr-max-batch x beam size x 18 MB = 1.5 GB)")
    overload.set_defaults(func=_guarded(lambda a: _mixed("overload", a)))

    peer = sub.add_parser("kokoro-peer", help="voxserve's Kokoro against kokoro-onnx's "
                          "create_stream, in one process on the same texts")
    peer.add_argument("--threads", type=_levels, default=None,
                      help="comma-separated thread counts: voxserve's workers, kokoro-onnx's "
                      "intra-op threads (default 1..cores)")
    peer.add_argument("--num-prompts", type=int, default=12,
                      help="prompts per thread count, drawn with --seed (default 12)")
    peer.add_argument("--prompts", type=Path, help="text file, one prompt per line")
    peer.add_argument("--seed", type=int, default=0)
    peer.add_argument("--voice", default="af_heart", help="Kokoro voice (default af_heart)")
    peer.add_argument("--base-url", default=None,
                      help="also a running voxserve over HTTP at c=1 (its own threads)")
    peer.add_argument("--model", default="tts-1-hd",
                      help="the model the HTTP requests name (default tts-1-hd)")
    peer.add_argument("--no-warmup", dest="warmup", action="store_false",
                      help="skip the engine's warm-up and each speaker's untimed first phrase")
    peer.add_argument("--output", "-o", type=Path, default=None,
                      help="result JSON (default bench-kokoro-peer-YYYYmmdd-HHMMSS.json)")
    peer.add_argument("--no-progress", dest="progress", action="store_false")
    peer.set_defaults(func=_guarded(_kokoro_peer))

    prosody = sub.add_parser("kokoro-prosody", help="tts-1-hd against Kokoro speaking each "
                             "sentence whole, and kokoro-onnx: durations, pauses, WER, joins")
    prosody.add_argument("--voices", type=lambda v: v.split(","), default=["af_heart", "af_nova"],
                         help="comma-separated Kokoro voices (default af_heart,af_nova)")
    prosody.add_argument("--workers", type=int, default=2, help="engine workers (default 2)")
    prosody.add_argument("--prompts", type=Path, help="text file, one prompt per line")
    prosody.add_argument("--no-peer", dest="peer", action="store_false",
                         help="leave kokoro-onnx out")
    prosody.add_argument("--output", "-o", type=Path, default=None,
                         help="result JSON (default bench-kokoro-prosody-YYYYmmdd-HHMMSS.json)")
    prosody.add_argument("--no-progress", dest="progress", action="store_false")
    prosody.set_defaults(func=_guarded(_kokoro_prosody))

    offline = sub.add_parser("offline", help="the runners at full load, no HTTP: the limit")
    offline.add_argument("--threads", type=_levels, default=None,
                         help="comma-separated thread counts (default 1..cores)")
    offline.add_argument("--seconds", type=float, default=None,
                         help="time per point (default 8 for piper, 30 for kokoro, whose "
                         "segments take seconds each)")
    offline.add_argument("--model", choices=("piper", "kokoro"), default="piper",
                         help="the voice model to measure (default piper)")
    offline.add_argument("--mode", action="append", choices=("full", "chunked", "intra"),
                         help="measure only this mode (repeatable; default all of the model's): "
                         "full = N threads on single-threaded sessions, whole segments; "
                         "chunked = Piper's stage B chunk by chunk as the server cuts it; "
                         "intra = Kokoro, one thread on N-thread sessions")
    offline.add_argument("--voice", default=None,
                         help="kokoro only: the voice to speak in (default af_heart)")
    offline.add_argument("--prompts", type=Path, help="text file, one prompt per line")
    offline.add_argument("--output", "-o", type=Path, default=None, help="also write JSON")
    offline.set_defaults(func=_guarded(_offline))
