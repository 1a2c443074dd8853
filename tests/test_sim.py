"""The simulated device (`--device sim`): its cost model against the H200 figures it was
fitted to, its one GPU serializing device time, its duration model against the real
models, and a real server on it serving both voice models to a real client."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from tests.conftest import run_server
from voxserve.cli import build_parser, main, server_config
from voxserve.config import ASRConfig, TTSConfig
from voxserve.engine.adapters.piper import PiperVoice
from voxserve.engine.devices import resolve_device
from voxserve.runners.kokoro.onnx_runner import KokoroInput, KokoroModel, style_row
from voxserve.runners.kokoro.sim_runner import SimKokoroModel
from voxserve.runners.piper.sim_runner import SimPiperModel, SimPiperVocoder
from voxserve.runners.sim.costs import PIPER_VOCODER, SOURCES, STAGES, Source
from voxserve.runners.sim.device import SimDevice, host_work, sim_device
from voxserve.runners.sim.steps import TONE_LEVEL, SimStage
from voxserve.text.kokoro_g2p import KokoroG2P
from voxserve.text.kokoro_vocab import KOKORO_VOCAB

HELD_OUT = (
    "A small yellow bird sang from the branch outside the kitchen window every morning.",
    "Remember to water the tomatoes twice a week until the end of the summer.",
    "The train to the coast leaves at a quarter past six from the second platform.",
)
"""Sentences the duration table was not fitted on."""


@pytest.mark.parametrize("source", SOURCES, ids=lambda s: f"{s.stage}-b{s.batch}-{s.share}-{'graph' if s.graphed else 'eager'}")
def test_the_cost_model_reproduces_the_figures_it_was_fitted_to(source: Source) -> None:
    modelled = source.modelled()
    assert abs(modelled / source.seconds - 1) <= source.tolerance, (source.figure, modelled)


def test_graphs_cut_the_host_share_and_never_the_device_share() -> None:
    for stage in STAGES.values():
        assert stage.host_s(64, 100, graphed=True) < stage.host_s(64, 100, graphed=False) / 4, stage.name
        assert stage.device_s(64, 100) > stage.device_s(1, 100), stage.name


def test_one_simulated_gpu_runs_one_step_at_a_time_while_hosts_overlap() -> None:
    device = SimDevice()
    ends: list[float] = []
    start = time.monotonic()

    def step() -> None:
        device.run(0.1)
        ends.append(time.monotonic() - start)

    threads = [threading.Thread(target=step) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    # Two 0.1 s device shares queue one behind the other.
    assert max(ends) >= 0.2 - 1e-3 and min(ends) >= 0.1 - 1e-3, ends
    busy, by_stage = device.use()
    assert busy == pytest.approx(0.2) and by_stage == {"": (2, 2)}


def test_a_faster_sim_device_divides_the_device_share_and_keeps_the_host_share() -> None:
    stage = STAGES["kokoro.decoder"]
    device = SimDevice()
    before = time.thread_time()
    SimStage(stage, graphed=False, device=device, speed=1000).step(128, 60)
    # The eager launches (22.5 ms) stay on this thread; the 124 ms of kernels become 0.12 ms.
    assert time.thread_time() - before >= stage.host_s(128, 60, graphed=False)
    assert device.use()[0] == pytest.approx(stage.device_s(128, 60) / 1000)
    with pytest.raises(ValueError, match="positive"):
        SimStage(stage, graphed=True, speed=0)
    for speed in ("0", "-1", "nan", "inf", "1001"):
        with pytest.raises(ValueError, match="--tts-sim-speed must be from 0.01 to 1000"):
            server_config(build_parser().parse_args(["serve", "--device", "sim", "--tts-sim-speed", speed]))
    config = server_config(build_parser().parse_args(["serve", "--device", "sim", "--tts-sim-speed", "1000"]))
    voice = PiperVoice.load(config.tts)
    assert isinstance(voice.model, SimPiperModel)
    before = sim_device().use()[0]
    voice.model.vocoder.run([np.zeros((1, 192, 52), np.float32)])
    assert sim_device().use()[0] - before == pytest.approx(PIPER_VOCODER.device_s(1, 52) / 1000)


def test_the_host_share_is_this_threads_cpu() -> None:
    before = time.thread_time()
    host_work(0.02)
    assert time.thread_time() - before >= 0.02


def test_sim_resolves_only_when_asked() -> None:
    assert resolve_device("sim", "auto", "onnx") == ("sim", "sim")
    assert resolve_device("auto", "auto", "onnx")[0] != "sim"
    with pytest.raises(ValueError, match="stand-ins"):
        TTSConfig(device="sim", runtime="onnx")
    with pytest.raises(ValueError, match="simulated runner"):
        ASRConfig(models=("whisper-tiny.en",), device="sim", runtime="torch")


def test_serve_device_sim_puts_both_engines_on_it_unless_one_is_named() -> None:
    config = server_config(build_parser().parse_args(["serve", "--device", "sim"]))
    assert (config.tts.device, config.asr.device) == ("sim", "sim")
    config = server_config(build_parser().parse_args(["serve", "--device", "sim", "--asr-device", "cpu"]))
    assert (config.tts.device, config.asr.device) == ("sim", "cpu")


def test_speak_refuses_the_sim_device(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for flag in ("--device", "--tts-device"):
        assert main(["speak", "Hello.", flag, "sim", "-o", f"{tmp_path}/out.wav"]) == 2
        assert "makes no speech" in capsys.readouterr().err


def test_transcribe_refuses_the_sim_device(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    clip = tmp_path / "clip.wav"
    clip.write_bytes(b"RIFF")  # refused before the file is read
    assert main(["transcribe", str(clip), "--asr-device", "sim"]) == 2
    assert "makes none" in capsys.readouterr().err


def _total_frames(durations: np.ndarray) -> int:
    return int(np.sum(durations))


def test_piper_durations_stay_near_the_real_models() -> None:
    real = PiperVoice.load(TTSConfig(models=("piper",), device="cpu", fixed_prior=False))
    sim = PiperVoice.load(TTSConfig(models=("piper",), device="sim"))
    speaker = real.voices[0]
    for text in HELD_OUT:
        items = real.inputs(text, speaker, 1.0)
        want = sum(_total_frames(d) for _, d in real.model.acoustic.run_timed(items))
        got = sum(latent.frames for latent in sim.acoustic(sim.inputs(text, speaker, 1.0)))
        assert abs(got / want - 1) < 0.15, (text, got, want)


def test_kokoro_durations_stay_near_the_real_models() -> None:
    real = KokoroModel()
    g2p = KokoroG2P(KOKORO_VOCAB)
    rows = real.voice("af_alloy")
    runner, _ = real.runners(1)
    sim_runner, _ = SimKokoroModel().runners(1)
    for text in HELD_OUT:
        ids = np.asarray(g2p(text, "a").ids, dtype=np.int64)
        items = [KokoroInput(ids, style_row(rows, len(ids)), 1.0)]
        want = runner.run(items)[0].frames
        got = sim_runner.run(items)[0].frames
        assert abs(got / want - 1) < 0.15, (text, got, want)


def test_a_server_on_the_sim_device_serves_both_models_and_says_what_it_is() -> None:
    config = server_config(build_parser().parse_args(["serve", "--device", "sim", "--no-asr", "--tts-gpu-batch", "8"]))
    with run_server(config, kokoro=True) as srv:
        client = openai.OpenAI(base_url=f"{srv.base_url}/v1", api_key="unused", max_retries=0, timeout=30)
        for model in ("tts-1", "tts-1-hd"):
            with client.audio.speech.with_streaming_response.create(
                model=model, voice="alloy", input=HELD_OUT[0], response_format="pcm"
            ) as response:
                pcm = np.frombuffer(response.read(), dtype="<i2")
            seconds = len(pcm) / 24000
            assert 2.0 < seconds < 10.0, (model, seconds)
            # A quiet tone, not speech: never louder than the stand-in's level (with Piper's gain).
            assert 0 < np.abs(pcm).max() <= 1.2 * TONE_LEVEL * 32768, model
        health: dict[str, Any] = httpx.get(f"{srv.base_url}/health", timeout=10).json()
        assert health["devices"]["speech"] == "sim" and "never speech" in health["simulated"]
        metrics = httpx.get(f"{srv.base_url}/metrics", timeout=10).text
        assert 'voxserve_device_info{device="sim",engine="speech"} 1.0' in metrics
        busy = [line for line in metrics.splitlines() if line.startswith("voxserve_sim_device_busy_seconds_total")]
        assert busy and float(busy[0].split()[-1]) > 0
        assert 'voxserve_sim_device_calls_total{stage="kokoro.decoder"}' in metrics


def test_the_load_tool_spreads_its_clients_over_processes(tmp_path: Path) -> None:
    config = server_config(build_parser().parse_args(["serve", "--device", "sim", "--no-asr", "--tts-gpu-batch", "8"]))
    with run_server(config) as srv:
        out = tmp_path / "spread.json"
        argv = ["bench", "speech", "--base-url", srv.base_url, "--concurrency", "4", "--num-prompts", "8",
                "--processes", "2", "--warmup", "1", "--no-progress", "-o", str(out)]
        assert main(argv) == 0
    result = json.loads(out.read_text())
    level = result["levels"][0]
    assert result["settings"]["processes"] == 2
    assert [r["index"] for r in level["records"]] == list(range(8))
    assert level["summary"]["completed"] == 8 and level["summary"]["audio_s"] > 0
    assert level["client_lag_s"]["n"] > 0  # the children's own loops were measured



def test_a_vocoder_step_takes_windows_of_different_lengths_each_as_if_alone() -> None:
    device = SimDevice()
    piper = SimPiperVocoder(256, SimStage(PIPER_VOCODER, graphed=True, device=device))
    mixed = piper.run([np.zeros((0, 20), np.float32), np.zeros((0, 52), np.float32)])
    alone = piper.run([np.zeros((0, 20), np.float32)])
    assert [len(a) for a in mixed] == [20 * 256, 52 * 256]
    np.testing.assert_array_equal(mixed[0], alone[0])
    assert device.use()[1] == {"piper.vocoder": (2, 3)}  # one call of two windows, then one of one
