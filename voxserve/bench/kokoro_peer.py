"""`bench kokoro-peer`: voxserve's Kokoro against kokoro-onnx's own `create_stream`.

One process, the same texts, the same thread count, in one run. Imports the engine, as
`offline` does, and kokoro-onnx (the `peers` extra). For each thread count N, these
speakers take the prompts one at a time, their order alternating prompt by prompt so that
neither always runs right after the other:
- `voxserve`: the TTS engine in this process with N workers and Kokoro alone, as
  `voxserve serve` runs it but without HTTP: `prepare`, `submit`, then every chunk as the
  engine hands it out;
- `voxserve-http` (with a base URL): a running voxserve server over HTTP at c=1, raw PCM;
  it runs on whatever threads that server was started with;
- `kokoro-onnx`: `Kokoro.create_stream` on the same joined int8 model file, on a session
  with N intra-op threads (ONNX Runtime's other defaults, as kokoro-onnx's own session
  has them), and a voices file built here from voxserve's installed voices.

Each is timed from the call to its first non-empty chunk (TTFP) and to its last. The
audio differs in length for the same text: kokoro-onnx trims the silence around each of
its batches and inserts its own pauses, voxserve keeps the model's own, so the report
gives both audio-s/s and the time each took for the same texts.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
import numpy as np

from voxserve.bench.metrics import continuity_ok_rate, max_underrun, summarize
from voxserve.config import TTSConfig
from voxserve.engine.adapters.kokoro import KokoroVoice
from voxserve.engine.tts import TTSEngine
from voxserve.errors import VoxError
from voxserve.runners.kokoro.onnx_runner import (
    SAMPLE_RATE,
    KokoroModel,
    list_voices,
    load_voice,
    model_file,
)

__all__ = [
    "PEER",
    "PeerRecord",
    "Speaker",
    "format_peer",
    "records_json",
    "run_kokoro_peer",
    "summarize_peer",
    "write_voices_npz",
]

PEER = "kokoro-onnx"
_FAILURES = (VoxError, httpx.HTTPError, TimeoutError, ValueError)
"""What one prompt may fail with (the engine's errors, HTTP, a timeout, kokoro-onnx's own)."""
_ESPEAK_LANGUAGES = {
    "en-US": "en-us",
    "en-GB": "en-gb",
    "es": "es",
    "fr": "fr-fr",
    "hi": "hi",
    "it": "it",
    "pt-BR": "pt-br",
}
"""Kokoro's voice languages as the espeak-ng names kokoro-onnx's `lang` takes."""


@dataclass
class PeerRecord:
    """One prompt spoken by one speaker. Times in seconds from the call."""

    system: str
    threads: int
    prompt: int
    chars: int
    ttfp_s: float | None = None
    e2e_s: float | None = None
    audio_s: float = 0.0
    chunks: int = 0
    max_underrun_s: float | None = None
    error: str | None = None
    chunk_times_s: list[float] = field(default_factory=list)
    chunk_samples: list[int] = field(default_factory=list)

    def finish(self, e2e_s: float, sample_rate: int) -> None:
        self.e2e_s = e2e_s
        self.chunks = len(self.chunk_times_s)
        self.audio_s = sum(self.chunk_samples) / sample_rate
        if self.chunk_times_s:
            self.ttfp_s = self.chunk_times_s[0]
            self.max_underrun_s = max_underrun(self.chunk_times_s, self.chunk_samples, sample_rate)


class Speaker(Protocol):
    """One system under test: speaks a text and records when each chunk came."""

    name: str

    def speak(self, text: str, record: PeerRecord) -> None: ...


class EngineSpeaker:
    """voxserve's TTS engine in this process, Kokoro only, N workers."""

    name = "voxserve"

    def __init__(self, voice: KokoroVoice, voice_name: str, workers: int, warm: bool,
                 timeout_s: float = 600.0):
        self._engine = TTSEngine(TTSConfig(models=("kokoro",), workers=workers), models=[voice])
        self._voice = voice.resolve_voice(voice_name)
        self._timeout = timeout_s
        self._engine.start()
        if warm:
            self._engine.warmup()

    def speak(self, text: str, record: PeerRecord) -> None:
        engine = self._engine
        started = time.perf_counter()
        handle = engine.submit(engine.prepare(text, self._voice), SAMPLE_RATE)
        try:
            while True:
                item = handle.stream.get_blocking(self._timeout)
                engine.taken(handle.id)
                if len(item.pcm):
                    record.chunk_times_s.append(time.perf_counter() - started)
                    record.chunk_samples.append(len(item.pcm))
                if item.last:
                    break
        finally:
            engine.abort(handle.id)
        record.finish(time.perf_counter() - started, SAMPLE_RATE)

    def close(self) -> None:
        self._engine.stop()


