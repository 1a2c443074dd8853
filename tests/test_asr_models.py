"""Several speech recognizers served at once, through a real server, httpx and the OpenAI
SDK: Moonshine base-en as the default with Whisper tiny.en beside it. A request names a
model or lets the server route it: what the default lacks (word times, a prompt, another
language) goes to a loaded model that has it; a model named by its own name that lacks
it is a 400 that names one that can. Moonshine is judged on a real recording of a person
(beckett.wav, shipped with its weights)."""

from __future__ import annotations

import itertools
import json
import wave
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import numpy as np
import pytest
from openai import BadRequestError, OpenAI

from tests.asr_support import RATE, normalize, sdk_live_turn, wav_bytes, wer
from tests.conftest import RunningServer, run_server, tts_config
from voxserve.config import ASRConfig
from voxserve.engine.admission import weighted_room
from voxserve.engine.recognizer import Abilities, TranscribeOptions, choose_model
from voxserve.errors import InvalidRequest
from voxserve.runners.moonshine.onnx_runner import bundled_model_dir

pytestmark = pytest.mark.timeout(120)

URL = "/v1/audio/transcriptions"
BECKETT = "Ever tried ever failed no matter try again fail again fail better"


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    config = replace(tts_config(), asr=ASRConfig(models=("moonshine-base-en", "whisper-tiny.en"), max_requests=4))
    with run_server(config) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def beckett() -> bytes:
    return (bundled_model_dir().parents[1] / "test-data" / "beckett.wav").read_bytes()


def _samples(data: bytes) -> np.ndarray:
    import io

    with wave.open(io.BytesIO(data)) as w:
        assert w.getframerate() == 16000 and w.getsampwidth() == 2
        return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)


def _post(client: httpx.Client, data: bytes, **fields: Any) -> httpx.Response:
    form: dict[str, str | list[str]] = {k: str(v) for k, v in fields.items() if k not in ("granularities", "include")}
    form["timestamp_granularities[]"] = fields.get("granularities", [])
    form["include[]"] = fields.get("include", [])
    return client.post(URL, files={"file": ("a.wav", data)}, data=form)


def test_models_say_what_each_can_do(client: httpx.Client) -> None:
    listed = {m["id"]: m for m in client.get("/v1/models").json()["data"]}
    moonshine = listed["moonshine-base-en"]["transcription"]
    assert moonshine["default"] and not moonshine["word_timestamps"] and moonshine["languages"] == ["en"]
    assert moonshine["logprobs"] and not moonshine["prompt"] and moonshine["memory_mb"] > 0
    assert listed["whisper-tiny.en"]["transcription"]["word_timestamps"]
    assert listed["whisper-1"]["root"] == "moonshine-base-en"


def test_moonshine_hears_a_real_recording(client: httpx.Client, beckett: bytes) -> None:
    for model in ("moonshine-base-en", "whisper-1", "gpt-4o-mini-transcribe-2025-12-15"):
        r = _post(client, beckett, model=model)
        assert r.status_code == 200 and normalize(r.json()["text"]) == normalize(BECKETT), r.text


def test_what_the_default_lacks_goes_to_a_model_that_has_it(client: httpx.Client, beckett: bytes) -> None:
    words = _post(client, beckett, model="whisper-1", response_format="verbose_json", granularities=["word"])
    assert words.status_code == 200, words.text
    assert [w["word"].strip(",.").lower() for w in words.json()["words"]][:2] == ["ever", "tried"]
    prompted = _post(client, beckett, model="whisper-1", prompt="Samuel Beckett, Worstward Ho.")
    assert prompted.status_code == 200 and wer(BECKETT, prompted.json()["text"]) < 0.2
    refused = _post(client, beckett, model="moonshine-base-en", response_format="verbose_json", granularities=["word"])
    error = refused.json()["error"]
    assert refused.status_code == 400 and error["param"] == "timestamp_granularities"
    assert "whisper-tiny.en" in error["message"]
    refused = _post(client, beckett, model="moonshine-base-en", prompt="Beckett")
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "prompt"
    # No loaded model speaks French: said so, never served in English.
    french = _post(client, beckett, model="whisper-1", language="fr")
    assert french.status_code == 400 and "English-only" in french.json()["error"]["message"]


def test_subtitles_stay_sentence_sized_on_a_model_without_word_times(
    client: httpx.Client, beckett: bytes
) -> None:
    """Moonshine's cues are timed from the cuts: at most 10 s each, at pauses, in order."""
    speech = _samples(beckett)
    gap = np.zeros(8000, dtype=np.int16)
    long = wav_bytes(np.concatenate([speech, gap, speech, gap, speech]), 16000)
    r = _post(client, long, model="moonshine-base-en", response_format="verbose_json")
    assert r.status_code == 200, r.text
    segments = r.json()["segments"]
    assert len(segments) >= 3 and all(s["end"] - s["start"] <= 10.0 for s in segments)
    assert all(a["end"] <= b["start"] for a, b in itertools.pairwise(segments))
    assert wer(" ".join([BECKETT] * 3), r.json()["text"]) < 0.1
    srt = _post(client, long, model="moonshine-base-en", response_format="srt")
    assert srt.status_code == 200 and srt.text.count(" --> ") == len(segments)


