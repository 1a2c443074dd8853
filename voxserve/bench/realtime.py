"""`bench realtime`: C live transcription sessions on `WS /v1/realtime`, at real time.

A level's C sessions speak C * `utterances` clips spread over the set's lengths
(`liveclips.spread`), so every level says short and long clips alike. Each session waits a
random offset within one clip's length (so the sessions do not speak in lock step), opens
with server VAD, then speaks its clips at real time with `gap_s` of
silence between them, and keeps sending silence until every clip has its `completed` or
its timeout has passed. Per clip it measures, from the end of speech (when the bench sent
the clip's last sample above -45 dBFS): the time to the `completed` event and to the
`speech_stopped` event, the number of deltas, and the transcript's word errors.

Once per level, after the live sessions, the same clips are uploaded as files to
`POST /v1/audio/transcriptions` one at a time, so the live WER stands beside the file WER
on the same audio. With `files` > 0, that many loops upload a long file (the clips joined)
while the sessions run, to show live latency with file transcriptions beside it; no upload
starts after the sessions end, and the ones in flight then finish and count. Speaks HTTP
and WebSocket only.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from tqdm import tqdm

from voxserve.bench.levels import BenchError, measure_levels
from voxserve.bench.live import LiveSession
from voxserve.bench.liveclips import LiveClip, joined_wav, spread
from voxserve.bench.load import LevelRun
from voxserve.bench.metrics import summarize, word_errors
from voxserve.bench.rtclient import (
    LiveOptions,
    SessionFailed,
    Utterance,
    auth_headers,
    latency_summary,
)
from voxserve.bench.transcribe import (
    SIM_REFUSAL,
    Clip,
    TranscribeRecord,
    TranscribeTarget,
    summarize_transcribe,
    transcribe,
    transcription_simulated,
)

__all__ = ["SessionRecord", "bench_realtime", "check_plan", "run_session", "summarize_realtime"]

UPLOAD_TIMEOUT_S = 600.0


@dataclass
class SessionRecord:
    """One live session of a level; its utterances carry the measurements."""

    index: int
    offset_s: float
    """The random wait before it connected."""
    connected_at_s: float | None = None
    error: str | None = None
    """Why the session failed as a whole (could not open, the server ended it)."""
    close_code: int | None = None
    events: list[str] = field(default_factory=list)
    """The first event types it received, in order."""
    error_events: list[dict[str, Any]] = field(default_factory=list)
    unmatched_events: int = 0
    frames_sent: int = 0
    late_s: dict[str, float] = field(default_factory=dict)
    """How late its audio frames left against their schedule."""
    utterances: list[Utterance] = field(default_factory=list)


def _utterances(index: int, clips: list[LiveClip]) -> list[Utterance]:
    return [Utterance(index, turn, c.name, c.reference, c.audio_s) for turn, c in enumerate(clips)]


async def run_session(http: aiohttp.ClientSession, options: LiveOptions, index: int,
                      clips: list[LiveClip], gap_s: float, offset_s: float, origin: float,
                      on_done: Callable[[], None] | None = None) -> SessionRecord:
    """Wait `offset_s`, open a session, speak `clips` with `gap_s` between, and collect.

    `on_done` is called once per utterance as it finishes (for a progress bar).
    """
    record = SessionRecord(index, offset_s, utterances=_utterances(index, clips))
    await asyncio.sleep(offset_s)
    try:
        live = await LiveSession.open(http, options, origin)
    except SessionFailed as exc:
        record.error = str(exc)
        for u in record.utterances:
            u.fail(exc.failure, str(exc))
            u.finish()
            if on_done is not None:
                on_done()
        return record
    record.connected_at_s = time.perf_counter() - origin
    waited = 0
    try:
        for utterance, clip in zip(record.utterances, clips, strict=True):
            live.say(utterance, clip)
            live.pause(gap_s)
        for utterance in record.utterances:
            await live.end_of_speech(utterance)
        for utterance in record.utterances:
            await live.wait(utterance)
            waited += 1
            if on_done is not None:
                on_done()
    except SessionFailed as exc:
        record.error = str(exc)
    finally:
        await live.close()
        for _ in range(len(record.utterances) - waited):
            if on_done is not None:
                on_done()
    client = live.client
    if client.ended is not None and record.error is None and any(
            not u.finished() for u in record.utterances):
        record.error = client.ended
    record.close_code = client.close_code
    record.events = client.events
    record.error_events = client.error_events
    record.unmatched_events = client.unmatched
    record.frames_sent = len(live.pacer.sent_at)
    record.late_s = live.pacing()
    for u in record.utterances:
        if record.error is not None and not u.finished():
            u.fail("session", record.error)
        u.finish()
    return record


def _rate(errors: list[int], words: list[int]) -> float | None:
    return sum(errors) / sum(words) if sum(words) else None


def summarize_realtime(sessions: list[SessionRecord], file_text: dict[str, str | None],
                       wall_s: float) -> dict[str, Any]:
    """The level's figures. WER counts every utterance with a reference (one without a
    transcript counts as all deletions); the file WER scores the file transcript of each
    utterance's clip, so both are over the same words."""
    utts = [u for s in sessions for u in s.utterances]
    ok = [u for u in utts if u.failure is None]
    scored = [u for u in utts if u.reference_words]
    file_counts = []
    for u in scored:
        text = file_text.get(u.clip)
        if text is not None and u.reference is not None:
            file_counts.append(word_errors(u.reference, text))
    late = [s.late_s["max"] for s in sessions if math.isfinite(s.late_s.get("max", math.nan))]
    late99 = [s.late_s["p99"] for s in sessions if math.isfinite(s.late_s.get("p99", math.nan))]
    return {
        "sessions": len(sessions),
        "sessions_failed": sum(1 for s in sessions if s.error is not None),
        "utterances": len(utts),
        "completed": len(ok),
        "failed": len(utts) - len(ok),
        "failures_by_status": dict(Counter(u.failure for u in utts if u.failure)),
        "error_events": dict(Counter(str(e.get("code")) for s in sessions for e in s.error_events)),
        "unmatched_events": sum(s.unmatched_events for s in sessions),
        "wall_s": wall_s,
        "audio_s": sum(u.audio_s for u in utts),
        "completed_latency_s": latency_summary(
            [u.completed_latency_s for u in ok if u.completed_latency_s is not None]),
        "speech_started_latency_s": latency_summary(
            [u.speech_started_latency_s for u in ok if u.speech_started_latency_s is not None]),
        "cut_utterances": sum(1 for u in ok if len(u.items) > 1),
        "speech_stopped_latency_s": latency_summary(
            [u.speech_stopped_latency_s for u in ok if u.speech_stopped_latency_s is not None]),
        "vad_end_offset_ms": summarize(
            [u.vad_end_offset_ms for u in ok if u.vad_end_offset_ms is not None]),
        "deltas_per_utterance": statistics.fmean(u.deltas for u in ok) if ok else math.nan,
        "items_per_utterance": statistics.fmean(len(u.items) for u in ok) if ok else math.nan,
        "wer_live": _rate([u.word_errors or 0 for u in scored], [u.reference_words or 0 for u in scored]),
        "wer_file": (_rate([c.errors for c in file_counts], [c.reference_words for c in file_counts])
                     if len(file_counts) == len(scored) else None),
        "wer_utterances": len(scored),
        "pacing_late_max_s": max(late) if late else math.nan,
        "pacing_late_p99_s": max(late99) if late99 else math.nan,
    }


