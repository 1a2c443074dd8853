"""The TTS engine on a batched device: streams that share steps sound as each one alone.

The batched step is the GPU's; here it runs on the CPU's ONNX Runtime Piper voice, whose
stage A and vocoder take any batch, so the mechanism is proven where CI runs it."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from tests.voice_support import HookedVoice
from voxserve.config import TTSConfig
from voxserve.engine.scheduler import Budget
from voxserve.engine.tts import TTSEngine
from voxserve.engine.tts_models import load_models
from voxserve.engine.tts_stats import stream_batch
from voxserve.engine.voices import VoiceModel

TEXTS = (
    "Hello there, my friend.",
    "This sentence is a little longer than the first one was.",
    "Short.",
    "Numbers like twelve and forty two are read out in words.",
    "The last stream asks for two sentences. Here is the second.",
)
CONFIG = replace(TTSConfig(), models=("piper",), noise_scale=0.0, noise_w=0.0, workers=2)


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    ref = reference.astype(np.float64)
    noise = ref - other.astype(np.float64)
    return float(10 * np.log10(np.sum(ref**2) / max(np.sum(noise**2), 1e-9)))


@pytest.fixture(scope="module")
def models() -> list[VoiceModel[Any]]:
    return load_models(replace(CONFIG, fixed_prior=False))


@pytest.fixture
def engine(models: list[VoiceModel[Any]]) -> Iterator[TTSEngine]:
    batched = TTSEngine(CONFIG, models=models, budget=Budget.batched(8))
    batched.start()
    yield batched
    batched.stop()


def test_streams_decoded_in_shared_steps_sound_as_each_does_alone(
    engine: TTSEngine, models: list[VoiceModel[Any]]
) -> None:
    voice = engine.default_model.voices[0]
    alone_engine = TTSEngine(CONFIG, models=models)
    alone_engine.start()
    try:
        alone = [alone_engine.synthesize(text, voice) for text in TEXTS]
    finally:
        alone_engine.stop()
    handles = [engine.submit(engine.prepare(text, voice), engine.sample_rate) for text in TEXTS]
    with ThreadPoolExecutor(len(handles)) as pool:
        together = list(pool.map(lambda h: engine.collect(h, 30.0), handles))
    for text, one, shared in zip(TEXTS, alone, together, strict=True):
        assert len(one) == len(shared), text
        # Chunk plans differ (a lone CPU stream starts smaller), and the vocoder's joins
        # are exact to within the context frames' reach: 118 dB on whole sentences.
        assert snr_db(one, shared) > 60, text
    assert engine.stats.chunks > 0


def test_a_batched_step_carries_several_streams_at_once(models: list[VoiceModel[Any]]) -> None:
    """Five streams that start together: their stage A runs as one step, and their first
    chunks as another, so there are far fewer steps than units."""
    steps: list[int] = []
    model = HookedVoice(models[0])
    voice = model.voices[0]
    model.hook = lambda stage, size: steps.append(size)  # told of every call's batch
    watched = TTSEngine(CONFIG, models=[model], budget=Budget.batched(8))
    watched.start()
    try:
        handles = [watched.submit(watched.prepare(text, voice), watched.sample_rate) for text in TEXTS]
        for handle in handles:
            watched.collect(handle, 30.0)
    finally:
        watched.stop()
    assert max(steps) >= 4
    assert len(steps) < sum(steps) / 2


def test_admission_reads_the_cost_at_the_batch_its_streams_make(engine: TTSEngine) -> None:
    """Streams of different texts at once fill steps of several units; admission counts
    a model's cost on its batch curve at the batch its live streams make (spread over
    the model's kinds of unit: `stream_batch`), not at a step of one nor of every
    stream live."""
    name = engine.default_model.name
    profile = engine.default_model.profile
    voice = engine.default_model.voices[0]
    handles = [engine.submit(engine.prepare(text, voice), engine.sample_rate) for text in TEXTS]
    with ThreadPoolExecutor(len(handles)) as pool:
        list(pool.map(lambda h: engine.collect(h, 30.0), handles))
    stats = engine.step_stats()
    assert max(stats["step_units"]["vocoder"]) > 1  # steps held several streams' chunks
    assert 1 <= stats["units"][name] <= 8
    kinds = len(profile.window_buckets) + 1
    assert [stream_batch(n, profile, 8) for n in (1, kinds - 1, 2 * kinds, 100)] == [1, 1, 2, 8]
    meter = engine.stats.costs[name]
    with engine._cond:
        costs = engine._admission_costs({name: 2 * kinds - 1})  # with the newcomer, two a kind
    assert costs[name] == pytest.approx(meter.cost(2) * profile.ramp)  # type: ignore[operator]
    assert stats["step_frames"]["kept"] > 0


def test_steps_in_flight_cost_the_device_its_busy_time_once(engine: TTSEngine) -> None:
    """Two steps overlap on a batched device (one is launched while the other runs), but
    the device runs one at a time: the cost meter counts each step's share of the
    device's busy timeline, so overlapping steps are not counted twice."""
    with engine._cond:
        engine._device_until = 0.0
        assert engine._device_share(10.00, 10.05) == pytest.approx(0.05)  # alone
        assert engine._device_share(10.01, 10.09) == pytest.approx(0.04)  # launched while the first ran
        assert engine._device_share(10.02, 10.08) == 0.0  # ended within the one before
        assert engine._device_share(10.20, 10.25) == pytest.approx(0.05)  # after an idle gap
