"""Phonemes and phoneme ids for a Piper voice, through the espeak-ng bundled in piper-tts.

espeak-ng keeps global state (voice, buffers), so every call into it in this process goes
through `espeak_clauses` and its one lock; other phonemizers (`voxserve.text.kokoro_g2p`)
call it too. This module does no I/O beyond reading the voice config it is given.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["Phonemizer", "UnsupportedVoice", "espeak_clauses"]

_ESPEAK_LOCK = threading.Lock()
_espeak_ready = False  # guarded by _ESPEAK_LOCK
# espeak-ng marks a language switch as "(en)". No "(" inside, so a run of "(" with no ")"
# is one linear pass, not one pass per "(".
_LANG_SWITCH = re.compile(r"\([^()]+\)")


class UnsupportedVoice(ValueError):
    """The voice uses a phoneme type this server does not implement."""


def espeak_clauses(voice: str, texts: Sequence[str]) -> list[list[tuple[str, str, bool]]]:
    """espeak-ng's IPA for each of `texts`, read with `voice`: one (phonemes, terminator,
    end_of_sentence) per clause, as `piper.espeakbridge.get_phonemes` gives them.

    The only way into espeak-ng in this process: it holds the lock for the whole batch,
    since the voice and espeak's buffers are global. The voice is set once per batch
    (setting it costs ~0.1 ms, more than reading a word).
    """
    global _espeak_ready
    from piper import espeakbridge
    from piper.phonemize_espeak import ESPEAK_DATA_DIR

    with _ESPEAK_LOCK:
        if not _espeak_ready:
            espeakbridge.initialize(str(ESPEAK_DATA_DIR))
            _espeak_ready = True
        espeakbridge.set_voice(voice)
        return [espeakbridge.get_phonemes(text) for text in texts]


class Phonemizer:
    """Text -> phoneme id arrays, one per sentence, for one voice config."""

    def __init__(self, voice_config: Mapping[str, Any]):
        from piper.config import PiperConfig

        self._config = PiperConfig.from_dict(dict(voice_config))
        kind = str(self._config.phoneme_type.value)
        if kind not in ("espeak", "text"):
            raise UnsupportedVoice(f"phoneme type {kind!r} is not supported (espeak, text)")
        self._kind = kind
        self._id_map = self._config.phoneme_id_map

    def _espeak(self, text: str) -> list[list[str]]:
        (clauses,) = espeak_clauses(self._config.espeak_voice, [text])
        sentences: list[list[str]] = []
        current: list[str] = []
        for phonemes, terminator, end_of_sentence in clauses:
            phonemes = _LANG_SWITCH.sub("", phonemes) + terminator
            if terminator in (",", ":", ";"):
                phonemes += " "
            current.extend(unicodedata.normalize("NFD", phonemes))
            if end_of_sentence:
                sentences.append(current)
                current = []
        if current:
            sentences.append(current)
        return sentences

    def phonemes(self, text: str) -> list[list[str]]:
        """One phoneme list per sentence; empty sentences dropped."""
        if self._kind == "text":
            groups = [list(unicodedata.normalize("NFD", text))]
        else:
            groups = self._espeak(text)
        return [g for g in groups if any(not p.isspace() for p in g)]

    def ids(self, text: str) -> list[np.ndarray]:
        """One int64 id array per sentence (BOS, pads and EOS included)."""
        bos, pad, eos = self._id_map["^"], self._id_map["_"], self._id_map["$"]
        out: list[np.ndarray] = []
        for sentence in self.phonemes(text):
            ids: list[int] = [*bos, *pad]
            for phoneme in sentence:
                mapped = self._id_map.get(phoneme)
                if mapped is None:
                    continue  # unknown symbols (e.g. emoji remnants) carry no sound
                ids.extend(mapped)
                ids.extend(pad)
            ids.extend(eos)
            if len(ids) > len(bos) + len(pad) + len(eos):
                out.append(np.asarray(ids, dtype=np.int64))
        return out
