"""Word timings: from per-phoneme durations to seconds of a stream's audio.

The pure mapping is checked on hand-made durations; the engine with the real Kokoro model
over several segments (offsets added, output resampled); then a real server with both
models: `timestamps: true` as JSON, as SSE `speech.words` events and on the speech
WebSocket, and a request without it unchanged.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from websockets.sync.client import connect

from tests.conftest import RunningServer
from voxserve.bench.kokoro_prosody import PROSODY_TEXTS, mid_phrase_pauses
from voxserve.engine.adapters.kokoro import TAIL_FRAMES, KokoroVoice
from voxserve.engine.tts import PreparedText, TTSEngine
from voxserve.engine.voices import Span
from voxserve.engine.words import WordFrames, WordTime, word_frames, word_times
from voxserve.runners.kokoro.onnx_runner import HOP, SAMPLE_RATE, KokoroInput

pytestmark = pytest.mark.timeout(120)

TEXT = "Hello there, my friend. This second sentence checks the offsets."
"""Two sentences, so two segments for either model (the second's times carry the first's
length), the first of two clauses; no longer, since every Kokoro request of it is seconds
of CPU."""


def test_word_frames_follow_the_durations_after_the_lead() -> None:
    durations = np.array([2, 3, 1, 4, 5], dtype=np.int64)
    words = [("a", 0, 2), ("gone", 2, 2), ("b", 3, 5)]
    assert word_frames(words, durations, lead=7) == (
        WordFrames("a", 7, 12),
        WordFrames("b", 13, 22),
    )


def test_word_times_add_the_segment_offset() -> None:
    times = word_times([WordFrames("a", 10, 20)], offset_s=1.5, frame_s=0.025)
    assert times == (WordTime("a", 1.75, 2.0),)


def check_timings(words: list[WordTime], seconds: float, expected: list[str]) -> None:
    """Monotonic, inside the audio, covering it to within 0.5 s of its end."""
    assert [w.word for w in words] == expected
    for w in words:
        assert 0 <= w.start < w.end <= seconds + 1e-3
    for a, b in itertools.pairwise(words):
        assert a.end <= b.start + 1e-3
    assert words[0].start < 0.5
    assert seconds - words[-1].end < 0.5


def test_piper_phonemizer_maps_written_words_to_their_ids() -> None:
    from voxserve.runners.piper.onnx_runner import bundled_voice
    from voxserve.text.phonemize import Phonemizer

    phonemizer = Phonemizer(json.loads(bundled_voice().config.read_text()))
    text = "In 1990, the well-known Dr. Smith paid 40 % & left."
    sentences = phonemizer.sentences(text)
    assert [s.ids.tolist() for s in sentences] == [ids.tolist() for ids in phonemizer.ids(text)]
    words = [w for s in sentences for w in s.words]
    assert [w[0] for w in words] == ["In", "1990", "the", "well-known", "Dr", "Smith", "paid", "40", "%", "&", "left"]
    for s in sentences:
        bounds = [b for _, first, last in s.words for b in (first, last)]
        assert bounds == sorted(bounds) and 0 < bounds[0] and bounds[-1] < len(s.ids)


def test_piper_words_that_espeak_joins_keep_their_own_ids() -> None:
    """espeak reads "from the" as one word ("fɹʌmðə"), and "as it is" as one: every
    written word still gets its own ids, in order, inside the joined reading."""
    from voxserve.runners.piper.onnx_runner import bundled_voice
    from voxserve.text.phonemize import Phonemizer

    phonemizer = Phonemizer(json.loads(bundled_voice().config.read_text()))
    text = "Hello from the playground. This sentence streams into the browser as it is made."
    sentences = phonemizer.sentences(text)
    words = [w for s in sentences for w in s.words]
    assert [w[0] for w in words] == text.replace(".", "").split()
    for s in sentences:
        bounds = [b for _, first, last in s.words for b in (first, last)]
        assert bounds == sorted(bounds) and bounds[-1] < len(s.ids)
        assert all(last - first >= 2 for _, first, last in s.words)  # at least one phoneme
    # Each joined word gets a share that fits its reading alone, not an even split.
    spans = {w: last - first for w, first, last in words}
    assert spans["the"] < spans["from"] < spans["playground"]


@pytest.fixture()
def both(kokoro_server: RunningServer) -> RunningServer:
    """Piper (without noise) and Kokoro (tests/conftest.py)."""
    return kokoro_server


@pytest.fixture()
def kokoro_engine(both: RunningServer) -> TTSEngine:
    """The server's engine (Piper and Kokoro, warm), given streams directly."""
    return both.state.engine


