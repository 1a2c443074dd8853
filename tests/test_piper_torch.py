"""The torch Piper runner against ONNX Runtime, on the CPU, on the bundled joe voice and
the same inputs, noise fixed: the same durations and frame counts, audio within an SNR
bound of the float32 graphs (whole sentences and vocoder windows with context, and with
the voice's own noise scales on the same noise), each item of a padded batch as alone,
the engine's stream and its Whisper round trip as ONNX Runtime's, a user's voice folder
converted once and cached, and torch left unloaded on the ONNX path. Vocoder windows of
different lengths share a call, each with its audio alone. The vocoder in bfloat16
(`--tts-precision bfloat16`) stays within the bounds set for Kokoro's float32 torch path
(SNR and log-mel distance to the float32 graph), with Whisper hearing it no worse;
ONNX Runtime refuses a reduced precision.

Measured on a 2-core AMD EPYC (torch 2.13, float32): whole sentences 90-107 dB from
ONNX Runtime's audio, vocoder windows 119-124 dB, the fixed-noise graph 95-99 dB, the
engine's int16 streams 85-87 dB; Whisper heard the same text from both (WER 0 on
`SHORT`). The bounds below are looser, for other CPUs' kernels.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import soxr
from onnx import TensorProto, helper

from tests.asr_support import SHORT, wer
from tests.audio_parity import mel_distance_db
from voxserve.audio.mel import LogMel
from voxserve.config import TTSConfig
from voxserve.engine.adapters.piper import PiperVoice
from voxserve.engine.asr import fitted_window
from voxserve.engine.tts import TTSEngine
from voxserve.runners.piper import weights as piper_weights
from voxserve.runners.piper.onnx_runner import (
    DURATIONS_TENSOR,
    LATENT_TENSOR,
    AcousticInput,
    PiperModel,
    bundled_voice,
)
from voxserve.runners.piper.torch_runner import TorchPiperModel
from voxserve.runners.piper.weights import TORCH_LAYOUT, weights_path
from voxserve.runners.whisper.ct2_runner import WhisperRunner
from voxserve.runners.whisper.interface import DecodeInput
from voxserve.text.phonemize import Phonemizer

pytestmark = pytest.mark.timeout(300)

TEXTS = [
    *SHORT,
    "Is it 4:30 already? Wow, time flies when you're having fun!",
    "Yes.",
]
"""The ASR tests' sentences, a question with numbers, and a one-word sentence."""
SENTENCE_SNR_DB = 70.0
"""Whole sentences, stage A and vocoder on torch against both on ONNX Runtime (measured
90-107 dB): the latents differ by up to 3e-4, the durations not at all."""
WINDOW_SNR_DB = 100.0
"""The vocoder alone on the same window of z (measured 119-124 dB)."""
STREAM_SNR_DB = 60.0
"""The engine's int16 streams, chunked and crossfaded, torch against ONNX Runtime
(measured 85-87 dB)."""
BATCH_Z_TOLERANCE = 1e-3
"""Largest |z| difference between an item in a padded batch and alone (measured 1.4e-4:
the convolutions' kernels differ with the padded length)."""
CONTEXT = 10
"""Context frames on each side of a vocoder window, as the engine's default."""
MIXED_TOLERANCE = 1e-5
"""Largest sample difference between a window in a call of mixed lengths and alone
(the masked convolutions see what a lone window sees; only the order of float sums may
differ)."""
HALF_SNR_DB = 14.0
"""The bfloat16 vocoder against the float32 graph (measured 40.2-40.4 dB)."""
HALF_MEL_DB = 1.5
"""The same, log-mel distance (measured 0.79-0.85 dB)."""


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    noise = reference.astype(np.float64) - test.astype(np.float64)
    return float(10 * np.log10(np.sum(reference.astype(np.float64) ** 2) / max(np.sum(noise**2), 1e-30)))


@pytest.fixture(scope="module")
def onnx_model() -> PiperModel:
    return PiperModel(bundled_voice())


