"""Pipecat's own OpenAI services against a voxserve, pointed at it by `base_url` alone.

Run by `tests/test_agent_framework.py` with the Python of `.venv-agents` (Pipecat pins
dependencies the server's environment cannot share), as a separate process:

    python tests/pipecat_client.py http://127.0.0.1:PORT "Text to speak."

It speaks the text with `OpenAITTSService` (`POST /v1/audio/speech`, its default model
`gpt-4o-mini-tts`), then hears that audio back with `OpenAISTTService` (an upload per
turn, its default `gpt-transcribe`) and with `OpenAIRealtimeSTTService` (`/v1/realtime`,
its default `gpt-realtime-whisper`, appends committed when its local VAD hears the end of
speech). Each runs in a Pipecat pipeline of its own; the test plays the VAD, with the
frames a VAD would push. It prints one JSON object: the audio's length and rate, each
transcript, and every error frame.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.task import PipelineParams
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.openai.stt import OpenAIRealtimeSTTService, OpenAISTTService
from pipecat.services.openai.tts import OpenAITTSService
from pipecat.workers.runner import WorkerRunner

RATE = 24000
FRAME_BYTES = RATE // 50 * 2
"""20 ms of 16-bit audio, a transport's usual frame."""
TIMEOUT_S = 60.0


class Collect(FrameProcessor):
    """The last processor: keeps the audio, transcripts and errors that reach it."""

    def __init__(self) -> None:
        super().__init__()
        self.audio = bytearray()
        self.transcripts: list[str] = []
        self.errors: list[str] = []
        self.heard = asyncio.Event()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame):
            self.audio.extend(frame.audio)
        elif isinstance(frame, TranscriptionFrame):
            self.transcripts.append(frame.text)
            self.heard.set()
        elif isinstance(frame, ErrorFrame):
            self.errors.append(str(frame.error))
            self.heard.set()
        await self.push_frame(frame, direction)


async def run(service: FrameProcessor, frames: list[Frame], wait_for_transcript: bool) -> Collect:
    """One pipeline, service then `Collect`: queue `frames`, wait for a transcript if
    asked, then end it."""
    collect = Collect()
    params = PipelineParams(audio_in_sample_rate=RATE, audio_out_sample_rate=RATE)
    worker = PipelineWorker(Pipeline([service, collect]), params=params, enable_rtvi=False)

    async def drive() -> None:
        await worker.queue_frames(frames)
        if wait_for_transcript:
            await asyncio.wait_for(collect.heard.wait(), TIMEOUT_S)
        await worker.queue_frame(EndFrame())

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await asyncio.wait_for(asyncio.gather(runner.run(), drive()), TIMEOUT_S)
    return collect


def spoken(audio: bytes) -> list[Frame]:
    """What a transport and its VAD push for one utterance: start, 20 ms frames, stop."""
    frames: list[Frame] = [VADUserStartedSpeakingFrame()]
    for i in range(0, len(audio), FRAME_BYTES):
        frames.append(InputAudioRawFrame(audio=audio[i : i + FRAME_BYTES], sample_rate=RATE, num_channels=1))
    frames.append(VADUserStoppedSpeakingFrame())
    return frames


async def main(base_url: str, text: str) -> dict[str, Any]:
    result: dict[str, Any] = {}
    started = time.perf_counter()
    tts = OpenAITTSService(api_key="unused", base_url=f"{base_url}/v1", sample_rate=RATE)
    spoke = await run(tts, [TTSSpeakFrame(text)], wait_for_transcript=False)
    audio = bytes(spoke.audio)
    result["tts"] = {"audio_s": len(audio) / 2 / RATE, "errors": spoke.errors}
    result["tts_s"] = time.perf_counter() - started

    silence = bytes(FRAME_BYTES * 10)
    stt = OpenAISTTService(api_key="unused", base_url=f"{base_url}/v1")
    heard = await run(stt, spoken(silence + audio + silence), wait_for_transcript=True)
    result["stt"] = {"transcripts": heard.transcripts, "errors": heard.errors}
    result["stt_s"] = time.perf_counter() - started

    ws_base = base_url.replace("http://", "ws://") + "/v1/realtime"
    live = OpenAIRealtimeSTTService(api_key="unused", base_url=ws_base)
    heard = await run(live, spoken(silence + audio + silence), wait_for_transcript=True)
    result["realtime"] = {"transcripts": heard.transcripts, "errors": heard.errors}
    result["total_s"] = time.perf_counter() - started
    return result


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))))
