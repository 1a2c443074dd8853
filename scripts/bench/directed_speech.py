"""Directed speech against its targets: first audio of a two-voice input against its first
sentence alone, pause accuracy, a dialogue's round trip through Whisper, and a batch
against the same prompts sent at once.

    PYTHONPATH=$PWD .venv/bin/python scripts/bench/directed_speech.py [--rounds 15]

Starts a server on loopback with both voice models (noise off) and Whisper, then, per
model (tts-1 Piper, tts-1-hd Kokoro):
- first audio at c=1: the dialogue input and its first sentence alone, interleaved
  (A B A B ...), median of each and their ratio (target: within 1.1x);
- pauses: `[pause:N]` for 0.25, 0.7 and 2 s, the samples inserted against the plain
  sentence at the model's own rate (target: within 10 ms);
- round trip: a 6-line dialogue in one input and the same lines one request each,
  each transcribed by the server's Whisper, WER of both (target: within 1 point);
then, on Piper, 32 short prompts as one batch and as 32 concurrent requests,
interleaved, their throughput ratio, and /health's p99 while each runs (target: 0.9x,
under 10 ms).
"""

from __future__ import annotations

import argparse
import io
import statistics
import threading
import time
import wave
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import httpx

from tests.asr_support import wer
from tests.conftest import run_server
from voxserve.config import ServerConfig, TTSConfig

VOICES = {"tts-1": ("joe", "joe"), "tts-1-hd": ("af_bella", "am_adam")}
RATES = {"tts-1": 22050, "tts-1-hd": 24000}
FIRST = "Good morning, how can I help you today?"
SECOND = "I would like to book a table for two, please."
LINES = [
    "Good morning, how can I help you today?",
    "I would like to book a table for two, please.",
    "Of course. For which evening would that be?",
    "Friday evening, around eight o'clock, if you can.",
    "Friday at eight is free. May I have your name?",
    "It is Morgan. Thank you very much for your help.",
]


def first_audio(http: httpx.Client, body: Mapping[str, object]) -> float:
    started = time.perf_counter()
    elapsed = None
    with http.stream("POST", "/v1/audio/speech", json=body) as r:
        r.raise_for_status()
        for chunk in r.iter_bytes():
            if chunk and elapsed is None:
                elapsed = time.perf_counter() - started
    if elapsed is None:
        raise RuntimeError("no audio")
    return elapsed


def pcm(http: httpx.Client, model: str, text: str, voice: str) -> bytes:
    body = {"model": model, "voice": voice, "input": text, "response_format": "pcm", "sample_rate": RATES[model]}
    r = http.post("/v1/audio/speech", json=body)
    r.raise_for_status()
    return r.content


def wav(data: bytes, rate: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(data)
    return out.getvalue()


def transcribe(http: httpx.Client, data: bytes, rate: int) -> str:
    r = http.post("/v1/audio/transcriptions", files={"file": ("a.wav", wav(data, rate))},
                  data={"model": "whisper-1", "language": "en"})  # fmt: skip
    r.raise_for_status()
    return str(r.json()["text"])


def measure_model(http: httpx.Client, model: str, rounds: int) -> None:
    a, b = VOICES[model]
    rate = RATES[model]
    plain = {"model": model, "voice": a, "input": FIRST, "response_format": "pcm"}
    dialogue = {**plain, "input": f"[voice:{a}] {FIRST} [voice:{b}] {SECOND}"}
    first_audio(http, plain), first_audio(http, dialogue)  # warm
    alone, two = [], []
    for _ in range(rounds):
        alone.append(first_audio(http, plain))
        two.append(first_audio(http, dialogue))
    m_alone, m_two = statistics.median(alone), statistics.median(two)
    print(f"{model}: first audio, c=1, {rounds} rounds interleaved: first sentence alone "
          f"{m_alone * 1e3:.0f} ms, two-voice dialogue {m_two * 1e3:.0f} ms, ratio {m_two / m_alone:.3f}")

    base = len(pcm(http, model, FIRST, a)) // 2
    for seconds in (0.25, 0.7, 2.0):
        got = len(pcm(http, model, f"{FIRST} [pause:{seconds}s]", a)) // 2 - base
        print(f"{model}: pause {seconds} s inserted {got / rate:.4f} s (error {abs(got / rate - seconds) * 1e3:.2f} ms)")

    voices = [a if i % 2 == 0 else b for i in range(len(LINES))]
    joined = " ".join(f"[voice:{v}] {line}" for v, line in zip(voices, LINES, strict=True))
    one = transcribe(http, pcm(http, model, joined, a), rate)
    each = " ".join(transcribe(http, pcm(http, model, line, v), rate) for v, line in zip(voices, LINES, strict=True))
    truth = " ".join(LINES)
    print(f"{model}: 6-line dialogue WER: one input {wer(truth, one) * 100:.1f} %, "
          f"one request per line {wer(truth, each) * 100:.1f} %")


def health_p99(base_url: str, stop: threading.Event, out: list[float]) -> None:
    with httpx.Client(base_url=base_url, timeout=10) as http:
        while not stop.is_set():
            started = time.perf_counter()
            http.get("/health").raise_for_status()
            out.append(time.perf_counter() - started)
            time.sleep(0.01)


def measure_batch(base_url: str, http: httpx.Client, rounds: int) -> None:
    prompts = [f"Press {n} for the menu item number {n}." for n in range(32)]
    body = {"model": "tts-1", "voice": "alloy", "response_format": "pcm"}

    def batch() -> None:
        r = http.post("/v1/audio/speech/batch", json={**body, "items": [{"input": p} for p in prompts]})
        r.raise_for_status()
        assert all("audio" in d for d in r.json()["data"])

    def concurrent() -> None:
        with ThreadPoolExecutor(32) as pool, httpx.Client(base_url=base_url, timeout=300) as c:
            list(pool.map(lambda p: c.post("/v1/audio/speech", json={**body, "input": p}).raise_for_status(), prompts))

    times: dict[str, list[float]] = {"batch": [], "concurrent": []}
    health: dict[str, list[float]] = {"batch": [], "concurrent": []}
    for _ in range(rounds):
        for name, run in (("batch", batch), ("concurrent", concurrent)):
            stop = threading.Event()
            probe = threading.Thread(target=health_p99, args=(base_url, stop, health[name]))
            probe.start()
            started = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - started)
            stop.set()
            probe.join()
    tb, tc = statistics.median(times["batch"]), statistics.median(times["concurrent"])
    p99 = {k: sorted(v)[int(0.99 * (len(v) - 1))] * 1e3 for k, v in health.items()}
    print(f"batch of 32 prompts: {tb:.2f} s, 32 concurrent requests: {tc:.2f} s (medians of {rounds}, interleaved); "
          f"batch throughput {tc / tb:.2f}x of concurrent; /health p99 {p99['batch']:.1f} ms during batches, "
          f"{p99['concurrent']:.1f} ms during concurrent requests")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    config = ServerConfig(tts=replace(TTSConfig(), models=("piper", "kokoro"), noise_w=0.0, noise_scale=0.0))
    with run_server(config, kokoro=True) as srv, httpx.Client(base_url=srv.base_url, timeout=300) as http:
        for model in ("tts-1", "tts-1-hd"):
            measure_model(http, model, args.rounds)
        measure_batch(srv.base_url, http, max(3, args.rounds // 5))


if __name__ == "__main__":
    main()