@pytest.fixture(scope="module")
def torch_model() -> TorchPiperModel:
    return TorchPiperModel(bundled_voice())


@pytest.fixture(scope="module")
def items(onnx_model: PiperModel) -> list[AcousticInput]:
    """Every sentence of `TEXTS`, noise scales 0."""
    phonemizer = Phonemizer(onnx_model.config)
    return [AcousticInput(s.ids, 0.0, 1.0, 0.0) for text in TEXTS for s in phonemizer.sentences(text)]


@pytest.fixture(scope="module")
def onnx_stage_a(onnx_model: PiperModel, items: list[AcousticInput]) -> list[tuple[np.ndarray, np.ndarray]]:
    return [onnx_model.acoustic.run_timed([item])[0] for item in items]


@pytest.fixture(scope="module")
def torch_stage_a(torch_model: TorchPiperModel, items: list[AcousticInput]) -> list[tuple[np.ndarray, np.ndarray]]:
    return [torch_model.acoustic.run_timed([item])[0] for item in items]


def test_durations_and_frames_are_onnx_runtimes(
    onnx_stage_a: list[tuple[np.ndarray, np.ndarray]], torch_stage_a: list[tuple[np.ndarray, np.ndarray]]
) -> None:
    assert len(onnx_stage_a) >= 6
    for (z_onnx, d_onnx), (z_torch, d_torch) in zip(onnx_stage_a, torch_stage_a, strict=True):
        assert d_torch.dtype == np.int64 and np.array_equal(d_torch, d_onnx)
        assert z_torch.shape == z_onnx.shape and z_torch.shape[-1] == d_onnx.sum()
        assert np.abs(z_torch - z_onnx).max() < 1e-3


def test_whole_sentences_sound_as_onnx_runtimes(
    onnx_model: PiperModel,
    torch_model: TorchPiperModel,
    onnx_stage_a: list[tuple[np.ndarray, np.ndarray]],
    torch_stage_a: list[tuple[np.ndarray, np.ndarray]],
) -> None:
    for (z_onnx, _), (z_torch, _) in zip(onnx_stage_a, torch_stage_a, strict=True):
        expected = onnx_model.vocoder.run([z_onnx])[0]
        got = torch_model.vocoder.run([z_torch])[0]
        assert got.dtype == np.float32 and got.shape == expected.shape == (z_onnx.shape[-1] * 256,)
        assert snr_db(expected, got) >= SENTENCE_SNR_DB


def test_vocoder_windows_with_context_are_onnx_runtimes_and_batch_as_alone(
    onnx_model: PiperModel, torch_model: TorchPiperModel, onnx_stage_a: list[tuple[np.ndarray, np.ndarray]]
) -> None:
    """32-frame chunks of one sentence's z, each with `CONTEXT` frames on both sides
    (cut at the ends), cropped as the engine crops; then the full-width windows as one
    batch of equal lengths."""
    z = onnx_stage_a[1][0]
    frames, hop = z.shape[-1], torch_model.hop
    windows = []
    for lo in range(0, frames, 32):
        hi = min(frames, lo + 32)
        a, b = max(0, lo - CONTEXT), min(frames, hi + CONTEXT)
        expected = onnx_model.vocoder.run([z[:, a:b]])[0][(lo - a) * hop : (hi - a) * hop]
        got = torch_model.vocoder.run([z[:, a:b]])[0][(lo - a) * hop : (hi - a) * hop]
        assert snr_db(expected, got) >= WINDOW_SNR_DB
        if b - a == 32 + 2 * CONTEXT:
            windows.append(np.ascontiguousarray(z[:, a:b]))
    assert len(windows) >= 3
    together = torch_model.vocoder.run(windows)
    for window, pcm in zip(windows, together, strict=True):
        assert np.abs(pcm - torch_model.vocoder.run([window])[0]).max() < 1e-5


