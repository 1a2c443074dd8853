"""`bench voice-loop`: a voice agent's round trip, from the user's last word to the first
sound of the reply.

Each of C conversations takes `turns` turns; in each one:
1. the user speaks a clip at real time into `WS /v1/realtime` (server VAD), as `bench
   realtime` does: the end of speech is when the bench sent the clip's last sample above
   -45 dBFS;
2. on `completed`, a simulated LLM waits `llm_ttft_s`, then streams its reply (a built-in
   prompt) into `WS /v1/audio/speech/stream` at `tokens_per_s`, then sends `input.done`.
   A token is `chars_per_token` characters (4 by default, the average length of an
   English BPE token) cut from the text as it stands, spaces and marks included, so
   tokens split words as an LLM's do;
3. voice-to-voice is the end of the user's speech to the reply's first audio byte. The
   reply is played at real time from that byte on a player that waits when it runs dry
   (`metrics.playback_stalls`): its stalls and their total length are the continuity;
4. once the reply has played, the user pauses `pause_s` and speaks the next turn.

The microphone sends silence all along (while the reply plays, too), as a live one does.
The conversations start at random offsets within one clip's length. Speaks HTTP and
WebSocket only.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from tqdm import tqdm

from voxserve.bench.levels import BenchError, measure_levels
from voxserve.bench.live import LiveSession
from voxserve.bench.liveclips import LiveClip, spread
from voxserve.bench.load import LevelRun
from voxserve.bench.metrics import playback_stalls
from voxserve.bench.rtclient import (
    LiveOptions,
    SessionFailed,
    Utterance,
    auth_headers,
    close_with_reader,
    latency_summary,
    ws_url,
)
from voxserve.bench.speech import chunk_samples

__all__ = ["ConversationRecord", "LoopSettings", "TurnRecord", "bench_voice_loop", "llm_tokens",
           "summarize_voice_loop"]

_ERROR_CHARS = 300


def llm_tokens(text: str, chars_per_token: int = 4) -> list[str]:
    """The text cut into pieces of `chars_per_token` characters (the last may be shorter)."""
    if chars_per_token < 1:
        raise ValueError(f"a token has at least one character, got {chars_per_token}")
    return [text[i : i + chars_per_token] for i in range(0, len(text), chars_per_token)]


@dataclass(frozen=True)
class LoopSettings:
    """What the simulated agent does; the same at every level."""

    turns: int = 4
    voice: str = "alloy"
    llm_ttft_s: float = 0.0
    """From the user's `completed` to the reply's first token."""
    tokens_per_s: float = 20.0
    chars_per_token: int = 4
    pause_s: float = 0.5
    """The user's pause after the reply has played, before the next turn."""
    stall_threshold_s: float = 0.02
    """Shorter waits of the player are not counted as stalls (its buffer hides them)."""

    def check(self) -> None:
        """Raise ValueError for settings that cannot make a meaningful run."""
        if self.turns < 1:
            raise ValueError(f"a conversation takes at least one turn, got {self.turns}")
        if self.tokens_per_s <= 0 or self.chars_per_token < 1:
            raise ValueError(f"tokens per second must be positive and a token at least one "
                             f"character, got {self.tokens_per_s:g} and {self.chars_per_token}")
        if min(self.llm_ttft_s, self.pause_s, self.stall_threshold_s) < 0:
            raise ValueError("the LLM's time to first token, the pause and the stall "
                             "threshold cannot be negative")


@dataclass
class TurnRecord:
    """One turn: the user's utterance and the agent's spoken reply. `*_at_s` are from the
    level's start."""

    conversation: int
    turn: int
    user: Utterance
    reply_text: str
    reply_tokens: int
    completed_latency_s: float | None = None
    reply_started_at_s: float | None = None
    """When the first token was sent."""
    first_audio_at_s: float | None = None
    voice_to_voice_s: float | None = None
    reply_done_at_s: float | None = None
    """Arrival of `input.flushed`: the whole reply is spoken."""
    sample_rate: int | None = None
    segments: int = 0
    chunk_times_s: list[float] = field(default_factory=list)
    chunk_bytes: list[int] = field(default_factory=list)
    reply_audio_s: float | None = None
    stalls: int | None = None
    stall_s: float | None = None
    played_until_s: float | None = None
    failure: str | None = None
    """`user_<why>` when the transcription failed, `reply_error`, `reply_timeout`,
    `no_audio`, or `session` / `session_<code>` when the conversation ended early (the
    code when the server refused it, e.g. `session_too_many_sessions`)."""
    error: str | None = None

    def fail(self, failure: str, error: str) -> None:
        if self.failure is None:
            self.failure, self.error = failure, error[:_ERROR_CHARS]


