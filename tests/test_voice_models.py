"""One engine, two voice models, one scheduler: each stream runs on its own model, in its
own figures, and each model's cost is measured apart.

The second model is the same loaded Piper voice served under another name with no
chunking: a real model whose decoder takes whole sentences, as Kokoro's may have to. Its
audio must equal the chunked model's (the chunk joins are seamless), and its streams
must come as one chunk per sentence.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import httpx
import numpy as np
import pytest

from tests.conftest import RunningServer, run_server, tts_config
from voxserve.config import ASRConfig
from voxserve.engine.adapters.piper import PiperVoice
from voxserve.engine.admission import TARGET_UTILIZATION
from voxserve.engine.stream import StreamItem
from voxserve.engine.tts import TTSEngine
from voxserve.engine.tts_models import claiming, load_models
from voxserve.engine.voices import VoiceModel
from voxserve.errors import NotFound
from voxserve.serving.catalog import speech_model, speech_model_ids

# The models' costs, measured in wall time at the warm-up, are compared: run alone.
pytestmark = pytest.mark.serial

WHOLE = "piper-whole"
WHOLE_RAMP = 3.0
"""Admission counts a whole-segment stream at 3 times its measured cost."""
TEXT = "The first sentence is short. The second one runs on a little longer than that."


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    ref = reference.astype(np.float64)
    noise = ref - test.astype(np.float64)
    return float(10 * np.log10(np.sum(ref**2) / max(np.sum(noise**2), 1e-30)))


@pytest.fixture(scope="module")
def two_models() -> Iterator[RunningServer]:
    tts = tts_config(noise_scale=0.0, noise_w=0.0, workers=2, models=("piper",))
    config = replace(tts, asr=ASRConfig(enabled=False))
    (piper,) = load_models(config.tts)
    assert isinstance(piper, PiperVoice)
    whole = PiperVoice(piper.model, None, piper.output_gain, 0.0, 0.0, name=WHOLE, model_ids=())
    # The two share one network: the whole-segment model costs less only by the chunks'
    # context frames (about a third), plus noise. A ramp of 3 on it puts its count well
    # above the chunked one's, so admission's counts of the two tell apart by construction.
    whole._profile = replace(whole.profile, ramp=WHOLE_RAMP)
    engine = TTSEngine(config.tts, models=[piper, whole])
    with run_server(config, engine=engine) as srv:
        yield srv


def pcm(client: httpx.Client, model: str) -> np.ndarray:
    body = {"model": model, "voice": "alloy", "input": TEXT, "response_format": "pcm", "sample_rate": 22050}
    r = client.post("/v1/audio/speech", json=body)
    assert r.status_code == 200, r.text
    return np.frombuffer(r.content, dtype=np.int16)


def test_streams_of_both_models_side_by_side_give_the_same_audio(two_models: RunningServer) -> None:
    with httpx.Client(base_url=two_models.base_url, timeout=60) as c, ThreadPoolExecutor(4) as pool:
        chunked, whole, chunked2, whole2 = pool.map(lambda m: pcm(c, m), ["tts-1", WHOLE] * 2)
    assert len(chunked) == len(whole) > 22050
    assert snr_db(whole, chunked) >= 60
    # Not bit for bit: a stream that starts while the others have not yet arrived is cut
    # into a lone stream's chunks (12, 24, ... frames) on two threads, a crowded one into
    # 16, 32, ...; both reproduce the whole decode.
    assert len(chunked2) == len(chunked) and len(whole2) == len(whole)
    assert snr_db(chunked, chunked2) >= 60 and snr_db(whole, whole2) >= 60


def test_whole_segment_model_sends_one_chunk_per_sentence(two_models: RunningServer) -> None:
    engine = two_models.state.engine
    chunks = {}
    for name in (WHOLE, "en_US-joe-medium"):
        model = engine.models[name]
        prepared = engine.prepare(TEXT, model.voices[0])
        assert prepared.model == name and len(prepared.segments) == 2
        handle = engine.submit(prepared, model.profile.sample_rate)
        items: list[StreamItem] = []
        try:
            while not items or not items[-1].last:
                items.append(handle.stream.get_blocking(30))
                engine.taken(handle.id)
        finally:
            engine.abort(handle.id)
        chunks[name] = len(items)
    assert chunks[WHOLE] == 2 and chunks["en_US-joe-medium"] > 2


def test_each_model_has_its_measured_cost(two_models: RunningServer) -> None:
    engine = two_models.state.engine
    costs = engine.costs()
    assert set(costs) == {"en_US-joe-medium", WHOLE}
    assert all(c is not None and 0 < c < 5 for c in costs.values())  # warm-up measured both
    capacity = engine.capacity_streams()
    assert capacity is not None and capacity > 0
    metrics = httpx.get(f"{two_models.base_url}/metrics").text
    found = dict(re.findall(r'voxserve_tts_model_cost\{model="([^"]+)"\} ([0-9.e+-]+)', metrics))
    assert set(found) == {"en_US-joe-medium", WHOLE}
    assert all(float(v) > 0 for v in found.values())


def test_admitted_streams_not_yet_submitted_count_at_their_own_models_cost(
    two_models: RunningServer,
) -> None:
    """A stream admission let in counts at its model's cost until `submit` sees it, and
    then as a live stream of that model; one whose model no `keeping_up` named, at the
    costliest model's cost."""
    engine = two_models.state.engine
    costs = {name: c for name, c in engine._admission_costs({}).items() if c is not None}
    cheap = min(costs, key=lambda name: costs[name])
    cost, ceiling = costs[cheap], max(costs.values())
    assert cost < 0.95 * ceiling  # the two models' costs tell the counts apart
    budget = engine.config.workers * TARGET_UTILIZATION
    assert engine.active_streams == 0
    assert engine.keeping_up(0, cheap)  # admission grants a slot on a yes
    assert engine.capacity_streams(admitted=1) == pytest.approx(budget / cost)
    # A second admitted stream that no `keeping_up` let in (the gate is not asked while
    # nothing is active): of unknown model.
    assert engine.capacity_streams(admitted=2) == pytest.approx(budget / ((cost + ceiling) / 2))
    model = engine.models[cheap]
    handle = engine.submit(engine.prepare(TEXT, model.voices[0]), model.profile.sample_rate)
    try:
        assert engine.capacity_streams(admitted=1) == pytest.approx(budget / cost)  # live now
        assert engine.capacity_streams(admitted=2) == pytest.approx(budget / ((cost + ceiling) / 2))
    finally:
        engine.abort(handle.id)


