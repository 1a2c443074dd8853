"""`voxserve bench` end to end: small runs against a real voxserve on loopback.

The ASR set is spoken by the server's own TTS and transcribed by its own Whisper, so the
whole `make-asr-set` -> `transcribe` path runs through the real stack.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import math
import time
import wave
from pathlib import Path

import pytest

from tests.conftest import RunningServer
from voxserve.bench.load import run_level
from voxserve.bench.offline import chunk_windows
from voxserve.cli import main
from voxserve.engine.work import VocoderChunking

SHORT_PROMPTS = [
    "Hello there.",
    "Turn left at the next corner, then keep going.",
    "The kettle is boiling, so please make the tea.",
]


def _speech_args(base_url: str, tmp_path: Path, *extra: str) -> list[str]:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(SHORT_PROMPTS) + "\n", encoding="utf-8")
    return ["bench", "speech", "--base-url", base_url, "--prompts", str(prompts),
            "--no-progress", "--warmup", "1", *extra]


@pytest.mark.timeout(90)
def test_speech_bench_json_plot_and_compare(server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, png = tmp_path / "run.json", tmp_path / "run.png"
    rc = main(_speech_args(server.base_url, tmp_path, "--concurrency", "1,2",
                           "--num-prompts", "3", "-o", str(out), "--plot", str(png)))
    assert rc == 0
    result = json.loads(out.read_text())
    settings = result["settings"]
    assert result["kind"] == "speech"
    assert settings["base_url"] == server.base_url
    assert settings["concurrency"] == [1, 2] and settings["num_prompts"] == 3
    assert len(settings["prompts"]) == 3 and settings["started_at"]
    assert "git_revision" in settings and settings["underrun_threshold_s"] == 0.1
    assert [lv["concurrency"] for lv in result["levels"]] == [1, 2]
    for level in result["levels"]:
        s = level["summary"]
        assert s["completed"] == 3 and s["failed"] == 0 and s["failures_by_status"] == {}
        assert s["audio_throughput"] > 0 and s["request_throughput"] > 0
        assert s["audio_throughput"] == pytest.approx(s["audio_s"] / s["wall_s"])
        assert 0.0 <= s["continuity_ok_rate"] <= 1.0
        assert s["sample_rates"] == [24000]  # the server's header, not a guess
        assert s["ttfp_s"]["p50"] <= s["ttfp_s"]["p99"] <= s["ttfp_s"]["max"]
        assert level["health"]["n"] > 0 and level["health"]["failures"] == 0
        assert len(level["records"]) == 3
        for rec in level["records"]:
            assert rec["status"] == 200 and rec["error"] is None
            assert rec["chunk_times_s"] and len(rec["chunk_times_s"]) == len(rec["chunk_bytes"])
            assert rec["chunk_times_s"] == sorted(rec["chunk_times_s"])
            assert 0 < rec["ttfp_s"] == rec["chunk_times_s"][0] <= rec["e2el_s"]
            assert rec["chunk_times_s"][-1] <= rec["e2el_s"]
            assert rec["audio_s"] == pytest.approx(sum(rec["chunk_bytes"]) / 2 / 24000)
            assert rec["rtf"] == pytest.approx(rec["e2el_s"] / rec["audio_s"])
            assert rec["max_underrun_s"] >= 0
            assert 0 < rec["server_timing_s"]["total"] < rec["ttfp_s"]
        parts = s["first_packet_s"]
        assert {"text", "queue", "acoustic", "decode", "encode", "total", "http"} <= set(parts)
        assert parts["acoustic"]["n"] == 3 and parts["http"]["p50"] >= 0
        tail = s["first_packet_tail_s"]  # the slowest first packet's parts add up to its TTFP
        assert tail["n"] == 1 and tail["ttfp"] == pytest.approx(s["ttfp_s"]["max"])
        assert tail["total"] + tail["http"] == pytest.approx(tail["ttfp"])
    assert result["health"]["n"] >= sum(lv["health"]["n"] for lv in result["levels"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = capsys.readouterr().out
    assert "TTFP p50 ms" in table and "/health over the run" in table
    assert "c=1 first packet p50 ms: parse" in table and "= server" in table

    packed = tmp_path / "run.json.gz"  # as docs/bench keeps the larger results
    packed.write_bytes(gzip.compress(out.read_bytes()))
    assert main(["bench", "compare", str(out), str(packed)]) == 0
    compared = capsys.readouterr().out
    assert "c=1" in compared and "c=2" in compared and "1.00" in compared

    overlay = tmp_path / "both.png"
    assert main(["bench", "plot", str(out), str(out), "--label", "a", "--label", "b",
                 "-o", str(overlay)]) == 0
    assert overlay.stat().st_size > 10_000


@pytest.mark.timeout(90)
def test_speech_bench_records_429s(tight_server: RunningServer, tmp_path: Path) -> None:
    out = tmp_path / "busy.json"  # one stream at a time, no queue
    rc = main(_speech_args(tight_server.base_url, tmp_path, "--concurrency", "3", "--num-prompts",
                           "6", "--no-probe-health", "-o", str(out), "--fail-on-error"))
    assert rc == 1  # some requests failed and --fail-on-error was given
    level = json.loads(out.read_text())["levels"][0]
    s = level["summary"]
    assert s["completed"] >= 1 and s["failed"] >= 1
    assert s["failures_by_status"] == {"429": s["failed"]}
    refused = [r for r in level["records"] if r["status"] == 429]
    assert all(r["retry_after"] and r["error"] and r["ttfp_s"] is None for r in refused)
    assert "health" not in level


@pytest.mark.timeout(30)
def test_unknown_voice_fails_fast(server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(_speech_args(server.base_url, tmp_path, "--voice", "nobody", "--concurrency", "1",
                           "--num-prompts", "1", "-o", str(tmp_path / "x.json")))
    assert rc == 2
    assert "warm-up request" in capsys.readouterr().err


@pytest.mark.timeout(90)
def test_make_asr_set_then_transcribe(server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prompts = tmp_path / "asr.txt"
    prompts.write_text("Hello there, how are you today.\nThe kettle is boiling.\n")
    folder = tmp_path / "asr"
    assert main(["bench", "make-asr-set", "--base-url", server.base_url, "--out", str(folder),
                 "--prompts", str(prompts), "--request-sample-rate", "16000"]) == 0
    assert sorted(p.name for p in folder.iterdir()) == [
        "000.txt", "000.wav", "001.txt", "001.wav", "manifest.jsonl"]
    with wave.open(str(folder / "000.wav")) as w:
        assert w.getframerate() == 16000 and w.getnframes() > 8000
    assert (folder / "001.txt").read_text().strip() == "The kettle is boiling."
    capsys.readouterr()

    out = tmp_path / "asr.json"
    rc = main(["bench", "transcribe", "--base-url", server.base_url, "--manifest",
               str(folder / "manifest.jsonl"), "--concurrency", "1,2", "--warmup", "1",
               "--no-progress", "-o", str(out)])
    assert rc == 0
    result = json.loads(out.read_text())
    assert result["kind"] == "transcribe"
    for level in result["levels"]:
        s = level["summary"]
        assert s["completed"] == 2 and s["failed"] == 0
        assert s["rtfx"] == pytest.approx(s["audio_s"] / s["wall_s"]) and s["rtfx"] > 0
        assert s["wer_clips"] == 2 and 0.0 <= s["wer"] <= 0.2  # tiny.en on clean TTS speech
        assert s["latency_s"]["p50"] > 0 and level["health"]["n"] > 0
        for rec in level["records"]:
            assert rec["text"] and rec["reference_words"] in (6, 4)
    assert "RTFx" in capsys.readouterr().out

    # --diarize asks for speaker labels; the diarized transcript's text is scored the same
    rc = main(["bench", "transcribe", "--base-url", server.base_url, "--manifest",
               str(folder / "manifest.jsonl"), "--concurrency", "1", "--diarize", "--no-progress", "-o", str(out)])
    assert rc == 0
    result = json.loads(out.read_text())
    assert result["settings"]["model"] == "gpt-4o-transcribe-diarize" and result["settings"]["diarize"]
    assert result["levels"][0]["summary"]["failed"] == 0 and result["levels"][0]["summary"]["wer"] <= 0.2


def test_closed_loop_and_poisson_keep_the_concurrency_cap() -> None:
    in_flight = peak = 0

    async def fn(index: int, scheduled: float) -> tuple[int, float, float]:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        sent = time.perf_counter()
        await asyncio.sleep(0.01)
        in_flight -= 1
        return index, scheduled, sent

    closed = asyncio.run(run_level(fn, 12, 3, progress=False))
    assert [r[0] for r in closed.results] == list(range(12)) and peak == 3
    peak = 0
    poisson = asyncio.run(run_level(fn, 30, 2, request_rate=500.0, seed=1, progress=False))
    scheduled = [r[1] for r in poisson.results]
    assert scheduled == sorted(scheduled) and peak <= 2
    assert all(sent >= due - 1e-6 for _, due, sent in poisson.results)
    assert not math.isnan(poisson.wall_s) and poisson.wall_s > 0


def test_offline_chunking_matches_the_engine_rule() -> None:
    c = VocoderChunking()
    assert chunk_windows(100, c, first=True) == [
        (0, 26, 0, 16), (6, 58, 16, 48), (38, 100, 48, 100)]
    # a later segment gets full-size chunks; a tail shorter than 16 frames joins its chunk
    assert chunk_windows(40, c, first=False) == [(0, 40, 0, 40)]
    assert chunk_windows(300, c, first=False) == [(0, 138, 0, 128), (118, 266, 128, 256), (246, 300, 256, 300)]
    assert chunk_windows(10, c, first=True) == [(0, 10, 0, 10)]


@pytest.mark.timeout(60)
def test_offline_measures_audio_per_second(tmp_path: Path) -> None:
    out = tmp_path / "offline.json"
    assert main(["bench", "offline", "--threads", "1", "--seconds", "0.3", "-o", str(out)]) == 0
    points = json.loads(out.read_text())["points"]
    assert {p["mode"] for p in points} == {"full", "chunked"}
    assert all(p["audio_per_s"] > 1 and p["segments"] >= 1 for p in points)


@pytest.mark.timeout(60)
def test_offline_measures_kokoro(tmp_path: Path) -> None:
    prompts, out = tmp_path / "prompts.txt", tmp_path / "offline.json"
    prompts.write_text("Hi.\n", encoding="utf-8")
    assert main(["bench", "offline", "--model", "kokoro", "--threads", "1", "--seconds", "0.1",
                 "--prompts", str(prompts), "-o", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["settings"]["model"] == "kokoro" and result["settings"]["voice"] == "af_heart"
    # one thread: `intra` (one thread on N-thread sessions) is the same point, so it is skipped
    (point,) = result["points"]
    assert point["mode"] == "full" and point["threads"] == 1 and point["segments"] >= 1
    assert point["audio_s"] >= 0.5 * point["segments"]  # "Hi." and the pads' silence
    assert math.isfinite(point["audio_per_s"]) and point["audio_per_s"] > 0
    assert main(["bench", "offline", "--model", "kokoro", "--mode", "chunked"]) == 2


def test_git_revision_reads_a_checkout_and_a_worktree(tmp_path: Path) -> None:
    from voxserve.bench.report import git_revision

    main_git = tmp_path / "main" / ".git"
    (main_git / "refs" / "heads").mkdir(parents=True)
    (main_git / "HEAD").write_text("ref: refs/heads/main\n")
    (main_git / "refs" / "heads" / "main").write_text("a" * 40 + "\n")
    (main_git / "packed-refs").write_text("b" * 40 + " refs/heads/topic\n")
    assert git_revision(tmp_path / "main" / "voxserve" / "bench" / "report.py") == "a" * 40
    own = main_git / "worktrees" / "wt"
    own.mkdir(parents=True)
    (own / "HEAD").write_text("ref: refs/heads/topic\n")
    (own / "commondir").write_text("../..\n")
    (tmp_path / "wt").mkdir()
    (tmp_path / "wt" / ".git").write_text(f"gitdir: {own}\n")
    assert git_revision(tmp_path / "wt" / "voxserve" / "report.py") == "b" * 40
    assert git_revision(Path("/")) is None
