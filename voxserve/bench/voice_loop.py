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

With `barge_in_s`, the user does not wait: `barge_in_s` after a reply's first audio,
while the server is still sending it, the user starts the next turn over it. The agent
sends `input.cancel` the moment the live session reports that turn's `speech_started`,
as an agent does, and stops its player. Per barge-in the bench records when the user's
speech began (the first sample above -45 dBFS was sent), when the cancel went out, when
`audio.cancelled` came back, and the last audio frame of the cancelled reply, so the
time until the reply's audio stops is split into the server's VAD and the speech
WebSocket's cancel. The next reply's voice-to-voice is reported apart, beside the first
turn's (a fresh session's). The last turn is never interrupted.

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
import numpy as np
from tqdm import tqdm

from voxserve.bench.levels import BenchError, measure_levels
from voxserve.bench.live import LiveSession
from voxserve.bench.liveclips import LIVE_RATE, SPEECH_DBFS, LiveClip, spread
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

__all__ = ["BargeIn", "ConversationRecord", "LoopSettings", "TurnRecord", "bench_voice_loop",
           "first_loud_sample", "llm_tokens", "summarize_voice_loop"]

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
    barge_in_s: float | None = None
    """The user speaks the next turn this long after a reply's first audio; None waits
    for the reply to play out."""

    def check(self) -> None:
        """Raise ValueError for settings that cannot make a meaningful run."""
        if self.turns < 1:
            raise ValueError(f"a conversation takes at least one turn, got {self.turns}")
        if self.tokens_per_s <= 0 or self.chars_per_token < 1:
            raise ValueError(f"tokens per second must be positive and a token at least one "
                             f"character, got {self.tokens_per_s:g} and {self.chars_per_token}")
        if min(self.llm_ttft_s, self.pause_s, self.stall_threshold_s, self.barge_in_s or 0.0) < 0:
            raise ValueError("the LLM's time to first token, the pause, the stall "
                             "threshold and the barge-in delay cannot be negative")


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
    after_barge_in: bool = False
    """The user spoke this turn over the reply before it."""
    barge_in: BargeIn | None = None
    """This turn's reply was cut off by the next turn's speech."""
    failure: str | None = None
    """`user_<why>` when the transcription failed, `reply_error`, `reply_timeout`,
    `no_audio`, or `session` / `session_<code>` when the conversation ended early (the
    code when the server refused it, e.g. `session_too_many_sessions`)."""
    error: str | None = None

    def fail(self, failure: str, error: str) -> None:
        if self.failure is None:
            self.failure, self.error = failure, error[:_ERROR_CHARS]


@dataclass
class BargeIn:
    """A reply cut off by the user (times from the level's start)."""

    onset_at_s: float
    """The user's speech began: the frame with its first sample above -45 dBFS was sent."""
    cancel_sent_at_s: float | None = None
    """`speech_started` came, and the agent sent `input.cancel`."""
    cancelled_at_s: float | None = None
    """`audio.cancelled` came back."""
    last_audio_at_s: float | None = None
    """The cancelled reply's last audio frame."""

    @property
    def detect_s(self) -> float | None:
        """The user's onset to the cancel (the live session's VAD)."""
        return None if self.cancel_sent_at_s is None else self.cancel_sent_at_s - self.onset_at_s

    @property
    def answer_s(self) -> float | None:
        """`input.cancel` to `audio.cancelled`."""
        if self.cancel_sent_at_s is None or self.cancelled_at_s is None:
            return None
        return self.cancelled_at_s - self.cancel_sent_at_s

    @property
    def audio_after_s(self) -> float | None:
        """How long after the cancel the reply's audio still came (0: none after it)."""
        if self.cancel_sent_at_s is None or self.last_audio_at_s is None:
            return None
        return max(0.0, self.last_audio_at_s - self.cancel_sent_at_s)

    @property
    def stop_s(self) -> float | None:
        """The user's onset to `audio.cancelled`: until the reply has surely stopped."""
        return None if self.cancelled_at_s is None else self.cancelled_at_s - self.onset_at_s


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
        self.last_turn: TurnRecord | None = None
        """The turn of the latest reply: audio that comes after its end still counts to it."""
        self.error_events: list[dict[str, Any]] = []
        self.ended: str | None = None
        self.cancelled_at_s: float | None = None
        """Arrival of the latest `audio.cancelled`."""
        self.first_audio = asyncio.Event()
        """Set by the current reply's first audio frame."""
        self._cancelling = False
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
        self.turn = self.last_turn = turn
        self._flushed.clear()
        self.first_audio.clear()
        self._cancelling = False
        start = time.perf_counter()
        turn.reply_started_at_s = start - self.origin
        try:
            for k, token in enumerate(tokens):
                delay = start + k / tokens_per_s - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                if self._cancelling:
                    break
                await self.ws.send_str(json.dumps({"type": "input.text", "text": token}))
            if not self._cancelling:
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

    async def cancel(self) -> float:
        """Barge-in: stop sending the reply and send `input.cancel`; `speak` returns on
        `audio.cancelled`. Returns when the cancel was sent (perf_counter)."""
        self._cancelling = True
        await self.ws.send_str(json.dumps({"type": "input.cancel"}))
        return time.perf_counter()

    async def close(self) -> None:
        await close_with_reader(self.ws, self._reader)

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                now = time.perf_counter() - self.origin
                turn = self.turn
                if message.type == aiohttp.WSMsgType.BINARY:
                    heard = turn or self.last_turn
                    if heard is not None and message.data:
                        heard.chunk_times_s.append(now)
                        heard.chunk_bytes.append(len(message.data))
                        self.first_audio.set()
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
                elif kind == "audio.cancelled":
                    self.cancelled_at_s = now
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
        self.first_audio.set()


