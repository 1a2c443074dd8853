"""Every English Kokoro voice round-tripped through Whisper: word error rate per voice.

    PYTHONPATH=$PWD .venv/bin/python scripts/bench/kokoro_voices.py [--max-wer 0.15] [--languages en-US,en-GB]

Starts a server on loopback with Piper, Kokoro and Whisper, has every voice of the given
languages speak one fixed sentence (`tts-1-hd`, pcm), transcribes each clip with the
server's own Whisper (`tiny.en`, so English only) and prints the WER per voice, worst
first. Exits 1 when a voice is over `--max-wer`. The test suite checks one voice per
language (tests/test_kokoro_voice.py); this covers all of them, two streams at a time (one
per worker), which takes a few minutes on two cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import httpx
import numpy as np

from tests.asr_support import wav_bytes, wer
from tests.conftest import run_server
from voxserve.config import ServerConfig, TTSConfig
from voxserve.runners.kokoro.onnx_runner import list_voices

SENTENCE = "Please call Stella and ask her to bring these things with her."


def round_trip(client: httpx.Client, voice: str) -> tuple[float, str, str]:
    """(WER, voice, what Whisper heard) for one voice speaking SENTENCE."""
    spoken = client.post("/v1/audio/speech", json={
        "model": "tts-1-hd", "input": SENTENCE, "voice": voice, "response_format": "pcm"})
    spoken.raise_for_status()
    pcm = np.frombuffer(spoken.content, dtype=np.int16)
    heard = client.post("/v1/audio/transcriptions", files={"file": ("a.wav", wav_bytes(pcm))},
                        data={"model": "whisper-1", "language": "en"})
    heard.raise_for_status()
    text: str = heard.json()["text"]
    return wer(SENTENCE, text), voice, text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--languages", default="en-US,en-GB", help="voice languages to speak (Whisper is English-only)")
    parser.add_argument("--max-wer", type=float, default=0.15, help="fail when a voice's WER is above this")
    args = parser.parse_args(argv)
    languages = set(args.languages.split(","))
    voices = [v.name for v in list_voices() if v.language in languages]
    config = ServerConfig(tts=replace(TTSConfig(), models=("piper", "kokoro")))
    start = time.monotonic()
    with (run_server(config, kokoro=True) as server,
          httpx.Client(base_url=server.base_url, timeout=120) as client,
          ThreadPoolExecutor(2) as pool):  # one stream per worker
        results = sorted(pool.map(lambda voice: round_trip(client, voice), voices), reverse=True)
    for rate, voice, text in results:
        print(f"{voice:14s} WER {rate * 100:5.1f} %  {text}")
    bad = [voice for rate, voice, _ in results if rate > args.max_wer]
    print(f"{len(voices)} voices in {time.monotonic() - start:.0f} s; over {args.max_wer:.0%}: {', '.join(bad) or 'none'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
