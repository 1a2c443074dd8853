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
from voxserve.config import ASRConfig, ServerConfig, TTSConfig

pytestmark = pytest.mark.timeout(180)


def test_overload_sheds_with_429_and_stays_bounded(tmp_path: Path) -> None:
    config = ServerConfig(
        tts=replace(TTSConfig(), max_streams=4, max_queue=4, queue_timeout_s=5.0),
        asr=replace(ASRConfig(), max_requests=2, max_queue=2, queue_timeout_s=5.0),
    )
    out = tmp_path / "overload.json"
    with run_server(config) as srv:
        run = subprocess.run(
            [sys.executable, "-m", "voxserve.cli", "bench", "overload", "--base-url", srv.base_url,
             "--duration", "20", "--tts-concurrency", "32", "--asr-concurrency", "8",
             "--warmup-s", "5", "--window-s", "5", "--rss-limit-mb", "3072", "--no-progress",
             "-o", str(out)],
            check=False, capture_output=True, text=True, timeout=150,
        )
        state = srv.state
        assert state.admission.active == 0 and state.admission.queued == 0
        assert state.asr_admission.active == 0 and state.asr.budget.held == 0
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    assert result["verdict"] == "pass"
    speech, asr = result["speech"], result["transcribe"]
    # Far past capacity: both endpoints shed load with 429, and only with 429.
    assert set(speech["failures_by_status"]) == {"429"} and speech["completed"] >= 8
    assert set(asr["failures_by_status"]) == {"429"} and asr["completed"] >= 2
    assert result["retry_after_missing"] == 0
    # Admitted streams carried real audio, and transcripts were right.
    assert all(r["audio_s"] and r["audio_s"] > 0.5 for r in result["speech_records"] if r["status"] == 200)
    assert asr["wer"] is not None and asr["wer"] < 0.1
    # The server stayed responsive (a loose bound; the bench reports the real figures).
    assert result["health"]["p99"] < 0.25 and result["health"]["failures"] == 0
