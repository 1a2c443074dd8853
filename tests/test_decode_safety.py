"""Uploads decode only as audio.

An FFmpeg concat script naming a WAV beside the server was decoded and transcribed: the
answer held the words of a local file. These tests put a real recording of speech beside
the server's working directory, prove that an unrestricted PyAV really reads it through
each script, and then upload those scripts: each gets 400 `invalid_audio` with nothing of
the file in the answer, while /health and a normal transcription are served meanwhile.
Common audio formats still decode.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import av
import httpx
import numpy as np
import pytest
from av.audio.stream import AudioStream

from tests.asr_support import SHORT, normalize, speak, wav_bytes
from tests.conftest import RunningServer
from voxserve.audio.decode import ACCEPTED_FORMATS, accepted, decode_audio
from voxserve.errors import InvalidRequest

pytestmark = pytest.mark.timeout(120)

ASR = "/v1/audio/transcriptions"
SECRET = SHORT[1]  # "Please call Stella and ask her to bring these things with her from the store."
SECRET_WORDS = {"stella", "bring", "things", "store", "please"}
SECRET_PATH = "clips/secret.wav"  # relative: resolved against the server's working directory

ATTACKS = {
    "concat": f"ffconcat version 1.0\nfile {SECRET_PATH}\n",
    "concat_file_protocol": f"ffconcat version 1.0\nfile file:{SECRET_PATH}\n",
    "hls": f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:4.0,\n{SECRET_PATH}\n#EXT-X-ENDLIST\n",
    "hls_file_protocol": (
        f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:4.0,\nfile:{SECRET_PATH}\n#EXT-X-ENDLIST\n"
    ),
    # SBaGen: FFmpeg synthesizes hours of sound from a few bytes of text.
    "sbg_script": "-SE\nalpha: 200+10/1\nNOW alpha\n",
}


@pytest.fixture(scope="module")
def secret_wav(server: RunningServer) -> bytes:
    with httpx.Client(base_url=server.base_url, timeout=60) as c:
        return speak(c, SECRET)


@pytest.fixture()
def beside_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secret_wav: bytes) -> Iterator[Path]:
    """The server (in this process) runs in a folder holding clips/secret.wav."""
    (tmp_path / "clips").mkdir()
    (tmp_path / SECRET_PATH).write_bytes(secret_wav)
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def test_the_attack_is_real_without_the_allow_list(beside_server: Path) -> None:
    # Opened with every demuxer allowed, the concat script reads the local file.
    with av.open(io.BytesIO(ATTACKS["concat"].encode()), "r", metadata_errors="ignore") as container:
        assert container.format.name == "concat"
        samples = sum(frame.samples for frame in container.decode(audio=0))
    with av.open(str(beside_server / SECRET_PATH)) as local:
        assert samples == sum(frame.samples for frame in local.decode(audio=0)) > 0


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_scripts_do_not_decode(beside_server: Path, name: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        decode_audio(ATTACKS[name].encode(), max_seconds=60)
    assert refused.value.code == "invalid_audio" and refused.value.param == "file"


@pytest.mark.serial  # /health's latency is bounded
def test_script_uploads_get_400_and_nothing_of_the_file(
    beside_server: Path, server: RunningServer, client: httpx.Client, short_speech: list[np.ndarray]
) -> None:
    normal = wav_bytes(short_speech[0])
    probes: list[tuple[int, float]] = []
    done = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=server.base_url, timeout=10) as c:
            while not done.is_set():
                started = time.monotonic()
                probes.append((c.get("/health").status_code, time.monotonic() - started))
                time.sleep(0.02)

    def upload(data: bytes, filename: str) -> httpx.Response:
        with httpx.Client(base_url=server.base_url, timeout=60) as c:
            return c.post(ASR, files={"file": (filename, data)}, data={"model": "whisper-1"})

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        with ThreadPoolExecutor(len(ATTACKS) + 1) as pool:
            attacks = {
                name: pool.submit(upload, script.encode(), "a.m3u8" if name.startswith("hls") else "a.wav")
                for name, script in ATTACKS.items()
            }
            ok = pool.submit(upload, normal, "b.wav")
            answers = {name: future.result() for name, future in attacks.items()}
            answer = ok.result()
    finally:
        done.set()
        prober.join()

    for name, r in answers.items():
        assert r.status_code == 400, (name, r.text)
        error = r.json()["error"]
        assert error["code"] == "invalid_audio" and error["param"] == "file", name
        assert not SECRET_WORDS & set(normalize(r.text).split()), (name, r.text)
    assert answer.status_code == 200, answer.text
    assert "fox" in normalize(answer.json()["text"])
    assert probes and all(status == 200 for status, _ in probes)
    assert max(seconds for _, seconds in probes) < 2.0


def test_allow_list_names_real_demuxers_and_no_script_formats() -> None:
    demuxers: set[str] = set()
    for name in av.formats_available:
        try:
            demuxers.update(av.ContainerFormat(name, "r").name.split(","))
        except ValueError:
            pass  # a muxer only
    assert ACCEPTED_FORMATS <= demuxers
    for script in ("concat", "hls", "dash", "image2", "image2pipe", "sbg", "lavfi", "ffmetadata",
                   "webm_dash_manifest", "tty", "bin", "data", "mpjpeg", "srt"):
        assert not accepted(script), script
    assert accepted("matroska,webm") and accepted("mov,mp4,m4a,3gp,3g2,mj2")


def _encode(fmt: str, codec: str, rate: int) -> bytes:
    t = np.arange(3 * rate) / rate
    tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)[None]
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as out:
        stream = out.add_stream(codec, rate=rate, layout="mono")
        assert isinstance(stream, AudioStream)  # an audio codec's name gives an audio stream
        formats = stream.codec_context.codec.audio_formats
        assert formats  # an audio codec lists its sample formats
        frame = av.AudioFrame.from_ndarray(tone, format="flt", layout="mono")
        frame.sample_rate = rate
        resampler = av.AudioResampler(format=formats[0].name, layout="mono", rate=rate)
        for piece in resampler.resample(frame):
            out.mux(stream.encode(piece))
        out.mux(stream.encode(None))
    return buf.getvalue()


@pytest.mark.parametrize(
    ("fmt", "codec", "rate"),
    [
        ("wav", "pcm_s16le", 16000), ("w64", "pcm_s16le", 16000), ("aiff", "pcm_s16be", 22050),
        ("caf", "pcm_s16le", 16000), ("au", "pcm_s16be", 8000), ("flac", "flac", 44100),
        ("mp3", "libmp3lame", 24000), ("ogg", "libopus", 48000), ("webm", "libopus", 48000),
        ("ipod", "aac", 16000), ("mp4", "aac", 16000), ("adts", "aac", 16000),
        ("amr", "libopencore_amrnb", 8000), ("avi", "pcm_s16le", 16000),
    ],
)
def test_common_formats_still_decode(fmt: str, codec: str, rate: int) -> None:
    audio = decode_audio(_encode(fmt, codec, rate), max_seconds=60)
    assert 2.9 < len(audio) / 16000 < 3.2
    assert 0.1 < float(np.max(np.abs(audio))) < 0.5
