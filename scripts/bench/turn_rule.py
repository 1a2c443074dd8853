"""How semantic_vad's rule would end the turns of a set of clips, offline, with the server's
own VAD, turn detector, end-of-turn model and Whisper model, but no server and no clock.

For each clip (`paused_turns.py` writes them: `whole-*` sentences and `paused-*` ones with
a pause put in mid-thought) it finds every pause the turn detector sees, asks the model at
each silence of `SILENCES_MS` that the pause lasted, and decodes the turn up to the pause as
the early final does. Then, per eagerness (and per first silence with `--first`), it
applies the rule of `engine/semantic.py` (`probes` and `ends_turn`, with the transcript
always in time) and counts:

- cut: clips that the rule ends at a pause other than the last (a thought cut in two);
- late: clips whose last pause the rule does not end within 1.5 s (the next turn of a
  conversation often starts by then, and runs into this one);
- the silence at which the last pause ends, p50 and p90 (the final's latency less the
  VAD's lag and the model's call).

    python scripts/bench/turn_rule.py --probe probes.json whole/ paused/
    python scripts/bench/turn_rule.py --rules probes.json --first 96,250,400,700
    python scripts/bench/turn_rule.py --rules probes.json --first 160 --complete-at 0.8,0.9,0.95
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import wave
from pathlib import Path
from typing import Any

import numpy as np

SILENCES_MS = (32, 64, 96, 160, 250, 300, 350, 400, 550, 700, 1000, 1500, 2000, 3000)
RATE = 16000
FRAME = 512
"""Samples per VAD frame (32 ms)."""
LATE_MS = 1500.0


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
    p.add_argument("--probe", type=Path, help="write the pauses of the clips in FOLDERS here")
    p.add_argument("--rules", type=Path, help="read pauses written by --probe and apply the rule")
    p.add_argument("--first", default="", help="also try these first silences (ms, comma-separated)")
    p.add_argument("--complete-at", default="",
                   help="with --first, also try these probabilities in place of COMPLETE_AT (comma-separated)")
    p.add_argument("folders", nargs="*", type=Path)
    args = p.parse_args()
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
