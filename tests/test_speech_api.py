"""`POST /v1/audio/speech` through real clients against a real server."""

from __future__ import annotations

import base64
import io
import json
import struct

import av
import httpx
import numpy as np
import openai
import pytest

TEXT = "Hello there. This is voxserve, streaming speech as it is made."


def speech(client: httpx.Client, **fields: object) -> httpx.Response:
    body = {"model": "tts-1", "voice": "alloy", "input": TEXT, **fields}
    return client.post("/v1/audio/speech", json=body)


def decoded_seconds(data: bytes) -> float:
    with av.open(io.BytesIO(data), "r") as container:
        samples, rate = 0, 0
        for frame in container.decode(audio=0):
            samples += frame.samples
            rate = frame.sample_rate
    return samples / rate


@pytest.fixture(scope="module")
def pcm_seconds(base_url: str) -> float:
    with httpx.Client(base_url=base_url, timeout=60) as c:
        r = speech(c, response_format="pcm")
    assert r.status_code == 200
    return len(r.content) / 2 / 24000


def test_openai_sdk_streaming_pcm(base_url: str) -> None:
    sizes = []
    with (
        openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused") as client,
        client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=TEXT, response_format="pcm"
        ) as response,
    ):
        assert response.headers["content-type"] == "audio/pcm"
        assert response.headers["x-sample-rate"] == "24000"
        for chunk in response.iter_bytes():
            sizes.append(len(chunk))
    total = sum(sizes)
    assert total % 2 == 0
    assert 2.5 < total / 2 / 24000 < 8
    assert len([s for s in sizes if s]) > 3  # it really streamed in pieces


def test_openai_sdk_plain_call_mp3(base_url: str, pcm_seconds: float) -> None:
    with openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused") as client:
        audio = client.audio.speech.create(model="tts-1", voice="nova", input=TEXT)
    assert audio.content[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2") or audio.content[:3] == b"ID3"
    assert decoded_seconds(audio.content) == pytest.approx(pcm_seconds, abs=0.12)


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac", "wav"])
def test_every_format_decodes_to_the_expected_duration(
    client: httpx.Client, fmt: str, pcm_seconds: float
) -> None:
    r = speech(client, response_format=fmt)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("audio/")
    assert decoded_seconds(r.content) == pytest.approx(pcm_seconds, abs=0.12)


def test_wav_header_declares_unknown_length(client: httpx.Client) -> None:
    r = speech(client, response_format="wav")
    head = r.content[:44]
    assert head[:4] == b"RIFF" and head[8:12] == b"WAVE"
    assert struct.unpack("<I", head[4:8])[0] == 0xFFFFFFFF
    assert struct.unpack("<I", head[40:44])[0] == 0xFFFFFFFF
    assert struct.unpack("<I", head[24:28])[0] == 24000


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 44100, 48000])
def test_sample_rate_field(client: httpx.Client, rate: int, pcm_seconds: float) -> None:
    r = speech(client, response_format="pcm", sample_rate=rate)
    assert r.status_code == 200
    assert r.headers["x-sample-rate"] == str(rate)
    assert len(r.content) / 2 / rate == pytest.approx(pcm_seconds, abs=0.05)


def test_speed_changes_duration_through_length_scale(client: httpx.Client, pcm_seconds: float) -> None:
    fast = speech(client, response_format="pcm", speed=2.0)
    slow = speech(client, response_format="pcm", speed=0.5)
    fast_s, slow_s = len(fast.content) / 48000, len(slow.content) / 48000
    assert fast_s < pcm_seconds * 0.7
    assert slow_s > pcm_seconds * 1.5


def test_voice_as_object_and_own_name(client: httpx.Client) -> None:
    assert speech(client, voice={"id": "joe"}, response_format="pcm").status_code == 200
    r = speech(client, voice="joe", model="en_US-joe-medium", response_format="pcm", instructions="Speak warmly")
    assert r.status_code == 200


def test_sse_stream(client: httpx.Client, pcm_seconds: float) -> None:
    events = []
    with client.stream(
        "POST",
        "/v1/audio/speech",
        json={"model": "tts-1", "voice": "alloy", "input": TEXT, "response_format": "pcm", "stream_format": "sse"},
    ) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) > 3
    audio = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    assert len(audio) / 2 / 24000 == pytest.approx(pcm_seconds, abs=0.05)
    assert events[-1]["type"] == "speech.audio.done"
    usage = events[-1]["usage"]
    assert usage["input_tokens"] == len(TEXT) and usage["total_tokens"] > usage["input_tokens"]


def test_streamed_pcm_is_continuous_speech(client: httpx.Client) -> None:
    r = speech(client, response_format="pcm")
    pcm = np.frombuffer(r.content, dtype=np.int16).astype(np.float64) / 32768
    assert 0.3 < np.abs(pcm).max() <= 1.0
    # No hard clicks at chunk joins: sample-to-sample jumps stay speech-like.
    assert np.abs(np.diff(pcm)).max() < 0.8


