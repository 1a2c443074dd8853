"""The CPU cores that the speech and transcription engines of one process share.

Neither engine imports the other. Each asks `SharedCores` what the other is doing, in the
terms of its own rule: a transcription batch runs solo (on several threads) only while no
speech stream is open; a speech unit spreads onto idle cores only while no transcription
work runs or waits; a live session's delta starts only while speech leaves a worker free.
Each engine is given the board at construction and joins it (`join_speech`,
`join_transcription`); the server builds the ASR engine on the speech engine's board.
Alone (ASR off, a Ray replica), an engine's board says the other side is idle.

Lock order: the ASR engine asks under its own lock, so `speech_*` takes only the TTS
engine's lock; the TTS engine asks with its lock let go.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["SharedCores"]


class _Speech(Protocol):
    @property
    def active_streams(self) -> int: ...


class _Transcription(Protocol):
    def busy(self) -> bool: ...


class SharedCores:
    def __init__(self) -> None:
        self.speech: _Speech | None = None
        self.speech_workers = 0
        """The TTS engine's worker threads (`--tts-workers`)."""
        self.transcription: _Transcription | None = None

    def join_speech(self, speech: _Speech, workers: int) -> None:
        """The speech engine, with its worker threads, shares these cores (from its construction)."""
        self.speech, self.speech_workers = speech, workers

    def join_transcription(self, transcription: _Transcription) -> None:
        """The transcription engine shares these cores (from its construction)."""
        self.transcription = transcription

    def speech_running(self) -> bool:
        """Any speech stream open: a transcription batch then keeps to its own worker's threads."""
        return self.speech is not None and self.speech.active_streams > 0

    def speech_on_every_worker(self) -> bool:
        """As many speech streams as TTS workers: a live delta would only slow them, so it waits."""
        return self.speech is not None and self.speech.active_streams >= self.speech_workers

    def transcription_running(self) -> bool:
        """Transcription work decoding or waiting: no speech unit takes the idle cores then."""
        return self.transcription is not None and self.transcription.busy()
