"""Hostile and broken requests against the real server: each gets a clear 4xx in the
OpenAI error shape, or a correct 200, quickly; never a 500 or a hang. The last test
checks that the server still serves normal requests afterwards.

Cases that `test_speech_api.py` and `test_asr_api.py` already cover are not repeated.
"""

from __future__ import annotations

import struct
import time
from typing import Any

import httpx
import numpy as np
import pytest

pytestmark = pytest.mark.timeout(120)

SPEECH = "/v1/audio/speech"
ASR = "/v1/audio/transcriptions"
TEXT = "The quick brown fox jumps over the lazy dog."


def openai_error(r: httpx.Response, status: int = 400, param: str | None = None) -> str:
    """The message of a well-formed OpenAI error response."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["message"]
    if param is not None:
        assert error["param"] == param
    return str(error["message"])


def speak(client: httpx.Client, text: str, **fields: Any) -> httpx.Response:
    body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm", **fields}
    return client.post(SPEECH, json=body)


def raw_speech(client: httpx.Client, raw: bytes) -> httpx.Response:
    return client.post(SPEECH, content=raw, headers={"content-type": "application/json"})


def pcm_seconds(r: httpx.Response) -> float:
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "audio/pcm"
    pcm = np.frombuffer(r.content, dtype=np.int16)
    assert np.abs(pcm).max() > 1000  # real sound, not silence
    return len(pcm) / int(r.headers["x-sample-rate"])


# -- speech: text ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "\x01\x02\x03\x07\x1b\x7f",
        "\x00\x00\x00",
        "!" * 4096,
        ". " * 2048,
        "?!\u2026\u2014()\u00ab\u00bb",
    ],
    ids=["control", "nul", "4096-bang", "periods", "mixed-punctuation"],
)
def test_nothing_to_speak_is_refused(client: httpx.Client, text: str) -> None:
    # Punctuation alone says nothing. The phonemizer would read a run of "!" as the word
    # "exclamation", which is not what the text asks for.
    message = openai_error(speak(client, text), 400, "input")
    assert "nothing that can be spoken" in message and "send words" in message


def test_emoji_are_spoken_by_name(client: httpx.Client) -> None:
    # Emoji are symbols with names ("grinning face"), as a screen reader says them.
    assert 1.0 < pcm_seconds(speak(client, "\U0001f600\U0001f389\U0001f680")) < 5.0


@pytest.mark.slow
def test_4096_letters_are_spoken(client: httpx.Client) -> None:
    # Letters are text, however odd: the longest accepted input is spoken in full.
    started = time.monotonic()
    seconds = pcm_seconds(speak(client, "a" * 4096))
    assert seconds > 10
    assert time.monotonic() - started < 60


# -- speech: the JSON body -------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b'{"model": "tts-1", "voice": "alloy", "input": "h\xff\xfei"}', "not valid UTF-8"),
        (b'{"model": "tts-1", "voice": "alloy", "input": "\xc3"}', "not valid UTF-8"),
        (
            b'{"model": "tts-1", "voice": "alloy", "input": "hi", "speed": 1' + b"0" * 5000 + b"}",
            "too many digits",
        ),
        (
            b'{"model": "tts-1", "voice": "alloy", "input": '
            + b"[" * 100_000
            + b"]" * 100_000
            + b"}",
            "nested too deeply",
        ),
    ],
    ids=["invalid-utf8", "truncated-utf8", "5000-digit-number", "deep-nesting"],
)
def test_undecodable_json_bodies(client: httpx.Client, raw: bytes, words: str) -> None:
    assert words in openai_error(raw_speech(client, raw), 400)


def test_lone_surrogate_is_not_text(client: httpx.Client) -> None:
    r = raw_speech(client, b'{"model": "tts-1", "voice": "alloy", "input": "hi \\ud800 there"}')
    assert "valid string" in openai_error(r, 400, "input")


@pytest.mark.parametrize(
    "speed",
    [1e308, 10**30, -1, -1e308, "NaN", "Infinity", "-inf", None, [1.0], True],
    ids=[
        "1e308",
        "10e30",
        "negative",
        "-1e308",
        "nan-string",
        "inf-string",
        "-inf-string",
        "null",
        "list",
        "bool",
    ],
)
def test_speed_out_of_range_or_not_a_number(client: httpx.Client, speed: object) -> None:
    openai_error(speak(client, "hi", speed=speed), 400, "speed")


@pytest.mark.parametrize("token", [b"NaN", b"Infinity", b"-Infinity", b"1e999"])
def test_speed_non_finite_json_tokens(client: httpx.Client, token: bytes) -> None:
    r = raw_speech(
        client, b'{"model": "tts-1", "voice": "alloy", "input": "hi", "speed": ' + token + b"}"
    )
    assert "finite" in openai_error(r, 400, "speed")


@pytest.mark.parametrize(
    "voice",
    [["alloy"], 3, 1.5, None, {"id": ""}, {"id": 7}, {"id": "alloy", "style": "warm"}, {}],
    ids=["list", "int", "float", "null", "empty-id", "numeric-id", "extra-key", "empty-object"],
)
def test_voice_of_the_wrong_shape(client: httpx.Client, voice: object) -> None:
    openai_error(speak(client, "hi", voice=voice), 400, "voice")


def test_voice_object_with_an_unknown_long_id(client: httpx.Client) -> None:
    message = openai_error(speak(client, "hi", voice={"id": "x" * 200}), 404, "voice")
    assert "alloy" in message  # says which voices exist


# -- transcriptions --------------------------------------------------------------------


@pytest.fixture(scope="module")
def speech_pcm(base_url: str) -> bytes:
    """TEXT spoken by the server, as 16 kHz int16 PCM."""
    with httpx.Client(base_url=base_url, timeout=60) as c:
        r = speak(c, TEXT, sample_rate=16000)
    assert r.status_code == 200
    return r.content


@pytest.fixture(scope="module")
def mp3(base_url: str) -> bytes:
    with httpx.Client(base_url=base_url, timeout=60) as c:
        r = speak(c, TEXT, response_format="mp3")
    assert r.status_code == 200
    return r.content


def wav(pcm: bytes, rate: int = 16000, data_size: int | None = None) -> bytes:
    fmt = struct.pack("<4sIHHIIHH", b"fmt ", 16, 1, 1, rate, 2 * rate, 2, 16)
    size = len(pcm) if data_size is None else data_size
    return (
        b"RIFF"
        + struct.pack("<I", min(size + 36, 0xFFFFFFFF))
        + b"WAVE"
        + fmt
        + b"data"
        + struct.pack("<I", size)
        + pcm
    )


def float_wav(samples: np.ndarray, rate: int = 16000) -> bytes:
    data = samples.astype("<f4").tobytes()
    fmt = struct.pack("<4sIHHIIHH", b"fmt ", 16, 3, 1, rate, 4 * rate, 4, 32)
    return (
        b"RIFF"
        + struct.pack("<I", len(data) + 36)
        + b"WAVE"
        + fmt
        + b"data"
        + struct.pack("<I", len(data))
        + data
    )


def multipart(*parts: tuple[str, bytes, str | None]) -> tuple[bytes, dict[str, str]]:
    """A hand-made multipart body: (name, value, filename or None) per part."""
    out = b""
    for name, value, filename in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += (
            f"--b0undary\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + value + b"\r\n"
        )
    return out + b"--b0undary--\r\n", {"content-type": "multipart/form-data; boundary=b0undary"}


def transcribe(
    client: httpx.Client, data: bytes, name: str = "a.wav", **fields: str
) -> httpx.Response:
    return client.post(ASR, files={"file": (name, data)}, data={"model": "whisper-1", **fields})


def test_file_part_missing_from_a_real_multipart_body(client: httpx.Client) -> None:
    body, headers = multipart(("model", b"whisper-1", None), ("language", b"en", None))
    assert "'file' is required" in openai_error(
        client.post(ASR, content=body, headers=headers), 400, "file"
    )


def test_file_part_sent_twice(client: httpx.Client, speech_pcm: bytes) -> None:
    files = [("file", ("a.wav", wav(speech_pcm))), ("file", ("b.wav", wav(speech_pcm)))]
    r = client.post(ASR, files=files, data={"model": "whisper-1"})
    assert "files" in openai_error(r, 400).lower()


def test_model_field_missing(client: httpx.Client, speech_pcm: bytes) -> None:
    r = client.post(ASR, files={"file": ("a.wav", wav(speech_pcm))})
    assert openai_error(r, 400, "model") == "'model' is required"


def test_zero_byte_file_with_an_audio_name(client: httpx.Client) -> None:
    r = client.post(
        ASR, files={"file": ("speech.mp3", b"", "audio/mpeg")}, data={"model": "whisper-1"}
    )
    assert "the file is empty" in openai_error(r, 400, "file")


@pytest.mark.parametrize(
    "content_type", ["application/json", "text/plain", "audio/wav", "application/octet-stream"]
)
def test_not_multipart(client: httpx.Client, speech_pcm: bytes, content_type: str) -> None:
    r = client.post(ASR, content=wav(speech_pcm), headers={"content-type": content_type})
    assert "multipart/form-data" in openai_error(r, 400)


def test_multipart_without_a_boundary(client: httpx.Client) -> None:
    r = client.post(ASR, content=b"--x\r\n\r\n", headers={"content-type": "multipart/form-data"})
    assert "boundary" in openai_error(r, 400).lower()


def test_mp3_cut_inside_its_header(client: httpx.Client, mp3: bytes) -> None:
    assert "could not decode audio" in openai_error(
        transcribe(client, mp3[:100], "cut.mp3"), 400, "file"
    )


def test_mp3_cut_after_its_first_frames(client: httpx.Client, mp3: bytes) -> None:
    # What decodes is kept, as players do: a fraction of a second, torn frame dropped.
    r = transcribe(client, mp3[:2001], "cut.mp3", response_format="verbose_json")
    assert r.status_code == 200, r.text
    assert 0.1 < r.json()["duration"] < 0.5


@pytest.mark.parametrize("declared", [0xFFFFFFF0, 0x7FFFFFFF], ids=["4GB", "2GB"])
def test_wav_header_larger_than_its_data(
    client: httpx.Client, speech_pcm: bytes, declared: int
) -> None:
    started = time.monotonic()
    r = transcribe(client, wav(speech_pcm, data_size=declared), response_format="verbose_json")
    assert r.status_code == 200, r.text
    assert r.json()["duration"] == pytest.approx(len(speech_pcm) / 2 / 16000, abs=0.05)
    assert "quick brown fox" in r.json()["text"].lower()
    assert time.monotonic() - started < 20


def test_rf64_header_declaring_10_gb(client: httpx.Client, speech_pcm: bytes) -> None:
    """RF64 (64-bit WAV) says 10 GiB of data follows; a few KB do. Nothing is sized from
    the header: the server reads what is there."""
    ten_gb = 10 * 2**30
    ds64 = struct.pack("<4sIQQQI", b"ds64", 28, ten_gb + 36, ten_gb, ten_gb // 2, 0)
    fmt = struct.pack("<4sIHHIIHH", b"fmt ", 16, 1, 1, 16000, 32000, 2, 16)
    data = (
        b"RF64"
        + struct.pack("<I", 0xFFFFFFFF)
        + b"WAVE"
        + ds64
        + fmt
        + b"data"
        + struct.pack("<I", 0xFFFFFFFF)
    )
    started = time.monotonic()
    r = transcribe(client, data + speech_pcm[:64000], response_format="verbose_json")
    assert r.status_code == 200, r.text
    assert r.json()["duration"] == pytest.approx(2.0, abs=0.05)
    assert time.monotonic() - started < 20


def test_wav_at_1_hz_is_refused(client: httpx.Client) -> None:
    # 4 KB that would otherwise expand to 33 minutes of audio to transcribe.
    r = transcribe(client, wav(b"\x00\x01" * 2000, rate=1))
    assert "sample rate of 1 Hz" in openai_error(r, 400, "file")


@pytest.mark.parametrize(
    ("value", "words"),
    [(1e30, "out of range"), (np.nan, "invalid samples"), (np.inf, "invalid samples")],
)
def test_float_wav_of_absurd_samples_is_refused(
    client: httpx.Client, value: float, words: str
) -> None:
    # Samples of 1e30 overflow the features; the decoder then ran on noise for half a minute.
    started = time.monotonic()
    r = transcribe(client, float_wav(np.full(16000, value)))
    assert words in openai_error(r, 400, "file")
    assert time.monotonic() - started < 5


def test_float_wav_a_little_past_full_scale_is_fine(
    client: httpx.Client, speech_pcm: bytes
) -> None:
    loud = np.frombuffer(speech_pcm, dtype=np.int16) / 32768 * 1.5
    r = transcribe(client, float_wav(loud))
    assert r.status_code == 200, r.text
    assert "quick brown fox" in r.json()["text"].lower()


# -- afterwards ------------------------------------------------------------------------


def test_server_still_serves_after_bad_input(client: httpx.Client, speech_pcm: bytes) -> None:
    assert client.get("/health").json() == {"status": "ok"}
    assert pcm_seconds(speak(client, TEXT)) > 1.5
    r = transcribe(client, wav(speech_pcm))
    assert r.status_code == 200, r.text
    assert "quick brown fox" in r.json()["text"].lower()
