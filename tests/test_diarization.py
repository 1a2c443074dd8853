"""Speaker diarization through a real server: `model=gpt-4o-transcribe-diarize` on
`/v1/audio/transcriptions` (diarized_json, json, text, verbose_json, srt, vtt, streamed
segments), known speakers, `POST /v1/audio/diarization` (json and RTTM), and a clear
400 for every bad input, each sent the way an attacker would.

The conversation: the server's own Piper voice and a real person (the Beckett reading
that ships in the moonshine-cpp wheel) taking turns. Its DER on conversations of real
people is the benchmark's (`python -m voxserve.bench.diarize`, docs/ASR.md).
"""

from __future__ import annotations

import base64
import itertools
import json
import pickle
import time
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.asr_support import speak_pcm, wav_bytes
from tests.conftest import RunningServer, run_server, tts_config
from voxserve.audio.decode import decode_audio
from voxserve.bench.der import der, named_share
from voxserve.bench.real_speech_mix import telephone_line
from voxserve.engine.chunking import speech_probabilities
from voxserve.engine.diarize import (
    MAX_CLUSTERED,
    NOBODY,
    PAD_S,
    VAD_BLOCK_FRAMES,
    VAD_GRIDS,
    VAD_LEAD_FRAMES,
    Turn,
    cluster_windows,
    fill_pauses,
    frame_levels,
    fresh_probabilities,
    heard_speech,
    letter,
    padded,
    unheard_sound,
)
from voxserve.engine.segments import TimedSegment, Word
from voxserve.engine.speakers import speaker_segments
from voxserve.runners.speaker.checkpoint import read_state_dict
from voxserve.runners.vad import FRAME_SAMPLES

pytestmark = pytest.mark.timeout(120)

RATE = 16000
MODEL = "gpt-4o-transcribe-diarize"
JOE = ["Please call Stella and ask her to bring these things with her from the store.",
       "The museum opens early on weekends, so we should arrive before the crowds."]
GAP = np.zeros(int(0.8 * RATE), dtype=np.int16)


@pytest.fixture(scope="module")
def srv() -> Iterator[RunningServer]:
    with run_server(tts_config()) as s:
        yield s


@pytest.fixture(scope="module")
def http(srv: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=srv.base_url, timeout=120) as c:
        yield c


def _beckett() -> np.ndarray:
    path = resources.files("moonshine_cpp") / "test-data" / "beckett.wav"
    audio = decode_audio(Path(str(path)).read_bytes(), 60.0, RATE)
    pcm: np.ndarray = (np.clip(audio, -1, 1) * 32767).astype(np.int16)
    return pcm


@pytest.fixture(scope="module")
def conversation(http: httpx.Client) -> tuple[bytes, list[tuple[float, float, str]]]:
    """Joe, Beckett, Joe, with the time each turn spans."""
    turns = [("joe", speak_pcm(http, JOE[0], RATE)), ("beckett", _beckett()), ("joe", speak_pcm(http, JOE[1], RATE))]
    pieces: list[np.ndarray] = []
    spans: list[tuple[float, float, str]] = []
    at = 0
    for who, pcm in turns:
        if pieces:
            pieces.append(GAP)
            at += len(GAP)
        spans.append((at / RATE, (at + len(pcm)) / RATE, who))
        pieces.append(pcm)
        at += len(pcm)
    return wav_bytes(np.concatenate(pieces), RATE), spans


@pytest.fixture(scope="module")
def joe_reference(http: httpx.Client) -> str:
    """Joe saying something else: a known speaker's reference, as a data URL."""
    pcm = speak_pcm(http, "Here is a different sentence, spoken on another day.", RATE)
    return "data:audio/wav;base64," + base64.b64encode(wav_bytes(pcm, RATE)).decode()


def _post(http: httpx.Client, data: dict[str, Any] | list[tuple[str, str]], audio: bytes,
          path: str = "/v1/audio/transcriptions") -> httpx.Response:
    fields: dict[str, list[str]] = {}
    for key, value in (data.items() if isinstance(data, dict) else data):
        fields.setdefault(key, []).append(value)
    return http.post(path, data=fields, files={"file": ("talk.wav", audio, "audio/wav")})


