"""The GPU bench (`scripts/gpu/`), checked end to end on this machine: the parts staged
from what is here (no download: the wheels are fetched only by a real staging run, so
here the plan holds the models, the voice and the clips), each call's size measured on
disk against the lent machine's 64 MiB, then every call run in its dry form: slices
joined and checked, what is complete installed, each model measured in the call that
completes it (Piper, Kokoro, and Whisper through HTTP: a loop, bursts and one at a time)
against a real server on the simulated GPU with the modules the GPU image lacks refused
at import, Whisper's search and its runner alone (greedy and beam search) on torch on the
CPU, and one archive
under $OUT holding a JSON per step and level. The dry levels are one stream and a few
uploads, and only the batched speech setup runs, so the three servers' start-up is most
of the time."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from voxserve.config import ASR_DEVICES, TTS_DEVICES

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "scripts" / "gpu"
MIB = 2**20

pytestmark = pytest.mark.timeout(420)

DEVICE = "sim"
"""The simulated GPU: the server's batched path, scheduled as on CUDA."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_staged_calls_fit_and_a_dry_run_returns_its_archive(tmp_path: Path) -> None:
    assert DEVICE in TTS_DEVICES and DEVICE in ASR_DEVICES
    stage = tmp_path / "stage"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, str(GPU / "stage.py"), "--no-download", "--clips", "1", "--out", str(stage)],
        check=True, env=env, capture_output=True, timeout=90,
    )  # fmt: skip
    calls = sorted(stage.glob("call*"))
    plan = json.loads((calls[0] / "plan.json").read_text())
    assert 1 <= len(calls) <= 4
    for call in calls:
        carried = sum(p.stat().st_size for p in call.iterdir())
        assert carried + plan["tree_bytes"] <= 64 * MIB, f"{call.name}: {(carried + plan['tree_bytes']) / MIB:.1f} MiB"
    # Every file is sliced whole, in order, and the slices on disk are those of the plan.
    for f in plan["files"]:
        assert sum(size for _, _, size in f["slices"]) == f["size"]
        for k, name, size in f["slices"]:
            assert (stage / f"call{k}" / name).stat().st_size == size
    assert set(plan["ready"]) == {"piper", "kokoro", "whisper"}
    assert plan["ready"]["piper"] == 1

    work, out = tmp_path / "work", tmp_path / "out"
    run_env = {**env, "VOX_WORK": str(work), "OUT": str(out), "PYTHON": sys.executable, "VOX_LIMIT": "200"}
    for k in range(1, len(calls) + 1):
        subprocess.run(
            [str(GPU / "call.sh"), str(k), "--dry", "--device", DEVICE, "--stage", str(stage), "--models",
             "piper,kokoro,whisper", "--setups", "batched", "--port", str(_free_port())],
            check=True, env=run_env, capture_output=True, timeout=220,
        )  # fmt: skip
        assert [p.name for p in out.iterdir()] == ["results.tar.gz"]
    with tarfile.open(out / "results.tar.gz") as tar:
        names = set(tar.getnames())

        def result(call: int, name: str) -> dict[str, Any]:
            data: dict[str, Any] = json.load(tar.extractfile(f"results/call{call}/{name}.json"))  # type: ignore[arg-type]
            return data

        level = result(plan["ready"]["piper"], "piper-batched-c1")
        kokoro = result(plan["ready"]["kokoro"], "kokoro-batched-c1")
        k = plan["ready"]["whisper"]
        files, short = result(k, "whisper-files"), result(k, "whisper-short-c1")
        bursts = result(k, "whisper-bursts")
        search = result(k, "whisper-search")
        beam5 = result(k, "whisper-runner-beam5")
        stage1 = result(1, "stage")
        last = result(len(calls), "stage")
    for k in range(1, len(calls) + 1):
        assert {f"results/call{k}/{n}" for n in ("call.json", "stage.json", "done.json", "log.txt")} <= names
    assert "results/call1/piper-batched-server.json" in names
    assert level["requests"] == 1 and level["failed"] == 0 and level["first_audio_p50_ms"] > 0
    assert level["audio_s_per_s"] > 0
    assert f"results/call{plan['ready']['kokoro']}/kokoro-batched-server.json" in names
    assert kokoro["requests"] == 1 and kokoro["failed"] == 0 and kokoro["first_audio_p50_ms"] > 0
    assert kokoro["audio_s_per_s"] > 0
    # Whisper through HTTP: every upload answered, /health probed meanwhile, and no WER
    # from the simulated device's made-up text.
    assert files["requests"] == 4 and files["failed"] == 0 and files["rtfx"] > 0
    assert files["latency_p50_ms"] > 0 and files["health_p99_ms"] is not None and files["wer"] is None
    assert short["requests"] == 2 and short["failed"] == 0 and short["latency_p50_ms"] > 0
    # Bursts of uploads at once, with the server's own figures over them.
    assert bursts["requests"] == 4 and bursts["failed"] == 0
    assert bursts["pieces_per_batch"] >= 1 and bursts["server_cpu_ms_per_audio_s"] > 0
    # The torch runner's search (on the CPU here): its host share measured per step, and
    # the runner alone decoding with beam search.
    assert all(search["searches"][name]["step_s"] > 0 for name in ("beam5", "greedy", "sample5"))
    assert beam5["beam"] == 5 and beam5["best"]["words"] > 0 and beam5["best"]["rtfx"] > 0
    assert stage1["copied_bytes"] > 0 and last["waiting"] == []
    # Everything was joined, checked against its sha256, and the staged voice and model
    # are where the servers read them.
    assert (work / "voices" / "piper").is_dir()
    assert any((work / "cache" / "voxserve" / "kokoro").rglob("kokoro-v1.0.int8.onnx"))
