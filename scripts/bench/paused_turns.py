"""Make a set of spoken turns with a pause in the middle of the thought, for the live
benches (`voxserve bench realtime --audio-dir DIR`), from a running server's own voices.

Each sentence is spoken whole (so its prosody runs on through the pause point), with word
timings; the pause goes in at the quietest 5 ms between the word before the `|` and the
word after it. Writes, per sentence and voice, `paused-N-VOICE.wav` (with the pause) or
`whole-N-VOICE.wav` (`--whole`: the same sentence without it), each with its `.txt`
reference, as `bench make-asr-set` does. An utterance that the server splits into two
items was cut.

    python scripts/bench/paused_turns.py --base-url http://127.0.0.1:8000 --out paused
    voxserve bench realtime --audio-dir paused --turn-detection semantic_vad --concurrency 1
"""

from __future__ import annotations

import argparse
import base64
import json
import urllib.request
import wave
from pathlib import Path

import numpy as np

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
RATE = 24000


def speak(base_url: str, model: str, voice: str, text: str) -> tuple[np.ndarray, list[dict[str, float]]]:
    body = json.dumps({"model": model, "voice": voice, "input": text, "timestamps": True,
                       "response_format": "pcm", "sample_rate": RATE}).encode()
    request = urllib.request.Request(f"{base_url}/v1/audio/speech", body,
                                     {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        reply = json.load(response)
    audio = np.frombuffer(base64.b64decode(reply["audio"]), dtype=np.int16)
    return audio, reply["timestamps"]


def quietest(audio: np.ndarray, a: float, b: float, window_s: float = 0.005) -> int:
    """The sample in [a, b] seconds where a 5 ms window holds the least energy."""
    lo, hi = max(0, int(a * RATE)), min(len(audio), int(b * RATE))
    w = max(1, int(window_s * RATE))
    if hi - lo <= w:
        return (lo + hi) // 2
    power = np.convolve(audio[lo:hi].astype(np.float64) ** 2, np.ones(w), mode="valid")
    return lo + int(np.argmin(power)) + w // 2


def write(path: Path, audio: np.ndarray, text: str) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(audio.astype(np.int16).tobytes())
    path.with_suffix(".txt").write_text(text + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", default="http://127.0.0.1:8000")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--pause-ms", type=float, default=600.0)
    p.add_argument("--whole", action="store_true", help="write the sentences without the pause")
    p.add_argument("--sentences", type=int, default=10, help="sentences per voice")
    p.add_argument("--pool", type=int, default=12,
                   help="draw them from the first N of SENTENCES (12: the live benches' set; 36: all)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    pause = np.zeros(int(args.pause_ms / 1000 * RATE), dtype=np.int16)
    for v, (model, voice) in enumerate(VOICES):
        # Each voice takes its own run of sentences, so the set holds different words.
        for k in range(args.sentences):
            n = (k + 3 * v) % min(args.pool, len(SENTENCES))
            before, after = SENTENCES[n].split("|")
            text = f"{before.strip()} {after.strip()}"
            audio, words = speak(args.base_url, model, voice, text)
            name = f"{'whole' if args.whole else 'paused'}-{n:02d}-{voice}"
            if not args.whole:
                k_before = len(before.split()) - 1
                end, start = words[k_before]["end_time"], words[k_before + 1]["start_time"]
                cut = quietest(audio, end - 0.04, start + 0.04)
                audio = np.concatenate([audio[:cut], pause, audio[cut:]])
            write(args.out / f"{name}.wav", audio, text)
            print(name, f"{len(audio) / RATE:.2f} s")


if __name__ == "__main__":
    main()