def _who(spans: list[tuple[float, float, str]], start: float, end: float) -> str:
    mid = (start + end) / 2
    return min(spans, key=lambda s: max(s[0] - mid, mid - s[1], 0.0))[2]


def test_diarized_json_labels_each_person(http: httpx.Client, conversation: tuple[bytes, Any]) -> None:
    audio, spans = conversation
    r = _post(http, {"model": MODEL, "response_format": "diarized_json"}, audio)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["task"] == "transcribe" and body["usage"]["type"] == "duration"
    segments = body["segments"]
    assert {s["type"] for s in segments} == {"transcript.text.segment"}
    assert [s["id"] for s in segments] == [f"seg_{i:03d}" for i in range(1, len(segments) + 1)]
    label_of: dict[str, set[str]] = {}
    for s in segments:
        label_of.setdefault(_who(spans, s["start"], s["end"]), set()).add(s["speaker"])
    assert label_of["joe"] == {"A"} and label_of["beckett"] == {"B"}, segments
    # every word of the transcript is in a speaker segment, in order: labelling costs no words
    assert " ".join(s["text"] for s in segments).split() == body["text"].split()
    assert "stella" in body["text"].lower()


def test_known_speaker_is_named_and_a_stranger_stays_lettered(
    http: httpx.Client, conversation: tuple[bytes, Any], joe_reference: str
) -> None:
    audio, spans = conversation
    form = [("model", MODEL), ("response_format", "diarized_json"),
            ("known_speaker_names[]", "Joe"), ("known_speaker_references[]", joe_reference)]
    r = _post(http, form, audio)
    assert r.status_code == 200, r.text
    for s in r.json()["segments"]:
        expected = "Joe" if _who(spans, s["start"], s["end"]) == "joe" else "A"
        assert s["speaker"] == expected, s


def test_other_formats_carry_the_labels(http: httpx.Client, conversation: tuple[bytes, Any]) -> None:
    audio, _ = conversation
    verbose = _post(http, {"model": MODEL, "response_format": "verbose_json"}, audio).json()
    assert {s["speaker"] for s in verbose["segments"]} == {"A", "B"}
    srt = _post(http, {"model": MODEL, "response_format": "srt"}, audio).text
    assert "\nA: " in srt and "\nB: " in srt
    vtt = _post(http, {"model": MODEL, "response_format": "vtt"}, audio).text
    assert vtt.startswith("WEBVTT") and "<v A>" in vtt and "<v B>" in vtt
    assert "stella" in _post(http, {"model": MODEL, "response_format": "text"}, audio).text.lower()
    assert "stella" in _post(http, {"model": MODEL, "response_format": "json"}, audio).json()["text"].lower()