def test_model_ids_resolve_in_one_place(two_models: RunningServer) -> None:
    engine = two_models.state.engine

    def name(model_id: str) -> str:
        model: VoiceModel[Any] = speech_model(engine, model_id)
        return model.name

    assert name("tts-1") == name("en_US-joe-medium") == "en_US-joe-medium"
    assert name("tts-1-hd") == name("gpt-4o-mini-tts") == "en_US-joe-medium"  # unclaimed: the default
    assert name(WHOLE) == WHOLE
    with pytest.raises(NotFound) as refused:
        speech_model(engine, "kokoro")
    assert refused.value.code == "model_not_found" and WHOLE in refused.value.message
    assert speech_model_ids(engine) == ["tts-1", "tts-1-hd", "gpt-4o-mini-tts", "en_US-joe-medium", WHOLE]
    with httpx.Client(base_url=two_models.base_url, timeout=30) as c:
        ids = [m["id"] for m in c.get("/v1/models").json()["data"]]
        assert WHOLE in ids and ids.count("tts-1") == 1
        r = c.post("/v1/audio/speech", json={"model": "nope", "voice": "alloy", "input": "Hi."})
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_unknown_model_kind_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="--tts-models takes piper"):
        load_models(tts_config(models=("piper", "nope")).tts)


def test_the_registry_says_which_family_claims_a_model_id_without_loading_it() -> None:
    """An offline command loads only the family a request's model id needs."""
    assert claiming("tts-1", ("kokoro", "piper")) == ("piper",)
    assert claiming("tts-1-hd", ("piper", "kokoro")) == ("kokoro",)
    assert claiming("gpt-4o-mini-tts", ("piper", "kokoro")) == ()
    assert claiming("tts-1", ("nope",)) == ()