class HttpSpeaker:
    """A running voxserve over HTTP: one streamed `POST /v1/audio/speech` at a time."""

    name = "voxserve-http"

    def __init__(self, base_url: str, model: str, voice_name: str, timeout_s: float = 600.0):
        self._client = httpx.Client(base_url=base_url, timeout=timeout_s)
        self._body = {"model": model, "voice": voice_name, "response_format": "pcm"}

    def speak(self, text: str, record: PeerRecord) -> None:
        started = time.perf_counter()
        with self._client.stream("POST", "/v1/audio/speech", json={**self._body, "input": text}) as r:
            if r.status_code != 200:
                record.error = f"HTTP {r.status_code}: {r.read()[:300]!r}"
                return
            rate = int(r.headers.get("x-sample-rate", SAMPLE_RATE))
            received = 0  # bytes; a chunk may end inside a 16-bit sample
            for data in r.iter_raw():
                if data:
                    record.chunk_times_s.append(time.perf_counter() - started)
                    record.chunk_samples.append((received + len(data)) // 2 - received // 2)
                    received += len(data)
        record.finish(time.perf_counter() - started, rate)

    def close(self) -> None:
        self._client.close()


def write_voices_npz(folder: Path) -> Path:
    """kokoro-onnx's voices file (an .npz of name -> float32 [510, 1, 256]), built from
    voxserve's installed voices, each checked against its pinned sha256."""
    path = folder / "voices-v1.0.npz"
    styles = {v.name: load_voice(v.name).reshape(-1, 1, 256) for v in list_voices()}
    np.savez(path, **styles)  # type: ignore[arg-type]  # numpy's stub takes one positional
    return path


class PeerSpeaker:
    """kokoro-onnx's `create_stream`, on a session with N intra-op threads."""

    name = PEER

    def __init__(self, voices_path: Path, voice_name: str, threads: int):
        import onnxruntime as ort
        from kokoro_onnx import Kokoro

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        session = ort.InferenceSession(str(model_file()), options,
                                       providers=["CPUExecutionProvider"])
        self._kokoro = Kokoro.from_session(session, str(voices_path))
        self._voice = voice_name
        language = {v.name: v.language for v in list_voices()}[voice_name]
        if language not in _ESPEAK_LANGUAGES:
            raise ValueError(f"voice {voice_name!r} speaks {language}, which the comparison "
                             f"does not cover; pick one of {', '.join(_ESPEAK_LANGUAGES)}")
        self._lang = _ESPEAK_LANGUAGES[language]

    def speak(self, text: str, record: PeerRecord) -> None:
        async def stream() -> float:
            started = time.perf_counter()
            async for audio, _rate in self._kokoro.create_stream(text, self._voice, lang=self._lang):
                if len(audio):
                    record.chunk_times_s.append(time.perf_counter() - started)
                    record.chunk_samples.append(len(audio))
            return time.perf_counter() - started

        record.finish(asyncio.run(stream()), SAMPLE_RATE)

    def close(self) -> None:
        pass


def summarize_peer(records: Sequence[PeerRecord]) -> dict[str, Any]:
    """Per (threads, system): TTFP, audio-s/s, continuity; and each thread count's ratios
    of voxserve (in process, and over HTTP when measured) to kokoro-onnx."""
    groups: dict[tuple[int, str], list[PeerRecord]] = {}
    for r in records:
        groups.setdefault((r.threads, r.system), []).append(r)
    rows: list[dict[str, Any]] = []
    for (threads, system), group in groups.items():
        done = [r for r in group if r.error is None and r.ttfp_s is not None]
        wall = sum(r.e2e_s or 0.0 for r in done)
        audio = sum(r.audio_s for r in done)
        underruns = [r.max_underrun_s or 0.0 for r in done]
        rows.append({
            "threads": threads,
            "system": system,
            "completed": len(done),
            "failed": len(group) - len(done),
            "ttfp_s": summarize([r.ttfp_s or 0.0 for r in done]),
            "e2e_s": summarize([r.e2e_s or 0.0 for r in done]),
            "audio_s": audio,
            "wall_s": wall,
            "audio_per_s": audio / wall if wall else float("nan"),
            "chunks_per_prompt": sum(r.chunks for r in done) / len(done) if done else float("nan"),
            "max_underrun_s": max(underruns, default=float("nan")),
            "continuity_ok_rate": continuity_ok_rate(underruns),
        })
    ratios: list[dict[str, Any]] = []
    by_key: dict[tuple[int, str], dict[str, Any]] = {(row["threads"], row["system"]): row for row in rows}
    for (threads, system), row in by_key.items():
        peer = by_key.get((threads, PEER))
        if system == PEER or peer is None:
            continue
        ratios.append({
            "threads": threads,
            "system": system,
            "ttfp_p50": row["ttfp_s"]["p50"] / peer["ttfp_s"]["p50"],
            "audio_per_s": row["audio_per_s"] / peer["audio_per_s"],
            "speedup_same_texts": peer["wall_s"] / row["wall_s"] if row["wall_s"] else float("nan"),
        })
    return {"systems": rows, "ratios": ratios}


def format_peer(summary: dict[str, Any]) -> str:
    header = (f"{'threads':>7}  {'system':<14}{'TTFP p50':>10}{'TTFP p95':>10}{'audio-s/s':>11}"
              f"{'audio s':>9}{'wall s':>9}{'chunks':>8}{'max underrun':>14}")
    lines = [header]
    for row in summary["systems"]:
        t = row["ttfp_s"]
        lines.append(f"{row['threads']:>7}  {row['system']:<14}{t['p50'] * 1e3:>8.0f}ms"
                     f"{t['p95'] * 1e3:>8.0f}ms{row['audio_per_s']:>11.2f}{row['audio_s']:>9.1f}"
                     f"{row['wall_s']:>9.1f}{row['chunks_per_prompt']:>8.1f}"
                     f"{row['max_underrun_s'] * 1e3:>12.0f}ms")
    for r in summary["ratios"]:
        lines.append(f"threads={r['threads']} {r['system']} against {PEER}: TTFP p50 "
                     f"{r['ttfp_p50']:.2f}x its, audio-s/s {r['audio_per_s']:.2f}x, the same texts "
                     f"done {r['speedup_same_texts']:.2f}x as fast")
    return "\n".join(lines)


@contextmanager
def _speakers(threads: int, voice: KokoroVoice, voice_name: str, voices_path: Path,
              base_url: str | None, http_model: str, warm: bool) -> Iterator[list[Speaker]]:
    """The speakers for one thread count, closed (the engine stopped) on the way out."""
    with ExitStack() as stack:
        engine = EngineSpeaker(voice, voice_name, threads, warm)
        stack.callback(engine.close)
        speakers: list[Speaker] = [engine]
        if base_url is not None:
            http = HttpSpeaker(base_url, http_model, voice_name)
            stack.callback(http.close)
            speakers.append(http)
        speakers.append(PeerSpeaker(voices_path, voice_name, threads))
        yield speakers


def run_kokoro_peer(prompts: list[str], thread_counts: list[int], voice_name: str,
                    base_url: str | None = None, http_model: str = "tts-1-hd",
                    warm: bool = True,
                    report: Callable[[str], Any] = print) -> tuple[list[PeerRecord], dict[str, Any]]:
    """Every speaker speaks every prompt at each thread count; records and their summary."""
    voice = KokoroVoice(KokoroModel())
    voice.resolve_voice(voice_name)  # 404-style error before anything loads
    records: list[PeerRecord] = []
    with tempfile.TemporaryDirectory(prefix="voxserve-kokoro-peer-") as tmp:
        voices_path = write_voices_npz(Path(tmp))
        for threads in thread_counts:
            with _speakers(threads, voice, voice_name, voices_path, base_url, http_model,
                           warm) as speakers:
                if warm:
                    for speaker in speakers:  # first-run costs out of the timing
                        speaker.speak("Warming up.", PeerRecord(speaker.name, threads, -1, 11))
                for i, text in enumerate(prompts):
                    order = speakers if i % 2 == 0 else speakers[::-1]
                    for speaker in order:
                        record = PeerRecord(speaker.name, threads, i, len(text))
                        try:
                            speaker.speak(text, record)
                        except _FAILURES as exc:  # a failed prompt is recorded, not fatal
                            record.error = f"{type(exc).__name__}: {exc}"
                        records.append(record)
                        report(f"threads={threads} {speaker.name:<14} prompt {i}: "
                               + (record.error or f"TTFP {(record.ttfp_s or 0) * 1e3:.0f} ms, "
                                  f"{record.audio_s:.1f} s of audio in {record.e2e_s or 0:.2f} s"))
    return records, summarize_peer(records)


def records_json(records: Sequence[PeerRecord]) -> list[dict[str, Any]]:
    return [asdict(r) for r in records]
