"""Overload at a small scale, driven by `voxserve bench overload` in its own process: many
more speech and transcription clients than the server admits. Refused requests get 429
with Retry-After, nothing else fails, admitted streams play to the end, /health stays
fast, and memory stays bounded. The full-size run (c=256 + c=32) is in docs/BENCHMARKS.md."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import run_server
from voxserve.config import ASRConfig, ServerConfig, TTSConfig, WSConfig

# It measures this process's memory and /health's latency under the overload: run alone.
pytestmark = [pytest.mark.serial, pytest.mark.timeout(180)]


def _rss_mb() -> float:
    """This process's resident memory: the server under test runs in it, beside whatever
    the tests before this one loaded."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_overload_sheds_with_429_and_stays_bounded(tmp_path: Path) -> None:
    config = ServerConfig(
        tts=replace(TTSConfig(), max_streams=4, max_queue=4, queue_timeout_s=5.0),
        asr=replace(ASRConfig(), max_requests=2, max_queue=2, queue_timeout_s=5.0),
    )
    out = tmp_path / "overload.json"
    with run_server(config, asr_nice=True) as srv:
        # The overload may add at most 1 GiB to what the process held before it.
        rss_limit = _rss_mb() + 1024
        # 6 s of load: the bench reads /metrics every 5 s, so one RSS sample falls in it.
        run = subprocess.run(
            [sys.executable, "-m", "voxserve.cli", "bench", "overload", "--base-url", srv.base_url,
             "--duration", "6", "--tts-concurrency", "32", "--asr-concurrency", "8",
             "--warmup-s", "3", "--window-s", "3", "--rss-limit-mb", f"{rss_limit:.0f}", "--no-progress",
             "-o", str(out)],
            check=False, capture_output=True, text=True, timeout=150,
        )
        state = srv.state
        assert state.admission.active == 0 and state.admission.queued == 0
        assert srv.asr_admission.active == 0 and srv.asr.budget.held == 0
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    assert result["verdict"] == "pass"
    speech, asr = result["speech"], result["transcribe"]
    # Far past capacity: both endpoints shed load with 429, and only with 429.
    # Every slot served at least one client to the end, however fast this machine is.
    assert set(speech["failures_by_status"]) == {"429"} and speech["completed"] >= config.tts.max_streams
    assert set(asr["failures_by_status"]) == {"429"} and asr["completed"] >= config.asr.max_requests
    assert result["retry_after_missing"] == 0
    # Admitted streams carried real audio, and transcripts were right.
    assert all(r["audio_s"] and r["audio_s"] > 0.5 for r in result["speech_records"] if r["status"] == 200)
    assert asr["wer"] is not None and asr["wer"] < 0.1
    # The server stayed responsive (a loose bound; the bench reports the real figures).
    assert result["health"]["p99"] < 0.25 and result["health"]["failures"] == 0


def test_soak_with_hostile_clients_costs_them_only_their_connections(tmp_path: Path) -> None:
    """`bench soak --hostile 1`: one client of each hostile kind (stalled upload, header
    dribbler, slow reader, vanishing and oversized WebSocket) in loops beside a normal
    load. The server ends every attempt, the normal clients all succeed and play without
    gaps, and once the load stops nothing is left open. Short timeouts keep it quick."""
    config = replace(
        ServerConfig(),
        header_timeout_s=2.0,
        body_idle_timeout_s=2.0,
        send_stall_timeout_s=3.0,
        ws=replace(WSConfig(), send_timeout_s=3.0),
    )
    out = tmp_path / "soak.json"
    with run_server(config, asr_nice=True) as srv:
        run = subprocess.run(
            [sys.executable, "-m", "voxserve.cli", "bench", "soak", "--base-url", srv.base_url,
             "--duration", "10", "--tts-concurrency", "2", "--asr-concurrency", "1",
             "--hostile", "1", "--hostile-hold", "20", "--warmup-s", "3", "--window-s", "3",
             "--max-rss-growth", "0.25", "--min-continuity", "0.9", "--no-progress", "-o", str(out)],
            check=False, capture_output=True, text=True, timeout=150,
        )
        state = srv.state
        assert state.admission.active == 0 and state.ws_open == 0
        assert srv.asr_admission.active == 0 and srv.asr.budget.held == 0
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    assert result["verdict"] == "pass"
    hostile = result["hostile"]
    assert all(h["attempts"] >= 1 and h["ended_by_server"] == h["attempts"] for h in hostile.values()), hostile
    assert set(hostile["stalled_upload"]["statuses"]) <= {"408"}
    assert set(hostile["oversized_ws"]["statuses"]) == {"1009"}
    assert result["speech"]["completed"] >= 4 and not result["speech"]["failures_by_status"]
    assert result["transcribe"]["completed"] >= 2 and not result["transcribe"]["failures_by_status"]
    assert result["settled"]["idle"] and result["health"]["failures"] == 0
