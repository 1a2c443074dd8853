"""Speech markup: the SSML subset and inline tags, read by the parser and spoken by both
models through the real server.

Pauses are checked as samples: Piper's server here has no noise, so the same text gives
the same audio, and an input with a pause must be that audio with exactly the asked
silence inserted. Bad markup is sent as the attack it would be: huge, deeply nested,
entity bombs, unknown tags, endless voice switches, pauses too long.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import numpy as np
import pytest
from websockets.sync.client import connect

from tests.conftest import RunningServer
from tests.growth import grows_linearly
from voxserve.errors import InvalidRequest
from voxserve.text.markup import (
    MAX_DEPTH,
    MAX_VOICE_SWITCHES,
    Pause,
    Say,
    TaggedSegmenter,
    parse,
)
from voxserve.text.say_as import say_as

PIPER_RATE = 22050
KOKORO_RATE = 24000


def _pcm(client: httpx.Client, text: str, rate: int = PIPER_RATE, **extra: Any) -> np.ndarray:
    body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm", "sample_rate": rate, **extra}
    r = client.post("/v1/audio/speech", json=body)
    assert r.status_code == 200, r.text
    return np.frombuffer(r.content, dtype="<i2")


def _error(client: httpx.Client, text: str, **extra: Any) -> tuple[int, str]:
    body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm", **extra}
    r = client.post("/v1/audio/speech", json=body)
    return r.status_code, r.json()["error"]["message"] if r.status_code != 200 else ""


# -- the parser ----------------------------------------------------------------------------
def test_ssml_subset_reads_into_spans_and_pauses() -> None:
    script = parse(
        '<speak>Hello <break time="700ms"/> world. <voice name="am_adam"><prosody rate="slow">'
        'Slow &amp; steady</prosody></voice> <say-as interpret-as="date">2024-03-05</say-as>'
        '<sub alias="World Wide Web">WWW</sub><s>One.</s><p>Two.</p><break strength="strong"/></speak>'
    )
    assert script is not None
    assert script.items == (
        Say("Hello"),
        Pause(0.7),
        Say("world."),
        Say("Slow & steady", "am_adam", 0.75),
        Say("March fifth, twenty twenty-four World Wide Web", say_as=True),
        Say("One."),
        Say("Two."),
        Pause(0.75),
    )
    # What the limit counts: the text as written (spaces between elements included), no markup.
    assert len("Hello world.Slow & steady2024-03-05World Wide WebOne.Two.") <= script.spoken_chars <= 64


def test_inline_tags_and_brackets_that_are_not_tags() -> None:
    assert parse("No tags [here] at all [pause:soon].") is None
    script = parse("A [pause:0.5s] b [voice:af_bella] c [pause:x] d [pause:250ms][pause:1]")
    assert script is not None
    assert script.items == (Say("A"), Pause(0.5), Say("b"), Say("c [pause:x] d", "af_bella"), Pause(1.25))


def test_say_as_rules() -> None:
    assert say_as("cardinal", "1,234") == "one thousand two hundred thirty-four"
    assert say_as("ordinal", "21") == "twenty-first"
    assert say_as("date", "12/25/1999") == "December twenty-fifth, nineteen ninety-nine"
    assert say_as("date", "25.12.2005", "dmy") == "December twenty-fifth, two thousand five"
    assert say_as("telephone", "+1 (555) 010-4477") == "plus one, five five five, oh one oh, four four seven seven"
    assert say_as("characters", "AB1") == "A B one"
    assert say_as("date", "13/45/2000") is None
    assert say_as("cardinal", "9" * 40) is None


ATTACKS = {
    "unknown tag": ('<speak><audio src="http://x/a.wav"/>hi</speak>', "<audio> is not supported"),
    "unknown attribute": ('<speak><prosody pitch="high">hi</prosody></speak>', "no attribute 'pitch'"),
    "doctype": ('<!DOCTYPE speak [<!ENTITY a "aaaa">]><speak>&a;</speak>', "DTD"),
    "entity bomb inside": ('<speak><!ENTITY lol "lol">&lol;&lol;</speak>', "DTD"),
    "external entity": ("<speak>&xxe;</speak>", "entity &xxe; is not accepted"),
    "xml declaration": ('<?xml version="1.0"?><speak>hi</speak>', "processing instruction"),
    "comment": ("<speak><!-- x -->hi</speak>", "comment"),
    "unclosed": ("<speak><p>hi", "<p> is not closed"),
    "crossed": ("<speak><p><s>hi</p></s></speak>", "</p> closes <s>"),
    "deep": ("<speak>" + "<p>" * 5000 + "hi" + "</p>" * 5000 + "</speak>", f"nested more than {MAX_DEPTH} deep"),
    "nested 20 deep": ("<speak>" + "<s>" * 20 + "hi" + "</s>" * 20 + "</speak>", f"nested more than {MAX_DEPTH} deep"),
    "pause too long": ('<speak>a<break time="10.5s"/>b</speak>', "longer than 10 s"),
    "pauses sum": ("<speak>" + 'a<break time="9s"/>' * 8 + "</speak>", "add up to more than 60 s"),
    "inline pause too long": ("hi [pause:30s] there", "longer than 10 s"),
    "voice switches": ("".join(f"[voice:v{i % 2}] hi " for i in range(200)), f"more than {MAX_VOICE_SWITCHES} changes"),
    "text outside": ("<speak>hi</speak> and more", "outside <speak>"),
    "bad rate": ('<speak><prosody rate="ludicrous">hi</prosody></speak>', "prosody rate"),
    "rate past 4x": ("<speak>" + '<prosody rate="x-fast">' * 4 + "hi" + "</prosody>" * 4 + "</speak>", "within 0.25 to 4"),
    "say-as unknown": ('<speak><say-as interpret-as="currency">$5</say-as></speak>', "is not supported"),
    "tag in say-as": ('<speak><say-as interpret-as="cardinal"><break/>5</say-as></speak>', "holds text only"),
    "long tag": ('<speak><voice name="' + "a" * 5000 + '">hi</voice></speak>', "longer than 512"),
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attacks_are_refused_by_name(name: str) -> None:
    text, words = ATTACKS[name]
    with pytest.raises(InvalidRequest) as refused:
        parse(text)
    assert words in str(refused.value)
    assert refused.value.param == "input"


WORST = {
    "nested and closed": lambda n: "<speak>" + "<s>a</s>" * (n // 8) + "</speak>",
    "breaks": lambda n: "<speak>" + '<break time="0ms"/>' * (n // 19) + "a</speak>",
    "entities": lambda n: "<speak>" + "&amp;" * (n // 5) + "</speak>",
    "open brackets": lambda n: "[" * n,
    "tag prefixes": lambda n: "[voice:" * (n // 7),
    "inline tags": lambda n: "a [pause:0ms]" * (n // 13),
    "angle brackets": lambda n: "<speak>" + "<" * n,
}


@pytest.mark.parametrize("name", list(WORST))
def test_the_parser_is_linear(name: str) -> None:
    def run(n: int) -> None:
        try:
            parse(WORST[name](n))
        except InvalidRequest:
            pass

    linear, times = grows_linearly(run, 64_000)
    assert linear, times


def test_session_segmenter_keeps_tags_whole_and_voices_in_force() -> None:
    seg = TaggedSegmenter("clause")
    out: list[str] = []
    for fragment in ["Hello there, my ", "friend. [voi", "ce:af_bella] How are", " you today? [pau", "se:1s]", " Fine. "]:
        out += seg.feed(fragment)
    out += seg.flush()
    assert out == [
        "Hello there,",
        "my friend.",
        "[voice:af_bella] How are you today?",
        "[voice:af_bella] [pause:1s] Fine.",
    ]


# -- through the server (Piper) --------------------------------------------------------------
def test_a_pause_is_exact_silence_in_the_stream(client: httpx.Client) -> None:
    plain = _pcm(client, "Hello there.")
    paused = _pcm(client, "Hello there. [pause:1s]")
    lead = _pcm(client, "[pause:0.5s] Hello there.")
    assert len(paused) - len(plain) == PIPER_RATE
    assert np.array_equal(paused[: len(plain)], plain) and not paused[len(plain) :].any()
    assert len(lead) - len(plain) == PIPER_RATE // 2 and not lead[: PIPER_RATE // 2].any()
    both = _pcm(client, '<speak>Hello there.<break time="700ms"/>Hello there.</speak>')
    gap = round(0.7 * PIPER_RATE)
    assert len(both) == 2 * len(plain) + gap
    # Two sentences may be decoded at once on different threads: the same audio but for rounding.
    assert np.abs(both[: len(plain)].astype(int) - plain).max() < 200
    assert not both[len(plain) : len(plain) + gap].any()


def test_word_times_count_the_pause(client: httpx.Client) -> None:
    body = {"model": "tts-1", "voice": "alloy", "input": "Good morning. [pause:2s] Good night.",
            "response_format": "wav", "timestamps": True}
    r = client.post("/v1/audio/speech", json=body)
    assert r.status_code == 200, r.text
    words = r.json()["timestamps"]
    morning = next(w for w in words if w["word"].startswith("morning"))
    night = next(w for w in words if w["word"].startswith("night"))
    assert night["start_time"] - morning["end_time"] >= 2.0


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac", "wav", "pcm"])
def test_every_format_and_sse_takes_markup(client: httpx.Client, fmt: str) -> None:
    text = '<speak><s>One.</s><break time="300ms"/><s><say-as interpret-as="ordinal">2</say-as>.</s></speak>'
    r = client.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": text, "response_format": fmt})
    assert r.status_code == 200 and len(r.content) > 1000
    r = client.post("/v1/audio/speech", json={
        "model": "tts-1", "voice": "alloy", "input": "One. [pause:300ms] Two.", "response_format": fmt, "stream_format": "sse",
    })
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done"
    assert sum(len(base64.b64decode(e["audio"])) for e in events if e["type"] == "speech.audio.delta") > 500


@pytest.mark.parametrize(
    "name", ["unknown tag", "doctype", "external entity", "nested 20 deep", "pause too long", "voice switches"]
)
def test_the_server_answers_attacks_with_400(client: httpx.Client, name: str) -> None:
    text, words = ATTACKS[name]
    status, message = _error(client, text)
    assert status == 400 and words in message


def test_limits_count_spoken_text_and_markup_apart(client: httpx.Client, server: RunningServer) -> None:
    limit = server.state.config.tts.max_input_chars
    # Markup past the spoken limit, little spoken: fine, up to twice the limit in all.
    quiet = "<speak>" + '<break time="0ms"/>' * ((limit + 500) // 19) + "Hello there.</speak>"
    assert limit < len(quiet) <= 2 * limit
    assert len(_pcm(client, quiet)) > 0
    status, message = _error(client, "<speak>" + '<break time="0ms"/>' * (2 * limit // 19) + "Hi.</speak>")
    assert status == 400 and "with markup" in message
    status, message = _error(client, "<speak>" + "Hello. " * (limit // 7 + 1) + "</speak>")
    assert status == 400 and f"at most {limit}" in message


def test_an_unknown_voice_in_a_tag_is_404(client: httpx.Client) -> None:
    status, message = _error(client, "Hi. [voice:nobody_here] Hello.")
    assert status == 404 and "nobody_here" in message


def test_the_speech_websocket_reads_inline_tags(server: RunningServer) -> None:
    url = server.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    audio = bytearray()
    with connect(url) as ws:
        ws.send(json.dumps({"type": "session.config", "voice": "alloy", "response_format": "pcm", "sample_rate": PIPER_RATE}))
        for fragment in ["Hello there. [pau", "se:1s] Hello there."]:
            ws.send(json.dumps({"type": "input.text", "text": fragment}))
        ws.send(json.dumps({"type": "input.done"}))
        texts = []
        while True:
            message = ws.recv(timeout=60)
            if isinstance(message, bytes):
                audio.extend(message)
                continue
            event = json.loads(message)
            assert event["type"] != "error", event
            if event["type"] == "audio.start":
                texts.append(event["text"])
            if event["type"] == "input.flushed":
                break
    assert texts == ["Hello there.", "[pause:1s] Hello there."]
    pcm = np.frombuffer(bytes(audio), dtype="<i2")
    half = (len(pcm) - PIPER_RATE) // 2
    assert not pcm[half : half + PIPER_RATE].any()  # the second segment opens with 1 s of silence


# -- two voices, both models (Kokoro) ---------------------------------------------------------
def test_a_dialogue_speaks_each_voice_within_the_model(kokoro_server: RunningServer) -> None:
    with httpx.Client(base_url=kokoro_server.base_url, timeout=120) as client:
        def speak(text: str, **extra: Any) -> np.ndarray:
            return _pcm(client, text, KOKORO_RATE, model="tts-1-hd", voice="af_heart", **extra)

        bella = speak("[voice:af_bella] Hello there.")
        adam = speak("[voice:am_adam] Hello there.")
        both = speak("[voice:af_bella] Hello there. [pause:0.5s] [voice:am_adam] Hello there.")
        assert len(both) == len(bella) + len(adam) + KOKORO_RATE // 2
        assert np.abs(both[: len(bella)].astype(int) - bella).max() < 200
        assert np.abs(both[-len(adam) :].astype(int) - adam).max() < 200
        assert not both[len(bella) : len(bella) + KOKORO_RATE // 2].any()
        r = client.post("/v1/audio/speech", json={
            "model": "tts-1-hd", "voice": "af_heart", "response_format": "wav", "timestamps": True,
            "input": "[voice:af_bella] Hello there. [pause:0.5s] [voice:am_adam] Hello there.",
        })
        words = r.json()["timestamps"]
        second = [w for w in words if w["word"].startswith("Hello")][1]
        assert second["start_time"] >= (len(bella) + KOKORO_RATE // 2) / KOKORO_RATE  # after voice one and the pause
        assert second["start_time"] < (len(bella) + KOKORO_RATE // 2) / KOKORO_RATE + 0.5
        blend = speak('<speak><voice name="af_bella(2)+am_adam(1)">Hello there.</voice></speak>')
        assert len(blend) > KOKORO_RATE // 2

        r = client.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": "Hi. [voice:af_bella] Hello."})
        assert r.status_code == 400 and "belongs to model kokoro" in r.json()["error"]["message"]
        r = client.post("/v1/audio/speech", json={
            "model": "tts-1-hd", "voice": "ef_dora", "input": '<speak><say-as interpret-as="cardinal">12</say-as></speak>',
        })
        assert r.status_code == 400 and "in English" in r.json()["error"]["message"]
