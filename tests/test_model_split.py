"""The two-stage split reproduces the full Piper graph, and chunked vocoding reproduces
the whole-latent decode."""

from __future__ import annotations

import hashlib
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from voxserve.config import TTSConfig
from voxserve.engine.adapters.piper import OUTPUT_GAIN, PiperVoice
from voxserve.engine.cpu_scheduler import CpuScheduler
from voxserve.engine.output import decode_chunk
from voxserve.engine.stream import StreamFailed
from voxserve.engine.tts import TTSEngine
from voxserve.engine.voices import Span
from voxserve.engine.work import AcousticWork, Latent, VocoderChunking, VocoderWork
from voxserve.runners.piper.onnx_runner import (
    SPLIT_LAYOUT,
    AcousticInput,
    AcousticRunner,
    PiperModel,
    bundled_voice,
    split_model,
)
from voxserve.runners.piper.prior_graph import (
    FIXED_LAYOUT,
    MAX_PRIOR_DIFF,
    PRIOR_LENGTHS,
    fixed_priors,
)
from voxserve.text.phonemize import Phonemizer

TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away into the woods."


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    noise = reference.astype(np.float64) - test.astype(np.float64)
    return float(10 * np.log10(np.sum(reference.astype(np.float64) ** 2) / max(np.sum(noise**2), 1e-30)))


@pytest.fixture(scope="module")
def model() -> PiperModel:
    return PiperModel(bundled_voice())


@pytest.fixture(scope="module")
def ids(model: PiperModel) -> np.ndarray:
    return Phonemizer(model.config).ids(TEXT)[0]


def test_split_is_cached_by_hash(model: PiperModel, tmp_path: Path) -> None:
    graphs = split_model(model.files.model, tmp_path)
    assert all(path.exists() for path in graphs.files())
    mtime = graphs.prior.stat().st_mtime_ns
    assert split_model(model.files.model, tmp_path) == graphs
    assert graphs.prior.stat().st_mtime_ns == mtime  # second call reuses the cache
    assert graphs.prior.parent.name == f"{_sha256(model.files.model)[:32]}-{SPLIT_LAYOUT}"  # not an older layout's


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_stage_a_gives_durations_that_sum_to_its_frames(model: PiperModel, ids: np.ndarray) -> None:
    ((z, durations),) = model.acoustic.run_timed([AcousticInput(ids, 0.0, 1.0, 0.0)])
    assert len(durations) == len(ids) and durations.min() >= 0
    assert int(durations.sum()) == z.shape[1]


def test_two_stages_equal_full_model(model: PiperModel, ids: np.ndarray) -> None:
    full = ort.InferenceSession(str(model.files.model), providers=["CPUExecutionProvider"])
    feeds = {
        "input": ids[np.newaxis],
        "input_lengths": np.array([len(ids)], dtype=np.int64),
        "scales": np.array([0.0, 1.0, 0.0], dtype=np.float32),
    }
    reference = full.run(None, feeds)[0].reshape(-1)
    z = model.acoustic.run([AcousticInput(ids, 0.0, 1.0, 0.0)])[0]
    assert z.shape[0] == 192
    staged = model.vocoder.run([z])[0]
    assert staged.shape == reference.shape == (z.shape[1] * model.hop,)
    np.testing.assert_allclose(staged, reference, rtol=0, atol=1e-5)


def _chunked(model: PiperModel, z: np.ndarray, chunking: VocoderChunking | None) -> np.ndarray:
    """Decode z through the scheduler's chunk plan, exactly as the engine does."""
    voice = PiperVoice(model, chunking, 1.0)
    sched = CpuScheduler(credits=100)
    sched.add(1, [AcousticInput(np.zeros(3, np.int64), 0, 1, 0)], 0.0, voice.profile)
    work = sched.next_work(0.0)
    assert isinstance(work, AcousticWork)
    sched.complete_acoustic(work, Latent(z, z.shape[-1]))
    parts, now = [], 0.0
    while (work := sched.next_work(now)) is not None:
        assert isinstance(work, VocoderWork)
        pcm = decode_chunk(voice, work)
        parts.append(pcm)
        sched.complete_vocoder(work, len(pcm), now)
        now += 0.01
    assert not sched.has(1)
    return np.concatenate(parts)