def _stream(engine: TTSEngine, text: str, rate: int, speed: float = 1.0) -> tuple[list[WordTime], float]:
    voice = engine.models["kokoro-82m-v1.0"].resolve_voice("af_heart")
    prepared = engine.prepare(text, voice, speed)
    assert len(prepared.segments) >= 2, "the test wants several segments"
    return _collect(engine, prepared, rate)


def _collect(engine: TTSEngine, prepared: PreparedText, rate: int) -> tuple[list[WordTime], float]:
    """A submitted stream's word timings and seconds of audio, every chunk taken."""
    handle = engine.submit(prepared, rate)
    words: list[WordTime] = []
    samples = 0
    try:
        while True:
            item = handle.stream.get_blocking(60)
            engine.taken(handle.id)
            words.extend(item.words)
            samples += len(item.pcm)
            if item.last:
                return words, samples / rate
    finally:
        engine.abort(handle.id)


_STREAMS: dict[tuple[int, float], tuple[list[WordTime], float]] = {}
"""TEXT streamed by the engine, per (rate, speed): each is one Kokoro synthesis, which
the tests below share instead of repeating."""


def _shared_stream(engine: TTSEngine, rate: int, speed: float) -> tuple[list[WordTime], float]:
    if (rate, speed) not in _STREAMS:
        _STREAMS[rate, speed] = _stream(engine, TEXT, rate, speed)
    return _STREAMS[rate, speed]


SPEEDS = {24000: 0.8, 16000: 1.25}
"""Each output rate is streamed at one of the two speeds the speed test compares."""


@pytest.mark.parametrize("rate", [24000, 16000])
def test_kokoro_words_cover_a_stream_of_several_segments(kokoro_engine: TTSEngine, rate: int) -> None:
    words, seconds = _shared_stream(kokoro_engine, rate, SPEEDS[rate])
    check_timings(words, seconds, re.findall(r"\w+", TEXT))


def test_kokoro_speed_is_in_the_timings(kokoro_engine: TTSEngine) -> None:
    """Word times are seconds whatever the output rate, so a slow stream at one rate and
    a fast one at the other compare."""
    slow, slow_s = _shared_stream(kokoro_engine, 24000, 0.8)
    fast, fast_s = _shared_stream(kokoro_engine, 16000, 1.25)
    assert slow[-1].end > fast[-1].end * 1.3
    assert seconds_close(slow[-1].end, slow_s) and seconds_close(fast[-1].end, fast_s)


def test_kokoro_decodes_a_segment_to_its_speech_and_sends_the_silent_tail_as_zeros(
    kokoro_engine: TTSEngine,
) -> None:
    model = kokoro_engine.models["kokoro-82m-v1.0"]
    assert isinstance(model, KokoroVoice) and TAIL_FRAMES is not None
    item = model.inputs("Hello there.", model.resolve_voice("af_heart"), 1.0)[0]
    latent = model.acoustic([item])[0]
    decoded = latent.features.decoded.frames
    assert 5 <= latent.frames - decoded <= 20  # most of the "." and the pad
    pcm = model.decode([Span(latent, 0, latent.frames)])[0]
    assert len(pcm) == latent.frames * HOP  # the pause is kept, so word times hold
    assert not np.any(pcm[decoded * HOP :])
    frame_rms = np.sqrt(np.mean(pcm[: decoded * HOP].reshape(decoded, HOP) ** 2, axis=1))
    assert frame_rms.max() > 0.05 and frame_rms[-1] < 1e-3  # speech, then no click where zeros begin


def seconds_close(end: float, seconds: float) -> bool:
    return 0 <= seconds - end < 0.5


# -- through a real server ---------------------------------------------------------------

MODELS = ["tts-1", "tts-1-hd"]
"""Request models whose words are timed: Piper (tts-1) and Kokoro (tts-1-hd)."""

WORDS = re.findall(r"\w+", TEXT)


@pytest.fixture()
def http(both: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=both.base_url, timeout=120) as client:
        yield client


def _body(model: str, **extra: object) -> dict[str, object]:
    return {"model": model, "input": TEXT, "voice": "alloy", "response_format": "pcm", **extra}


def _times(words: list[dict[str, Any]]) -> list[WordTime]:
    return [WordTime(w["word"], w["start_time"], w["end_time"]) for w in words]