def test_logprobs_in_json_and_in_the_stream(client: httpx.Client, beckett: bytes) -> None:
    for model in ("moonshine-base-en", "whisper-tiny.en"):
        body = _post(client, beckett, model=model, include=["logprobs"]).json()
        logprobs = body["logprobs"]
        assert "".join(lp["token"] for lp in logprobs).strip() == body["text"], model
        assert all(lp["logprob"] <= 0 and bytes(lp["bytes"]).decode() == lp["token"] for lp in logprobs)
        assert sum(lp["logprob"] for lp in logprobs) / len(logprobs) > -1.0
    with client.stream(
        "POST", URL, files={"file": ("a.wav", beckett)},
        data={"model": "whisper-1", "stream": "true", "include[]": ["logprobs"]},
    ) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    deltas = [e for e in events if e["type"] == "transcript.text.delta"]
    done = events[-1]
    assert done["type"] == "transcript.text.done" and deltas and all(d["logprobs"] for d in deltas)
    assert done["usage"] == {"type": "duration", "seconds": 9.963} and done["languages"] == ["en"]
    assert len(done["logprobs"]) == sum(len(d["logprobs"]) for d in deltas)
    # Without the field, no logprobs anywhere; a plain-text format cannot carry them.
    assert "logprobs" not in _post(client, beckett, model="whisper-1").json()
    text = _post(client, beckett, model="whisper-1", response_format="text", include=["logprobs"])
    assert text.status_code == 400 and text.json()["error"]["param"] == "include"


def test_the_sdk_names_models_and_reads_logprobs(server: RunningServer, beckett: bytes) -> None:
    sdk = OpenAI(api_key="unused", base_url=f"{server.base_url}/v1")
    try:
        result = sdk.audio.transcriptions.create(
            model="gpt-4o-mini-transcribe", file=("a.wav", beckett), include=["logprobs"]
        )
        assert normalize(result.text) == normalize(BECKETT)
        assert result.logprobs and (result.logprobs[0].token or "").strip().lower() == "ever"
        with pytest.raises(BadRequestError):
            sdk.audio.transcriptions.create(model="moonshine-base-en", file=("a.wav", beckett), prompt="x")
    finally:
        sdk.close()


def test_a_live_session_names_its_model(server: RunningServer, beckett: bytes) -> None:
    import soxr

    speech = soxr.resample(_samples(beckett), 16000, RATE)
    for model in ("moonshine-base-en", "whisper-tiny.en"):
        events = sdk_live_turn(server.base_url, speech, timeout_s=60, model=model)
        assert not [e for e in events if e.type == "error"]
        # The recording pauses after its first words, which end the first turn.
        assert normalize(events[-1].transcript) == "ever tried", model


def test_heavier_models_hold_more_of_the_request_limit(server: RunningServer) -> None:
    """The engine's measured costs weigh each held request: the costliest model's
    requests fill the limit sooner than the cheapest's."""
    engine = server.asr
    weights = engine.weights()
    assert min(weights.values()) == pytest.approx(1.0) and all(w >= 1.0 for w in weights.values())
    heavy = max(weights, key=lambda m: weights[m])
    light = min(weights, key=lambda m: weights[m])
    assert engine.admits(0, heavy)
    fits = max(1, int(engine.config.max_requests // weights[heavy]))
    assert weighted_room({heavy: fits - 1}, weights, heavy, engine.config.max_requests)
    if weights[heavy] > 1.5:
        assert not weighted_room({heavy: fits}, weights, heavy, engine.config.max_requests)
        assert weighted_room({light: fits}, weights, light, engine.config.max_requests)


def test_weighted_room_is_the_load_with_the_newcomer() -> None:
    weights = {"light": 1.0, "heavy": 3.0}
    assert weighted_room({"heavy": 1}, weights, "heavy", 6)
    assert not weighted_room({"heavy": 1, "light": 1}, weights, "heavy", 6)
    assert weighted_room({"light": 5}, weights, "light", 6)
    assert weighted_room({}, weights, "unmeasured", 1)


ENGLISH = Abilities(("en",), False, False, False, False, True)
MULTI = Abilities(("en", "fr", "de"), True, True, True, True, True)


def test_choose_model_routes_what_the_default_lacks() -> None:
    models = {"en": ENGLISH, "multi": MULTI}
    assert choose_model(None, models, "en", TranscribeOptions()) == "en"
    assert choose_model(None, models, "en", TranscribeOptions(language="fr")) == "multi"
    assert choose_model(None, models, "en", TranscribeOptions(task="translate")) == "multi"
    assert choose_model(None, models, "en", TranscribeOptions(words=True, timings=True)) == "multi"
    assert choose_model("en", models, "en", TranscribeOptions(logprobs=True)) == "en"
    with pytest.raises(InvalidRequest) as refused:
        choose_model("en", models, "en", TranscribeOptions(language="de"))
    assert refused.value.param == "language" and "multi" in refused.value.message
    with pytest.raises(InvalidRequest, match="unknown language 'xx'"):
        choose_model(None, models, "en", TranscribeOptions(language="xx"))
    with pytest.raises(InvalidRequest, match="English-only"):
        choose_model(None, {"en": ENGLISH}, "en", TranscribeOptions(language="fr"))


def test_a_model_list_that_cannot_be_served_is_refused_at_start() -> None:
    from voxserve.engine.asr import ASREngine

    with pytest.raises(ValueError, match="neither a bundled model"):
        ASREngine(ASRConfig(models=("whisper-huge",), workers=1))
    with pytest.raises(ValueError, match="CPU only"):
        ASREngine(ASRConfig(models=("moonshine-base-en",), device="sim", workers=1))