def test_a_padded_batch_gives_each_item_its_own_output(
    torch_model: TorchPiperModel, items: list[AcousticInput], torch_stage_a: list[tuple[np.ndarray, np.ndarray]]
) -> None:
    """All sentences (1 to 170 ids) in one stage A call, with different scales per item."""
    slow = [AcousticInput(item.ids, item.noise_scale, 1.3 if i % 2 else 1.0, item.noise_w) for i, item in enumerate(items)]
    batched = torch_model.acoustic.run_timed(slow)
    for i, (item, (z, durations)) in enumerate(zip(slow, batched, strict=True)):
        z_alone, d_alone = torch_model.acoustic.run_timed([item])[0] if i % 2 else torch_stage_a[i]
        assert np.array_equal(durations, d_alone)
        assert z.shape == z_alone.shape and np.abs(z - z_alone).max() < BATCH_Z_TOLERANCE
    priors = torch_model.acoustic.run_prior(slow[:3])
    for (prior, durations), (_, d) in zip(priors, batched[:3], strict=True):
        assert np.array_equal(durations, d) and prior.frames == d.sum()


def test_windows_of_different_lengths_share_a_call_each_as_alone(
    torch_model: TorchPiperModel, onnx_stage_a: list[tuple[np.ndarray, np.ndarray]]
) -> None:
    """Bucketed windows of 20, 52 and 36 frames and a 1-frame one in one call, padded
    and masked: each gets its own samples, as alone."""
    z = onnx_stage_a[1][0]
    windows = [np.ascontiguousarray(z[:, a:b]) for a, b in ((0, 20), (10, 62), (40, 76), (80, 81))]
    together = torch_model.vocoder.run(windows)
    for window, pcm in zip(windows, together, strict=True):
        (alone,) = torch_model.vocoder.run([window])
        assert pcm.shape == alone.shape == (window.shape[-1] * torch_model.hop,)
        assert np.abs(pcm - alone).max() < MIXED_TOLERANCE


def test_the_bfloat16_vocoder_keeps_the_bounds(
    onnx_model: PiperModel,
    items: list[AcousticInput],
    onnx_stage_a: list[tuple[np.ndarray, np.ndarray]],
    streams: dict[str, list[np.ndarray]],
) -> None:
    """Stage A stays float32 (the durations are the graph's); the vocoder's audio within
    the bounds, on the same z; Whisper hears the engine's bfloat16 streams no worse than
    ONNX Runtime's."""
    half = TorchPiperModel(bundled_voice(), dtype="bfloat16")
    for item, (z, durations) in list(zip(items, onnx_stage_a, strict=True))[:3]:
        (_, got), = half.acoustic.run_timed([item])
        assert np.array_equal(got, durations)
        expected, audio = onnx_model.vocoder.run([z])[0], half.vocoder.run([z])[0]
        assert snr_db(expected, audio) >= HALF_SNR_DB
        assert mel_distance_db(expected, audio, sample_rate=onnx_model.sample_rate) <= HALF_MEL_DB
    heard = _transcripts(_speak("torch", SHORT, noise=0.0, precision="bfloat16"))
    assert _corpus_wer(SHORT, heard) <= _corpus_wer(SHORT, _transcripts(streams["onnx"]))


def test_onnx_runtime_refuses_a_reduced_precision() -> None:
    with pytest.raises(ValueError, match="--tts-precision bfloat16 applies to the torch runners only"):
        TTSConfig(models=("piper",), runtime="onnx", precision="bfloat16")
    with pytest.raises(ValueError, match="unknown TTS precision"):
        TTSConfig(precision="float8")
    with pytest.raises(ValueError, match="applies to the torch runners only"):  # auto resolves to onnx here
        PiperVoice.load(TTSConfig(models=("piper",), device="cpu", precision="float16"))


