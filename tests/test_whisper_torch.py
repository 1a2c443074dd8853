"""The torch Whisper runner against the CTranslate2 runner, on the CPU, on the same
weights (the bundled tiny.en) and the same clips (the bench's sentences, spoken by
voxserve's own TTS on the session's server): the same text, segment and word times at
float32, the same WER as the int8 default; its weight files; and the runtimes loaded only
when chosen."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.asr_support import LONG, wav_bytes, wer
from voxserve.audio.decode import decode_audio
from voxserve.audio.mel import LogMel
from voxserve.cli import main
from voxserve.config import ASRConfig
from voxserve.engine.asr import fitted_window, resolve_device
from voxserve.engine.segments import TimedSegment, window_segments
from voxserve.runners.whisper.ct2_runner import WhisperRunner
from voxserve.runners.whisper.interface import DecodeInput, DecodeOutput, bundled_model
from voxserve.runners.whisper.torch_runner import TorchWhisperRunner
from voxserve.runners.whisper.weights import (
    export_weights,
    from_ct2,
    from_hf,
    hf_config,
    read_npz,
    to_hf,
    write_safetensors,
)

pytestmark = pytest.mark.timeout(300)

TEXTS = LONG[:10]
"""10 sentences of 5-8 s: 90 % identical allows one clip to differ."""
BATCH = 8
TIME_TOLERANCE_S = 0.1


@dataclass(frozen=True)
class Clip:
    text: str
    input: DecodeInput
    duration: float


@pytest.fixture(scope="module")
def clips(long_speech: list[np.ndarray]) -> list[Clip]:
    """Each sentence as the session's server spoke it (tests/conftest.py), decoded to
    16 kHz as an upload is, and featurized as the engine does for a short file (its own
    frames in a fitted window), with alignment asked."""
    mel = LogMel()
    out = []
    for text, pcm in zip(TEXTS, long_speech[: len(TEXTS)], strict=True):
        samples = decode_audio(wav_bytes(pcm), max_seconds=60)
        features, frames = mel(samples)
        window = fitted_window(len(samples))
        out.append(Clip(text, DecodeInput(features[:, :window].copy(), frames, align=True), len(samples) / 16000))
    return out


def _run(runner: WhisperRunner | TorchWhisperRunner, clips: list[Clip], beam: int = 5) -> list[DecodeOutput]:
    opts = runner.options("transcribe", "en", None, beam, 0.0)
    outputs: list[DecodeOutput] = []
    by_width: dict[int, list[int]] = {}
    for i, clip in enumerate(clips):
        by_width.setdefault(clip.input.features.shape[-1], []).append(i)
    found: dict[int, DecodeOutput] = {}
    for idx in by_width.values():
        for start in range(0, len(idx), BATCH):
            part = idx[start : start + BATCH]
            for i, out in zip(part, runner.run([clips[i].input for i in part], opts), strict=True):
                found[i] = out
    outputs = [found[i] for i in range(len(clips))]
    return outputs


@pytest.fixture(scope="module")
def torch_runner() -> TorchWhisperRunner:
    return TorchWhisperRunner(workers=1)


@pytest.fixture(scope="module")
def torch_out(torch_runner: TorchWhisperRunner, clips: list[Clip]) -> list[DecodeOutput]:
    return _run(torch_runner, clips)


def _segments(runner: WhisperRunner | TorchWhisperRunner, out: DecodeOutput, clip: Clip) -> list[TimedSegment]:
    return window_segments(out, runner.tokenizer("transcribe", "en"), 0.0, clip.duration, 0.0)


def test_same_text_and_times_as_ctranslate2_float32(
    clips: list[Clip], torch_runner: TorchWhisperRunner, torch_out: list[DecodeOutput]
) -> None:
    ct2 = WhisperRunner(compute_type="float32")
    reference = _run(ct2, clips)
    same = [a.tokens == b.tokens for a, b in zip(reference, torch_out, strict=True)]
    assert sum(same) >= 0.9 * len(clips), [
        (ct2.tokenizer("transcribe", "en").decode(a.tokens), torch_runner.tokenizer("transcribe", "en").decode(b.tokens))
        for a, b, s in zip(reference, torch_out, same, strict=True)
        if not s
    ]
    segment_gap = word_gap = 0.0
    for a, b, clip, s in zip(reference, torch_out, clips, same, strict=True):
        assert abs(a.avg_logprob - b.avg_logprob) < 1e-3 and abs(a.no_speech_prob - b.no_speech_prob) < 1e-3
        if not s:
            continue
        sa, sb = _segments(ct2, a, clip), _segments(torch_runner, b, clip)
        assert [x.text for x in sa] == [x.text for x in sb]
        for x, y in zip(sa, sb, strict=True):
            segment_gap = max(segment_gap, abs(x.start - y.start), abs(x.end - y.end))
            for u, v in zip(x.words or (), y.words or (), strict=True):
                word_gap = max(word_gap, abs(u.start - v.start), abs(u.end - v.end))
    assert segment_gap <= TIME_TOLERANCE_S and word_gap <= TIME_TOLERANCE_S, (segment_gap, word_gap)


def test_wer_as_the_int8_default(
    clips: list[Clip], torch_runner: TorchWhisperRunner, torch_out: list[DecodeOutput]
) -> None:
    default = WhisperRunner()  # int8, as served
    int8_out = _run(default, clips)

    def corpus_wer(runner: WhisperRunner | TorchWhisperRunner, outs: list[DecodeOutput]) -> float:
        tok = runner.tokenizer("transcribe", "en")
        words = sum(len(c.text.split()) for c in clips)
        return sum(wer(c.text, tok.decode(o.tokens)) * len(c.text.split()) for c, o in zip(clips, outs, strict=True)) / words

    # Within one word of the ~150.
    assert abs(corpus_wer(torch_runner, torch_out) - corpus_wer(default, int8_out)) <= 0.01


def test_greedy_and_prompted_decoding_match(clips: list[Clip], torch_runner: TorchWhisperRunner) -> None:
    ct2 = WhisperRunner(compute_type="float32")
    few = clips[:2]
    assert [o.tokens for o in _run(ct2, few, beam=1)] == [o.tokens for o in _run(torch_runner, few, beam=1)]
    prompted = [runner.options("transcribe", "en", "Farmers, travelers and fishermen.", 5, 0.0) for runner in (ct2, torch_runner)]
    assert prompted[0] == prompted[1]
    inputs = [c.input for c in few]
    a, b = ct2.run(inputs, prompted[0]), torch_runner.run(inputs, prompted[1])
    assert [o.tokens for o in a] == [o.tokens for o in b]
    assert np.allclose([o.no_speech_prob for o in a], [o.no_speech_prob for o in b], atol=1e-3)


def test_the_steps_a_cuda_graph_captures_decode_the_same(clips: list[Clip], torch_runner: TorchWhisperRunner) -> None:
    """The fixed-shape step (masked attention over the whole static cache), run eagerly
    on the CPU, gives the eager path's tokens: greedy and beam, one batch of two."""
    fixed = TorchWhisperRunner(workers=1, fixed_steps=True)
    few = clips[:2]
    for beam in (1, 5):
        assert [o.tokens for o in _run(fixed, few, beam)] == [o.tokens for o in _run(torch_runner, few, beam)]


