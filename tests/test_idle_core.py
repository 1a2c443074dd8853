"""A lone stream on the idle core, through the real server: its audio is the whole
decode of each sentence (the parallel chunks, each with its context, come out in order),
and the server reports where its first packet's time went."""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest

from tests.conftest import RunningServer
from voxserve.engine.voices import Span

# A lone stream on the idle core needs that core idle: run alone.
pytestmark = pytest.mark.serial

TEXT = (
    "The storm knocked out power across the valley. Crews are working through the night, "
    "and most homes should have electricity again by tomorrow noon."
)


def reference_pcm(server: RunningServer, text: str) -> np.ndarray:
    """Each sentence decoded whole, in one call on one thread, as the engine's output
    stage finishes it (fixed gain, int16)."""
    engine = server.state.engine
    model = engine.default_model
    prepared = engine.prepare(text, model.resolve_voice("alloy"))
    parts = []
    for item in prepared.segments:
        latent = model.acoustic([item])[0]
        parts.append(model.decode([Span(latent, 0, latent.frames)])[0])
    audio = np.clip(np.concatenate(parts) * model.output_gain, -1.0, 1.0)
    return (audio * 32767.0).astype(np.int16)


def test_a_lone_stream_uses_the_idle_core_and_keeps_its_audio(server: RunningServer, client: httpx.Client) -> None:
    engine = server.state.engine
    rate = engine.default_model.profile.sample_rate
    before = engine.idle_core_units()
    body = {"model": "tts-1", "voice": "alloy", "input": TEXT, "response_format": "pcm", "sample_rate": rate}
    r = client.post("/v1/audio/speech", json=body)
    assert r.status_code == 200
    after = engine.idle_core_units()
    assert after["threads"] > before["threads"]  # stage A and the first chunk on two threads
    assert after["chunks"] > before["chunks"]  # and chunks of the stream side by side
    got = np.frombuffer(r.content, dtype=np.int16).astype(np.float64)
    ref = reference_pcm(server, TEXT).astype(np.float64)
    assert got.shape == ref.shape
    snr = 10 * np.log10(np.sum(ref**2) / max(np.sum((ref - got) ** 2), 1e-30))
    assert snr >= 60, f"SNR {snr:.1f} dB against the whole decode"

    timing = dict(part.split(";dur=") for part in r.headers["server-timing"].split(", "))
    parts = ("parse", "text", "admission", "queue", "acoustic", "wait", "decode", "deliver", "encode")
    assert list(timing) == [*parts, "total"]
    total = float(timing["total"])
    assert 0 < sum(float(timing[p]) for p in parts) <= total + 0.05
    metrics = client.get("/metrics").text
    assert 'voxserve_tts_first_packet_seconds_count{part="acoustic"}' in metrics
    assert 'voxserve_tts_idle_core_units_total{way="chunks"}' in metrics
    assert 'voxserve_tts_admission_held_total{reason="lagging"}' in metrics


def test_a_long_text_starts_speaking_before_all_of_it_is_read(server: RunningServer, client: httpx.Client) -> None:
    """The stream starts on the text's first piece; the model's front end reads the rest
    while the first audio goes out. The server's text part of the first packet stays well
    under the time the whole text takes to prepare. (That the rest is spoken, and how a
    rest that says nothing ends, `tests/test_model_split.py` shows.)"""
    engine = server.state.engine
    text = " ".join(f"Reading number {i} says the weather in the valley stays mild." for i in range(60))
    assert len(text) <= server.state.config.tts.max_input_chars
    voice = engine.default_model.resolve_voice("alloy")
    whole_ms, text_ms = [], []
    for _ in range(3):  # the least of three: the machine's noise is one-sided
        started = time.perf_counter()
        whole = engine.prepare(text, voice)
        whole_ms.append((time.perf_counter() - started) * 1000)
        body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm"}
        with client.stream("POST", "/v1/audio/speech", json=body) as r:
            assert r.status_code == 200
            timing = dict(part.split(";dur=") for part in r.headers["server-timing"].split(", "))
            assert next(r.iter_bytes())  # the first audio; leave the other 59 sentences
        text_ms.append(float(timing["text"]))
    assert len(whole.segments) == 60
    assert min(text_ms) < min(whole_ms) / 4, (text_ms, whole_ms)
