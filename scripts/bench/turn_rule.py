"""How semantic_vad's rule would end the turns of a set of clips, offline, with the server's
own VAD, turn detector, end-of-turn model and Whisper model, but no server and no clock.

`--clips OUT` makes the set from a running server's own voices: turns with a pause in the
middle of the thought (`paused-N-VOICE.wav`), or with `--whole` the same sentences without
it (`whole-N-VOICE.wav`), each with its `.txt` reference, as `bench make-asr-set` writes
them (so `voxserve bench realtime --audio-dir OUT` reads them too). Each sentence is spoken
whole, so its prosody runs on through the pause point, with word timings; the pause goes in
at the quietest 5 ms between the word before the `|` and the word after it.

For each clip `--probe` finds every pause the turn detector sees, asks the model at
each silence of `SILENCES_MS` that the pause lasted, and decodes the turn up to the pause as
the early final does. Then `--rules`, per eagerness (and per first silence with `--first`),
applies the rule of `engine/semantic.py` (`probes` and `ends_turn`, with the transcript
always in time) and counts:

- cut: clips that the rule ends at a pause other than the last (a thought cut in two);
- late: clips whose last pause the rule does not end within 1.5 s (the next turn of a
  conversation often starts by then, and runs into this one);
- the silence at which the last pause ends, p50 and p90 (the final's latency less the
  VAD's lag and the model's call).

    python scripts/bench/turn_rule.py --clips paused --base-url http://127.0.0.1:8000
    python scripts/bench/turn_rule.py --clips whole --whole --base-url http://127.0.0.1:8000
    python scripts/bench/turn_rule.py --probe probes.json whole/ paused/
    python scripts/bench/turn_rule.py --rules probes.json --first 96,250,400,700
    python scripts/bench/turn_rule.py --rules probes.json --first 160 --complete-at 0.8,0.9,0.95
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import statistics
import urllib.request
import wave
from pathlib import Path
from typing import Any

import numpy as np

SILENCES_MS = (32, 64, 96, 160, 250, 300, 350, 400, 550, 700, 1000, 1500, 2000, 3000)
RATE = 16000
FRAME = 512
"""Samples per VAD frame (32 ms)."""
LATE_MS = 1500.0


SENTENCES = [
    "I would like to book a table for | four people at eight tonight.",
    "Can you tell me what the weather will be like in | Paris this weekend?",
    "Please send the report to | my manager before the meeting tomorrow.",
    "I need a flight from Boston to | Denver on the morning of the twelfth.",
    "What is the best way to get from the airport to | the city center?",
    "My order number is | four five six, and it has not arrived yet.",
    "Could you remind me to call | my sister when I get home tonight?",
    "The package should be delivered to the | back door of the building.",
    "I want to change my appointment with | the dentist to next Friday.",
    "How much does it cost to rent a car for | three days in Chicago?",
    "Set a timer for | twenty minutes and tell me when it is done.",
    "We are looking for a hotel near the | beach with free parking.",
    "Do you know if the pharmacy on | Main Street is open on Sundays?",
    "I think we should move the meeting to | Thursday afternoon instead.",
    "Could you add milk, eggs and | a loaf of bread to my shopping list?",
    "The train to Seattle leaves at | half past nine from platform two.",
    "Please turn off the lights in the | kitchen and the living room.",
    "My flight was cancelled, so I need | a new ticket for tomorrow.",
    "What time does the museum | close on Saturday evenings?",
    "I'd like to order a large pizza with | mushrooms and extra cheese.",
    "Remind me to water the plants | every morning this week.",
    "Is there a quiet place nearby where | I can work for an hour?",
    "Send a message to Anna saying that | I will be ten minutes late.",
    "We need two more chairs for | the guests arriving this evening.",
    "Can you find a recipe for | a vegetarian lasagna for six people?",
    "The printer on the third floor is | out of paper again.",
    "I was wondering whether you could | help me fix my bicycle.",
    "Play some relaxing music while | I finish cooking dinner.",
    "How long will it take to drive to | the coast if we leave now?",
    "My phone keeps turning off when | the battery is still half full.",
    "Book two tickets for the concert | on the fifteenth of June.",
    "Tell me which of these three | laptops has the longest battery life.",
    "I left my keys somewhere in | the office yesterday afternoon.",
    "Let's meet at the cafe across | the street from the library.",
    "Could you check whether my package | has been shipped yet?",
    "After lunch I want to go for | a walk along the river.",
]
VOICES = [("tts-1", "alloy"), ("tts-1-hd", "af_bella"), ("tts-1-hd", "am_adam"), ("tts-1-hd", "bf_emma")]
SPOKEN_RATE = 24000


def speak(base_url: str, model: str, voice: str, text: str) -> tuple[np.ndarray, list[dict[str, float]]]:
    body = json.dumps({"model": model, "voice": voice, "input": text, "timestamps": True,
                       "response_format": "pcm", "sample_rate": SPOKEN_RATE}).encode()
    request = urllib.request.Request(f"{base_url}/v1/audio/speech", body,
                                     {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        reply = json.load(response)
    audio = np.frombuffer(base64.b64decode(reply["audio"]), dtype=np.int16)
    return audio, reply["timestamps"]


def quietest(audio: np.ndarray, a: float, b: float, window_s: float = 0.005) -> int:
    """The sample in [a, b] seconds where a 5 ms window holds the least energy."""
    lo, hi = max(0, int(a * SPOKEN_RATE)), min(len(audio), int(b * SPOKEN_RATE))
    w = max(1, int(window_s * SPOKEN_RATE))
    if hi - lo <= w:
        return (lo + hi) // 2
    power = np.convolve(audio[lo:hi].astype(np.float64) ** 2, np.ones(w), mode="valid")
    return lo + int(np.argmin(power)) + w // 2


def write(path: Path, audio: np.ndarray, text: str) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SPOKEN_RATE)
        w.writeframes(audio.astype(np.int16).tobytes())
    path.with_suffix(".txt").write_text(text + "\n")


def make_clips(base_url: str, out: Path, pause_ms: float, whole: bool, sentences: int, pool: int) -> None:
    """Speak the set's turns on a running server, with or without the pause, into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    pause = np.zeros(int(pause_ms / 1000 * SPOKEN_RATE), dtype=np.int16)
    for v, (model, voice) in enumerate(VOICES):
        # Each voice takes its own run of sentences, so the set holds different words.
        for k in range(sentences):
            n = (k + 3 * v) % min(pool, len(SENTENCES))
            before, after = SENTENCES[n].split("|")
            text = f"{before.strip()} {after.strip()}"
            audio, words = speak(base_url, model, voice, text)
            name = f"{'whole' if whole else 'paused'}-{n:02d}-{voice}"
            if not whole:
                k_before = len(before.split()) - 1
                end, start = words[k_before]["end_time"], words[k_before + 1]["start_time"]
                cut = quietest(audio, end - 0.04, start + 0.04)
                audio = np.concatenate([audio[:cut], pause, audio[cut:]])
            write(out / f"{name}.wav", audio, text)
            print(name, f"{len(audio) / SPOKEN_RATE:.2f} s")