async def _file_pass(http: aiohttp.ClientSession, target: TranscribeTarget,
                     clips: list[LiveClip]) -> list[TranscribeRecord]:
    """Each clip uploaded once, one at a time, as a 24 kHz WAV (the audio the session got)."""
    records = []
    for i, clip in enumerate(clips):
        rec = TranscribeRecord(i, clip.name, clip.audio_s, 0.0, 0.0, clip.reference)
        records.append(await transcribe(http, target, Clip(Path(clip.name), clip.audio_s,
                                                           clip.reference), clip.wav(), rec))
    return records


async def _file_loop(http: aiohttp.ClientSession, target: TranscribeTarget, clip: Clip,
                     data: bytes, stop: asyncio.Event, origin: float,
                     records: list[TranscribeRecord], numbers: Iterator[int]) -> None:
    """Upload the long file again and again until `stop`; the upload in flight then ends
    normally and counts (the live sessions are over by then, so it disturbs nothing)."""
    while not stop.is_set():
        now = time.perf_counter() - origin
        rec = TranscribeRecord(next(numbers), clip.path.name, clip.audio_s, now, now,
                               clip.reference)
        records.append(await transcribe(http, target, clip, data, rec))


def _files_summary(records: list[TranscribeRecord]) -> dict[str, Any]:
    """`bench transcribe`'s figures, over the time from the level's start to the end of
    the last upload; RTFx per request is each upload's audio over its latency."""
    wall = max((r.sent_at_s + (r.latency_s or 0.0) for r in records), default=0.0)
    out = summarize_transcribe(records, wall)
    out["rtfx_per_request"] = summarize([r.audio_s / r.latency_s for r in records
                                         if r.ok and r.latency_s])
    out["records"] = [asdict(r) for r in records]
    return out


