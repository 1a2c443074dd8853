"""An agent framework's own client against voxserve: Pipecat's OpenAI services, each
pointed at the server by its base URL alone, with their default model names, drive
speech (`POST /v1/audio/speech`), transcription (an upload per turn) and live
transcription (`/v1/realtime`) on loopback.

Pipecat runs in a process of its own, from `.venv-agents` (`make test` builds it from the
pinned `tests/agents-requirements.txt`): its pins conflict with the server's (`soxr`), and
a process boundary is where a real client meets a server anyway. `tests/pipecat_client.py`
is that client.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.asr_support import wer
from tests.conftest import RunningServer

pytestmark = pytest.mark.timeout(150)

ROOT = Path(__file__).resolve().parents[1]
CLIENT = ROOT / "tests" / "pipecat_client.py"
TEXT = "Please call Stella and ask her to bring these things with her from the store."


def _agents_python() -> Path:
    """The interpreter of `.venv-agents` (or `VOXSERVE_AGENTS_PYTHON`). Missing, the test is
    skipped on a developer's machine and fails in CI, where `make test` must have built it."""
    path = Path(os.environ.get("VOXSERVE_AGENTS_PYTHON", ROOT / ".venv-agents" / "bin" / "python"))
    if not path.exists():
        message = f"{path} is missing; `make test` (or `make agents`) builds it"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def test_pipecat_openai_services_with_only_the_base_url_changed(server: RunningServer) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OPENAI_API_KEY", "OPENAI_BASE_URL")}
    run = subprocess.run(
        [str(_agents_python()), str(CLIENT), server.base_url, TEXT],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["tts"]["errors"] == [] and result["tts"]["audio_s"] > 2.0, result
    for service in ("stt", "realtime"):  # OpenAISTTService, OpenAIRealtimeSTTService
        heard = result[service]
        assert heard["errors"] == [], (service, heard)
        (transcript,) = heard["transcripts"]
        assert wer(TEXT, transcript) < 0.15, (service, transcript)
