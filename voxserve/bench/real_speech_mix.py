"""Pure parts of the real-speech bench: noise at a signal-to-noise ratio, a telephone
line, and the text normalisation that word and character error rates are taken on.

numpy in, numpy out; no I/O and no server. SNR is the clip's *active speech level* over
the noise's RMS: the speech level is the RMS of the 20 ms frames within 40 dB of the
loudest frame, so that pauses and leading silence do not lower it (a clip with long
pauses would otherwise be drowned at a nominal SNR), and the noise is continuous, so its
whole-clip RMS is its level.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import soxr

from voxserve.bench.metrics import cer_characters, normalize_text

__all__ = ["ACTIVE_RANGE_DB", "Errors", "active_level", "babble", "errors", "mix_at_snr",
           "normalize", "number_words", "pink_noise", "snr_db", "telephone_line",
           "uses_characters"]

FRAME_S = 0.02
ACTIVE_RANGE_DB = 40.0
"""Frames this far below the loudest one are pauses, not speech."""
CHARACTER_LANGUAGES = frozenset({"ja", "zh"})


def _frames(audio: np.ndarray, rate: int) -> np.ndarray:
    n = max(1, int(FRAME_S * rate))
    usable = len(audio) // n * n
    if usable == 0:
        return audio.reshape(1, -1).astype(np.float64)
    return audio[:usable].reshape(-1, n).astype(np.float64)


def active_level(audio: np.ndarray, rate: int) -> float:
    """RMS of the frames within `ACTIVE_RANGE_DB` of the loudest frame."""
    power = np.mean(_frames(audio, rate) ** 2, axis=1)
    if power.max() <= 0.0:
        return 0.0
    active = power[power >= power.max() * 10.0 ** (-ACTIVE_RANGE_DB / 10.0)]
    return float(np.sqrt(active.mean()))


def _rms(audio: np.ndarray) -> float:
    return float(np.sqrt(np.mean(audio.astype(np.float64) ** 2))) if len(audio) else 0.0


def snr_db(speech: np.ndarray, noise: np.ndarray, rate: int) -> float:
    """Active speech level of `speech` over the RMS of `noise`, in dB."""
    return 20.0 * float(np.log10(active_level(speech, rate) / _rms(noise)))


def pink_noise(n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` samples of 1/f noise with unit RMS: white noise shaped in the frequency domain
    (power falls 3 dB an octave), without the DC bin."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    f = np.arange(len(spectrum), dtype=np.float64)
    f[0] = 1.0
    spectrum /= np.sqrt(f)
    spectrum[0] = 0.0
    noise = np.fft.irfft(spectrum, n)
    return (noise / _rms(noise)).astype(np.float32)


def babble(talkers: Sequence[np.ndarray], n: int, rate: int,
           rng: np.random.Generator) -> np.ndarray:
    """`n` samples of the talkers speaking at once, each at the same active level, each
    looped from a random start so that none begins with its leading silence in step."""
    total = np.zeros(n, dtype=np.float64)
    for talker in talkers:
        level = active_level(talker, rate)
        reps = -(-(n + len(talker)) // len(talker))
        looped = np.tile(talker, reps)
        start = int(rng.integers(0, len(talker)))
        total += looped[start:start + n] / level
    return (total / _rms(total)).astype(np.float32)


def mix_at_snr(speech: np.ndarray, noise: np.ndarray, snr: float, rate: int) -> np.ndarray:
    """`speech` plus `noise` scaled to `snr` dB below its active level; the sum is scaled
    down together when it would clip, which keeps the ratio."""
    if len(noise) != len(speech):
        raise ValueError("noise and speech must have the same length")
    gain = active_level(speech, rate) / (_rms(noise) * 10.0 ** (snr / 20.0))
    mixed: np.ndarray = speech.astype(np.float64) + gain * noise.astype(np.float64)
    peak = float(np.max(np.abs(mixed))) if len(mixed) else 0.0
    if peak > 0.99:
        mixed *= 0.99 / peak
    return mixed.astype(np.float32)


def telephone_line(audio: np.ndarray, rate: int) -> np.ndarray:
    """`audio` as heard through a narrowband telephone call: resampled to 8 kHz, limited
    to 300-3400 Hz, companded to 8-bit G.711 mu-law and back, then returned at `rate`."""
    narrow = soxr.resample(audio.astype(np.float32), rate, 8000)
    spectrum = np.fft.rfft(narrow)
    freqs = np.fft.rfftfreq(len(narrow), 1.0 / 8000)
    spectrum[(freqs < 300.0) | (freqs > 3400.0)] = 0.0
    band = np.clip(np.fft.irfft(spectrum, len(narrow)), -1.0, 1.0)
    mu = 255.0
    code = np.round(np.sign(band) * np.log1p(mu * np.abs(band)) / np.log1p(mu) * 127.0)
    decoded = np.sign(code) * np.expm1(np.abs(code) / 127.0 * np.log1p(mu)) / mu
    return np.asarray(soxr.resample(decoded.astype(np.float32), 8000, rate), dtype=np.float32)


_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SMALL = {
    "es": "cero uno dos tres cuatro cinco seis siete ocho nueve diez once doce trece catorce "
          "quince dieciséis diecisiete dieciocho diecinueve veinte",
    "fr": "zéro un deux trois quatre cinq six sept huit neuf dix onze douze treize quatorze "
          "quinze seize dix-sept dix-huit dix-neuf vingt",
    "de": "null eins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf dreizehn "
          "vierzehn fünfzehn sechzehn siebzehn achtzehn neunzehn zwanzig",
    "sv": "noll en två tre fyra fem sex sju åtta nio tio elva tolv tretton fjorton femton "
          "sexton sjutton arton nitton tjugo",
    "it": "zero uno due tre quattro cinque sei sette otto nove dieci undici dodici tredici "
          "quattordici quindici sedici diciassette diciotto diciannove venti",
    "pt": "zero um dois três quatro cinco seis sete oito nove dez onze doze treze catorze "
          "quinze dezesseis dezessete dezoito dezenove vinte",
}


def _english(n: int) -> str:
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    if n < 1000:
        rest = n % 100
        return _ONES[n // 100] + " hundred" + ("" if rest == 0 else " " + _english(rest))
    if n < 1_000_000:
        rest = n % 1000
        return _english(n // 1000) + " thousand" + ("" if rest == 0 else " " + _english(rest))
    return str(n)


def number_words(n: int, language: str) -> str | None:
    """`n` as the words a reference writes: English up to a million, other languages
    up to twenty; None where this has no words for it."""
    if language == "en":
        return _english(n) if n < 1_000_000 else None
    table = _SMALL.get(language)
    if table is None or n > 20:
        return None
    return table.split()[n]


_DIGITS = re.compile(r"\d+")
_TAGS = re.compile(r"\[[^\]]*\]|<[^>]*>|\{[^}]*\}")
_ENGLISH_WORDS = {"mr": "mister", "mrs": "missus", "dr": "doctor", "yknow": "you know",
                  "ok": "okay", "alright": "all right"}
_FILLERS = frozenset(["uh", "um", "uhm", "er", "erm", "ah", "hmm", "mm", "mhm"])


def normalize(text: str, language: str) -> str:
    """Lower case, punctuation removed, numbers spelled out as the references spell them,
    annotation tags ([noise], <vocnoise>) dropped; in English, the hesitations "uh" and
    "um" dropped (the references write them, Whisper leaves them out: they are not the
    words a listener wants) and "mr" read as "mister". For ja and zh, the characters
    that CER counts."""
    text = _TAGS.sub(" ", unicodedata.normalize("NFKC", text))
    if language in CHARACTER_LANGUAGES:
        return cer_characters(text)
    # "10,000" and "3.5" become one number or two before punctuation is removed.
    text = re.sub(r"(?<=\d)[,.](?=\d{3}\b)", "", text)

    def spell(match: re.Match[str]) -> str:
        words = number_words(int(match.group()), language)
        return f" {words} " if words is not None else match.group()

    words = normalize_text(_DIGITS.sub(spell, text)).split()
    if language == "en":
        words = [w for w in " ".join(_ENGLISH_WORDS.get(w, w) for w in words).split()
                 if w not in _FILLERS]
    return " ".join(words)


def uses_characters(language: str) -> bool:
    return language in CHARACTER_LANGUAGES


@dataclass(frozen=True)
class Errors:
    """Edits (substitutions + deletions + insertions) against the reference's units:
    words, or characters for ja and zh."""

    edits: int
    units: int

    @property
    def rate(self) -> float:
        return self.edits / self.units if self.units else float("nan")


def errors(reference: str, hypothesis: str, language: str) -> Errors:
    """Errors of one hypothesis, both sides normalised, counted by jiwer (the test extra)."""
    import jiwer

    ref, hyp = normalize(reference, language), normalize(hypothesis, language)
    if not ref:
        raise ValueError(f"reference {reference!r} is empty once normalised")
    if uses_characters(language):
        c = jiwer.process_characters(ref, hyp)
        return Errors(c.substitutions + c.deletions + c.insertions, len(ref))
    w = jiwer.process_words(ref, hyp)
    return Errors(w.substitutions + w.deletions + w.insertions, len(ref.split()))
