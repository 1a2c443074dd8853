"""`voxserve speak` and `voxserve voices`, with no server."""

from __future__ import annotations

import wave

from voxserve.cli import main


def test_speak_writes_a_wav(tmp_path, capsys) -> None:
    out = tmp_path / "hello.wav"
    assert main(["speak", "Hello from the command line.", "-o", str(out), "--sample-rate", "16000"]) == 0
    with wave.open(str(out)) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        seconds = w.getnframes() / w.getframerate()
    assert 1.0 < seconds < 5.0
    assert "wrote" in capsys.readouterr().out


def test_voices_lists_the_bundled_voice_and_aliases(capsys) -> None:
    assert main(["voices"]) == 0
    out = capsys.readouterr().out
    assert "joe" in out and "alloy -> joe" in out


def test_voice_dir_serves_any_piper_voice(tmp_path, capsys) -> None:
    import shutil

    from voxserve.runners.piper import bundled_voice

    files = bundled_voice()
    voice_dir = tmp_path / "voices"
    voice_dir.mkdir()
    shutil.copy(files.model, voice_dir / "en_US-test-medium.onnx")
    shutil.copy(files.config, voice_dir / "en_US-test-medium.onnx.json")
    out = tmp_path / "v.wav"
    assert main(["speak", "A voice from a folder.", "-o", str(out), "--voice-dir", str(voice_dir)]) == 0
    assert main(["voices", "--voice-dir", str(voice_dir)]) == 0
    assert "en_US-test-medium" in capsys.readouterr().out


def test_voice_dir_without_a_voice_is_a_clear_error(tmp_path) -> None:
    import pytest

    from voxserve.runners.piper import find_voice

    with pytest.raises(ValueError, match="exactly one Piper voice"):
        find_voice(tmp_path)
