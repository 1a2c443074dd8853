"""`/v1/audio/transcriptions` and `/translations` through the real server and model, on
speech made by voxserve's own TTS."""

from __future__ import annotations

import asyncio
import io
import json
import re
import socket
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from tests.asr_support import SHORT, speak, wav_bytes, wer
from tests.conftest import RunningServer, run_server, tts_config
from voxserve.config import ASRConfig

pytestmark = pytest.mark.timeout(120)

URL = "/v1/audio/transcriptions"


@pytest.fixture(scope="module", params=["ct2", "torch"])
def runtime_server(request: pytest.FixtureRequest, server: RunningServer) -> Iterator[RunningServer]:
    """For the tests of what the runtime decides (text, timestamps, words, streaming,
    batching): the session's server (CTranslate2), then one whose transcriptions run on
    the torch runner (`--asr-runtime torch`). Containers, validation and limits come before
    the runtime, and are tested on the session's server alone."""
    if request.param == "ct2":
        yield server
        return
    config = replace(tts_config(noise_w=0.0, noise_scale=0.0), asr=ASRConfig(models=("whisper-tiny.en",), runtime="torch"))
    with run_server(config) as running:
        assert running.asr.runtime == "torch"
        yield running


@pytest.fixture()
def runtime_client(runtime_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=runtime_server.base_url, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def clip(base_url: str) -> dict[str, Any]:
    """Two sentences in one utterance, in several containers, made by the TTS endpoint."""
    text = " ".join(SHORT[:2])
    with httpx.Client(base_url=base_url, timeout=60) as c:
        files = {fmt: speak(c, text, fmt) for fmt in ("wav", "mp3", "opus", "flac", "aac")}
    return {"text": text, "files": files}


def _post(client: httpx.Client, data: bytes, name: str = "a.wav", **fields: Any) -> httpx.Response:
    fields.setdefault("model", "whisper-1")
    return client.post(URL, files={"file": (name, data)}, data=fields)


def _error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body: dict[str, Any] = r.json()["error"]
    assert body["type"] == "invalid_request_error"
    return body


@pytest.mark.parametrize("fmt", ["wav", "mp3", "opus", "flac", "aac"])
def test_every_container_transcribes(client: httpx.Client, clip: dict[str, Any], fmt: str) -> None:
    r = _post(client, clip["files"][fmt], name=f"speech.{fmt}")
    assert r.status_code == 200, r.text
    body = r.json()
    assert wer(clip["text"], body["text"]) < 0.2, body["text"]
    assert body["usage"]["type"] == "duration"
    assert 4 < body["usage"]["seconds"] < 15


@pytest.fixture(scope="module")
def short_mp3(base_url: str) -> list[bytes]:
    """`SHORT` as MP3, spoken by the session's server: both runtimes hear the same files."""
    with httpx.Client(base_url=base_url, timeout=60) as c:
        return [speak(c, text, "mp3") for text in SHORT]


def test_short_sentences_wer(runtime_client: httpx.Client, short_mp3: list[bytes]) -> None:
    words = errors = 0.0
    for text, mp3 in zip(SHORT, short_mp3, strict=True):
        r = _post(runtime_client, mp3, name="s.mp3", model="whisper-tiny.en")
        assert r.status_code == 200, r.text
        n = len(text.split())
        errors += wer(text, r.json()["text"]) * n
        words += n
    assert errors / words < 0.2


def test_text_srt_and_vtt(runtime_client: httpx.Client, clip: dict[str, Any]) -> None:
    wav = clip["files"]["wav"]
    text = _post(runtime_client, wav, response_format="text")
    assert text.status_code == 200 and text.headers["content-type"].startswith("text/plain")
    assert wer(clip["text"], text.text) < 0.2

    srt = _post(runtime_client, wav, response_format="srt")
    assert srt.status_code == 200 and "subrip" in srt.headers["content-type"]
    cues = srt.text.strip().split("\n\n")
    assert cues
    times = []
    for n, cue in enumerate(cues, start=1):
        lines = cue.split("\n")
        assert lines[0] == str(n)
        m = re.fullmatch(r"(\d\d):(\d\d):(\d\d),(\d{3}) --> (\d\d):(\d\d):(\d\d),(\d{3})", lines[1])
        assert m, lines[1]
        h1, m1, s1, ms1, h2, m2, s2, ms2 = map(int, m.groups())
        times.append((h1 * 3600 + m1 * 60 + s1 + ms1 / 1000, h2 * 3600 + m2 * 60 + s2 + ms2 / 1000))
        assert len(lines) == 3 and lines[2].strip()
    assert all(a <= b for a, b in times) and all(times[i][1] <= times[i + 1][0] for i in range(len(times) - 1))
    assert wer(clip["text"], " ".join(c.split("\n")[2] for c in cues)) < 0.2

    vtt = _post(runtime_client, wav, response_format="vtt")
    assert vtt.status_code == 200 and vtt.headers["content-type"].startswith("text/vtt")
    blocks = vtt.text.strip().split("\n\n")
    assert blocks[0] == "WEBVTT"
    for block in blocks[1:]:
        timing, line = block.split("\n")
        assert re.fullmatch(r"(\d\d:)?\d\d:\d\d\.\d{3} --> (\d\d:)?\d\d:\d\d\.\d{3}", timing)
        assert line.strip()


def test_verbose_json_with_words(runtime_client: httpx.Client, clip: dict[str, Any]) -> None:
    r = _post(
        runtime_client,
        clip["files"]["flac"],
        name="a.flac",
        response_format="verbose_json",
        **{"timestamp_granularities[]": ["word", "segment"]},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["language"] == "english"
    assert body["duration"] == pytest.approx(body["usage"]["seconds"])
    segments, words = body["segments"], body["words"]
    assert [s["id"] for s in segments] == list(range(len(segments)))
    for s in segments:
        assert 0 <= s["start"] <= s["end"] <= body["duration"] + 0.01
        assert s["avg_logprob"] <= 0 and 0 <= s["no_speech_prob"] <= 1 and s["compression_ratio"] > 0
    assert wer(clip["text"], " ".join(w["word"] for w in words)) < 0.2
    starts = [w["start"] for w in words]
    assert starts == sorted(starts)
    assert all(w["start"] <= w["end"] for w in words)
    # "Please" opens the second sentence, which begins after the first one's ~3 s.
    please = next(w for w in words if w["word"].lower().startswith("please"))
    assert 2.0 < please["start"] < 5.0


def test_word_only_granularity_leaves_out_segments(runtime_client: httpx.Client, clip: dict[str, Any]) -> None:
    r = _post(
        runtime_client, clip["files"]["wav"], response_format="verbose_json", **{"timestamp_granularities[]": "word"}
    )
    assert r.status_code == 200, r.text
    assert "segments" not in r.json() and r.json()["words"]


def test_sse_stream_raw(runtime_client: httpx.Client, runtime_server: RunningServer, clip: dict[str, Any]) -> None:
    events = []
    with runtime_client.stream(
        "POST", URL, files={"file": ("a.wav", clip["files"]["wav"])}, data={"model": "whisper-1", "stream": "true"}
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    assert [e["type"] for e in events[:-1]] == ["transcript.text.delta"] * (len(events) - 1)
    assert len(events) >= 2 and events[-1]["type"] == "transcript.text.done"
    assert "".join(e["delta"] for e in events[:-1]) == events[-1]["text"]
    assert wer(clip["text"], events[-1]["text"]) < 0.2
    deadline = time.monotonic() + 5
    while runtime_server.asr_admission.active:  # the stream gave its slot back
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_openai_sdk(base_url: str, clip: dict[str, Any]) -> None:
    sdk = openai.OpenAI(base_url=f"{base_url}/v1", api_key="none", max_retries=0, timeout=60)
    try:
        plain = sdk.audio.transcriptions.create(model="whisper-1", file=("a.mp3", clip["files"]["mp3"]))
        assert wer(clip["text"], plain.text) < 0.2

        verbose = sdk.audio.transcriptions.create(
            model="whisper-1",
            file=("a.wav", io.BytesIO(clip["files"]["wav"])),
            response_format="verbose_json",
            timestamp_granularities=["word", "segment"],
        )
        assert verbose.words and verbose.segments and verbose.duration > 4

        stream = sdk.audio.transcriptions.create(
            model="whisper-1", file=("a.wav", clip["files"]["wav"]), stream=True
        )
        kinds, deltas, done = [], [], ""
        for event in stream:
            kinds.append(event.type)
            if event.type == "transcript.text.delta":
                deltas.append(event.delta)
            elif event.type == "transcript.text.done":
                done = event.text
        assert kinds[-1] == "transcript.text.done" and "".join(deltas) == done
        assert wer(clip["text"], done) < 0.2

        # German is not the default model's: the loaded multilingual model serves it.
        german = sdk.audio.transcriptions.create(model="whisper-1", file=("a.wav", clip["files"]["wav"]), language="de")
        assert german.text
        with pytest.raises(openai.BadRequestError, match="unknown language"):
            sdk.audio.transcriptions.create(model="whisper-1", file=("a.wav", clip["files"]["wav"]), language="xx")
    finally:
        sdk.close()


def test_language(runtime_client: httpx.Client, runtime_server: RunningServer, clip: dict[str, Any]) -> None:
    """A language the default (English) model lacks is served by the loaded model that
    speaks it; with only English models loaded (the torch server), it is a 400 that says so."""
    assert _post(runtime_client, clip["files"]["wav"], language="en").status_code == 200
    french = _post(runtime_client, clip["files"]["wav"], language="fr", response_format="verbose_json")
    if "whisper-base" in runtime_server.asr.models:
        assert french.status_code == 200 and french.json()["language"] == "french", french.text
    else:
        body = _error(french, 400)
        assert body["param"] == "language" and "English-only" in body["message"]
    body = _error(_post(runtime_client, clip["files"]["wav"], language="xx"), 400)
    assert body["param"] == "language" and body["code"] == "unsupported_language"


def test_translation_needs_a_multilingual_model(
    runtime_client: httpx.Client, runtime_server: RunningServer, clip: dict[str, Any]
) -> None:
    r = runtime_client.post(
        "/v1/audio/translations", files={"file": ("a.wav", clip["files"]["wav"])}, data={"model": "whisper-1"}
    )
    if "whisper-base" in runtime_server.asr.models:
        assert r.status_code == 200 and wer(clip["text"], r.json()["text"]) < 0.3, r.text
        return
    body = _error(r, 400)
    assert "English-only" in body["message"] and "translate" in body["message"]


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00" * 4096,
        b"not audio at all, just some text\n" * 100,
        b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8,
        b"ID3\x03\x00\x00\x00\x00\x00\x00" + bytes(4000),
    ],
    ids=["empty", "zeros", "text", "png", "bad-mp3"],
)
def test_undecodable_uploads_get_400(client: httpx.Client, data: bytes) -> None:
    body = _error(_post(client, data, name="x.mp3"), 400)
    assert body["message"].startswith("could not decode audio")


def test_truncated_file_keeps_what_decodes(client: httpx.Client, clip: dict[str, Any]) -> None:
    mp3 = clip["files"]["mp3"]
    r = _post(client, mp3[: len(mp3) // 2], name="half.mp3")
    assert r.status_code == 200, r.text
    assert r.json()["text"].lower().startswith("the quick brown fox")


def test_silence_gives_an_empty_transcript(runtime_client: httpx.Client) -> None:
    r = _post(runtime_client, wav_bytes(np.zeros(16000 * 4, np.int16), 16000), response_format="verbose_json")
    assert r.status_code == 200, r.text
    assert r.json()["text"] == "" and r.json()["segments"] == []
    assert r.json()["duration"] == pytest.approx(4.0)


def test_bad_fields(client: httpx.Client, clip: dict[str, Any]) -> None:
    wav = clip["files"]["wav"]
    assert _error(_post(client, wav, model="whisper-9"), 404)["code"] == "model_not_found"
    assert _error(_post(client, wav, response_format="docx"), 400)["param"] == "response_format"
    assert _error(_post(client, wav, temperature="2"), 400)["param"] == "temperature"
    assert _error(_post(client, wav, stream="true", response_format="srt"), 400)["param"] == "response_format"
    r = _post(client, wav, response_format="json", **{"timestamp_granularities[]": "word"})
    assert _error(r, 400)["param"] == "timestamp_granularities"
    assert _error(client.post(URL, data={"model": "whisper-1"}), 400)["message"].startswith("send the audio")
    assert _error(client.post(URL, files={"x": ("a", b"1")}, data={"model": "whisper-1"}), 400)["param"] == "file"


def test_upload_limit_declared(base_url: str) -> None:
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 40000000\r\n\r\n"
        )
        head = s.recv(65536).decode()
    assert head.startswith("HTTP/1.1 413"), head


def test_upload_limit_while_streaming(base_url: str) -> None:
    """A chunked upload with no declared size gets 413 once it passes 25 MiB, unread past it."""
    host, port = base_url.removeprefix("http://").split(":")
    chunk = b"\0" * (1 << 20)
    sent = 0
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: multipart/form-data; boundary=b\r\n\r\n"
        )
        part = b'--b\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\n'
        s.sendall(b"%x\r\n%s\r\n" % (len(part), part))
        s.settimeout(0.05)
        response = b""
        while sent < 40 << 20:
            try:
                s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
            except OSError:
                break
            try:
                response = s.recv(65536)
            except TimeoutError:
                continue
            if response:
                break
        s.settimeout(10)
        if not response:
            response = s.recv(65536)
    assert response.startswith(b"HTTP/1.1 413"), response[:200]
    assert 25 << 20 <= sent < 35 << 20


def test_concurrent_requests_are_batched(runtime_server: RunningServer, short_speech: list[np.ndarray]) -> None:
    base_url = runtime_server.base_url
    clips = [wav_bytes(pcm) for pcm in short_speech]
    with httpx.Client(base_url=base_url, timeout=60) as c:
        before = _batch_histogram(c.get("/metrics").text)

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=base_url, timeout=120) as ac:
            posts = [
                ac.post(URL, files={"file": ("a.wav", clips[i % len(clips)])}, data={"model": "whisper-1"})
                for i in range(16)
            ]
            return list(await asyncio.gather(*posts))

    started = time.perf_counter()
    responses = asyncio.run(run())
    elapsed = time.perf_counter() - started
    for i, r in enumerate(responses):
        assert r.status_code == 200, r.text
        assert wer(SHORT[i % len(SHORT)], r.json()["text"]) < 0.25
    with httpx.Client(base_url=base_url, timeout=60) as c:
        after = _batch_histogram(c.get("/metrics").text)
    batches = after["count"] - before["count"]
    pieces = after["sum"] - before["sum"]
    assert pieces == 16
    assert batches < 16, f"16 pieces ran in {batches} batches"
    assert after["1"] - before["1"] < batches, "no batch held more than one piece"
    print(f"16 concurrent clips: {elapsed:.2f} s, {batches:.0f} batches")


def _batch_histogram(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        m = re.match(r'voxserve_asr_batch_size_(bucket\{le="([^"]+)"\}|count|sum) (\S+)', line)
        if m:
            out[m.group(2) or m.group(1)] = float(m.group(3))
    return out


def test_admission_answers_429_past_the_queue(tight_server: RunningServer, clip: dict[str, Any]) -> None:
    srv = tight_server  # one transcription at a time, no queue

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=60) as ac:
            posts = [ac.post(URL, files={"file": ("a.wav", clip["files"]["wav"])}, data={"model": "whisper-1"})
                     for _ in range(3)]
            return list(await asyncio.gather(*posts))

    codes = sorted(r.status_code for r in asyncio.run(run()))
    assert codes[0] == 200 and 429 in codes
    with httpx.Client(base_url=srv.base_url, timeout=60) as c:
        assert _post(c, clip["files"]["wav"]).status_code == 200  # the slot was given back