def _load(path: Path) -> np.ndarray:
    import soxr

    with wave.open(str(path)) as w:
        audio = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32) / 32768
        rate = w.getframerate()
    return np.asarray(soxr.resample(audio, rate, RATE), dtype=np.float32)


def probe(folders: list[Path]) -> list[dict[str, Any]]:
    """Every pause of every clip: its length, the model's answers, the early transcript."""
    from voxserve.engine.asr import fitted_window
    from voxserve.engine.turns import Pause, Resume, Start, TurnDetector
    from voxserve.runners.turn import SmartTurn
    from voxserve.runners.vad import SileroVAD, VADStream
    from voxserve.runners.whisper.ct2_runner import WhisperRunner
    from voxserve.runners.whisper.interface import DecodeInput

    vad, model, whisper = SileroVAD(), SmartTurn(), WhisperRunner(workers=1)
    mel = whisper.log_mel()
    tokenizer = whisper.tokenizer("transcribe", "en")
    options = whisper.options("transcribe", "en", None, 5, 0.0)

    def transcript(samples: np.ndarray) -> str:
        features, frames = mel(samples)
        width = fitted_window(len(samples))
        out = whisper.run([DecodeInput(np.ascontiguousarray(features[:, :width]), frames)], options)[0]
        return str(tokenizer.decode([t for t in out.tokens if t < tokenizer.eot])).strip()

    rows: list[dict[str, Any]] = []
    for folder in folders:
        for path in sorted(folder.glob("*.wav")):
            audio = np.concatenate([np.zeros(RATE // 2, np.float32), _load(path), np.zeros(5 * RATE, np.float32)])
            stream = VADStream()
            probs = np.concatenate([vad.score(stream, audio[i : i + 320]) for i in range(0, len(audio), 320)])
            start: int | None = None
            paused: int | None = None
            pauses: list[tuple[int, int | None]] = []
            for event in TurnDetector(0.5, 10_000).feed(probs, 0):
                if isinstance(event, Start) and start is None:
                    start = max(0, event.frame * FRAME - int(0.3 * RATE))
                elif isinstance(event, Pause):
                    paused = event.frame
                elif isinstance(event, Resume) and paused is not None:
                    pauses.append((paused, event.frame - paused))
                    paused = None
            if paused is not None:
                pauses.append((paused, None))
            if start is None:
                continue
            for frame, length in pauses:
                end = frame * FRAME
                answers = {
                    str(ms): model.complete(audio[start : end + ms * RATE // 1000])
                    for ms in SILENCES_MS
                    if length is None or ms < length * FRAME * 1000 // RATE
                }
                rows.append({
                    "clip": path.name, "frames": length, "last": length is None, "p": answers,
                    "text": transcript(audio[start : end + FRAME]),
                })
            print(path.name, [(r["frames"], round(r["p"].get("96", -1), 2)) for r in rows if r["clip"] == path.name],
                  flush=True)
    return rows


def outcome(rows: list[dict[str, Any]], due: tuple[float, ...], english: bool = True,
            complete_at: float | None = None) -> dict[str, Any]:
    """Cut and late clips, and the silence that ends the last pause, under the server's
    rule with the model asked at the silences `due` (and, with `complete_at`, that
    probability in place of `COMPLETE_AT` before `DOUBT_AFTER_MS`)."""
    from voxserve.engine import semantic as rt

    def turn_ends(ms: float, p: float, text: str) -> bool:
        if complete_at is None or ms >= rt.DOUBT_AFTER_MS:
            return rt.ends_turn(ms, p, text, english)
        return p >= complete_at and not rt.trails_off(text, english)

    clips: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        clips.setdefault(row["clip"], []).append(row)
    cut = late = 0
    ends: list[float] = []
    for pauses in clips.values():
        for row in pauses:
            ended: float | None = None
            for ms in due:
                p = row["p"].get(str(int(ms)))
                if p is None:
                    break
                if turn_ends(ms, p, row["text"]):
                    ended = ms
                    break
            if not row["last"]:
                if ended is not None:
                    cut += 1
                    break
                continue
            late += ended is None or ended > LATE_MS
            ends.append(ended if ended is not None else float("inf"))
    finite = sorted(e for e in ends if e != float("inf")) or [float("nan")]
    return {
        "clips": len(clips), "cut": cut, "late": late,
        "end_p50_ms": statistics.median(finite), "end_p90_ms": finite[int(0.9 * (len(finite) - 1))],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clips", type=Path, help="speak the set's turns into this folder")
    p.add_argument("--base-url", default="http://127.0.0.1:8000", help="with --clips: the server whose voices speak")
    p.add_argument("--pause-ms", type=float, default=600.0, help="with --clips: the pause put in mid-thought")
    p.add_argument("--whole", action="store_true", help="with --clips: the sentences without the pause")
    p.add_argument("--sentences", type=int, default=10, help="with --clips: sentences per voice")
    p.add_argument("--pool", type=int, default=12,
                   help="with --clips: draw them from the first N of SENTENCES (12: the live benches' set; 36: all)")
    p.add_argument("--probe", type=Path, help="write the pauses of the clips in FOLDERS here")
    p.add_argument("--rules", type=Path, help="read pauses written by --probe and apply the rule")
    p.add_argument("--first", default="", help="also try these first silences (ms, comma-separated)")
    p.add_argument("--complete-at", default="",
                   help="with --first, also try these probabilities in place of COMPLETE_AT (comma-separated)")
    p.add_argument("folders", nargs="*", type=Path)
    args = p.parse_args()
    if args.clips:
        make_clips(args.base_url, args.clips, args.pause_ms, args.whole, args.sentences, args.pool)
        return
    if args.probe:
        rows = probe(args.folders)
        args.probe.write_text(json.dumps(rows))
    else:
        raw = args.rules.read_bytes()
        rows = json.loads(gzip.decompress(raw) if args.rules.suffix == ".gz" else raw)
    from voxserve.engine import semantic as rt

    tries: list[tuple[str, tuple[float, ...], float | None]] = [
        (e, rt.probes(e), None) for e in ("high", "auto", "low")]
    levels = [None, *(float(x) for x in filter(None, args.complete_at.split(",")))]
    for first in filter(None, args.first.split(",")):
        due = (float(first), *(t for t in rt.PROBES_MS if t > float(first)))
        tries += [(f"first {first} ms" + (f" p>={at:g}" if at is not None else ""), due, at) for at in levels]
    for kind in ("whole", "paused"):
        subset = [r for r in rows if r["clip"].startswith(kind)]
        if not subset:
            continue
        for name, due, at in tries:
            o = outcome(subset, due, complete_at=at)
            print(f"{kind:6s} {name:22s} clips {o['clips']:3d}  cut {o['cut']:3d}  late {o['late']:3d}  "
                  f"ends at p50 {o['end_p50_ms']:.0f} ms, p90 {o['end_p90_ms']:.0f} ms")


if __name__ == "__main__":
    main()