def _with_noise_inputs(model: Path) -> tuple[ort.InferenceSession, dict[str, str]]:
    """The whole voice graph with each random normal node replaced by a cut of a fed
    tensor of noise (its name by the node's), and the durations and z as outputs too."""
    proto = onnx.load(str(model))
    graph = proto.graph
    fed: dict[str, str] = {}
    for node in [n for n in graph.node if n.op_type == "RandomNormalLike"]:
        name = node.name.strip("/").replace("/", "_") + "_noise"
        graph.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", "channels", "length"]))
        graph.initializer.append(helper.make_tensor(f"{name}_starts", TensorProto.INT64, [3], [0, 0, 0]))
        at = list(graph.node).index(node)
        graph.node.remove(node)
        graph.node.insert(at, helper.make_node("Slice", [name, f"{name}_starts", f"{name}_shape"], [node.output[0]]))
        graph.node.insert(at, helper.make_node("Shape", [node.input[0]], [f"{name}_shape"]))
        fed[node.name] = name
    for extra in (DURATIONS_TENSOR, LATENT_TENSOR):
        graph.output.append(helper.make_tensor_value_info(extra, TensorProto.FLOAT, None))
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]), fed


def test_the_voices_own_noise_scales_on_the_same_noise(onnx_model: PiperModel, torch_model: TorchPiperModel) -> None:
    """Both noise sources fed (the duration predictor's and the prior's), at the voice's
    own scales: the same durations, audio within `SENTENCE_SNR_DB`."""
    session, fed = _with_noise_inputs(onnx_model.files.model)
    assert set(fed) == {"/dp/RandomNormalLike", "/RandomNormalLike"}
    rng = np.random.default_rng(7)
    scales = (onnx_model.noise_scale, onnx_model.length_scale, onnx_model.noise_w)
    phonemizer = Phonemizer(onnx_model.config)
    for text in SHORT[:2]:
        ids = phonemizer.sentences(text)[0].ids
        dp_noise = rng.standard_normal((1, 2, len(ids)), dtype=np.float32)
        z_noise = rng.standard_normal((1, 192, 1000), dtype=np.float32)
        feeds = {
            "input": ids[np.newaxis], "input_lengths": np.array([len(ids)]), "scales": np.array(scales, np.float32),
            fed["/dp/RandomNormalLike"]: dp_noise, fed["/RandomNormalLike"]: z_noise,
        }  # fmt: skip
        audio, durations, _ = session.run(None, feeds)
        (z, got), = torch_model.acoustic.run_timed([AcousticInput(ids, *scales)], noise=(dp_noise, z_noise))
        assert np.array_equal(got, durations.reshape(-1).astype(np.int64))
        assert snr_db(audio.reshape(-1), torch_model.vocoder.run([z])[0]) >= SENTENCE_SNR_DB


def _speak(runtime: str, texts: list[str], noise: float | None = None, precision: str = "float32") -> list[np.ndarray]:
    """Each text through a TTS engine on `runtime`: its whole int16 stream; `noise`:
    both noise scales, None for the voice's own."""
    config = TTSConfig(
        models=("piper",), runtime=runtime, fixed_prior=False, noise_scale=noise, noise_w=noise, precision=precision
    )
    engine = TTSEngine(config)
    engine.start()
    try:
        voice = engine.default_model.voices[0]
        return [engine.synthesize(text, voice) for text in texts]
    finally:
        engine.stop()


@pytest.fixture(scope="module")
def streams() -> dict[str, list[np.ndarray]]:
    """`SHORT` spoken by the engine on each runtime, noise scales 0."""
    return {runtime: _speak(runtime, SHORT, noise=0.0) for runtime in ("onnx", "torch")}


def test_the_engine_streams_on_torch_as_on_onnx_runtime(streams: dict[str, list[np.ndarray]]) -> None:
    """Chunked, crossfaded and resampled as served; the engine's first chunk also takes
    the deferred flow (a lone stream's stage A on two threads)."""
    for expected, got in zip(streams["onnx"], streams["torch"], strict=True):
        assert got.dtype == np.int16 and len(got) == len(expected) > 22050
        assert snr_db(expected, got) >= STREAM_SNR_DB


