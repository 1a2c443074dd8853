"""Batch speech through the real server: items with their own overrides, in order, as JSON
or a zip, each the audio the same single request makes; bad batches refused whole."""

from __future__ import annotations

import base64
import io
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import httpx
import numpy as np
import pytest

from tests.conftest import MakeServer, RunningServer, tts_config, wait_for

URL = "/v1/audio/speech/batch"


def _single(client: httpx.Client, **body: Any) -> bytes:
    r = client.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", **body})
    assert r.status_code == 200, r.text
    return r.content


def test_items_keep_their_order_and_overrides(client: httpx.Client) -> None:
    items = [
        {"input": "First of three."},
        {"input": "Second, slower.", "speed": 0.8, "response_format": "wav"},
        {"input": "Third [pause:0.5s] with a pause.", "sample_rate": 16000},
        {"input": '<speak>Fourth, <say-as interpret-as="ordinal">4</say-as>.</speak>', "response_format": "mp3"},
    ]
    r = client.post(URL, json={"voice": "alloy", "response_format": "pcm", "sample_rate": 22050, "items": items})
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert [d["index"] for d in data] == [0, 1, 2, 3]
    assert [d["audio_format"] for d in data] == ["pcm", "wav", "pcm", "mp3"]
    assert [d["sample_rate"] for d in data] == [22050, 22050, 16000, 22050]
    audio = [base64.b64decode(d["audio"]) for d in data]
    # The same audio as the single request, but for rounding: items run beside each other,
    # and a stream alone on the machine spreads its work over more threads.
    alone = np.frombuffer(_single(client, input="First of three.", response_format="pcm", sample_rate=22050), "<i2")
    first = np.frombuffer(audio[0], dtype="<i2")
    assert len(first) == len(alone) and np.abs(first.astype(int) - alone).max() < 200
    assert audio[1][:4] == b"RIFF" and (audio[3][:3] == b"ID3" or audio[3][:2] in (b"\xff\xfb", b"\xff\xf3"))
    third = np.frombuffer(audio[2], dtype="<i2")
    assert len(third) / 16000 > 1.5


def test_a_zip_holds_the_items_in_order(client: httpx.Client) -> None:
    items = [{"input": f"Prompt number {n}.", "response_format": fmt} for n, fmt in ((1, "wav"), (2, "flac"), (3, "opus"))]
    r = client.post(URL, json={"voice": "alloy", "items": items, "output": "zip"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(r.content)) as archive:
        assert archive.namelist() == ["000.wav", "001.flac", "002.opus"]
        assert archive.read("000.wav")[:4] == b"RIFF" and archive.read("001.flac")[:4] == b"fLaC"


BAD = {
    "33 items": ({"voice": "alloy", "items": [{"input": "Hi."}] * 33}, 400, "items"),
    "no items": ({"voice": "alloy", "items": []}, 400, "items"),
    "items not a list": ({"voice": "alloy", "items": "Hi."}, 400, "items"),
    "an item not an object": ({"voice": "alloy", "items": ["Hi."]}, 400, "items"),
    "an unknown item field": ({"voice": "alloy", "items": [{"input": "Hi.", "stream_format": "sse"}]}, 400, "items[0]"),
    "an unknown field": ({"voice": "alloy", "items": [{"input": "Hi."}], "callback": "http://x"}, 400, "callback"),
    "no voice": ({"items": [{"input": "Hi."}]}, 400, "items[0].voice"),
    "an unknown voice": ({"items": [{"input": "Hi.", "voice": "alloy"}, {"input": "Hi.", "voice": "nobody"}]}, 404,
                         "items[1].voice"),
    "an unknown voice in a tag": ({"voice": "alloy", "items": [{"input": "Hi. [voice:nobody] Hello."}]}, 404,
                                  "items[0].input"),
    "bad markup": ({"voice": "alloy", "items": [{"input": "Hi."}, {"input": "<speak><audio/></speak>"}]}, 400,
                   "items[1].input"),
    "a long item": ({"voice": "alloy", "items": [{"input": "a " * 2100}]}, 400, "items[0].input"),
    "too much in all": ({"voice": "alloy", "items": [{"input": "word " * 800}] * 32}, 400, "items"),
    "a bad speed": ({"voice": "alloy", "items": [{"input": "Hi.", "speed": 9}]}, 400, "items[0].speed"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_a_bad_batch_is_refused_whole(server: RunningServer, client: httpx.Client, name: str) -> None:
    body, status, param = BAD[name]
    streams = server.state.metrics.streams_started._value.get()
    r = client.post(URL, json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param
    assert server.state.metrics.streams_started._value.get() == streams  # nothing was spoken


def test_a_batch_leaves_half_the_streams_to_live_requests(make_server: MakeServer) -> None:
    config = tts_config(max_streams=2, max_queue=64)
    config = replace(config, asr=replace(config.asr, enabled=False))
    with make_server(config) as srv, httpx.Client(base_url=srv.base_url, timeout=120) as client:
        items = [{"input": f"A batch prompt, number {n}, to keep a stream busy for a while."} for n in range(8)]
        with ThreadPoolExecutor(1) as pool:
            batch = pool.submit(client.post, URL, json={"voice": "alloy", "response_format": "pcm", "items": items})
            wait_for(lambda: srv.state.engine.active_streams >= 1, 30)
            started = time.perf_counter()
            live = _single(client, input="A live request.", response_format="pcm")
            live_s = time.perf_counter() - started
            assert len(live) > 0 and not batch.done()  # served while the batch still runs
            r = batch.result()
            batch_s = time.perf_counter() - started
        assert r.status_code == 200 and len(r.json()["data"]) == 8
        assert live_s < batch_s / 2