@pytest.mark.parametrize("model", MODELS)
def test_json_timestamps_cover_the_audio_which_is_unchanged(http: httpx.Client, model: str) -> None:
    plain = http.post("/v1/audio/speech", json=_body(model))
    assert plain.status_code == 200 and plain.headers["content-type"] == "audio/pcm"
    r = http.post("/v1/audio/speech", json=_body(model, timestamps=True))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert (body["audio_format"], body["sample_rate"]) == ("pcm", 24000)
    audio = base64.b64decode(body["audio"])
    assert audio == plain.content
    check_timings(_times(body["timestamps"]), len(audio) / 2 / 24000, WORDS)


def _sse_events(http: httpx.Client, body: dict[str, object]) -> list[dict[str, Any]]:
    r = http.post("/v1/audio/speech", json={**body, "stream_format": "sse"})
    assert r.status_code == 200, r.text
    return [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]


@pytest.mark.parametrize("model", MODELS)
def test_sse_sends_each_segments_words_before_its_audio(http: httpx.Client, model: str) -> None:
    events = _sse_events(http, _body(model, timestamps=True))
    kinds = [e["type"] for e in events]
    assert kinds[0] == "speech.words" and kinds[-1] == "speech.audio.done"
    assert kinds.count("speech.words") >= 2, "one event per segment, several segments"
    words = [w for e in events if e["type"] == "speech.words" for w in e["words"]]
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    check_timings(_times(words), len(pcm) / 2 / 24000, WORDS)
    plain = _sse_events(http, _body(model))
    assert "speech.words" not in [e["type"] for e in plain]
    assert plain == [e for e in events if e["type"] != "speech.words"]


@pytest.mark.parametrize("model", MODELS)
def test_websocket_sends_speech_words_per_segment(both: RunningServer, model: str) -> None:
    url = both.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    with connect(url) as ws:
        ws.send(json.dumps({"type": "session.config", "model": model, "voice": "alloy", "timestamps": True}))
        ws.send(json.dumps({"type": "input.text", "text": TEXT}))
        ws.send(json.dumps({"type": "session.close"}))
        segments: dict[int, list[WordTime]] = {}
        audio: dict[int, int] = {}
        current = -1
        while True:
            message = ws.recv(timeout=60)
            if isinstance(message, bytes):
                assert current in segments, "speech.words comes before the segment's audio"
                audio[current] = audio.get(current, 0) + len(message)
                continue
            event = json.loads(message)
            if event["type"] == "audio.start":
                current = event["segment"]
            elif event["type"] == "speech.words":
                # One event per part of the segment the engine speaks: a Kokoro segment
                # of several clauses comes in several, each before its own audio.
                assert event["segment"] == current
                segments.setdefault(current, []).extend(_times(event["words"]))
            elif event["type"] == "session.done":
                break
    assert len(segments) >= 2
    for index, words in segments.items():
        check_timings(words, audio[index] / 2 / 24000, [w.word for w in words])
    assert [w.word for i in sorted(segments) for w in segments[i]] == WORDS


def test_timestamps_must_be_a_boolean(http: httpx.Client) -> None:
    r = http.post("/v1/audio/speech", json=_body("tts-1", timestamps="yes"))
    assert r.status_code == 400 and r.json()["error"]["param"] == "timestamps"


# -- Kokoro's prosody: whole sentences, as the model speaks them alone -------------------

def _alone_seconds(model: KokoroVoice, text: str, voice: str) -> float:
    """The model's own length for `text`, run in process on each of its items whole: its
    audio is exactly HOP samples per frame of stage A's durations."""
    acoustic, _ = model.model.runners(1)
    items = [KokoroInput(i.ids, i.style, i.speed) for i in model.inputs(text, model.resolve_voice(voice), 1.0)]
    return sum(f.frames for f in acoustic.run(items)) * HOP / SAMPLE_RATE


@pytest.mark.slow
@pytest.mark.parametrize("voice", ["af_heart", "af_nova"])
def test_kokoro_speaks_whole_sentences_at_the_models_own_pace(kokoro_engine: TTSEngine, voice: str) -> None:
    model = kokoro_engine.models["kokoro-82m-v1.0"]
    assert isinstance(model, KokoroVoice)
    for text in PROSODY_TEXTS[:3]:
        prepared = kokoro_engine.prepare(text, model.resolve_voice(voice), 1.0)
        words, seconds = _collect(kokoro_engine, prepared, SAMPLE_RATE)
        alone = _alone_seconds(model, text, voice)
        assert abs(seconds / alone - 1) < 0.10, (text, seconds, alone)
        assert [w.word for w in words] == [re.sub(r"\W", "", w) for w in text.split()]
        heard = [(w.word, w.start, w.end) for w in words]
        assert mid_phrase_pauses(text, heard) == 0, (text, words)