def _transcripts(pcms: list[np.ndarray]) -> list[str]:
    """Whisper tiny.en (the CPU default, int8, beam 5) on each 22.05 kHz clip."""
    runner = WhisperRunner()
    mel = LogMel()
    options = runner.options("transcribe", "en", None, 5, 0.0)
    tokenizer = runner.tokenizer("transcribe", "en")
    texts = []
    for pcm in pcms:
        samples = soxr.resample(pcm.astype(np.float32) / 32768.0, 22050, 16000)
        features, frames = mel(samples)
        window = features[:, : fitted_window(len(samples))].copy()
        out = runner.run([DecodeInput(window, frames)], options)[0]
        texts.append(tokenizer.decode(out.tokens))
    return texts


def _corpus_wer(texts: list[str], heard: list[str]) -> float:
    words = sum(len(t.split()) for t in texts)
    return sum(wer(t, h) * len(t.split()) for t, h in zip(texts, heard, strict=True)) / words


def test_whisper_hears_torch_as_well_as_onnx_runtime(streams: dict[str, list[np.ndarray]]) -> None:
    """The round trip on `SHORT`, noise fixed at 0, and on torch at the voice's own noise
    scales (drawn by torch)."""
    onnx_wer = _corpus_wer(SHORT, _transcripts(streams["onnx"]))
    torch_wer = _corpus_wer(SHORT, _transcripts(streams["torch"]))
    noisy_wer = _corpus_wer(SHORT, _transcripts(_speak("torch", SHORT)))
    assert torch_wer <= onnx_wer <= 0.1, (torch_wer, onnx_wer)
    assert noisy_wer <= 0.1, noisy_wer


def test_a_voice_folder_converts_once_into_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's voice (`--piper-voice-dir`): converted on first load into the cache folder by
    its hash and layout, read from there on the next; a damaged file is converted again.
    The torch path makes no ONNX split."""
    bundled = bundled_voice()
    folder = tmp_path / "voice"
    folder.mkdir()
    shutil.copy(bundled.model, folder / "en_US-user-medium.onnx")
    shutil.copy(bundled.config, folder / "en_US-user-medium.onnx.json")
    cache = tmp_path / "cache"
    config = TTSConfig(models=("piper",), runtime="torch", voice_dir=folder, cache_dir=cache)
    voice = PiperVoice.load(config)
    assert voice.name == "en_US-user-medium" and isinstance(voice.model, TorchPiperModel)
    path = weights_path(folder / "en_US-user-medium.onnx", cache)
    assert path.is_file() and path.name.endswith(f"-{TORCH_LAYOUT}.npz") and path.parent == cache / "piper-torch"
    assert not (cache / "piper-split").exists()
    weights = piper_weights.read_weights(path)
    assert sum(v.nbytes for v in weights.tensors.values()) < 70e6
    ids = Phonemizer(voice.model.config).sentences("Hello there.")[0].ids
    first = voice.model.acoustic.run_timed([AcousticInput(ids, 0.0, 1.0, 0.0)])[0]

    def refuse(model: Path) -> piper_weights.PiperWeights:
        raise AssertionError("converted again")

    with monkeypatch.context() as patch:
        patch.setattr(piper_weights, "convert", refuse)
        again = PiperVoice.load(config)  # from the cache
    second = again.model.acoustic.run_timed([AcousticInput(ids, 0.0, 1.0, 0.0)])[0]
    assert np.array_equal(first[0], second[0]) and np.array_equal(first[1], second[1])
    path.write_bytes(b"not a zip")
    PiperVoice.load(config)
    assert piper_weights.read_weights(path).convs == weights.convs


def test_only_the_torch_path_imports_torch() -> None:
    code = (
        "import sys\nfrom voxserve.config import TTSConfig\nfrom voxserve.engine.adapters.piper import PiperVoice\n"
        "PiperVoice.load(TTSConfig(models=('piper',), fixed_prior=False))\nprint('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.split()[-1] == "False"
