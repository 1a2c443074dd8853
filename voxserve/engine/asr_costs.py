"""What each speech recognizer costs: timed at the ASR engine's warm-up, then followed
by its file batches, and what a transcription slot of it weighs in admission.

A cost is seconds of one core per second of audio. Admission weighs every slot held by
its model's cost over the cheapest model's, so a costly model takes its share of the
request limit (`engine/admission.py: weighted_room`).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Hashable, Iterable

import numpy as np

from voxserve.audio.mel import SAMPLE_RATE
from voxserve.engine.adapters.whisper import fitted_window
from voxserve.engine.admission import weighted_room
from voxserve.engine.recognizer import Recognizer, TranscribeOptions

__all__ = [
    "COST_PROBE_S",
    "COST_WEIGHT",
    "TURN_ESTIMATE_S",
    "ModelCosts",
    "first_key",
    "live_decode_s",
    "probe_sound",
    "timed_cost",
]

COST_PROBE_S = 4.0
"""The warm-up times each model on this much sound: its first cost estimate."""
COST_WEIGHT = 0.1
"""Weight of the latest file batch in a model's running cost (`ModelCosts.meter`)."""
TURN_ESTIMATE_S = 3.0
"""The warm-up times a live turn of this length, in the window a live turn gets."""


class ModelCosts:
    """Each model's running cost and the transcription slots held of it. Thread-safe:
    the decoding workers meter, the event loop holds slots and asks admission."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._costs: dict[str, float] = {}
        self._held: Counter[str] = Counter()
        """Transcription slots held, by model (`hold`): what admission weighs."""

    def first(self, name: str, cost: float) -> None:
        """A model's first estimate (the warm-up's); a measured cost stays."""
        with self._lock:
            self._costs.setdefault(name, cost)

    def meter(self, name: str, busy_s: float, audio_s: float) -> None:
        """Follow a model's cost with one file batch: `busy_s` of core time for
        `audio_s` of audio."""
        if audio_s <= 0:
            return
        seen = busy_s / audio_s
        with self._lock:
            known = self._costs.get(name)
            self._costs[name] = seen if known is None else known + COST_WEIGHT * (seen - known)

    def weights(self, models: Iterable[str]) -> dict[str, float]:
        """Each model's cost over the cheapest one's (1 for every model until measured):
        what one transcription slot of it weighs in admission."""
        with self._lock:
            costs = {name: self._costs.get(name) for name in models}
        known = [c for c in costs.values() if c]
        floor = min(known) if known else None
        return {name: (c / floor if c and floor else 1.0) for name, c in costs.items()}

    def hold(self, model: str, n: int = 1) -> None:
        """Count a transcription slot of `model` taken (n=1) or given back (n=-1)."""
        with self._lock:
            self._held[model] += n
            if self._held[model] <= 0:
                del self._held[model]

    def admits(self, models: Iterable[str], model: str, max_requests: int) -> bool:
        """Whether a request for `model` fits within `max_requests`, every slot weighed by
        its model's cost (`weights`)."""
        weights = self.weights(models)
        with self._lock:
            held = dict(self._held)
        return weighted_room(held, weights, model, max_requests)


def probe_sound(seconds: float) -> np.ndarray:
    """A seeded, speech-shaped sound (noise in syllable-length bursts) for timing a
    model's decode: silence would be decoded to nothing, and cost too little."""
    rng = np.random.default_rng(0)
    n = int(seconds * SAMPLE_RATE)
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * np.arange(n) / SAMPLE_RATE)
    return (0.1 * envelope * rng.standard_normal(n)).astype(np.float32)


def first_key(model: Recognizer, beam_size: int) -> Hashable:
    """The batch key of a first attempt at English (at no language for a model that does
    not speak it, which then detects it): what the warm-up times."""
    language = "en" if "en" in model.abilities.languages else None
    return model.attempts(TranscribeOptions(language=language), beam_size)[0]


def _fastest_decode_s(model: Recognizer, audio: np.ndarray, beam_size: int, tries: int) -> float:
    """The fastest of `tries` first-attempt decodes of `audio` on one thread, in its
    fitted window (a warm model)."""
    key = first_key(model, beam_size)
    piece = model.input(audio, fitted_window(len(audio)))
    took = float("inf")
    for _ in range(tries):
        started = time.perf_counter()
        model.decode([piece], key, 1)
        took = min(took, time.perf_counter() - started)
    return took


def timed_cost(model: Recognizer, probe: np.ndarray, beam_size: int) -> float:
    """A model's cost on one thread, from one decode of `probe` (a warm model)."""
    return _fastest_decode_s(model, probe, beam_size, 1) / (len(probe) / SAMPLE_RATE)


def live_decode_s(model: Recognizer, beam_size: int, tries: int = 3) -> float:
    """The fastest of `tries` decodes of a silent live turn (`TURN_ESTIMATE_S`) on one
    thread, in the window a live turn gets, on a warm model."""
    turn = np.zeros(int(TURN_ESTIMATE_S * SAMPLE_RATE), dtype=np.float32)
    return _fastest_decode_s(model, turn, beam_size, tries)
