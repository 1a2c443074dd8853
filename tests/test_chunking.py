"""`chunking_strategy` and `include` on `/v1/audio/transcriptions`: the VAD cut planner on
synthetic probabilities, the official SDK's two shapes of the field through the real
server, and malformed fields, each answered 400 with its `param`."""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from tests.asr_support import SHORT, wav_bytes, wer, with_gaps
from voxserve.audio.chunks import AUTO, FRAME_SAMPLES, TAIL_MS, Chunking, plan_chunks
from voxserve.audio.cut import plan_spans

pytestmark = pytest.mark.timeout(60)

URL = "/v1/audio/transcriptions"
RATE = 16000


# -- the planner, pure -------------------------------------------------------------------


def probs_of(*stretches: tuple[float, float], loud: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Audio (a tone, never digital silence: 40 dB softer where the probability says
    silence, unless `loud`) and per-frame probabilities made of (seconds, probability)
    stretches."""
    probs = np.concatenate([np.full(round(s * RATE / FRAME_SAMPLES), p, dtype=np.float32) for s, p in stretches])
    n = len(probs) * FRAME_SAMPLES
    level = np.repeat(np.where((probs >= 0.5) | loud, 0.1, 0.001), FRAME_SAMPLES)
    audio = (level * np.sin(np.arange(n) * 0.05)).astype(np.float32)
    return audio, probs


def seconds(x: int) -> float:
    return x / RATE


def test_cuts_only_in_a_long_enough_silence() -> None:
    # 20 s of speech, a 0.1 s pause (too short), 5 s, 1 s of silence, then 14 s.
    audio, probs = probs_of((20, 0.9), (0.1, 0.1), (5, 0.9), (1.0, 0.05), (14, 0.9))
    spans = plan_chunks(audio, probs, RATE, AUTO)
    assert len(spans) == 2
    silence_start = round(25.1 * RATE / FRAME_SAMPLES) * FRAME_SAMPLES
    silence_end = silence_start + round(1.0 * RATE / FRAME_SAMPLES) * FRAME_SAMPLES
    # The first piece keeps TAIL_MS after its speech; the next starts prefix_padding_ms
    # before its speech; the silence between is not decoded.
    assert spans[0].end - silence_start == TAIL_MS * RATE // 1000
    assert silence_end - spans[1].start == AUTO.prefix_padding_ms * RATE // 1000
    assert spans[0].start == 0 and spans[1].end == len(audio)


def test_a_long_silence_between_pieces_is_dropped_and_times_stay_true() -> None:
    audio, probs = probs_of((12, 0.9), (20, 0.0), (15, 0.9))
    first, second = plan_chunks(audio, probs, RATE, Chunking(prefix_padding_ms=500))
    assert seconds(first.end) == pytest.approx(12 + TAIL_MS / 1000, abs=0.04)
    assert seconds(second.start) == pytest.approx(32 - 0.5, abs=0.04)  # its true start


def test_leading_and_trailing_silence_are_left_out() -> None:
    audio, probs = probs_of((6, 0.0), (20, 0.9), (2, 0.1), (20, 0.9), (8, 0.0))
    spans = plan_chunks(audio, probs, RATE, AUTO)
    assert seconds(spans[0].start) == pytest.approx(6 - AUTO.prefix_padding_ms / 1000, abs=0.04)
    assert seconds(spans[-1].end) == pytest.approx(48 + TAIL_MS / 1000, abs=0.04)


def test_without_a_long_silence_the_longest_short_one_near_the_limit_wins() -> None:
    # Fluent speech: only 64 ms dips, one at 22 s and a longer (128 ms) one at 27 s.
    audio, probs = probs_of((22, 0.9), (0.064, 0.2), (5, 0.9), (0.128, 0.3), (20, 0.9))
    spans = plan_chunks(audio, probs, RATE, Chunking(silence_duration_ms=500))
    assert seconds(spans[0].end) == pytest.approx(27.1, abs=0.1)
    assert spans[1].start == spans[0].end


def test_a_silence_as_loud_as_speech_is_decoded_like_speech() -> None:
    """The VAD can miss speech: a stretch it scores silent but that is as loud as the
    speech is neither dropped nor cut in."""
    audio, probs = probs_of((12, 0.9), (14, 0.0), (15, 0.9), loud=True)
    spans = plan_chunks(audio, probs, RATE, AUTO)
    assert spans[0].start == 0 and spans[-1].end == len(audio)
    assert all(a.end == b.start for a, b in itertools.pairwise(spans))


def test_no_speech_at_all_gets_the_energy_plan() -> None:
    audio, probs = probs_of((70, 0.01))
    assert plan_chunks(audio, probs, RATE, AUTO) == plan_spans(audio, RATE)


@pytest.mark.parametrize("seed", range(5))
def test_pieces_are_ordered_apart_and_within_the_limit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    stretches = [(float(rng.uniform(0.05, 6)), float(rng.choice([0.05, 0.95]))) for _ in range(80)]
    audio, probs = probs_of(*stretches)
    for limit in (14.0, 30.0):
        spans = plan_chunks(audio, probs, RATE, Chunking(silence_duration_ms=int(rng.integers(50, 2000))), limit)
        assert all(0 < len(s) <= limit * RATE for s in spans)
        assert all(a.end <= b.start for a, b in itertools.pairwise(spans))
        assert spans[0].start >= 0 and spans[-1].end <= len(audio)
        # Nothing dropped is speech: every speech frame lies in some piece.
        covered = np.zeros(len(audio), dtype=bool)
        for s in spans:
            covered[s.start : s.end] = True
        speech = np.repeat(probs >= 0.5, FRAME_SAMPLES)
        assert not (speech & ~covered).any()


# -- through the server ------------------------------------------------------------------


@pytest.fixture(scope="module")
def long_clip(short_speech: list[np.ndarray]) -> dict[str, Any]:
    """The four short sentences three times with 1.5 s between them: about 45 s."""
    samples, onsets = with_gaps(short_speech * 3, gap_s=1.5)
    return {"wav": wav_bytes(samples), "onsets": onsets, "text": " ".join(SHORT * 3)}


def test_sdk_auto_and_server_vad(base_url: str, long_clip: dict[str, Any]) -> None:
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0)
    auto = client.audio.transcriptions.create(
        model="whisper-1", file=("long.wav", long_clip["wav"]), chunking_strategy="auto"
    )
    assert wer(long_clip["text"], auto.text) < 0.1, auto.text
    verbose = client.audio.transcriptions.create(
        model="whisper-1",
        file=("long.wav", long_clip["wav"]),
        response_format="verbose_json",
        chunking_strategy={"type": "server_vad", "prefix_padding_ms": 200, "silence_duration_ms": 400, "threshold": 0.5},
        include=["logprobs"],
    )
    assert wer(long_clip["text"], verbose.text) < 0.1, verbose.text
    # Times stay true across cuts: each sentence's segment starts where it was placed.
    starts = [s.start for s in verbose.segments or []]
    for onset in long_clip["onsets"]:
        assert min(abs(s - onset) for s in starts) < 0.6, (onset, starts)
    assert len({s.seek for s in verbose.segments or []}) >= 2  # it was cut


def test_json_object_in_the_field(client: httpx.Client, long_clip: dict[str, Any]) -> None:
    r = client.post(
        URL,
        files={"file": ("a.wav", long_clip["wav"])},
        data={"model": "whisper-1", "chunking_strategy": '{"type": "server_vad", "threshold": 0.6}'},
    )
    assert r.status_code == 200, r.text
    assert wer(long_clip["text"], r.json()["text"]) < 0.1


def error_of(r: httpx.Response, param: str) -> str:
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    return str(error["message"])


TINY_WAV = wav_bytes(np.zeros(2400, dtype=np.int16))


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"chunking_strategy": "{not json"}, "valid JSON"),
        ({"chunking_strategy": "x" * 2000}, "characters long"),
        ({"chunking_strategy": '"auto"'}, "str is not a strategy"),
        ({"chunking_strategy": "[1, 2]"}, "list is not a strategy"),
        ({"chunking_strategy": "null"}, "NoneType is not a strategy"),
        ({"chunking_strategy": "manual"}, "valid JSON"),
        ({"chunking_strategy": '{"type": "client_vad"}'}, "type"),
        ({"chunking_strategy": '{"threshold": 0.5}'}, "type: Field required"),
        ({"chunking_strategy": '{"type": "server_vad", "eagerness": "high"}'}, "eagerness"),
        ({"chunking_strategy": '{"type": "server_vad", "threshold": 1.5}'}, "threshold"),
        ({"chunking_strategy": '{"type": "server_vad", "threshold": "0.5"}'}, "threshold"),
        ({"chunking_strategy": '{"type": "server_vad", "threshold": NaN}'}, "threshold"),
        ({"chunking_strategy": '{"type": "server_vad", "prefix_padding_ms": true}'}, "prefix_padding_ms"),
        ({"chunking_strategy": '{"type": "server_vad", "prefix_padding_ms": 2001}'}, "prefix_padding_ms"),
        ({"chunking_strategy": '{"type": "server_vad", "silence_duration_ms": 10}'}, "silence_duration_ms"),
        ({"chunking_strategy": '{"type": "server_vad", "silence_duration_ms": 300.5}'}, "silence_duration_ms"),
        ({"chunking_strategy": "[" * 100000}, "larger than 64 KB"),
        ({"chunking_strategy[type]": "server_vad", "chunking_strategy[threshold]": "loud"}, "threshold"),
        ({"chunking_strategy[type]": "server_vad", "chunking_strategy[threshold]": "1e999"}, "threshold"),
        ({"chunking_strategy[type]": "server_vad", "chunking_strategy[x]": "1"}, "x"),
        ({"chunking_strategy[threshold]": "0.5"}, "Field required"),
        ({"chunking_strategy": "auto", "chunking_strategy[type]": "server_vad"}, "both"),
    ],
)
def test_bad_chunking_strategy(client: httpx.Client, fields: dict[str, str], words: str) -> None:
    r = client.post(URL, files={"file": ("a.wav", TINY_WAV)}, data={"model": "whisper-1", **fields})
    assert words in error_of(r, "chunking_strategy")


def test_a_1_mb_chunking_strategy(client: httpx.Client) -> None:
    r = client.post(URL, files={"file": ("a.wav", TINY_WAV)}, data={"model": "whisper-1", "chunking_strategy": "a" * (1 << 20)})
    assert "larger than 64 KB" in error_of(r, "chunking_strategy")


@pytest.mark.parametrize("values", [["logprobs", "tokens"], ["LOGPROBS"], [""], ["x" * 5000]])
def test_bad_include(client: httpx.Client, values: list[str]) -> None:
    r = client.post(URL, files={"file": ("a.wav", TINY_WAV)}, data={"model": "whisper-1", "include[]": values})
    assert "include[]=logprobs" in error_of(r, "include")


def test_still_serving_after_the_attacks(client: httpx.Client, long_clip: dict[str, Any]) -> None:
    r = client.post(URL, files={"file": ("a.wav", long_clip["wav"])}, data={"model": "whisper-1", "include[]": "logprobs"})
    assert r.status_code == 200, r.text
    assert wer(long_clip["text"], r.json()["text"]) < 0.1


def test_attacks_meanwhile_cost_a_transcription_nothing(base_url: str, long_clip: dict[str, Any]) -> None:
    """A long transcription runs while other clients send malformed fields, an unknown
    model of 200 characters and 64 include[] values: each attack gets its 4xx at once and
    the transcription is whole."""
    import concurrent.futures

    def transcribe() -> httpx.Response:
        with httpx.Client(base_url=base_url, timeout=120) as c:
            return c.post(URL, files={"file": ("a.wav", long_clip["wav"])}, data={"model": "whisper-1"})

    attacks: list[dict[str, str | list[str]]] = [
        {"model": "whisper-1", "chunking_strategy": "[" * 60000},
        {"model": "whisper-1", "chunking_strategy": '{"type": "server_vad", "threshold": NaN}'},
        {"model": "x" * 200},
        {"model": "whisper-1", "include[]": ["tokens"] * 64},
    ]
    with concurrent.futures.ThreadPoolExecutor(1) as pool, httpx.Client(base_url=base_url, timeout=30) as c:
        work = pool.submit(transcribe)
        for _ in range(3):
            for fields in attacks:
                r = c.post(URL, files={"file": ("a.wav", TINY_WAV)}, data=fields)
                assert r.status_code in (400, 404), r.text
        done = work.result(timeout=120)
    assert done.status_code == 200, done.text
    assert wer(long_clip["text"], done.json()["text"]) < 0.1