def check_plan(options: LiveOptions, utterances: int, gap_s: float, files: int,
               file_seconds: float) -> None:
    """Raise ValueError for settings that cannot make a meaningful run."""
    if utterances < 1:
        raise ValueError(f"each session speaks at least one clip, got {utterances}")
    if gap_s < options.vad.silence_duration_ms / 1000:
        raise ValueError(f"a gap of {gap_s:g} s is shorter than the {options.vad.silence_duration_ms}"
                         f" ms of silence that ends a turn: the clips would run into one turn")
    if files < 0 or file_seconds <= 0:
        raise ValueError(f"--files must be >= 0 and --file-seconds positive, got {files} "
                         f"and {file_seconds:g}")


async def bench_realtime(options: LiveOptions, clips: list[LiveClip], levels: list[int],
                         utterances: int = 4, gap_s: float = 1.5, files: int = 0,
                         file_seconds: float = 60.0, warmup: int = 1) -> dict[str, Any]:
    """Warm up, then run every level: {"levels": [...], "health": {...}}."""
    check_plan(options, utterances, gap_s, files, file_seconds)
    target = TranscribeTarget(options.base_url, options.model, options.language, options.timeout_s)
    long_data, long_ref, long_s = joined_wav(clips, 1.0, file_seconds) if files else (b"", None, 0.0)
    long_clip = Clip(Path("joined.wav"), long_s, long_ref)
    mean_s = statistics.fmean(c.audio_s for c in clips)
    headers = auth_headers(options.api_key)
    # Sessions last as long as their audio; an upload gets the bench's usual 600 s.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), headers=headers,
                                     timeout=aiohttp.ClientTimeout(total=None, sock_connect=30)
                                     ) as http, \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), headers=headers,
                                  timeout=aiohttp.ClientTimeout(total=UPLOAD_TIMEOUT_S)) as uploads:
        if warmup:
            origin = time.perf_counter()
            warm = await run_session(http, options, -1, clips[:warmup], gap_s, 0.0, origin)
            bad = [u for u in warm.utterances if u.failure is not None]
            if warm.error or bad:
                why = warm.error or "; ".join(f"{u.clip}: {u.error}" for u in bad)
                raise BenchError(f"the warm-up session failed: {why} (events: {warm.events[:40]})")

        async def level(concurrency: int) -> tuple[LevelRun[SessionRecord], dict[str, Any]]:
            rng = random.Random(options.seed * 1000 + concurrency)
            chosen = spread(clips, concurrency * utterances, options.seed)
            plan = [chosen[i * utterances : (i + 1) * utterances] for i in range(concurrency)]
            offsets = [rng.uniform(0.0, mean_s) for _ in range(concurrency)]
            bar = tqdm(total=concurrency * utterances, desc=f"realtime c={concurrency}",
                       unit="utt", disable=not options.progress, leave=True)
            stop = asyncio.Event()
            file_records: list[TranscribeRecord] = []
            origin = time.perf_counter()
            numbers = itertools.count()
            loops = [asyncio.ensure_future(_file_loop(uploads, target, long_clip, long_data, stop,
                                                      origin, file_records, numbers))
                     for _ in range(files)]
            try:
                sessions = await asyncio.gather(*(
                    run_session(http, options, i, plan[i], gap_s, offsets[i], origin,
                                lambda: bar.update(1))
                    for i in range(concurrency)))
            finally:
                wall = time.perf_counter() - origin
                stop.set()
                await asyncio.gather(*loops)
                bar.close()
            used = list({c.name: c for session in plan for c in session}.values())
            file_pass = await _file_pass(uploads, target, used)
            texts = {r.file: (r.text if r.ok else None) for r in file_pass}
            summary = summarize_realtime(list(sessions), texts, wall)
            summary["file_pass"] = {**summarize_transcribe(file_pass, sum(
                r.latency_s or 0.0 for r in file_pass)), "records": [asdict(r) for r in file_pass]}
            if files:
                summary["files"] = _files_summary(file_records)
            if simulated:
                summary["wer_live"] = summary["wer_file"] = summary["file_pass"]["wer"] = None
            return LevelRun(list(sessions), origin, wall), summary

        simulated = await transcription_simulated(http, options.base_url)
        result = await measure_levels(levels, level, options.base_url, options.probe_health,
                                      options.health_interval_s)
        if simulated:
            result["wer_refused"] = SIM_REFUSAL
        return result