BAD_BODIES = [
    ({"model": "tts-1", "voice": "alloy", "input": ""}, 400, "input"),
    ({"model": "tts-1", "voice": "alloy", "input": "   "}, 400, "input"),
    ({"model": "tts-1", "voice": "alloy", "input": "a" * 4097}, 400, "input"),
    ({"model": "tts-1", "voice": "alloy"}, 400, "input"),
    ({"model": "tts-1", "voice": "nobody", "input": "hi"}, 404, "voice"),
    ({"model": "tts-1", "voice": {"id": "nobody"}, "input": "hi"}, 404, "voice"),
    ({"model": "tts-1", "voice": {"name": "joe"}, "input": "hi"}, 400, "voice"),
    ({"model": "tts-9", "voice": "alloy", "input": "hi"}, 404, "model"),
    ({"model": "tts-1", "voice": "alloy", "input": "hi", "response_format": "ogg"}, 400, "response_format"),
    ({"model": "tts-1", "voice": "alloy", "input": "hi", "speed": 5}, 400, "speed"),
    ({"model": "tts-1", "voice": "alloy", "input": "hi", "speed": 0.1}, 400, "speed"),
    ({"model": "tts-1", "voice": "alloy", "input": "hi", "speed": "fast"}, 400, "speed"),
    ({"model": "tts-1", "voice": "alloy", "input": "hi", "stream_format": "ws"}, 400, "stream_format"),
    ({"model": "tts-1", "voice": "alloy", "input": "hi", "sample_rate": 1000}, 400, "sample_rate"),
    ({"model": "tts-1", "voice": "alloy", "input": "\u2063\u2063"}, 400, "input"),
]


@pytest.mark.parametrize(("body", "status", "param"), BAD_BODIES)
def test_bad_requests_get_openai_errors(client: httpx.Client, body: dict[str, object], status: int, param: str) -> None:
    r = client.post("/v1/audio/speech", json=body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param
    assert error["type"] == "invalid_request_error" and error["message"]


@pytest.mark.parametrize(
    "raw",
    [b"", b"{", b"[1,2]", b"\xff\xfe{}", b'{"model": "tts-1", "input": "hi", "voice": "alloy"'],
)
def test_malformed_json(client: httpx.Client, raw: bytes) -> None:
    r = client.post("/v1/audio/speech", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_sdk_raises_typed_errors(base_url: str) -> None:
    with openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0) as client:
        with pytest.raises(openai.NotFoundError):
            client.audio.speech.create(model="tts-1", voice="nobody", input="hi")
        with pytest.raises(openai.BadRequestError):
            client.audio.speech.create(model="tts-1", voice="alloy", input="")


def test_wrong_method_and_path(client: httpx.Client) -> None:
    r = client.get("/v1/audio/speech")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    assert client.get("/nope").json()["error"]["code"] == "not_found"


def test_models_voices_health_metrics(client: httpx.Client) -> None:
    ids = {m["id"] for m in client.get("/v1/models").json()["data"]}
    assert {"tts-1", "tts-1-hd", "gpt-4o-mini-tts", "en_US-joe-medium"} <= ids
    voices = client.get("/v1/audio/voices").json()["voices"]
    assert {"joe", "alloy", "nova"} <= {v["id"] for v in voices}
    assert client.get("/health").json() == {"status": "ok"}
    text = client.get("/metrics").text
    for name in (
        "voxserve_http_requests_total",
        "voxserve_tts_ttfp_seconds_bucket",
        "voxserve_tts_rtf_bucket",
        "voxserve_tts_active_streams",
        "voxserve_tts_queued_streams",
        "voxserve_tts_chunks_decoded_total",
        "voxserve_event_loop_lag_seconds_bucket",
    ):
        assert name in text


def test_language_must_be_one_the_voice_speaks(client: httpx.Client) -> None:
    body = {"model": "tts-1", "input": "Hello there.", "voice": "alloy", "response_format": "pcm"}
    assert client.post("/v1/audio/speech", json={**body, "language": "en"}).status_code == 200
    assert client.post("/v1/audio/speech", json={**body, "language": "en-US"}).status_code == 200
    r = client.post("/v1/audio/speech", json={**body, "language": "fr"})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "language" and r.json()["error"]["code"] == "unsupported_language"


def test_voice_list_names_model_language_and_gender(client: httpx.Client) -> None:
    voices = client.get("/v1/audio/voices").json()["voices"]
    joe = next(v for v in voices if v["id"] == "joe")
    assert joe["model"] == "en_US-joe-medium" and joe["language"] == "en-US"
    assert joe["openai_model"] == "tts-1"  # what a client names to reach Piper's voices
    assert next(v for v in voices if v["id"] == "alloy")["alias_of"] == "joe"
