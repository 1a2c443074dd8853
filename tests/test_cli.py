"""`voxserve speak` and `voxserve voices`, with no server; and how `voxserve serve` reads
its API key from a file (tests/test_shutdown.py runs a real `serve` on one)."""

from __future__ import annotations

import wave
from pathlib import Path

import pytest

from voxserve.cli import build_parser, main, server_config


def test_speak_writes_a_wav(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "hello.wav"
    assert main(["speak", "Hello from the command line.", "-o", str(out), "--sample-rate", "16000"]) == 0
    with wave.open(str(out)) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        seconds = w.getnframes() / w.getframerate()
    assert 1.0 < seconds < 5.0
    assert "wrote" in capsys.readouterr().out


def test_speak_refuses_bad_settings_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "no.wav"
    assert main(["speak", "Hello.", "-o", str(out), "--sample-rate", "100"]) == 2
    assert main(["speak", "Hello.", "-o", str(out), "--voice", "nobody"]) == 2
    err = capsys.readouterr().err
    assert "sample_rate" in err or "sample rate" in err, err
    assert "nobody" in err and "Traceback" not in err
    assert not out.exists()


def test_voices_lists_the_bundled_voice_and_aliases(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["voices"]) == 0
    out = capsys.readouterr().out
    assert "joe" in out and "alloy -> joe" in out


def test_voice_dir_serves_any_piper_voice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    from voxserve.runners.piper.onnx_runner import bundled_voice

    files = bundled_voice()
    voice_dir = tmp_path / "voices"
    voice_dir.mkdir()
    shutil.copy(files.model, voice_dir / "en_US-test-medium.onnx")
    shutil.copy(files.config, voice_dir / "en_US-test-medium.onnx.json")
    out = tmp_path / "v.wav"
    assert main(["speak", "A voice from a folder.", "-o", str(out), "--piper-voice-dir", str(voice_dir)]) == 0
    assert main(["voices", "--piper-voice-dir", str(voice_dir)]) == 0
    assert "en_US-test-medium" in capsys.readouterr().out


def test_voice_dir_without_a_voice_is_a_clear_error(tmp_path: Path) -> None:
    import pytest

    from voxserve.runners.piper.onnx_runner import find_voice

    with pytest.raises(ValueError, match="exactly one Piper voice"):
        find_voice(tmp_path)


def test_voices_names_a_missing_or_empty_voice_dir_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["voices", "--piper-voice-dir", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["voices", "--piper-voice-dir", str(tmp_path)]) == 2
    assert "exactly one Piper voice" in capsys.readouterr().err


# -- the API key from a file ---------------------------------------------------------------

KEY = "vx-file-key-8d2e61"


def test_the_key_file_can_come_from_the_environment(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(f"  {KEY}\r\n")
    args = build_parser().parse_args(["serve"])
    assert server_config(args, {"VOXSERVE_API_KEY_FILE": str(key_file)}).api_key == KEY
    # A flag wins over the environment; the key itself wins over a key file.
    flagged = build_parser().parse_args(["serve", "--api-key-file", str(key_file)])
    assert server_config(flagged, {"VOXSERVE_API_KEY": "from-env"}).api_key == KEY
    both = {"VOXSERVE_API_KEY": "from-env", "VOXSERVE_API_KEY_FILE": str(key_file)}
    assert server_config(args, both).api_key == "from-env"


def test_a_bad_key_file_is_a_clear_error_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("VOXSERVE_API_KEY", raising=False)
    monkeypatch.delenv("VOXSERVE_API_KEY_FILE", raising=False)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    spaced = tmp_path / "spaced"
    spaced.write_text("two words\n")
    cases = [
        (["--api-key-file", str(tmp_path / "missing")], "cannot read the API key file"),
        (["--api-key-file", str(tmp_path)], "cannot read the API key file"),
        (["--api-key-file", str(empty)], "is empty"),
        (["--api-key-file", "/dev/zero"], "over 4096 bytes"),
        (["--api-key-file", str(spaced)], "printable ASCII without spaces"),
        (["--api-key", KEY, "--api-key-file", str(empty)], "not both"),
    ]
    for argv, message in cases:
        assert main(["serve", "--no-asr", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert message in err, (argv, err)
        assert "two words" not in err
    monkeypatch.setenv("VOXSERVE_API_KEY_FILE", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="cannot read the API key file"):
        server_config(build_parser().parse_args(["serve"]))


def test_serve_puts_speech_where_device_says_unless_told_otherwise() -> None:
    parse = build_parser().parse_args
    both = server_config(parse(["serve", "--device", "cuda"]))
    assert (both.tts.device, both.asr.device) == ("cuda", "cuda")
    split = server_config(parse(["serve", "--device", "cuda", "--tts-device", "cpu"]))
    assert (split.tts.device, split.asr.device) == ("cpu", "cuda")
    default = server_config(parse(["serve"]))
    assert (default.tts.device, default.asr.device, default.tts.runtime) == ("auto", "auto", "auto")
    with pytest.raises(ValueError, match="CPU only"):
        server_config(parse(["serve", "--device", "cuda", "--tts-runtime", "onnx"]))


def test_speak_on_cuda_without_a_gpu_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["speak", "Hello.", "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