def test_sampling_gives_plausible_text(clips: list[Clip], torch_runner: TorchWhisperRunner) -> None:
    opts = torch_runner.options("transcribe", "en", None, 5, 0.4)
    out = torch_runner.run([clips[0].input], opts)[0]
    text = torch_runner.tokenizer("transcribe", "en").decode(out.tokens)
    assert wer(clips[0].text, text) < 0.5 and out.avg_logprob < 0


@pytest.fixture()
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_weights_convert_once_and_travel_compact(cache_home: Path, tmp_path: Path) -> None:
    folder, _ = bundled_model()
    runner = TorchWhisperRunner(folder)
    cached = list((cache_home / "voxserve" / "whisper").glob("*.npz"))
    assert len(cached) == 1
    shipped = tmp_path / "tiny.en.npz"
    size = export_weights(folder, shipped)
    assert size < 32 * 2**20
    compact = read_npz(shipped)
    exact = from_ct2(folder)
    for name, value in exact.tensors.items():
        assert np.abs(compact.tensors[name] - value).max() <= np.abs(value).max() / 100, name
    again = TorchWhisperRunner(shipped)
    assert again.name == "tiny.en" and again.languages == runner.languages == ("en",)


def test_a_hugging_face_folder_converts_to_the_same_weights(tmp_path: Path) -> None:
    exact = from_ct2(bundled_model()[0])
    folder = tmp_path / "hf"
    folder.mkdir()
    write_safetensors(to_hf(exact), folder / "model.safetensors", np.float32)
    config, generation = hf_config(exact)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "generation_config.json").write_text(json.dumps(generation))
    (folder / "tokenizer.json").write_bytes(exact.tokenizer_json)
    converted = from_hf(folder)
    assert converted.dims == exact.dims and converted.alignment_heads == exact.alignment_heads
    assert converted.suppress_ids == exact.suppress_ids
    for name, value in exact.tensors.items():
        assert np.array_equal(converted.tensors[name], value), name


def _imports(code: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return set(done.stdout.split())


def test_each_runtime_loads_only_when_chosen() -> None:
    torch_side = _imports(
        "from voxserve.runners.whisper.torch_runner import TorchWhisperRunner\n"
        "import voxserve.engine.asr, voxserve.serving.state, voxserve.api.app"
    )
    assert "torch" in torch_side and "ctranslate2" not in torch_side and "faster_whisper" not in torch_side
    cpu_side = _imports(
        "import voxserve.api.app, voxserve.cli\nfrom voxserve.runners.whisper.ct2_runner import WhisperRunner\n"
        "from voxserve.config import ASRConfig\nfrom voxserve.engine.asr import resolve_device\n"
        "assert resolve_device(ASRConfig()) == ('cpu', 'ct2')"
    )
    assert "ctranslate2" in cpu_side and "torch" not in cpu_side
    assert resolve_device(ASRConfig(device="cpu")) == ("cpu", "ct2")
    assert resolve_device(ASRConfig(device="cpu", runtime="torch")) == ("cpu", "torch")
    with pytest.raises(ValueError, match="CPU only"):
        ASRConfig(device="cuda", runtime="ct2")


def test_speech_refuses_cuda_on_onnx_runtime_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["speak", "Hello.", "--device", "cuda", "--tts-runtime", "onnx"]) == 2
    assert "CPU only" in capsys.readouterr().err