def test_chunked_decode_matches_full_decode(model: PiperModel, ids: np.ndarray) -> None:
    z = model.acoustic.run([AcousticInput(ids, 0.0, 1.0, 0.0)])[0]
    full = model.vocoder.run([z])[0]
    streamed = _chunked(model, z, VocoderChunking())
    assert streamed.shape == full.shape
    assert snr_db(full, streamed) >= 60


def test_no_context_is_audibly_worse(model: PiperModel, ids: np.ndarray) -> None:
    """The context frames are what make chunking seamless."""
    z = model.acoustic.run([AcousticInput(ids, 0.0, 1.0, 0.0)])[0]
    full = model.vocoder.run([z])[0]
    bare = _chunked(model, z, VocoderChunking(left_context=0, right_context=0))
    assert snr_db(full, bare) < 40


def test_engine_stream_equals_full_model(model: PiperModel) -> None:
    """End to end: the engine's streamed int16 output is the full model's sentence audio
    under one fixed gain (deterministic with noise scales 0, no resampling)."""
    config = replace(TTSConfig(), models=("piper",), noise_scale=0.0, noise_w=0.0, workers=2)
    engine = TTSEngine(config)
    engine.start()
    try:
        text = "Hello there, my friend. This is the second sentence."
        voice = engine.default_model.voices[0]
        prepared = engine.prepare(text, voice)
        pcm = engine.synthesize(text, voice)
    finally:
        engine.stop()
    full = ort.InferenceSession(str(model.files.model), providers=["CPUExecutionProvider"])
    expected = []
    for seg in prepared.segments:
        feeds = {
            "input": seg.ids[np.newaxis],
            "input_lengths": np.array([len(seg.ids)], dtype=np.int64),
            "scales": np.array([0.0, 1.0, 0.0], dtype=np.float32),
        }
        expected.append(full.run(None, feeds)[0].reshape(-1))
    reference = np.clip(np.concatenate(expected) * OUTPUT_GAIN, -1, 1) * 32767
    assert pcm.dtype == np.int16 and len(pcm) == len(reference)
    assert snr_db(reference, pcm) >= 60


def test_a_stream_started_on_its_first_piece_of_text_is_the_whole_texts_audio(model: PiperModel) -> None:
    """The server starts a stream on its text's first piece and hands it the rest later
    (`prepare(head_only=True)`, `prepare_rest`, `extend`): the audio is the same as the
    whole text's, and a rest that says nothing ends the stream with nothing added. The
    prior is the dynamic graph throughout: its fixed-length copies, which round
    differently, would otherwise come online in the background between two runs. What
    is left to timing (a unit alone runs on two threads; a lone stream's first chunks run
    the flow on their own windows) moves a sample by a step or two of int16 at most."""
    config = replace(TTSConfig(), models=("piper",), noise_scale=0.0, noise_w=0.0, workers=2,
                     fixed_prior=False)
    engine = TTSEngine(config)
    engine.start()
    try:
        voice = engine.default_model.voices[0]
        for text in ("Hello there, my friend. This is the second sentence. And a third one!", "Hi. ( ) --"):
            whole = engine.synthesize(text, voice)
            head = engine.prepare(text, voice, head_only=True)
            assert head.rest and len(head.segments) == 1
            handle = engine.submit(head, engine.sample_rate)
            engine.extend(handle.id, engine.prepare_rest(head))
            streamed = engine.collect(handle, 10.0)
            assert len(streamed) == len(whole), text
            assert np.abs(streamed.astype(np.int32) - whole).max() <= 2, text
        # A rest that cannot be prepared fails its stream (a 500 inside the response),
        # after the audio already made.
        handle = engine.submit(engine.prepare("Hello. And more.", voice, head_only=True), engine.sample_rate)
        engine.fail_stream(handle.id, RuntimeError("front end broke"))
        with pytest.raises(StreamFailed, match="synthesis failed"):
            engine.collect(handle, 10.0)
    finally:
        engine.stop()


