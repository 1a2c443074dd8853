"""Decoded audio is bounded by what the server can afford.

A 2 MB FLAC of 2.9 hours of near-silence took the server to ~3 GB: the decoded float32
audio plus whole-file copies while decoding and planning cuts. Now decoding grows in
blocks reserved before they are allocated, and cut planning scans in bounded chunks, so
the peak is about the decoded audio itself. Each request holds at most
`max_audio_seconds` of the buffered-audio budget; past it 400, past the budget 429, while
other clients are served.
"""

from __future__ import annotations

import io
import tracemalloc

import av
import httpx
import numpy as np
import pytest

from tests.asr_support import normalize, wav_bytes
from tests.conftest import RunningServer
from voxserve.audio.blocks import SampleBlocks
from voxserve.audio.cut import plan_spans
from voxserve.audio.decode import SAMPLE_RATE, decode_blocks
from voxserve.engine.budget import AudioBudget
from voxserve.errors import Overloaded

pytestmark = pytest.mark.timeout(120)

ASR = "/v1/audio/transcriptions"


def near_silent_flac(seconds: float, rate: int) -> bytes:
    """Noise of +-1 LSB: compresses to ~2 bits a sample, yet every sample must be decoded."""
    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    with av.open(buf, "w", format="flac") as out:
        stream = out.add_stream("flac", rate=rate, layout="mono", format="s16")
        left = int(seconds * rate)
        while left:
            n = min(left, 10 * rate)
            frame = av.AudioFrame.from_ndarray(rng.integers(-1, 2, size=(1, n), dtype=np.int16), format="s16", layout="mono")
            frame.sample_rate = rate
            out.mux(stream.encode(frame))
            left -= n
        out.mux(stream.encode(None))
    return buf.getvalue()


def test_decode_and_cut_planning_peak_at_about_the_decoded_size() -> None:
    # 10 minutes at 8 kHz: small to make, and it goes through the resampler.
    data = near_silent_flac(600, 8000)
    assert len(data) < 2_000_000
    tracemalloc.start()  # numpy reports its buffers to tracemalloc
    try:
        audio = decode_blocks(data, max_seconds=3600)
        spans = plan_spans(audio, SAMPLE_RATE)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    decoded = len(audio) * 4
    assert abs(len(audio) - 600 * SAMPLE_RATE) < SAMPLE_RATE
    assert len(spans) >= 20 and spans[-1].end == len(audio)
    # Before: parts + concatenate + abs + float64 level scan came to ~3x.
    assert peak < 1.3 * decoded, f"peak {peak / decoded:.2f}x the decoded audio"


def test_blocks_are_reserved_before_they_are_allocated() -> None:
    budget = AudioBudget(25 * SAMPLE_RATE, SAMPLE_RATE)
    lease = budget.lease()
    with pytest.raises(Overloaded):
        decode_blocks(near_silent_flac(60, 16000), max_seconds=3600, reserve=lease.take)
    # Two 10 s blocks fit in 25 s; the third was refused before it was allocated.
    assert lease.samples == 20 * SAMPLE_RATE == budget.held
    lease.release()
    assert budget.held == 0


def test_block_slices_match_one_array() -> None:
    rng = np.random.default_rng(1)
    whole = rng.standard_normal(10_000).astype(np.float32)
    reserved: list[int] = []
    blocks = SampleBlocks(block=1000, reserve=reserved.append)
    for piece in np.array_split(whole, 37):
        blocks.extend(piece)
    assert len(blocks) == len(whole) and sum(reserved) == blocks.allocated == 10_000
    for start, stop in [(0, 10_000), (999, 1001), (1000, 2000), (5, 7), (9_990, 12_000), (3, 3)]:
        np.testing.assert_array_equal(blocks[start:stop], whole[start:stop])
    np.testing.assert_array_equal(blocks.to_array(), whole)


def test_past_its_share_or_the_budget_while_others_are_served(
    server: RunningServer, client: httpx.Client, short_speech: list[np.ndarray]
) -> None:
    asr = server.asr
    share = asr.config.max_audio_seconds  # 1 h by default, a third of the 3 h budget
    assert asr.config.max_buffered_audio_s >= 2 * share
    normal = wav_bytes(short_speech[0])

    def upload(data: bytes) -> httpx.Response:
        return client.post(ASR, files={"file": ("a.flac", data)}, data={"model": "whisper-1"})

    # Over one request's share: 400 while decoding, and nothing is held afterwards.
    r = upload(near_silent_flac(share + 60, 1000))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "audio_too_long"
    assert asr.budget.held == 0

    # Other requests hold all but 50 s of the budget: a 55 s file would pass it and gets
    # 429, while a normal clip (one 10 s block) and /health are served.
    hog = asr.budget.lease()
    hog.take(asr.budget.capacity - 50 * SAMPLE_RATE)
    try:
        r = upload(near_silent_flac(55, 8000))
        assert r.status_code == 429, r.text
        assert r.json()["error"]["type"] == "rate_limit_error" and int(r.headers["retry-after"]) >= 1
        assert asr.budget.held == asr.budget.capacity - 50 * SAMPLE_RATE
        assert client.get("/health").status_code == 200
        ok = upload(normal)
        assert ok.status_code == 200, ok.text
        assert "fox" in normalize(ok.json()["text"])
    finally:
        hog.release()
    assert asr.budget.held == 0