def test_streamed_segments_carry_online_labels(http: httpx.Client, conversation: tuple[bytes, Any]) -> None:
    audio, spans = conversation
    events = []
    with http.stream("POST", "/v1/audio/transcriptions", data={"model": MODEL, "stream": "true"},
                     files={"file": ("talk.wav", audio, "audio/wav")}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    segments = [e for e in events if e["type"] == "transcript.text.segment"]
    assert events[-1]["type"] == "transcript.text.done" and "stella" in events[-1]["text"].lower()
    assert segments and all(e["speaker"] in ("A", "B") for e in segments)
    joe = {e["speaker"] for e in segments if _who(spans, e["start"], e["end"]) == "joe"}
    beckett = {e["speaker"] for e in segments if _who(spans, e["start"], e["end"]) == "beckett"}
    assert len(joe) == 1 and len(beckett) == 1 and joe != beckett


def test_diarization_route_json_and_rttm(http: httpx.Client, conversation: tuple[bytes, Any],
                                         joe_reference: str) -> None:
    audio, spans = conversation
    r = _post(http, {}, audio, "/v1/audio/diarization")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["speakers"] == ["A", "B"] and body["duration"] == pytest.approx(spans[-1][1], abs=0.05)
    hyp = [(s["start"], s["end"], s["speaker"]) for s in body["segments"]]
    score = der(spans, hyp)  # the reference spans whole turns, pauses and all: only confusion counts here
    assert score.confusion < 0.02 and score.false_alarm < 0.02, score
    rttm = _post(http, [("response_format", "rttm"), ("known_speaker_names", "Joe Bloggs"),
                        ("known_speaker_references", joe_reference)], audio, "/v1/audio/diarization").text
    lines = [line.split() for line in rttm.splitlines()]
    assert lines and all(f[0] == "SPEAKER" and len(f) == 10 for f in lines)
    assert {f[7] for f in lines} == {"Joe_Bloggs", "A"}


def test_loud_noise_the_vad_does_not_hear_is_given_to_nobody(http: httpx.Client, srv: RunningServer,
                                                             conversation: tuple[bytes, Any]) -> None:
    """Sound the VAD does not hear as speech is embedded and kept only where it sounds
    like one of the speakers: seconds of loud noise after the talk make no speaker and
    stay unlabelled, but for any onset the VAD itself takes for speech, and the server
    answers others meanwhile."""
    audio, spans = conversation
    talk = decode_audio(audio, 60.0, RATE)
    rng = np.random.default_rng(1)
    noise = rng.normal(0.0, 0.1, 4 * RATE).astype(np.float32)  # white noise at -20 dBFS, far over the silence
    pcm = (np.clip(np.concatenate([talk, np.zeros(RATE // 2, np.float32), noise]), -1, 1) * 32767).astype(np.int16)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(_post, http, {}, wav_bytes(pcm, RATE), "/v1/audio/diarization")
        while not pending.done():
            assert httpx.get(f"{srv.base_url}/health", timeout=5).status_code == 200
            time.sleep(0.05)
        r = pending.result()
    assert r.status_code == 200, r.text
    assert r.json()["speakers"] == ["A", "B"]
    heard = padded(heard_speech(pcm.astype(np.float32) / 32767), len(pcm) / RATE)
    late = [seg for seg in r.json()["segments"] if seg["end"] > spans[-1][1] + 0.5]
    assert all(any(lo - 0.01 <= seg["start"] and seg["end"] <= hi + 0.01 for lo, hi in heard) for seg in late), \
        (late, heard[-3:])


def test_one_person_on_two_channels_is_one_speaker(http: httpx.Client) -> None:
    """Beckett in the room and then on a telephone line (8 kHz, G.711) between Joe's
    turns: the windows are compared through the telephone band and close centroids
    join, so the channel does not make him two people."""
    beckett = _beckett().astype(np.float32) / 32767
    phone = (np.clip(telephone_line(beckett, RATE), -1, 1) * 32767).astype(np.int16)
    turns = [("joe", speak_pcm(http, JOE[0], RATE)), ("beckett", _beckett()), ("joe", speak_pcm(http, JOE[1], RATE)),
             ("beckett", phone)]
    pcm = np.concatenate([p for _, turn in turns for p in (turn, GAP)])
    r = _post(http, {}, wav_bytes(pcm, RATE), "/v1/audio/diarization")
    assert r.status_code == 200, r.text
    assert len(r.json()["speakers"]) == 2, r.json()


def test_catalog_and_metrics(http: httpx.Client) -> None:
    ids = {m["id"] for m in http.get("/v1/models").json()["data"]}
    assert {MODEL, "voxserve-diarize"} <= ids
    assert "voxserve_asr_diarized_audio_seconds_total" in http.get("/metrics").text


# -- bad input ------------------------------------------------------------------------------
def _bad(r: httpx.Response, param: str) -> str:
    assert r.status_code == 400, (r.status_code, r.text[:300])
    error = r.json()["error"]
    assert error["param"] == param, error
    return str(error["message"])


def _speakers(names: list[str], refs: list[str]) -> list[tuple[str, str]]:
    return [("model", MODEL), *(("known_speaker_names[]", n) for n in names),
            *(("known_speaker_references[]", r) for r in refs)]


def _data_url(pcm: np.ndarray) -> str:
    return "data:audio/wav;base64," + base64.b64encode(wav_bytes(pcm, RATE)).decode()


def test_bad_known_speakers_are_refused(http: httpx.Client, conversation: tuple[bytes, Any],
                                        joe_reference: str) -> None:
    audio, _ = conversation
    five = [f"p{i}" for i in range(5)]
    assert "at most 4" in _bad(_post(http, _speakers(five, [joe_reference] * 5), audio), "known_speaker_names")
    assert "one reference per name" in _bad(_post(http, _speakers(["a", "b"], [joe_reference]), audio),
                                            "known_speaker_references")
    text = "data:audio/wav;base64," + base64.b64encode(b"just some text, not a sound " * 40).decode()
    assert "known_speaker_references[0] ('a')" in _bad(_post(http, _speakers(["a"], [text]), audio),
                                                      "known_speaker_references")
    short = _data_url((np.sin(np.arange(RATE) / 5) * 8000).astype(np.int16))
    assert "1.00 s long" in _bad(_post(http, _speakers(["a"], [short]), audio), "known_speaker_references")
    long = _data_url((np.sin(np.arange(12 * RATE) / 5) * 8000).astype(np.int16))
    assert "longer than" in _bad(_post(http, _speakers(["a"], [long]), audio), "known_speaker_references")
    assert "data URL" in _bad(_post(http, _speakers(["a"], ["https://example.com/a.wav"]), audio),
                              "known_speaker_references")
    assert "base64" in _bad(_post(http, _speakers(["a"], ["data:audio/wav;base64,@@@@"]), audio),
                            "known_speaker_references")
    assert "printable" in _bad(_post(http, _speakers(["x" * 65], [joe_reference]), audio), "known_speaker_names")
    assert "different" in _bad(_post(http, _speakers(["a", "a"], [joe_reference] * 2), audio),
                               "known_speaker_names")
    assert "gpt-4o-transcribe-diarize" in _bad(
        _post(http, [("model", "whisper-1"), ("known_speaker_names[]", "a"),
                     ("known_speaker_references[]", joe_reference)], audio), "known_speaker_names")


def test_oversized_reference_is_refused_while_read(http: httpx.Client, conversation: tuple[bytes, Any]) -> None:
    audio, _ = conversation
    huge = "data:audio/wav;base64," + "A" * (5 * 1024 * 1024)
    started = time.perf_counter()
    r = _post(http, _speakers(["a"], [huge]), audio)
    assert "over 4 MB" in _bad(r, "known_speaker_references")
    assert time.perf_counter() - started < 10
    four = "data:audio/wav;base64," + "A" * (3 * 1024 * 1024 + 512 * 1024)
    assert "12 MB" in _bad(_post(http, _speakers(["a", "b", "c", "d"], [four] * 4), audio),
                           "known_speaker_references")
    # a plain field is still held to 64 KB
    assert _post(http, {"model": MODEL, "prompt": "x" * 70_000}, audio).status_code == 400


def test_bad_formats_and_strategies_are_refused(http: httpx.Client, conversation: tuple[bytes, Any]) -> None:
    audio, _ = conversation
    assert "gpt-4o-transcribe-diarize" in _bad(
        _post(http, {"model": "whisper-1", "response_format": "diarized_json"}, audio), "response_format")
    _bad(_post(http, {"model": MODEL, "response_format": "rttm"}, audio), "response_format")
    _bad(_post(http, {"model": MODEL, "chunking_strategy": "{\"type\": \"server_vad\", \"threshold\": 7}"}, audio),
         "chunking_strategy")
    _bad(_post(http, {"model": MODEL, "chunking_strategy": "{"}, audio), "chunking_strategy")
    _bad(_post(http, {"model": MODEL, "include[]": "logprobs"}, audio), "include")
    _bad(_post(http, {"response_format": "srt"}, audio, "/v1/audio/diarization"), "response_format")
    _bad(_post(http, {"model": "whisper-1"}, audio, "/v1/audio/diarization"), "model")
    _bad(http.post("/v1/audio/diarization", data={"model": MODEL}, files={"x": ("a", b"1")}), "file")
    r = _post(http, {"model": MODEL}, b"RIFF" + b"\x00" * 100)
    assert r.status_code == 400


def test_a_bad_reference_costs_the_server_nothing(http: httpx.Client, srv: RunningServer,
                                                  conversation: tuple[bytes, Any]) -> None:
    audio, _ = conversation
    for _ in range(3):
        _bad(_post(http, _speakers(["a"], ["data:audio/wav;base64,AAAA"]), audio), "known_speaker_references")
    assert srv.asr_admission.active == 0 and srv.uploads.held == 0
    assert _post(http, {"model": MODEL}, audio).status_code == 200


# -- pure parts -----------------------------------------------------------------------------
def test_words_go_to_the_speaker_whose_turn_covers_them() -> None:
    words = (Word(" hello", 0.0, 0.5, 1.0), Word(" there", 0.6, 1.0, 1.0), Word(" bye", 2.1, 2.4, 1.0),
             Word(" now", 5.0, 5.2, 1.0))
    segment = TimedSegment(0.0, 5.2, " hello there bye now", (), 0.0, 1.0, 0.0, 0.0, 0, words)
    turns = [Turn(0.0, 1.1, "A"), Turn(2.0, 3.0, "B"), Turn(4.9, 6.0, "B")]
    out = speaker_segments([segment], turns)
    assert [(s.speaker, s.text) for s in out] == [("A", "hello there"), ("B", "bye"), ("B", "now")]
    assert speaker_segments([segment], [])[0].speaker == "A"


def test_the_vad_restarts_every_block_with_a_warm_up_on_staggered_grids() -> None:
    """One probability per whole frame, in place: before any grid's second block the
    plain stream's scores, and later each frame the highest of the grids' scores, each
    grid's block scored from a fresh state after its lead."""
    audio = np.tile(_beckett().astype(np.float32) / 32767, 3)[: 25 * RATE + 100]
    probs = fresh_probabilities(audio)
    assert len(probs) == len(audio) // FRAME_SAMPLES
    block, lead = VAD_BLOCK_FRAMES, VAD_LEAD_FRAMES
    first = block // VAD_GRIDS
    np.testing.assert_allclose(probs[:first], speech_probabilities(audio)[:first], atol=1e-5)
    lo, hi = block, block + first  # inside one block of every grid
    scored = []
    for grid in range(VAD_GRIDS):
        shift = grid * block // VAD_GRIDS
        start = lo - (lo - shift) % block if grid else lo
        alone = speech_probabilities(audio[(start - lead) * FRAME_SAMPLES : hi * FRAME_SAMPLES])
        scored.append(alone[lead + lo - start :])
    np.testing.assert_allclose(probs[lo:hi], np.max(scored, axis=0), atol=1e-5)
    assert (probs >= 0.5).any()


def test_sound_in_a_pause_between_one_speakers_turns_is_theirs() -> None:
    """A word the VAD missed between two turns of one person joins that person's speech;
    a silent pause stays a pause, and nothing fills a pause between two people."""
    speech = _beckett().astype(np.float32) / 32767
    floor = np.random.default_rng(0).normal(0.0, 1e-4, 8 * RATE).astype(np.float32)  # a noise floor, -80 dB
    audio = floor.copy()
    audio[: 2 * RATE] += speech[: 2 * RATE]
    audio[int(2.8 * RATE) : int(3.2 * RATE)] += speech[int(0.35 * RATE) : int(0.75 * RATE)]  # the missed word
    audio[4 * RATE : 6 * RATE] += speech[4 * RATE : 6 * RATE]
    levels = frame_levels(audio)
    assert len(levels) == len(audio) // FRAME_SAMPLES
    turns = [Turn(0.0, 2.0, "A"), Turn(4.0, 6.0, "A")]
    filled = fill_pauses(turns, levels)
    covered = [t for t in filled if t.start <= 3.0 < t.end]
    assert [t.speaker for t in covered] == ["A"]
    assert not any(t.start < 2.5 < t.end or t.start < 3.6 < t.end for t in filled)  # the silence either side
    assert fill_pauses([Turn(0.0, 2.0, "A"), Turn(4.0, 6.0, "B")], levels) == [Turn(0.0, 2.0, "A"), Turn(4.0, 6.0, "B")]
    quiet = frame_levels(np.concatenate([audio[: 2 * RATE], floor[: 2 * RATE], audio[4 * RATE :]]))
    assert fill_pauses(turns, quiet) == turns
    # Anywhere else the missed word is found as sound for the embedder to judge, and the
    # VAD's own speech and the silence are not.
    found = unheard_sound(levels, [(0.0, 2.0), (4.0, 6.0)])
    assert len(found) == 1 and found[0][0] < 3.0 < found[0][1]
    assert 2.2 < found[0][0] and found[0][1] < 3.8
    assert unheard_sound(levels, [(0.0, 6.0)]) == []
    assert unheard_sound(quiet, [(0.0, 2.0), (4.0, 6.0)]) == []


def test_regions_are_widened_but_stay_apart() -> None:
    regions = [(0.02, 1.0), (1.04, 2.0), (3.0, 4.0)]
    out = padded(regions, 4.03)
    np.testing.assert_allclose(out, [(0.0, 1.02), (1.02, 2.0 + PAD_S), (3.0 - PAD_S, 4.03)])
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(out))


@pytest.mark.parametrize("per_speaker", [60, MAX_CLUSTERED])
def test_odd_windows_that_sound_like_nobody_get_no_label(per_speaker: int) -> None:
    """Two voices and a few stray windows far from both (the onset of a noise the VAD took
    for speech): the strays form no speaker and join none, while a stray close to a voice
    joins it. With more windows than are agglomerated, the unsampled ones follow the
    same rule."""
    rng = np.random.default_rng(7)
    axes = np.linalg.qr(rng.normal(size=(192, 4)))[0].T  # four orthonormal directions

    def around(axis: np.ndarray, n: int, spread: float = 0.35) -> np.ndarray:
        v = axis + spread * rng.normal(size=(n, 192)) / np.sqrt(192)
        unit: np.ndarray = v / np.linalg.norm(v, axis=1, keepdims=True)
        return unit

    near_b = 0.8 * axes[1] + 0.6 * axes[3]  # similarity 0.8 to the second voice
    emb = np.concatenate([around(axes[0], per_speaker), around(axes[1], per_speaker), around(axes[2], 3),
                          around(near_b, 1, 0.05)]).astype(np.float32)
    labels = cluster_windows(emb)
    a, b = labels[0], labels[per_speaker]
    assert a != b and NOBODY not in (a, b)
    assert (labels[:per_speaker] == a).all() and (labels[per_speaker : 2 * per_speaker] == b).all()
    assert (labels[2 * per_speaker : -1] == NOBODY).all(), labels[2 * per_speaker :]
    assert labels[-1] == b


def test_letters_and_der() -> None:
    assert [letter(i) for i in (0, 1, 25, 26, 27)] == ["A", "B", "Z", "AA", "AB"]
    ref = [(0.0, 10.0, "x"), (10.0, 20.0, "y")]
    assert der(ref, [(0.0, 10.0, "B"), (10.0, 20.0, "A")]).der == 0.0
    wrong = der(ref, [(0.0, 20.0, "A")])
    assert wrong.confusion == pytest.approx(0.5, abs=0.02) and wrong.missed == 0.0
    assert der(ref, []).missed == 1.0
    named = [(0.0, 5.0, "x"), (5.0, 20.0, "B")]
    assert named_share(ref, named, "x", {"x"}) == pytest.approx(0.5, abs=0.01)
    assert named_share(ref, named, "y", {"x"}) == 0.0 and named_share(ref, named, "z", {"x"}) == 0.0
    # the collar leaves out the 0.25 s either side of x's start (0) and end (10), as der does
    assert named_share(ref, named, "x", {"x"}, 0.25) == pytest.approx(4.75 / 9.5, abs=0.01)


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self) -> tuple[Any, ...]:
            return (print, ("pwned",))

    path = tmp_path / "evil.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"w": Evil()}))
    with pytest.raises(pickle.UnpicklingError, match="not allowed"):
        read_state_dict(path)


def test_a_server_without_the_speaker_model_answers_503(http: httpx.Client, conversation: tuple[bytes, Any],
                                                        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Installed without `make install`'s CAM++ step: speaker labels get a 503 naming the
    step, and plain transcription goes on."""
    from voxserve.engine import diarize

    monkeypatch.setattr(diarize, "_model", None)
    monkeypatch.setattr(diarize, "checkpoint_path", lambda: tmp_path / "missing.pt")
    audio, _ = conversation
    for path in ("/v1/audio/diarization", "/v1/audio/transcriptions"):
        r = _post(http, {"model": "gpt-4o-transcribe-diarize"}, audio, path)
        assert r.status_code == 503, r.text
        assert "make install" in r.json()["error"]["message"]
    assert _post(http, {"model": "whisper-1"}, audio).status_code == 200
