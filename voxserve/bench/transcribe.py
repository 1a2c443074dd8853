"""`bench transcribe`: `POST /v1/audio/transcriptions` load (OpenAI multipart), RTFx and WER.

Speaks HTTP only. The input set is a folder of audio files with optional same-named `.txt`
references, or a JSONL manifest. Files are read into memory before timing starts.
"""

from __future__ import annotations

import json
import mimetypes
import time
import wave
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp

from voxserve.bench.levels import BenchError, measure_levels
from voxserve.bench.load import LevelRun, run_level
from voxserve.bench.metrics import summarize, word_errors
from voxserve.bench.server_use import ServerUse, server_use

__all__ = ["SIM_REFUSAL", "Clip", "TranscribeRecord", "TranscribeTarget", "bench_transcribe", "load_audio_dir",
           "load_manifest", "summarize_transcribe", "transcription_simulated"]

SIM_REFUSAL = ("no WER: the server transcribes on the simulated device (--asr-device sim), "
               "whose text is made up")
AUDIO_EXTENSIONS = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".webm", ".mp4", ".aac")
_ERROR_CHARS = 300


@dataclass(frozen=True)
class Clip:
    path: Path
    audio_s: float
    reference: str | None


def audio_duration(path: Path) -> float:
    """Length in seconds: read from the header for WAV, decoded with PyAV otherwise."""
    if path.suffix.lower() == ".wav":
        with wave.open(str(path), "rb") as w:
            return w.getnframes() / w.getframerate()
    import av

    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        samples = sum(frame.samples for frame in container.decode(stream))
        return samples / stream.rate


def load_audio_dir(folder: Path) -> list[Clip]:
    """Every audio file in `folder`, sorted; `NAME.txt` beside `NAME.wav` is its reference."""
    if not folder.is_dir():
        raise BenchError(f"{folder} is not a folder")
    clips = []
    for path in sorted(folder.iterdir()):
        if path.suffix.lower() in AUDIO_EXTENSIONS:
            ref = path.with_suffix(".txt")
            text = ref.read_text(encoding="utf-8").strip() if ref.exists() else None
            clips.append(Clip(path, audio_duration(path), text))
    if not clips:
        raise BenchError(f"{folder} holds no audio files ({', '.join(AUDIO_EXTENSIONS)})")
    return clips


def load_manifest(manifest: Path) -> list[Clip]:
    """JSON lines of {"audio": path, "text": optional reference, "duration": optional s}.

    Relative paths are relative to the manifest's folder.
    """
    clips = []
    for n, line in enumerate(manifest.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            path = manifest.parent / entry["audio"]
        except (ValueError, KeyError, TypeError) as exc:
            raise BenchError(f"{manifest}:{n}: expected a JSON object with an \"audio\" path "
                             f"and an optional \"text\" ({exc})") from exc
        duration = entry.get("duration")
        clips.append(Clip(path, float(duration) if duration else audio_duration(path),
                          entry.get("text")))
    if not clips:
        raise BenchError(f"{manifest} lists no audio")
    return clips


@dataclass(frozen=True)
class TranscribeTarget:
    base_url: str
    model: str = "whisper-1"
    language: str | None = None
    timeout_s: float = 600.0
    response_format: str = "json"
    """json, or diarized_json to ask for speaker labels (its `text` is scored the same)."""

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/v1/audio/transcriptions"

    def form(self, clip: Clip, data: bytes) -> aiohttp.FormData:
        form = aiohttp.FormData()
        mime = mimetypes.guess_type(clip.path.name)[0] or "application/octet-stream"
        form.add_field("file", data, filename=clip.path.name, content_type=mime)
        form.add_field("model", self.model)
        form.add_field("response_format", self.response_format)
        if self.language:
            form.add_field("language", self.language)
        return form


@dataclass
class TranscribeRecord:
    index: int
    file: str
    audio_s: float
    scheduled_at_s: float
    sent_at_s: float
    reference: str | None
    status: int = 0
    error: str | None = None
    retry_after: str | None = None
    latency_s: float | None = None
    text: str | None = None
    word_errors: int | None = None
    reference_words: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None


async def transcribe(session: aiohttp.ClientSession, target: TranscribeTarget, clip: Clip,
                     data: bytes, record: TranscribeRecord) -> TranscribeRecord:
    form = target.form(clip, data)
    sent = time.perf_counter()
    try:
        async with session.post(target.url, data=form) as resp:
            record.status = resp.status
            body = await resp.read()
        record.latency_s = time.perf_counter() - sent
        if record.status != 200:
            record.retry_after = resp.headers.get("retry-after")
            record.error = body.decode(errors="replace")[:_ERROR_CHARS]
            return record
        record.text = str(json.loads(body)["text"])
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as exc:
        record.latency_s = record.latency_s or time.perf_counter() - sent
        record.error = f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS]
        return record
    if record.reference is not None:
        counts = word_errors(record.reference, record.text)
        record.word_errors, record.reference_words = counts.errors, counts.reference_words
    return record