@dataclass
class ConversationRecord:
    index: int
    offset_s: float
    error: str | None = None
    close_code: int | None = None
    events: list[str] = field(default_factory=list)
    """The first realtime event types it received, in order."""
    error_events: list[dict[str, Any]] = field(default_factory=list)
    """Error events of both sessions (realtime, then speech)."""
    unmatched_events: int = 0
    frames_sent: int = 0
    late_s: dict[str, float] = field(default_factory=dict)
    turns: list[TurnRecord] = field(default_factory=list)


class ReplyStream:
    """`WS /v1/audio/speech/stream` for one conversation; one reply at a time."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, origin: float):
        self.ws = ws
        self.origin = origin
        self.turn: TurnRecord | None = None
        self.error_events: list[dict[str, Any]] = []
        self.ended: str | None = None
        self._flushed = asyncio.Event()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def open(cls, http: aiohttp.ClientSession, options: LiveOptions, voice: str,
                   origin: float) -> ReplyStream:
        url = ws_url(options.base_url, "/v1/audio/speech/stream")
        try:
            ws = await http.ws_connect(url, headers=auth_headers(options.api_key), max_msg_size=0)
            await ws.send_str(json.dumps({"type": "session.config", "response_format": "pcm",
                                          "voice": voice}))
        except (aiohttp.ClientError, OSError) as exc:
            raise SessionFailed(f"connecting to {url}: {type(exc).__name__}: {exc}") from exc
        return cls(ws, origin)

    async def speak(self, turn: TurnRecord, tokens: list[str], tokens_per_s: float,
                    timeout_s: float) -> None:
        """Stream the tokens, then `input.done`; return when the reply is spoken.

        Fails the turn when no audio came for `timeout_s` before `input.flushed`.
        """
        self.turn = turn
        self._flushed.clear()
        start = time.perf_counter()
        turn.reply_started_at_s = start - self.origin
        try:
            for k, token in enumerate(tokens):
                delay = start + k / tokens_per_s - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                await self.ws.send_str(json.dumps({"type": "input.text", "text": token}))
            await self.ws.send_str(json.dumps({"type": "input.done"}))
            while not self._flushed.is_set():
                seen = len(turn.chunk_times_s)
                try:
                    await asyncio.wait_for(self._flushed.wait(), timeout_s)
                except TimeoutError:
                    if len(turn.chunk_times_s) == seen:
                        turn.fail("reply_timeout", f"no audio and no input.flushed for "
                                  f"{timeout_s:g} s")
                        return
                if self.ended is not None and not self._flushed.is_set():
                    turn.fail("reply_error", self.ended)
                    return
        except (aiohttp.ClientError, OSError, RuntimeError) as exc:
            turn.fail("reply_error", f"sending the reply failed: {type(exc).__name__}: {exc}")
        finally:
            self.turn = None

    async def close(self) -> None:
        await close_with_reader(self.ws, self._reader)

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                now = time.perf_counter() - self.origin
                turn = self.turn
                if message.type == aiohttp.WSMsgType.BINARY:
                    if turn is not None and message.data:
                        turn.chunk_times_s.append(now)
                        turn.chunk_bytes.append(len(message.data))
                    continue
                if message.type != aiohttp.WSMsgType.TEXT:
                    continue
                event = json.loads(message.data)
                kind = event.get("type")
                if kind == "audio.start" and turn is not None:
                    turn.segments += 1
                    turn.sample_rate = int(event["sample_rate"])
                elif kind == "input.flushed":
                    if turn is not None:
                        turn.reply_done_at_s = now
                    self._flushed.set()
                elif kind == "error":
                    self.error_events.append({"at_s": now, "code": event.get("code"),
                                              "message": str(event.get("message"))[:_ERROR_CHARS]})
                    if turn is not None:
                        turn.fail("reply_error", f"{event.get('code')}: {event.get('message')}")
        except (aiohttp.ClientError, OSError, ValueError, KeyError, TypeError) as exc:
            self.ended = f"reading the speech stream failed: {type(exc).__name__}: {exc}"
        if self.ended is None:
            self.ended = f"the server closed the speech stream (code {self.ws.close_code})"
        self._flushed.set()


def _finish_reply(turn: TurnRecord, eos_at: float, threshold_s: float) -> None:
    if not turn.chunk_times_s or turn.sample_rate is None:
        turn.fail("no_audio", "the reply carried no audio")
        return
    turn.first_audio_at_s = turn.chunk_times_s[0]
    turn.voice_to_voice_s = turn.first_audio_at_s - eos_at
    samples = chunk_samples(turn.chunk_bytes)
    turn.reply_audio_s = sum(samples) / turn.sample_rate
    stalls = playback_stalls(turn.chunk_times_s, samples, turn.sample_rate, threshold_s)
    turn.stalls, turn.stall_s, turn.played_until_s = stalls.count, stalls.total_s, stalls.end_s


async def run_conversation(http: aiohttp.ClientSession, options: LiveOptions, loop: LoopSettings,
                           index: int, clips: list[LiveClip], replies: list[str],
                           offset_s: float, origin: float,
                           on_done: Callable[[], None] | None = None) -> ConversationRecord:
    """Wait `offset_s`, then hold one conversation of len(clips) turns."""
    record = ConversationRecord(index, offset_s)
    for t, (clip, text) in enumerate(zip(clips, replies, strict=True)):
        user = Utterance(index, t, clip.name, clip.reference, clip.audio_s)
        record.turns.append(TurnRecord(index, t, user, text,
                                       len(llm_tokens(text, loop.chars_per_token))))
    await asyncio.sleep(offset_s)
    live: LiveSession | None = None
    reply: ReplyStream | None = None
    reported = 0
    failure = "session"
    try:
        live = await LiveSession.open(http, options, origin)
        reply = await ReplyStream.open(http, options, loop.voice, origin)
        for turn, clip in zip(record.turns, clips, strict=True):
            live.say(turn.user, clip)
            eos = await live.end_of_speech(turn.user)
            await live.wait(turn.user)
            if turn.user.failure is not None:
                turn.fail(f"user_{turn.user.failure}", turn.user.error or "")
                if live.client.ended is not None:
                    raise SessionFailed(live.client.ended)
                await asyncio.sleep(loop.pause_s)
            else:
                if loop.llm_ttft_s > 0:
                    await asyncio.sleep(loop.llm_ttft_s)
                tokens = llm_tokens(turn.reply_text, loop.chars_per_token)
                await reply.speak(turn, tokens, loop.tokens_per_s, options.timeout_s)
                _finish_reply(turn, eos - origin, loop.stall_threshold_s)
                if reply.ended is not None:
                    raise SessionFailed(reply.ended)
                played = turn.played_until_s if turn.played_until_s is not None else 0.0
                await asyncio.sleep(max(0.0, origin + played + loop.pause_s - time.perf_counter()))
            reported += 1
            if on_done is not None:
                on_done()
    except SessionFailed as exc:
        record.error = str(exc)
        failure = exc.failure
    finally:
        if reply is not None:
            await reply.close()
            record.error_events.extend(reply.error_events)
        if live is not None:
            await live.close()
            client = live.client
            record.close_code = client.close_code
            record.events = client.events
            record.error_events[:0] = client.error_events
            record.unmatched_events = client.unmatched
            record.frames_sent = len(live.pacer.sent_at)
            record.late_s = live.pacing()
    for turn in record.turns:
        turn.user.finish()
        turn.completed_latency_s = turn.user.completed_latency_s
        if turn.voice_to_voice_s is None and turn.failure is None:
            turn.fail(failure, record.error or "the conversation ended before this turn")
    for _ in range(len(record.turns) - reported):
        if on_done is not None:
            on_done()
    return record


def summarize_voice_loop(conversations: list[ConversationRecord], wall_s: float) -> dict[str, Any]:
    """The level's figures over every turn of every conversation."""
    turns = [t for c in conversations for t in c.turns]
    ok = [t for t in turns if t.failure is None]
    scored = [t.user for t in turns if t.user.reference_words]
    words = sum(u.reference_words or 0 for u in scored)
    late = [c.late_s["max"] for c in conversations if math.isfinite(c.late_s.get("max", math.nan))]
    return {
        "conversations": len(conversations),
        "conversations_failed": sum(1 for c in conversations if c.error is not None),
        "turns": len(turns),
        "completed": len(ok),
        "failed": len(turns) - len(ok),
        "failures_by_status": dict(Counter(t.failure for t in turns if t.failure)),
        "error_events": dict(Counter(str(e.get("code")) for c in conversations
                                     for e in c.error_events)),
        "wall_s": wall_s,
        "voice_to_voice_s": latency_summary([t.voice_to_voice_s for t in ok
                                             if t.voice_to_voice_s is not None]),
        "completed_latency_s": latency_summary([t.completed_latency_s for t in turns
                                                if t.completed_latency_s is not None]),
        "continuity_ok_rate": (sum(1 for t in ok if t.stalls == 0) / len(ok)) if ok else math.nan,
        "stall_total_s": sum(t.stall_s or 0.0 for t in ok),
        "stalls_per_turn": statistics.fmean(t.stalls or 0 for t in ok) if ok else math.nan,
        "reply_audio_s": sum(t.reply_audio_s or 0.0 for t in ok),
        "wer_live": sum(u.word_errors or 0 for u in scored) / words if words else None,
        "pacing_late_max_s": max(late) if late else math.nan,
    }


