"""`voxserve bench realtime` and `bench voice-loop` end to end: short runs against a real
voxserve on loopback, whose own TTS speaks the clips and whose `/v1/realtime` hears them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import MakeServer, RunningServer, tts_config
from voxserve.cli import main
from voxserve.config import RealtimeConfig

# Clips are streamed in real time, and the pacing and the latencies bounded: run alone.
pytestmark = pytest.mark.serial


def _live_args(kind: str, server: RunningServer, out: Path, *extra: str) -> list[str]:
    return ["bench", kind, "--base-url", server.base_url, "--concurrency", "1", "--num-clips",
            "2", "--language", "en", "--no-progress", "-o", str(out), *extra]


@pytest.mark.timeout(90)
def test_realtime_bench_one_session_two_utterances(server: RunningServer, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out, png = tmp_path / "rt.json", tmp_path / "rt.png"
    rc = main(_live_args("realtime", server, out, "--utterances", "2", "--gap-s", "1.0",
                         "--warmup", "0", "--files", "1", "--file-seconds", "3",
                         "--plot", str(png)))
    assert rc == 0
    result = json.loads(out.read_text())
    settings = result["settings"]
    assert result["kind"] == "realtime" and settings["git_revision"] and settings["host"]
    assert settings["silence_ms"] == 500 and settings["frame_ms"] == 20
    assert settings["utterances_per_session"] == 2 and len(settings["clips"]) == 2
    (level,) = result["levels"]
    s = level["summary"]
    assert s["utterances"] == 2 and s["completed"] == 2 and s["failed"] == 0, s["failures_by_status"]
    assert s["error_events"] == {} and s["unmatched_events"] == 0
    for key in ("completed_latency_s", "speech_stopped_latency_s"):
        assert 0 < s[key]["p50"] <= s[key]["p90"] <= s[key]["max"] < 5
    # the server cannot call the turn over before its silence has passed
    assert s["speech_stopped_latency_s"]["p50"] >= 0.4
    assert s["wer_live"] < 0.5 and s["wer_file"] is not None and s["wer_file"] < 0.5
    assert s["deltas_per_utterance"] >= 0 and s["pacing_late_max_s"] < 0.5
    assert s["file_pass"]["completed"] == 2
    files = s["files"]  # one loop uploading the two clips joined (>= 3 s) beside the session
    assert files["completed"] >= 1 and files["failed"] == 0 and files["rtfx"] > 0
    assert files["audio_s"] >= 3 * files["completed"] and files["wer"] < 0.5
    assert level["health"]["n"] > 0 and level["health"]["failures"] == 0
    (session,) = level["records"]
    assert session["error"] is None and session["frames_sent"] > 100
    assert session["events"][:3] == ["session.created", "session.updated",
                                     "input_audio_buffer.speech_started"]
    for u in session["utterances"]:
        assert u["failure"] is None and u["transcript"] and len(u["items"]) == 1
        assert u["end_of_speech_at_s"] < u["speech_stopped_at_s"] <= u["completed_at_s"]
        assert u["committed"] == 1 and u["usage_s"] > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "completed p50 ms" in capsys.readouterr().out


@pytest.mark.timeout(90)
def test_voice_loop_bench_one_conversation_two_turns(server: RunningServer, tmp_path: Path) -> None:
    replies = tmp_path / "replies.txt"
    replies.write_text("Sure, I can help with that.\nThe train leaves at noon.\n")
    out = tmp_path / "vl.json"
    rc = main(_live_args("voice-loop", server, out, "--turns", "2", "--warmup", "0",
                         "--replies", str(replies), "--pause-ms", "200"))
    assert rc == 0
    result = json.loads(out.read_text())
    assert result["kind"] == "voice-loop" and result["settings"]["tokens_per_s"] == 20
    (level,) = result["levels"]
    s = level["summary"]
    assert s["turns"] == 2 and s["completed"] == 2 and s["failed"] == 0, s["failures_by_status"]
    assert 0 < s["voice_to_voice_s"]["p50"] <= s["voice_to_voice_s"]["max"] < 5
    assert 0 < s["completed_latency_s"]["p50"] < 5
    assert 0.0 <= s["continuity_ok_rate"] <= 1.0 and s["stall_total_s"] >= 0
    assert s["wer_live"] < 0.5 and level["health"]["n"] > 0
    (conversation,) = level["records"]
    assert conversation["error"] is None
    for turn in conversation["turns"]:
        # voice to voice is measured on every turn, after the transcript came
        assert turn["voice_to_voice_s"] is not None and turn["failure"] is None
        assert turn["voice_to_voice_s"] > turn["completed_latency_s"] > 0
        assert turn["sample_rate"] == 24000 and turn["reply_audio_s"] > 0.5
        assert turn["segments"] >= 1 and turn["stalls"] >= 0
    first, second = conversation["turns"]
    # the user spoke again only after the first reply had played
    assert second["user"]["start_ms"] > 0 and first["played_until_s"] is not None
    assert second["reply_started_at_s"] > first["played_until_s"]


@pytest.mark.timeout(90)
def test_realtime_bench_records_refused_sessions(make_server: MakeServer, tmp_path: Path) -> None:
    out = tmp_path / "busy.json"
    config = replace(tts_config(noise_w=0.0, noise_scale=0.0), realtime=RealtimeConfig(max_sessions=1))
    with make_server(config) as busy:
        rc = main(_live_args("realtime", busy, out, "--concurrency", "2", "--utterances", "1",
                             "--warmup", "0", "--no-probe-health", "--fail-on-error"))
    assert rc == 1  # one session was refused and --fail-on-error was given
    level = json.loads(out.read_text())["levels"][0]
    s = level["summary"]
    assert s["completed"] == 1 and s["failed"] == 1 and s["sessions_failed"] == 1
    assert s["failures_by_status"] == {"session_too_many_sessions": 1}
    refused = [r for r in level["records"] if r["error"]]
    assert len(refused) == 1 and "too_many_sessions" in refused[0]["error"]
    assert "health" not in level


@pytest.mark.timeout(90)
def test_voice_loop_bench_barges_in(server: RunningServer, tmp_path: Path) -> None:
    replies = tmp_path / "replies.txt"
    long = "I can help with that, and there is a lot to say about it, so let me go through it step by step."
    replies.write_text(f"{long} {long}\nThe train leaves at noon.\n")
    out = tmp_path / "vl.json"
    rc = main(_live_args("voice-loop", server, out, "--turns", "2", "--warmup", "0",
                         "--replies", str(replies), "--barge-in-ms", "300"))
    assert rc == 0
    result = json.loads(out.read_text())
    assert result["settings"]["barge_in_ms"] == 300
    (level,) = result["levels"]
    s = level["summary"]
    assert s["turns"] == 2 and s["completed"] == 2, s["failures_by_status"]
    assert s["error_events"] == {}
    barge = s["barge_in"]
    assert barge["turns"] == 1 and barge["cancelled"] == 1
    # The reply stops at once once the agent cancels: loose bounds, they prove the mechanism.
    assert 0 < barge["answer_s"]["max"] < 2 and barge["audio_after_cancel_s"]["max"] < 1
    assert 0 < barge["detect_s"]["p50"] < 2
    assert s["voice_to_voice_after_barge_in_s"]["n"] == 1 and s["voice_to_voice_first_turn_s"]["n"] == 1
    assert 0 < s["reply_first_audio_after_barge_in_s"]["p50"] < s["voice_to_voice_after_barge_in_s"]["p50"]
    first, second = level["records"][0]["turns"]
    assert first["barge_in"] is not None and second["after_barge_in"]
    # The user spoke over the first reply (cancelled before its input.flushed came).
    assert first["barge_in"]["onset_at_s"] < first["barge_in"]["cancel_sent_at_s"]
    assert first["reply_done_at_s"] is None
    assert second["voice_to_voice_s"] > 0 and second["reply_audio_s"] > 0.5
