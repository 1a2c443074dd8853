"""`bench stream-text`: the WebSocket speech API fed by a simulated LLM.

Each session sends a prompt as LLM-like tokens (a word with its leading space, or one
punctuation mark) at a fixed rate, 20 tokens/s by default, then `session.close`, and
times every audio frame that comes back. The bench runs the server's own segmenter over
the same tokens, so it knows which token completed the first clause; the headline figure
is the time from sending that token to the first audio byte. It also reports the time
from the first token to the first audio, against the time the text took to arrive (a
client that waited for the whole text before asking for speech could not start before
the text ended), and the playback continuity of each session's audio.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

from voxserve.bench.health import HealthProber, summarize_probes
from voxserve.bench.levels import BenchError
from voxserve.bench.metrics import continuity_ok_rate, max_underrun, summarize
from voxserve.bench.speech import chunk_samples
from voxserve.text.incremental import SplitMode, TextSegmenter

__all__ = ["StreamTextRecord", "bench_stream_text", "first_boundary_token", "llm_tokens"]

_TOKEN = re.compile(r"\s*[\w'’-]+|\s*[^\w\s]")


def llm_tokens(text: str) -> list[str]:
    """Split text the way an LLM streams it: words with their leading space, and marks."""
    return _TOKEN.findall(text)


def first_boundary_token(tokens: list[str], mode: SplitMode) -> int | None:
    """Index of the token after which the segmenter has its first complete segment."""
    segmenter = TextSegmenter(mode)
    for i, token in enumerate(tokens):
        if segmenter.feed(token):
            return i
    return None


@dataclass
class StreamTextRecord:
    index: int
    chars: int
    tokens: int
    boundary_token: int | None
    """Token that completed the first segment; None when only the close flushed it."""
    error: str | None = None
    sample_rate: int | None = None
    token_times_s: list[float] = field(default_factory=list)
    """When each token was sent, from the session's start."""
    chunk_times_s: list[float] = field(default_factory=list)
    chunk_bytes: list[int] = field(default_factory=list)
    segments: int = 0
    first_clause_latency_s: float | None = None
    first_audio_s: float | None = None
    text_s: float | None = None
    audio_s: float | None = None
    max_underrun_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.chunk_times_s)


async def _session(session: aiohttp.ClientSession, url: str, text: str, index: int,
                   tokens_per_s: float, mode: SplitMode) -> StreamTextRecord:
    tokens = llm_tokens(text)
    record = StreamTextRecord(index, len(text), len(tokens), first_boundary_token(tokens, mode))
    start = time.perf_counter()
    try:
        async with session.ws_connect(url, max_msg_size=0) as ws:
            await ws.send_json({"type": "session.config", "response_format": "pcm", "split": mode})

            async def send_tokens() -> None:
                for i, token in enumerate(tokens):
                    due = start + i / tokens_per_s
                    await asyncio.sleep(max(0.0, due - time.perf_counter()))
                    record.token_times_s.append(time.perf_counter() - start)
                    await ws.send_json({"type": "input.text", "text": token})
                await ws.send_json({"type": "session.close"})

            sender = asyncio.create_task(send_tokens())
            try:
                async for message in ws:
                    now = time.perf_counter() - start
                    if message.type == aiohttp.WSMsgType.BINARY:
                        record.chunk_times_s.append(now)
                        record.chunk_bytes.append(len(message.data))
                    elif message.type == aiohttp.WSMsgType.TEXT:
                        event = json.loads(message.data)
                        if event["type"] == "audio.start":
                            record.segments += 1
                            record.sample_rate = int(event["sample_rate"])
                        elif event["type"] == "error":
                            record.error = str(event.get("message"))[:300]
                        elif event["type"] == "session.done":
                            break
                    else:
                        break
            finally:
                sender.cancel()
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"[:300]
    return _finish(record)


def _finish(record: StreamTextRecord) -> StreamTextRecord:
    if not record.chunk_times_s or record.sample_rate is None:
        record.error = record.error or "no audio came back"
        return record
    first = record.chunk_times_s[0]
    record.first_audio_s = first - record.token_times_s[0]
    record.text_s = record.token_times_s[-1] - record.token_times_s[0]
    if record.boundary_token is not None:
        record.first_clause_latency_s = first - record.token_times_s[record.boundary_token]
    samples = chunk_samples(record.chunk_bytes)
    record.audio_s = sum(samples) / record.sample_rate
    record.max_underrun_s = max_underrun(record.chunk_times_s, samples, record.sample_rate)
    return record


async def bench_stream_text(base_url: str, prompts: list[str], levels: list[int],
                            tokens_per_s: float = 20.0, mode: SplitMode = "clause",
                            threshold_s: float = 0.1, timeout_s: float = 600.0) -> dict[str, Any]:
    """Every prompt once per level, with C sessions at a time."""
    url = base_url.rstrip("/").replace("http://", "ws://").replace("https://", "wss://")
    url += "/v1/audio/speech/stream"
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    out: list[dict[str, Any]] = []
    prober = HealthProber(base_url)
    prober.start()
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            warm = await _session(session, url, "Warming up, one clause.", -1, 1000.0, mode)
            if not warm.ok:
                raise BenchError(f"warm-up session to {url} failed: {warm.error}")
            for concurrency in levels:
                slots = asyncio.Semaphore(concurrency)
                level_start = time.perf_counter()

                async def one(i: int, text: str, slots: asyncio.Semaphore = slots) -> StreamTextRecord:
                    async with slots:
                        return await _session(session, url, text, i, tokens_per_s, mode)

                records = await asyncio.gather(*(one(i, t) for i, t in enumerate(prompts)))
                end = time.perf_counter()
                ok = [r for r in records if r.ok]
                underruns = [r.max_underrun_s for r in ok if r.max_underrun_s is not None]
                out.append({
                    "concurrency": concurrency,
                    "summary": {
                        "sessions": len(records),
                        "completed": len(ok),
                        "failed": len(records) - len(ok),
                        "first_clause_latency_s": summarize(
                            [r.first_clause_latency_s for r in ok if r.first_clause_latency_s is not None]),
                        "first_audio_s": summarize([r.first_audio_s for r in ok if r.first_audio_s is not None]),
                        "text_s": summarize([r.text_s for r in ok if r.text_s is not None]),
                        "underrun_s": summarize(underruns),
                        "continuity_ok_rate": continuity_ok_rate(underruns, threshold_s),
                        "segments_per_session": summarize([float(r.segments) for r in ok]),
                    },
                    "health": summarize_probes(prober.between(level_start, end)),
                    "records": [asdict(r) for r in records],
                })
    finally:
        probes = prober.stop()
    return {"levels": out, "health": summarize_probes(probes), "tokens_per_s": tokens_per_s, "split": mode}


def format_stream_text(result: dict[str, Any]) -> str:
    lines = [(f"{'c':>3} {'ok':>4} {'clause->audio p50/p95 ms':>25} {'first audio p50 s':>18} "
             f"{'text p50 s':>11} {'continuity':>10} {'/health p99 ms':>15}")]
    for level in result["levels"]:
        s = level["summary"]
        fc, fa, tx = s["first_clause_latency_s"], s["first_audio_s"], s["text_s"]
        lines.append(
            f"{level['concurrency']:>3} {s['completed']:>4} "
            f"{fc['p50'] * 1e3:>12.0f} / {fc['p95'] * 1e3:<10.0f} {fa['p50']:>18.2f} {tx['p50']:>11.2f} "
            f"{s['continuity_ok_rate']:>10.0%} {level['health']['p99'] * 1e3:>15.1f}")
    return "\n".join(lines)