async def bench_voice_loop(options: LiveOptions, loop: LoopSettings, clips: list[LiveClip],
                           replies: list[str], levels: list[int],
                           warmup: bool = True) -> dict[str, Any]:
    """Warm up with one turn, then run every level: {"levels": [...], "health": {...}}.

    The users say C * turns clips spread over the set's lengths (`liveclips.spread`);
    conversation i hears replies[(i * turns + t) % len(replies)] at turn t.
    """
    loop.check()
    if not replies:
        raise ValueError("no reply texts")
    mean_s = statistics.fmean(c.audio_s for c in clips)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     headers=auth_headers(options.api_key),
                                     timeout=aiohttp.ClientTimeout(total=None, sock_connect=30)
                                     ) as http:
        if warmup:
            warm = await run_conversation(http, options, loop, -1, clips[:1], replies[:1], 0.0,
                                          time.perf_counter())
            turn = warm.turns[0]
            if turn.failure is not None:
                raise BenchError(f"the warm-up conversation failed: {turn.failure}: {turn.error} "
                                 f"(realtime events: {warm.events[:40]})")

        async def level(concurrency: int) -> tuple[LevelRun[ConversationRecord], dict[str, Any]]:
            rng = random.Random(options.seed * 1000 + concurrency)
            n = loop.turns
            offsets = [rng.uniform(0.0, mean_s) for _ in range(concurrency)]
            bar = tqdm(total=concurrency * n, desc=f"voice-loop c={concurrency}", unit="turn",
                       disable=not options.progress, leave=True)
            origin = time.perf_counter()
            said = spread(clips, concurrency * n, options.seed)
            try:
                conversations = await asyncio.gather(*(
                    run_conversation(
                        http, options, loop, i, said[i * n : (i + 1) * n],
                        [replies[(i * n + t) % len(replies)] for t in range(n)],
                        offsets[i], origin, lambda: bar.update(1))
                    for i in range(concurrency)))
            finally:
                bar.close()
            wall = time.perf_counter() - origin
            return (LevelRun(list(conversations), origin, wall),
                    summarize_voice_loop(list(conversations), wall))

        return await measure_levels(levels, level, options.base_url, options.probe_health,
                                    options.health_interval_s)