async def _speak_barged_in(live: LiveSession, reply: ReplyStream, turn: TurnRecord,
                           following: TurnRecord, clip: LiveClip, tokens: list[str],
                           loop: LoopSettings, timeout_s: float) -> bool:
    """Speak the reply, and `loop.barge_in_s` after its first audio, while the server
    still sends it, start the following turn's clip over it and cancel the reply on that
    clip's `speech_started`. True when the following turn was said (the caller must not
    say it again); False when the reply was all sent first, and played out as usual."""
    assert loop.barge_in_s is not None
    origin = reply.origin
    speaking = asyncio.ensure_future(reply.speak(turn, tokens, loop.tokens_per_s, timeout_s))
    heard = asyncio.Event()

    def started(utterance: Utterance) -> None:
        if utterance is following.user:
            heard.set()

    try:
        first = asyncio.ensure_future(reply.first_audio.wait())
        await asyncio.wait({speaking, first}, return_when=asyncio.FIRST_COMPLETED)
        first.cancel()
        if not speaking.done():
            await asyncio.wait({speaking}, timeout=loop.barge_in_s)
        if speaking.done():
            return False
        live.client.on_speech_started = started
        live.say(following.user, clip)
        start = round(following.user.start_ms * LIVE_RATE / 1000)
        onset = await live.pacer.sent(start + first_loud_sample(clip.samples))
        barge = turn.barge_in = BargeIn(onset - origin)
        following.after_barge_in = True
        listening = asyncio.ensure_future(heard.wait())
        await asyncio.wait({speaking, listening}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        listening.cancel()
        if heard.is_set() and not speaking.done():
            barge.cancel_sent_at_s = await reply.cancel() - origin
        await speaking
        if barge.cancel_sent_at_s is not None:
            barge.cancelled_at_s = reply.cancelled_at_s
        return True
    except (OSError, RuntimeError) as exc:
        raise SessionFailed(f"barging in failed: {type(exc).__name__}: {exc}") from exc
    finally:
        live.client.on_speech_started = None
        if not speaking.done():
            speaking.cancel()
            await asyncio.wait({speaking})


def first_loud_sample(samples: np.ndarray, dbfs: float = SPEECH_DBFS) -> int:
    """Index of the first int16 sample at or above `dbfs` (0 when none is)."""
    threshold = math.ceil(32768.0 * 10.0 ** (dbfs / 20.0))
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) >= threshold)
    return int(loud[0]) if loud.size else 0


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
    said = -1
    """The turn whose clip is already said (over the reply before it)."""
    try:
        live = await LiveSession.open(http, options, origin)
        reply = await ReplyStream.open(http, options, loop.voice, origin)
        for t, (turn, clip) in enumerate(zip(record.turns, clips, strict=True)):
            if t != said:
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
                if loop.barge_in_s is not None and t + 1 < len(clips):
                    if await _speak_barged_in(live, reply, turn, record.turns[t + 1], clips[t + 1],
                                              tokens, loop, options.timeout_s):
                        said = t + 1
                else:
                    await reply.speak(turn, tokens, loop.tokens_per_s, options.timeout_s)
                _finish_reply(turn, eos - origin, loop.stall_threshold_s)
                if reply.ended is not None:
                    raise SessionFailed(reply.ended)
                if said != t + 1:
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
        if turn.barge_in is not None and turn.chunk_times_s:
            turn.barge_in.last_audio_at_s = turn.chunk_times_s[-1]
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
        **_barge_in_summary(turns, ok),
    }


def _barge_in_summary(turns: list[TurnRecord], ok: list[TurnRecord]) -> dict[str, Any]:
    """The barge-ins' figures, when the run had any: how fast the reply stopped, and the
    next reply's voice to voice beside a first turn's (a fresh session's)."""
    cut = [t.barge_in for t in turns if t.barge_in is not None]
    if not cut:
        return {}

    def summary(values: list[float | None]) -> dict[str, float]:
        return latency_summary([v for v in values if v is not None])

    return {
        "barge_in": {
            "turns": len(cut),
            "cancelled": sum(1 for b in cut if b.cancelled_at_s is not None),
            "detect_s": summary([b.detect_s for b in cut]),
            "answer_s": summary([b.answer_s for b in cut]),
            "audio_after_cancel_s": summary([b.audio_after_s for b in cut]),
            "stop_s": summary([b.stop_s for b in cut]),
        },
        "voice_to_voice_after_barge_in_s": summary([t.voice_to_voice_s for t in ok if t.after_barge_in]),
        "voice_to_voice_first_turn_s": summary([t.voice_to_voice_s for t in ok if t.turn == 0]),
        # The reply's own part, its first token to its first audio, without the
        # transcription before it: after a barge-in, and on a fresh session's first turn.
        "reply_first_audio_after_barge_in_s": summary([_reply_first_audio(t) for t in ok if t.after_barge_in]),
        "reply_first_audio_first_turn_s": summary([_reply_first_audio(t) for t in ok if t.turn == 0]),
    }


def _reply_first_audio(turn: TurnRecord) -> float | None:
    if turn.first_audio_at_s is None or turn.reply_started_at_s is None:
        return None
    return turn.first_audio_at_s - turn.reply_started_at_s


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