def test_a_deferred_flow_gives_the_same_chunks(model: PiperModel) -> None:
    """Stage A on two threads (a lone stream) leaves the flow to the chunks: the first runs
    it on its own window, the others once over the segment. The audio is the same, to the
    int16 output's rounding."""
    voice = PiperVoice(model, VocoderChunking(), 1.0, noise_scale=0.0, noise_w=0.0)
    (item,) = voice.inputs(TEXT, voice.voices[0], 1.0)
    (whole,) = voice.acoustic([item])
    (deferred,) = voice.acoustic([item], threads=2)
    assert deferred.durations is not None and whole.durations is not None
    assert deferred.frames == whole.frames and np.array_equal(deferred.durations, whole.durations)
    assert deferred.words == whole.words
    for lo, hi in ((0, 18), (0, 26), (0, 34), (6, 58), (14, 66), (38, 122), (whole.frames - 40, whole.frames)):
        a = voice.decode([Span(whole, lo, hi)])[0]
        b = voice.decode([Span(deferred, lo, hi)], threads=2)[0]
        assert snr_db(a, b) >= 90, (lo, hi)


def test_fixed_length_priors_match_the_dynamic_prior(model: PiperModel) -> None:
    """A single item runs on a fixed-length copy of the prior (padded ids): the same
    durations and frames as the dynamic graph, z_p within the fused layer norms' rounding;
    past the longest copy, the dynamic graph itself."""
    copies = fixed_priors(model.graphs.prior)
    assert sorted(copies) == sorted(PRIOR_LENGTHS)
    runner = AcousticRunner(model.graphs.prior, model.graphs.flow, multi_speaker=False, fixed=copies)
    ids = Phonemizer(model.config).ids(TEXT)[0]
    longest = max(PRIOR_LENGTHS)
    for n in (9, 16, 30, longest, longest + 1):
        item = AcousticInput(ids[:n], 0.0, 1.0, 0.0)
        ((fixed, fixed_durations),) = runner.run_prior([item], threads=2)
        ((want, want_durations),) = model.acoustic.run_prior([item])
        np.testing.assert_array_equal(fixed_durations, want_durations)
        assert fixed.frames == want.frames
        np.testing.assert_allclose(fixed.z_p, want.z_p, rtol=0, atol=0 if n > longest else MAX_PRIOR_DIFF)


def test_fixed_length_prior_is_built_once(model: PiperModel, tmp_path: Path) -> None:
    prior = tmp_path / "prior.onnx"
    shutil.copyfile(model.graphs.prior, prior)
    with ThreadPoolExecutor(2) as pool:  # two at once (as two servers starting): one builds
        first, second = pool.map(lambda _: fixed_priors(prior, (16,)), range(2))
    (built,) = first.values()
    assert second == first and built.name == f"prior-16-{FIXED_LAYOUT}.onnx"
    mtime = built.stat().st_mtime_ns
    assert fixed_priors(prior, (16,)) == {16: built}
    assert built.stat().st_mtime_ns == mtime  # read from the cache
    names = sorted(p.name for p in tmp_path.iterdir())
    weights = [n for n in names if n.endswith(".weights")]
    assert len(weights) == 1 and not [n for n in names if n.endswith(".tmp")]  # one build's weights
    assert len(names) == 4  # the prior, the copy, its weights and its lock file
    runner = AcousticRunner(prior, model.graphs.flow, multi_speaker=False, fixed={16: built})
    item = AcousticInput(np.arange(1, 12, dtype=np.int64), 0.0, 1.0, 0.0)
    ((fixed, durations),) = runner.run_prior([item])  # on weights shared with the prior
    ((want, want_durations),) = model.acoustic.run_prior([item])
    np.testing.assert_array_equal(durations, want_durations)
    np.testing.assert_allclose(fixed.z_p, want.z_p, rtol=0, atol=MAX_PRIOR_DIFF)


def test_fixed_length_priors_come_online_in_the_background() -> None:
    """A loaded voice serves on the dynamic prior at once and switches to the copies when
    its background thread has made and run their sessions."""
    model = PiperModel(bundled_voice())
    assert not model.acoustic.fixed_lengths
    model.fixed_prior_in_background(PRIOR_LENGTHS[:2], warm={1, 2}).join(60)
    assert model.acoustic.fixed_lengths == PRIOR_LENGTHS[:2]
    item = AcousticInput(np.arange(1, 20, dtype=np.int64), 0.0, 1.0, 0.0)
    ((prior, durations),) = model.acoustic.run_prior([item], threads=2)
    assert prior.frames == int(durations.sum()) > 0
