"""Compare a server's word timings with Whisper's word timestamps on the same audio.

    python -m voxserve.bench.word_timings --base-url http://127.0.0.1:8000

Asks each voice model of a running server (both by default) for a sentence with
`timestamps: true`, transcribes that audio with the server's own Whisper
(`timestamp_granularities[]=word`) and prints, per model, how far the starts and ends of
the words both name lie apart (median and 90th percentile, seconds). Whisper's own word
times are only good to a few tens of milliseconds, so this bounds the error from above.
"""

from __future__ import annotations

import argparse
import base64
import io
import re
import wave

import httpx
import numpy as np

TEXT = (
    "Voice agents need word timings to know which words were heard when the user "
    "interrupts. Captions need them too, and the playground highlights each word as it plays."
)


def _wav(pcm: bytes, rate: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)
    return out.getvalue()


def _plain(word: str) -> str:
    return re.sub(r"\W", "", word).lower()


def _compare(http: httpx.Client, model: str) -> str:
    r = http.post(
        "/v1/audio/speech",
        json={
            "model": model,
            "voice": "alloy",
            "input": TEXT,
            "response_format": "pcm",
            "timestamps": True,
        },
    )
    r.raise_for_status()
    body = r.json()
    pcm = base64.b64decode(body["audio"])
    t = http.post(
        "/v1/audio/transcriptions",
        files={"file": ("a.wav", _wav(pcm, body["sample_rate"]))},
        data={
            "model": "whisper-1",
            "language": "en",
            "response_format": "verbose_json",
            "timestamp_granularities[]": "word",
        },
    )
    t.raise_for_status()
    ours = [(_plain(w["word"]), w["start_time"], w["end_time"]) for w in body["timestamps"]]
    theirs = [(_plain(w["word"]), w["start"], w["end"]) for w in t.json()["words"]]
    starts: list[float] = []
    ends: list[float] = []
    at = 0
    for word, start, end in ours:  # pair in order, skipping at most two of Whisper's words
        for k in range(at, min(at + 3, len(theirs))):
            if theirs[k][0] == word:
                starts.append(abs(start - theirs[k][1]))
                ends.append(abs(end - theirs[k][2]))
                at = k + 1
                break
    seconds = len(pcm) / 2 / body["sample_rate"]
    return (
        f"{model}: {len(starts)} of {len(ours)} words paired; audio {seconds:.2f} s, last word ends "
        f"{ours[-1][2]:.2f} s; start diff median {np.median(starts):.3f} s, p90 "
        f"{np.percentile(starts, 90):.3f} s; end diff median {np.median(ends):.3f} s, p90 "
        f"{np.percentile(ends, 90):.3f} s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument(
        "--models", default="tts-1,tts-1-hd", help="voice models to ask (comma-separated)"
    )
    args = parser.parse_args(argv)
    with httpx.Client(base_url=args.base_url, timeout=120) as http:
        for model in args.models.split(","):
            print(_compare(http, model))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
