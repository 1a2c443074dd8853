"""Plain WAV uploads (one channel of 16-bit PCM) are read without FFmpeg and give FFmpeg's
samples bit for bit; malformed headers are refused or go through FFmpeg; speech uploaded
as such a file is transcribed through that path."""

from __future__ import annotations

import io
import struct
import wave

import httpx
import numpy as np
import pytest

from tests.asr_support import SHORT, speak, wer
from tests.conftest import RunningServer
from voxserve.audio import decode
from voxserve.audio.decode import decode_audio
from voxserve.audio.wav import plain_wav
from voxserve.errors import InvalidRequest

pytestmark = pytest.mark.timeout(60)


def _wav(samples: np.ndarray, rate: int, channels: int = 1) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype("<i2").tobytes())
    return out.getvalue()


def _through_ffmpeg(data: bytes, monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
    with monkeypatch.context() as m:
        m.setattr(decode, "plain_wav", lambda _: None)
        return decode_audio(data, max_seconds=60)


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 24000, 44100])
def test_plain_path_gives_ffmpegs_samples(rate: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(rate)
    data = _wav((rng.standard_normal(rate * 3) * 4000).clip(-32768, 32767), rate)
    assert plain_wav(data) is not None
    fast = decode_audio(data, max_seconds=60)
    assert np.array_equal(fast, _through_ffmpeg(data, monkeypatch))
    cut = data[: len(data) // 2 + 1]  # a truncated upload: the whole samples it holds
    assert np.array_equal(decode_audio(cut, max_seconds=60), _through_ffmpeg(cut, monkeypatch))


def test_a_streamed_header_reads_to_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    streamed = bytearray(_wav(np.arange(-800, 800) * 16, 16000))
    struct.pack_into("<I", streamed, streamed.index(b"data") + 4, 0xFFFFFFFF)
    struct.pack_into("<I", streamed, 4, 0xFFFFFFFF)
    assert plain_wav(bytes(streamed)) is not None
    assert np.array_equal(decode_audio(bytes(streamed), max_seconds=60), _through_ffmpeg(bytes(streamed), monkeypatch))


def test_other_layouts_go_through_ffmpeg() -> None:
    stereo = _wav(np.zeros(3200), 16000, channels=2)
    assert plain_wav(stereo) is None and len(decode_audio(stereo, max_seconds=60)) == 1600
    assert plain_wav(b"RIFF\x00\x00\x00\x00WAVE") is None
    assert plain_wav(b"not a wav") is None


def test_hostile_headers_are_refused() -> None:
    one_hertz = bytearray(_wav(np.zeros(64), 16000))
    struct.pack_into("<I", one_hertz, 24, 1)  # the fmt chunk's rate
    with pytest.raises(InvalidRequest, match="too low"):
        decode_audio(bytes(one_hertz), max_seconds=60)
    with pytest.raises(InvalidRequest, match="limit"):
        decode_audio(_wav(np.zeros(16000 * 3), 16000), max_seconds=2)
    claims_more = bytearray(_wav(np.ones(160), 16000))
    struct.pack_into("<I", claims_more, claims_more.index(b"data") + 4, 2**31)
    assert len(decode_audio(bytes(claims_more), max_seconds=60)) == 160
    with pytest.raises(InvalidRequest, match="no audio samples"):
        decode_audio(_wav(np.zeros(0), 16000), max_seconds=60)


def test_a_plain_wav_upload_is_transcribed(server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    with httpx.Client(base_url=server.base_url, timeout=60) as c:
        data = speak(c, SHORT[0])  # a streamed WAV: its header gives no sizes
        assert plain_wav(data) is not None
        assert np.array_equal(decode_audio(data, max_seconds=60), _through_ffmpeg(data, monkeypatch))
        r = c.post("/v1/audio/transcriptions", files={"file": ("speech.wav", data, "audio/wav")},
                   data={"model": "whisper-1"})
    assert r.status_code == 200, r.text
    assert wer(SHORT[0], r.json()["text"]) < 0.2
