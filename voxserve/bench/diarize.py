"""The diarization benchmark, over HTTP against a running server:
`python -m voxserve.bench.diarize --url http://127.0.0.1:8000`.

For each conversation of real people (`bench/conversations.py`; the held-out ones are
reported apart and were never used to choose a setting): DER (0.25 s collar,
best one-to-one mapping, `bench/der.py`) and the number of speakers from
`POST /v1/audio/diarization`; then the same with the known speakers' references (taken
from other recordings of them): the share of each known person's speech that carries
their name, and the share of the others' speech that wrongly carries a known name. The
words: the diarized transcript (`gpt-4o-transcribe-diarize`, which chunks `"auto"` and
times words) as WER against the same model's plain transcript (`whisper-1`, json, the
same chunking) and against its transcript with word times (the one the speakers are
given to, so any difference there is diarization's). The speed: a five-minute two-person
file transcribed with word times and with speakers in turns (`--speed-runs` each; the
same chunking), medians of the wall time, and the speakers alone
(`/v1/audio/diarization`), with `/health` probed every 50 ms meanwhile.
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import time
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from voxserve.audio.encode import wav_file
from voxserve.bench.conversations import (
    CONVERSATIONS,
    HELD_OUT,
    REFERENCES,
    Conversation,
    build,
    reference_audio,
)
from voxserve.bench.der import COLLAR_S, der, named_share
from voxserve.bench.health import HealthProber, summarize_probes
from voxserve.bench.metrics import word_errors
from voxserve.bench.real_speech_set import SAMPLE_RATE, default_cache

__all__ = ["Result", "main", "run"]

Turns = list[tuple[float, float, str]]


@dataclass(frozen=True)
class Result:
    conversation: str
    seconds: float
    speakers: int
    found: int
    der: float
    missed: float
    false_alarm: float
    confusion: float
    known: dict[str, float]
    """Share of each known person's speech that carries their name."""
    known_scored: dict[str, float]
    """The same outside the 0.25 s collar round each reference turn, as DER is scored."""
    misnamed: float
    """Share of the other people's speech that carries a known name."""
    wer_vs_plain: float
    wer_vs_timed: float
    """Against the same model's transcript with word times: diarization's own cost."""
    held_out: bool = False


PLAIN = [("model", "whisper-1"), ("chunking_strategy", "auto")]
TIMED = [*PLAIN, ("response_format", "verbose_json"), ("timestamp_granularities[]", "word")]
"""The transcription a diarized request runs: the same chunking, with word times."""
DIARIZED = [("model", "gpt-4o-transcribe-diarize"), ("response_format", "diarized_json")]


def _post(client: httpx.Client, path: str, audio: bytes, fields: list[tuple[str, str]]) -> httpx.Response:
    data: dict[str, list[str]] = {}
    for key, value in fields:
        data.setdefault(key, []).append(value)
    r = client.post(path, data=data, files={"file": ("talk.wav", audio, "audio/wav")})
    r.raise_for_status()
    return r


def _wav(audio: np.ndarray) -> bytes:
    return wav_file((np.clip(audio, -1.0, 1.0) * 32767).astype(np.int16), SAMPLE_RATE)


def _data_url(audio: np.ndarray) -> str:
    return "data:audio/wav;base64," + base64.b64encode(_wav(audio)).decode()


def run_one(client: httpx.Client, conversation: Conversation, held_out: bool = False, words: bool = True) -> Result:
    cache = default_cache()
    audio, reference = build(conversation, cache)
    wav = _wav(audio)
    body = _post(client, "/v1/audio/diarization", wav, []).json()
    hyp = [(s["start"], s["end"], s["speaker"]) for s in body["segments"]]
    score = der(reference, hyp)
    people = list(dict.fromkeys(s for *_, s in reference))
    refs = [r for r in REFERENCES if r.speaker in people]
    fields = [("known_speaker_names[]", r.speaker) for r in refs]
    fields += [("known_speaker_references[]", _data_url(reference_audio(r, cache))) for r in refs]
    named = _post(client, "/v1/audio/diarization", wav, fields).json()
    named_hyp = [(s["start"], s["end"], s["speaker"]) for s in named["segments"]]
    known = {r.speaker: named_share(reference, named_hyp, r.speaker, {r.speaker}) for r in refs}
    known_scored = {r.speaker: named_share(reference, named_hyp, r.speaker, {r.speaker}, COLLAR_S) for r in refs}
    others = [p for p in people if p not in known]
    names = set(known)
    misnamed = statistics.fmean(named_share(reference, named_hyp, p, names) for p in others) if others and names else 0.0
    wer = wer_timed = float("nan")
    if words:
        plain = _post(client, "/v1/audio/transcriptions", wav, PLAIN).json()["text"]
        timed = _post(client, "/v1/audio/transcriptions", wav, TIMED).json()["text"]
        diarized = _post(client, "/v1/audio/transcriptions", wav, DIARIZED).json()
        text = " ".join(s["text"] for s in diarized["segments"])
        wer, wer_timed = word_errors(plain, text).wer, word_errors(timed, text).wer
    return Result(conversation.id, round(len(audio) / SAMPLE_RATE, 1), len(people), len(body["speakers"]),
                  score.der, score.missed, score.false_alarm, score.confusion, known, known_scored, misnamed,
                  wer, wer_timed, held_out)


