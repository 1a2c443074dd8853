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
