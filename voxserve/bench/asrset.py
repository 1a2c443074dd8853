"""`bench make-asr-set`: an ASR test set spoken by the server's own TTS.

Each prompt becomes `NNN.wav` (16-bit mono, at the rate the server reports) and `NNN.txt`
(its text, the reference), plus a `manifest.jsonl`, so that `bench transcribe` can run
with nothing else installed. Speaks HTTP only.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import numpy as np

from voxserve.audio.encode import wav_file
from voxserve.bench.levels import BenchError
from voxserve.bench.speech import SpeechTarget

__all__ = ["make_asr_set"]


async def _fetch(session: aiohttp.ClientSession, target: SpeechTarget,
                 text: str, api_key: str | None) -> tuple[bytes, int]:
    headers = {"content-type": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    async with session.post(target.url, data=target.body(text), headers=headers) as resp:
        body = await resp.read()
        if resp.status != 200:
            raise BenchError(f"{target.url} answered {resp.status}: "
                             f"{body[:300].decode(errors='replace')}")
        header = resp.headers.get("x-sample-rate")
    rate = int(header) if header else target.sample_rate
    if rate is None:
        raise BenchError("the response has no x-sample-rate header; pass --sample-rate")
    return body, rate


async def make_asr_set(target: SpeechTarget, prompts: list[str], out_dir: Path,
                       concurrency: int = 2, api_key: str | None = None) -> list[Path]:
    """Synthesize every prompt into out_dir; returns the WAV paths in prompt order.

    `api_key` is sent as a Bearer token, for a server started with one.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    slots = asyncio.Semaphore(concurrency)
    timeout = aiohttp.ClientTimeout(total=target.timeout_s)
    width = max(3, len(str(len(prompts))))

    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def one(index: int, text: str) -> dict[str, object]:
            async with slots:
                pcm, rate = await _fetch(session, target, text, api_key)
            name = f"{index:0{width}d}"
            samples = np.frombuffer(pcm[: len(pcm) // 2 * 2], dtype="<i2")
            (out_dir / f"{name}.wav").write_bytes(wav_file(samples, rate))
            (out_dir / f"{name}.txt").write_text(text + "\n", encoding="utf-8")
            return {"audio": f"{name}.wav", "text": text, "duration": len(pcm) // 2 / rate}

        entries = await asyncio.gather(*(one(i, t) for i, t in enumerate(prompts)))
    with (out_dir / "manifest.jsonl").open("w", encoding="utf-8") as f:
        for entry in entries:
            f.write(json.dumps(entry) + "\n")
    return [out_dir / str(e["audio"]) for e in entries]