def summarize_transcribe(records: list[TranscribeRecord], wall_s: float) -> dict[str, Any]:
    ok = [r for r in records if r.ok]
    by_status: dict[str, int] = {}
    for r in records:
        if not r.ok:
            by_status[str(r.status)] = by_status.get(str(r.status), 0) + 1
    audio = sum(r.audio_s for r in ok)
    scored = [r for r in ok if r.reference_words]
    words = sum(r.reference_words or 0 for r in scored)
    return {
        "requests": len(records),
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "failures_by_status": by_status,
        "wall_s": wall_s,
        "request_throughput": len(ok) / wall_s if wall_s > 0 else 0.0,
        "audio_s": audio,
        "rtfx": audio / wall_s if wall_s > 0 else 0.0,
        "latency_s": summarize([r.latency_s for r in ok if r.latency_s is not None]),
        "wer": sum(r.word_errors or 0 for r in scored) / words if words else None,
        "wer_clips": len(scored),
    }


async def bench_transcribe(target: TranscribeTarget, clips: list[Clip], levels: list[int],
                           request_rate: float | None = None, warmup: int = 1,
                           probe_health: bool = True, health_interval_s: float = 0.05,
                           progress: bool = True, seed: int = 0, bursts: int = 0) -> dict[str, Any]:
    """Warm up, then send every clip once per level: {"levels": [...], "health": {...}}.

    With `bursts`, a level is that many bursts of C requests sent at once (the clips
    cycled), each burst sent when the one before has ended, instead of a closed loop.
    Each level's summary also holds the server's own figures over the level, read from
    its `/metrics` (`server`: pieces per decoder batch, CPU seconds per audio-second)."""
    data = {clip.path: clip.path.read_bytes() for clip in clips}
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=target.timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        simulated = await transcription_simulated(session, target.base_url)
        if simulated:
            clips = [replace(c, reference=None) for c in clips]
        for i in range(warmup):
            clip = clips[i % len(clips)]
            rec = await transcribe(session, target, clip, data[clip.path],
                                   TranscribeRecord(-1 - i, clip.path.name, clip.audio_s, 0.0,
                                                    0.0, None))
            if not rec.ok:
                raise BenchError(f"warm-up request to {target.url} failed "
                                 f"(status {rec.status}): {rec.error}")

        async def level(concurrency: int) -> tuple[LevelRun[TranscribeRecord], dict[str, Any]]:
            before = await server_use(session, target.base_url)
            start = time.perf_counter()

            def request_from(first: int) -> Any:
                async def request(index: int, scheduled: float) -> TranscribeRecord:
                    clip = clips[(first + index) % len(clips)]
                    record = TranscribeRecord(first + index, clip.path.name, clip.audio_s,
                                              scheduled - start, time.perf_counter() - start,
                                              clip.reference)
                    return await transcribe(session, target, clip, data[clip.path], record)
                return request

            if bursts:
                records: list[TranscribeRecord] = []
                for b in range(bursts):
                    part = await run_level(request_from(b * concurrency), concurrency, concurrency,
                                           None, seed, progress,
                                           desc=f"transcribe burst {b + 1}/{bursts} of {concurrency}")
                    records += part.results
                run = LevelRun(records, start, time.perf_counter() - start)
            else:
                run = await run_level(request_from(0), len(clips), concurrency, request_rate, seed,
                                      progress, desc=f"transcribe c={concurrency}")
            summary = summarize_transcribe(run.results, run.wall_s)
            after = await server_use(session, target.base_url)
            if before is not None and after is not None:
                summary["server"] = _server_summary(before, after, summary["audio_s"])
            return run, summary

        result = await measure_levels(levels, level, target.base_url, probe_health, health_interval_s)
        if simulated:
            result["wer_refused"] = SIM_REFUSAL
        return result


def _server_summary(before: ServerUse, after: ServerUse, audio_s: float) -> dict[str, Any]:
    """The server's figures across a level: its decoder batches' mean pieces and its
    process's CPU per audio-second answered."""
    batches = after.asr_batches - before.asr_batches
    cpu = after.cpu_s - before.cpu_s
    return {
        "asr_batches": batches,
        "pieces_per_batch": (after.asr_pieces - before.asr_pieces) / batches if batches else None,
        "cpu_s": cpu,
        "cpu_ms_per_audio_s": 1e3 * cpu / audio_s if audio_s > 0 else None,
    }


async def transcription_simulated(session: aiohttp.ClientSession, base_url: str) -> bool:
    """Whether the server transcribes on the simulated device (its `/health` says so):
    its text is made up, so there is no word error rate to report."""
    try:
        async with session.get(base_url.rstrip("/") + "/health") as resp:
            body = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return False
    devices = body.get("devices") if isinstance(body, dict) else None
    return isinstance(devices, dict) and devices.get("transcription") == "sim"
