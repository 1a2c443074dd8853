"""Test audio for the ASR tests, made offline by voxserve's own TTS, and WER scoring."""

from __future__ import annotations

import io
import re
import wave

import httpx
import jiwer
import numpy as np

SHORT = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "A rainbow is a division of white light into many beautiful colors.",
    "The museum opens early on weekends, so we should arrive before the crowds.",
]

# Twenty sentences of about eight seconds each, each with a distinct first word.
LONG = [
    "Morning light spread slowly across the quiet valley, and the farmers walked out to check their fields before breakfast.",
    "Children in the small village school learned to read by candlelight during the long and cold winter months.",
    "Every evening the old fisherman mended his nets on the wooden pier while the gulls circled above the harbor.",
    "Scientists believe that the ocean still hides thousands of creatures that nobody has ever seen or described.",
    "Our neighbors planted a beautiful garden with roses, tulips and tall sunflowers along the side of their house.",
    "Railway workers laid new tracks through the forest so that trains could carry timber to the growing city.",
    "Musicians gathered in the town square on summer nights and played songs that everyone knew by heart.",
    "Doctors recommend that people drink plenty of water, sleep well, and take a short walk every single day.",
    "Heavy rain flooded the main road last week, and the bridge near the river was closed for several days.",
    "Travelers often stop at the little bakery by the station to buy fresh bread and a cup of hot coffee.",
    "Engineers designed the new library with large windows, so the reading rooms are bright and warm all year.",
    "Volunteers cleaned the beach on Saturday morning and collected many bags of plastic and broken glass.",
    "Farmers in the north grow potatoes, barley and oats, because the soil there is rich and the summers are short.",
    "Students who practice a little every day usually remember much more than those who study only before exams.",
    "Lightning struck the tall oak tree behind the church, but luckily nobody was hurt and the fire was put out quickly.",
    "Visitors to the museum can see ancient maps, old coins and the tools that early sailors used to find their way.",
    "Grandmother told us stories about her childhood on the farm, where she cared for horses, chickens and goats.",
    "Snow covered the mountains early this year, and the ski resorts opened their slopes a month ahead of schedule.",
    "Firefighters trained for many hours to learn how to rescue people from burning buildings safely.",
    "Finally, the long journey came to an end, and the tired travelers were happy to sleep in their own beds again.",
]  # fmt: skip

RATE = 24000
"""Rate the test audio is made at (the server resamples it to 16 kHz)."""


def speak(client: httpx.Client, text: str, fmt: str = "wav", rate: int = RATE) -> bytes:
    r = client.post(
        "/v1/audio/speech",
        json={"model": "tts-1", "input": text, "voice": "alloy", "response_format": fmt, "sample_rate": rate},
    )
    assert r.status_code == 200, r.text
    return r.content


def speak_pcm(client: httpx.Client, text: str, rate: int = RATE) -> np.ndarray:
    return np.frombuffer(speak(client, text, "pcm", rate), dtype=np.int16)


def wav_bytes(samples: np.ndarray, rate: int = RATE) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype(np.int16).tobytes())
    return buf.getvalue()


def with_gaps(pieces: list[np.ndarray], gap_s: float = 1.0, rate: int = RATE) -> tuple[np.ndarray, list[float]]:
    """Concatenate with `gap_s` of silence between pieces; also return each piece's onset."""
    gap = np.zeros(int(gap_s * rate), dtype=np.int16)
    out: list[np.ndarray] = []
    onsets: list[float] = []
    at = 0
    for i, piece in enumerate(pieces):
        if i:
            out.append(gap)
            at += len(gap)
        onsets.append(at / rate)
        out.append(piece)
        at += len(piece)
    return np.concatenate(out), onsets


def normalize(text: str) -> str:
    text = text.lower().replace("-", " ")
    text = re.sub(r"[^a-z0-9' ]+", " ", text)
    return " ".join(text.split())


def wer(reference: str, hypothesis: str) -> float:
    return float(jiwer.wer(normalize(reference), normalize(hypothesis)))