def speed(client: httpx.Client, base_url: str, runs: int, minutes: float = 5.0) -> dict[str, Any]:
    """Transcription with word times and diarized transcription of a `minutes`-long
    two-person file, in turns, and the speakers alone."""
    audio, _ = build(CONVERSATIONS[0], default_cache())
    reps = int(np.ceil(minutes * 60 * SAMPLE_RATE / len(audio)))
    wav = _wav(np.tile(audio, reps)[: int(minutes * 60 * SAMPLE_RATE)])
    times: dict[str, list[float]] = {"plain": [], "diarized": [], "speakers_only": []}
    prober = HealthProber(base_url)
    prober.start()
    try:
        for _ in range(runs):
            for kind, fields in (("plain", TIMED), ("diarized", DIARIZED)):
                started = time.perf_counter()
                _post(client, "/v1/audio/transcriptions", wav, fields)
                times[kind].append(time.perf_counter() - started)
            started = time.perf_counter()
            _post(client, "/v1/audio/diarization", wav, [])
            times["speakers_only"].append(time.perf_counter() - started)
    finally:
        probes = prober.stop()
    plain, diarized = statistics.median(times["plain"]), statistics.median(times["diarized"])
    return {"minutes": minutes, "plain_s": round(plain, 2), "diarized_s": round(diarized, 2),
            "speakers_only_s": round(statistics.median(times["speakers_only"]), 2),
            "added": round((diarized - plain) / plain, 3), "runs": times,
            "health_p99_ms": round(summarize_probes(probes)["p99"] * 1000, 1)}


def run(base_url: str, speed_runs: int, words: bool = True) -> dict[str, Any]:
    with httpx.Client(base_url=base_url, timeout=1200) as client:
        results = [run_one(client, c, words=words) for c in CONVERSATIONS]
        held = [run_one(client, c, held_out=True, words=words) for c in HELD_OUT]
        out: dict[str, Any] = {"conversations": [r.__dict__ for r in results + held],
                               "mean_der": statistics.fmean(r.der for r in results),
                               "speaker_count_right": sum(r.speakers == r.found for r in results),
                               "held_out_mean_der": statistics.fmean(r.der for r in held),
                               "held_out_speaker_count_right": sum(r.speakers == r.found for r in held)}
        if speed_runs:
            out["speed"] = speed(client, base_url, speed_runs)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--speed-runs", type=int, default=3, help="plain and diarized runs of the 5-minute file; 0: none")
    p.add_argument("--out", help="write the results here as JSON")
    p.add_argument("--no-words", action="store_true",
                   help="speakers only: skip the plain and diarized transcriptions that compare the words")
    args = p.parse_args(argv)
    out = run(args.url, args.speed_runs, words=not args.no_words)
    print(f"{'conversation':29s} {'min':>5s} {'spk':>7s} {'DER%':>6s} {'miss':>5s} {'FA':>5s} {'conf':>5s} "
          f"{'known% (outside collar)':>24s} {'misnamed%':>9s} {'WER vs plain/timed%':>19s}")
    for r in out["conversations"]:
        known = " ".join(f"{v * 100:.0f}({c * 100:.0f})" for v, c in zip(r["known"].values(),
                                                                          r["known_scored"].values(), strict=True))
        known = known or "-"
        name = r["conversation"] + (" (held out)" if r["held_out"] else "")
        print(f"{name:29s} {r['seconds'] / 60:5.1f} {r['speakers']:>3d}/{r['found']:<3d} "
              f"{r['der'] * 100:6.1f} {r['missed'] * 100:5.1f} {r['false_alarm'] * 100:5.1f} "
              f"{r['confusion'] * 100:5.1f} {known:>24s} {r['misnamed'] * 100:9.1f} "
              f"{r['wer_vs_plain'] * 100:9.1f}/{r['wer_vs_timed'] * 100:<9.1f}")
    print(f"mean DER {out['mean_der'] * 100:.1f}%, speaker count right in {out['speaker_count_right']} of "
          f"{len(CONVERSATIONS)}; held out: mean DER {out['held_out_mean_der'] * 100:.1f}%, speaker count "
          f"right in {out['held_out_speaker_count_right']} of {len(HELD_OUT)}")
    if "speed" in out:
        s = out["speed"]
        print(f"5-minute two-person file: with word times {s['plain_s']} s, diarized {s['diarized_s']} s "
              f"(+{s['added'] * 100:.0f}%), speakers only {s['speakers_only_s']} s "
              f"({s['speakers_only_s'] / s['plain_s'] * 100:.0f}%), "
              f"/health p99 {s['health_p99_ms']} ms")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
