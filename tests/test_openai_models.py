"""OpenAI's model names through a real server and the official SDK: `/v1/models` says what
each name means, and every transcription name OpenAI or an agent framework sends reaches
the Whisper model, over HTTP and in a live session."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from openai import NotFoundError, OpenAI

from tests.asr_support import SHORT, sdk_live_turn, wav_bytes, wer
from tests.conftest import RunningServer
from voxserve.serving.catalog import ASR_MODELS, SPEECH_MODELS

pytestmark = pytest.mark.timeout(120)


def test_models_list_what_each_name_means(server: RunningServer) -> None:
    listed = {m["id"]: m for m in httpx.get(f"{server.base_url}/v1/models", timeout=10).json()["data"]}
    asr = server.asr
    for name in ASR_MODELS:
        assert listed[name]["root"] == asr.name
    # Each loaded ASR model is listed by its own name, with what it can do.
    for name, model in asr.models.items():
        about = listed[name]["transcription"]
        assert listed[name]["root"] == name and about["default"] == (model is asr.default)
        assert about["languages"] == list(model.abilities.languages) and about["memory_mb"] >= 0
    assert listed["whisper-base"]["transcription"]["translation"] and len(listed["whisper-base"]["transcription"]["languages"]) > 90
    default = server.state.engine.default_model.name
    assert listed[default]["root"] == default
    assert {listed[name]["root"] for name in SPEECH_MODELS} <= set(server.state.engine.models)
    assert all(m["object"] == "model" and m["owned_by"] == "voxserve" for m in listed.values())
    assert {
        "gpt-4o-transcribe", "gpt-4o-mini-transcribe", "gpt-4o-mini-transcribe-2025-12-15", "gpt-transcribe",
        "gpt-realtime-whisper", "gpt-live-transcribe",
    } <= set(listed)


def test_openai_transcription_names_reach_whisper(
    server: RunningServer, client: httpx.Client, short_speech: list[np.ndarray]
) -> None:
    sdk = OpenAI(api_key="unused", base_url=f"{server.base_url}/v1")
    audio = wav_bytes(short_speech[0])
    names = (
        "gpt-4o-mini-transcribe", "gpt-4o-transcribe", "gpt-4o-mini-transcribe-2025-12-15",
        "gpt-4o-transcribe-2025-03-20", "gpt-live-transcribe", *server.asr.models,
    )
    for name in names:
        text = sdk.audio.transcriptions.create(model=name, file=("a.wav", audio)).text
        assert wer(SHORT[0], text) < 0.2, (name, text)
    # The default model is English-only: a translation goes to the loaded model that can.
    r = client.post("/v1/audio/translations", files={"file": ("a.wav", audio)}, data={"model": "gpt-transcribe"})
    assert r.status_code == 200 and wer(SHORT[0], r.json()["text"]) < 0.2
    # Named by its own name, the English model is refused, pointing at one that can.
    r = client.post("/v1/audio/translations", files={"file": ("a.wav", audio)}, data={"model": "whisper-tiny.en"})
    error = r.json()["error"]
    assert r.status_code == 400 and "English-only" in error["message"] and "whisper-base" in error["message"]
    for unknown in ("gpt-5-transcribe", "gpt-4o-transcribe-diarised", "gpt-4o-transcribe-2025-3-20", "x" * 200):
        with pytest.raises(NotFoundError) as refused:
            sdk.audio.transcriptions.create(model=unknown, file=("a.wav", audio))
        assert refused.value.code == "model_not_found" and "whisper-base" in refused.value.message


def test_a_live_session_takes_the_realtime_names(server: RunningServer, short_speech: list[np.ndarray]) -> None:
    speech = short_speech[1]
    for model in ("gpt-realtime-whisper", "gpt-live-transcribe", "whisper-base"):
        events = sdk_live_turn(server.base_url, speech, timeout_s=60, model=model)
        assert not [e for e in events if e.type == "error"]
        assert wer(SHORT[1], events[-1].transcript) < 0.2
