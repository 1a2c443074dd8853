"""`bench kokoro-prosody`: how tts-1-hd sounds against Kokoro speaking each sentence whole.

One process, the same texts and voice. For each text, three renderings:
- `voxserve`: the TTS engine in this process (Kokoro alone, N workers), streamed as
  `voxserve serve` streams it, timed to its first audio;
- `whole`: the same model on each sentence whole, stage A then stage B in one call (the
  reference: the same phonemes, no windows), its leading pad cut as voxserve cuts it;
- `kokoro-onnx`: `Kokoro.create` on the same model file and voice (the peer, with its own
  phonemizer and pauses), timed to its whole result.

Whisper tiny.en (faster-whisper, word timestamps) transcribes each rendering. Reported
per system: duration against `whole`, pauses over 250 ms between two words with no
punctuation between them (from Whisper's word times, the same judge for every system),
WER, and first audio; for voxserve also the log-mel distance and level against `whole`,
and at each join of its windows the energy dip and the click against `whole`.
"""

from __future__ import annotations

import itertools
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from voxserve.bench.metrics import normalize_text, summarize, word_error_rate
from voxserve.config import TTSConfig
from voxserve.engine.adapters.kokoro import CHUNKING, GROWTH, LEAD_FRAMES, KokoroVoice
from voxserve.engine.output import crossfade
from voxserve.engine.tts import TTSEngine
from voxserve.engine.voices import Span
from voxserve.engine.work import Latent, VocoderChunking, plan_chunk
from voxserve.runners.kokoro.onnx_runner import HOP, SAMPLE_RATE, KokoroInput, list_voices

__all__ = ["PROSODY_TEXTS", "join_quality", "mid_phrase_pauses", "render_windows", "run_kokoro_prosody"]

PROSODY_TEXTS = (
    "The quick brown fox jumps over the lazy dog, twice before breakfast.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "Voice agents need word timings to know which words were heard when the user interrupts.",
    "After a long day, the fox sleeps under a tall tree and dreams of the next morning.",
    "It was the best of times, it was the worst of times, it was the age of wisdom.",
    "Streaming speech should sound like one voice reading one sentence, not a string of fragments.",
)
PAUSE_S = 0.25
"""A gap between two words longer than this, where the text has no punctuation, is a
pause a reader would not make."""
_PUNCTUATED = re.compile(r"[,;:.!?\u2014\u2013-]$")


@dataclass
class Rendering:
    system: str
    text: str
    voice: str
    seconds: float = 0.0
    first_audio_s: float | None = None
    transcript: str = ""
    pauses: int = 0
    speech_s: float = 0.0
    """From the first heard word's start to the last one's end (Whisper's times): the
    length without the silence before and after, which systems trim differently."""
    extra: dict[str, float] = field(default_factory=dict)


def mid_phrase_pauses(text: str, words: Sequence[tuple[str, float, float]]) -> int:
    """Gaps over `PAUSE_S` between consecutive heard words where the written word before
    the gap ends in no punctuation. Words are matched by position after normalizing, so a
    misheard word still counts its gap."""
    written = text.split()
    count = 0
    for (a, b), before in zip(itertools.pairwise(words), written, strict=False):
        if not _PUNCTUATED.search(before) and b[1] - a[2] > PAUSE_S:
            count += 1
    return count


def _db(x: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(np.square(x, dtype=np.float64)) + 1e-12))


def _log_mel(pcm: np.ndarray, n_fft: int = 1024, hop: int = 256, bands: int = 80) -> np.ndarray:
    frames = 1 + max(0, len(pcm) - n_fft) // hop
    window = np.hanning(n_fft)
    spec = np.abs(np.fft.rfft(np.stack([pcm[i * hop : i * hop + n_fft] * window for i in range(frames)]))) ** 2
    mel = 2595 * np.log10(1 + np.linspace(0, SAMPLE_RATE / 2, spec.shape[1]) / 700)
    edges = np.linspace(0, mel[-1], bands + 2)
    bank = np.stack([
        np.clip(np.minimum((mel - lo) / (mid - lo), (hi - mel) / (hi - mid)), 0, None)
        for lo, mid, hi in zip(edges, edges[1:], edges[2:], strict=False)
    ])
    return np.asarray(10 * np.log10(spec @ bank.T + 1e-10))


def mel_distance_db(reference: np.ndarray, test: np.ndarray) -> float:
    """Mean absolute log-mel difference (dB) over the frames within 60 dB of the
    reference's loudest."""
    n = min(len(reference), len(test))
    a, b = _log_mel(reference[:n]), _log_mel(test[:n])
    loud = a.max(axis=1) > a.max() - 60
    return float(np.mean(np.abs(a[loud] - b[loud])))


def join_quality(reference: np.ndarray, test: np.ndarray, joins: Sequence[int]) -> tuple[float, float, int]:
    """(worst energy dip, worst click, joins in sound) in dB at the `joins` (sample
    offsets) of `test`, each against `reference` at the same place. A dip counts only at
    a join where the reference's 10 ms there is within 10 dB of its mean level (in a gap
    between words, a quieter gap is no dip a listener hears): how much further that
    10 ms falls below the 20-60 ms either side than in the reference. The click: the
    first difference's energy over 5 ms at the join, against the reference's."""
    mean = _db(reference)
    dips, clicks, sounding = [0.0], [-99.0], 0
    for j in joins:
        if j < 1440 or j + 1440 > min(len(reference), len(test)):
            continue

        def contrast(x: np.ndarray, j: int = j) -> float:
            return _db(np.concatenate([x[j - 1440 : j - 480], x[j + 480 : j + 1440]])) - _db(x[j - 120 : j + 120])

        if _db(reference[j - 120 : j + 120]) > mean - 10:
            sounding += 1
            dips.append(contrast(test) - contrast(reference))
        clicks.append(_db(np.diff(test[j - 60 : j + 60])) - _db(np.diff(reference[j - 60 : j + 60])))
    return max(dips), max(clicks), sounding


def render_windows(
    model: KokoroVoice, latent: Latent, chunking: VocoderChunking = CHUNKING, growth: float = GROWTH,
    fade: int | None = None,
) -> tuple[np.ndarray, list[int]]:
    """A latent rendered offline as the engine streams it (the window plan, the crop, the
    crossfade of `fade` samples, by default the model's), and the sample offsets of its
    joins."""
    fade = model.profile.crossfade if fade is None else fade
    pieces: list[np.ndarray] = []
    joins: list[int] = []
    held: np.ndarray | None = None
    pos = index = 0
    while pos < latent.frames:
        lo, hi, start, end = plan_chunk(latent.frames, pos, index, chunking, level=latent.level, growth=growth)
        head = fade // 2 if start > 0 else 0
        tail = fade // 2 if end < latent.frames else 0
        pcm = model.decode([Span(latent, lo, hi)])[0][(start - lo) * HOP - head : (end - lo) * HOP + tail]
        if start > 0:
            joins.append(start * HOP)
        if held is not None:
            pcm = np.concatenate([crossfade(held, pcm[: len(held)]), pcm[len(held) :]])
        held = pcm[len(pcm) - 2 * tail :] if tail else None
        pieces.append(pcm[: len(pcm) - 2 * tail] if tail else pcm)
        pos, index = end, index + 1
    return np.concatenate(pieces), joins


def _whole(model: KokoroVoice, text: str, voice: str) -> tuple[np.ndarray, list[Latent]]:
    """Each sentence of `text` decoded whole, its leading pad cut to `LEAD_FRAMES` after
    the decode; and the latents the engine's stage A makes of the same items."""
    ref = model.resolve_voice(voice)
    items = model.inputs(text, ref, 1.0)
    acoustic, decoder = model.model.runners(1)
    out = []
    for frames in acoustic.run([KokoroInput(i.ids, i.style, i.speed) for i in items]):
        pcm = decoder.run([frames.decoder_input])[0]
        out.append(pcm[(int(frames.durations[0]) - LEAD_FRAMES) * HOP :])
    return np.concatenate(out), model.acoustic(items)


def _stream(engine: TTSEngine, model: KokoroVoice, text: str, voice: str) -> tuple[np.ndarray, float]:
    started = time.perf_counter()
    handle = engine.submit(engine.prepare(text, model.resolve_voice(voice), 1.0), SAMPLE_RATE)
    parts: list[np.ndarray] = []
    first: float | None = None
    try:
        while True:
            item = handle.stream.get_blocking(120)
            engine.taken(handle.id)
            if first is None and len(item.pcm):
                first = time.perf_counter() - started
            parts.append(item.pcm)
            if item.last:
                break
    finally:
        engine.abort(handle.id)
    return np.concatenate(parts).astype(np.float32) / 32767.0, first or 0.0


class _Judge:
    """Whisper tiny.en with word timestamps, on 16 kHz audio."""

    def __init__(self, threads: int) -> None:
        import logging

        from faster_whisper import WhisperModel

        from voxserve.runners.whisper.ct2_runner import bundled_model

        logging.getLogger("faster_whisper").setLevel(logging.WARNING)

        self._model = WhisperModel(str(bundled_model()[0]), device="cpu", compute_type="int8",
                                   cpu_threads=threads)

    def hear(self, pcm: np.ndarray) -> tuple[str, list[tuple[str, float, float]]]:
        import soxr

        audio = soxr.resample(pcm.astype(np.float32), SAMPLE_RATE, 16000)
        segments, _ = self._model.transcribe(audio, language="en", beam_size=5, word_timestamps=True)
        words = [(w.word.strip(), w.start, w.end) for s in segments for w in (s.words or [])]
        return " ".join(w for w, _, _ in words), words


def run_kokoro_prosody(
    texts: Sequence[str], voices: Sequence[str], workers: int, peer: bool,
    report: Callable[[str], None] = print,
) -> tuple[list[Rendering], dict[str, Any]]:
    """Every text in every voice by each system; the records and their summary."""
    engine = TTSEngine(TTSConfig(models=("kokoro",), workers=workers))
    engine.start()
    model = engine.models["kokoro-82m-v1.0"]
    assert isinstance(model, KokoroVoice)
    judge = _Judge(workers)
    speak_peer = _peer(voices) if peer else None
    records: list[Rendering] = []
    try:
        for voice, text in itertools.product(voices, texts):
            whole, latents = _whole(model, text, voice)
            streamed, first = _stream(engine, model, text, voice)
            rendered = [render_windows(model, latent) for latent in latents]
            offset, joins = 0, list[int]()
            for pcm, at in rendered:
                joins.extend(offset + j for j in at)
                offset += len(pcm)
            dip, click, sounding = join_quality(whole, np.concatenate([p for p, _ in rendered]), joins)
            extra = {"mel_db": mel_distance_db(whole, streamed), "level_db": _db(streamed) - _db(whole),
                     "join_dip_db": dip, "join_click_db": click, "joins": float(len(joins)),
                     "joins_in_sound": float(sounding)}
            clips = [(Rendering("voxserve", text, voice, len(streamed) / SAMPLE_RATE, first, extra=extra), streamed),
                     (Rendering("whole", text, voice, len(whole) / SAMPLE_RATE), whole)]
            if speak_peer is not None:
                started = time.perf_counter()
                audio = speak_peer(text, voice)
                peer_s = time.perf_counter() - started
                clips.append((Rendering("kokoro-onnx", text, voice, len(audio) / SAMPLE_RATE, peer_s), audio))
            for record, pcm in clips:
                record.transcript, words = judge.hear(pcm)
                record.pauses = mid_phrase_pauses(text, words)
                record.speech_s = words[-1][2] - words[0][1] if words else 0.0
                records.append(record)
            report(f"{voice}: {text[:40]}... " + ", ".join(f"{r.system} {r.seconds:.2f} s" for r, _ in clips))
    finally:
        engine.stop()
    return records, summarize_prosody(records)


def _peer(voices: Sequence[str]) -> Callable[[str, str], np.ndarray]:
    import onnxruntime as ort
    from kokoro_onnx import Kokoro

    from voxserve.bench.kokoro_peer import write_voices_npz
    from voxserve.runners.kokoro.onnx_runner import model_file

    folder = Path(tempfile.mkdtemp(prefix="voxserve-prosody-"))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    kokoro = Kokoro.from_session(ort.InferenceSession(str(model_file()), options,
                                                      providers=["CPUExecutionProvider"]),
                                 str(write_voices_npz(folder)))
    languages = {v.name: v.language for v in list_voices()}

    def speak(text: str, voice: str) -> np.ndarray:
        lang = "en-gb" if languages[voice] == "en-GB" else "en-us"
        audio, _ = kokoro.create(text, voice=voice, lang=lang)
        return np.asarray(audio, dtype=np.float32)

    return speak


def summarize_prosody(records: Sequence[Rendering]) -> dict[str, Any]:
    """Per system: median duration against `whole`, mid-phrase pauses in all, WER, and
    first audio; voxserve's log-mel, level and join figures."""
    whole = {(r.text, r.voice): r for r in records if r.system == "whole"}
    systems: dict[str, Any] = {}
    for name in dict.fromkeys(r.system for r in records):
        rows = [r for r in records if r.system == name]
        ratios = [r.seconds / whole[(r.text, r.voice)].seconds for r in rows]
        speech = [r.speech_s / whole[(r.text, r.voice)].speech_s for r in rows if whole[(r.text, r.voice)].speech_s]
        entry: dict[str, Any] = {
            "clips": len(rows),
            "duration_ratio": summarize(ratios),
            "speech_ratio": summarize(speech),
            "joins": sum(int(r.extra.get("joins", 0)) for r in rows),
            "joins_in_sound": sum(int(r.extra.get("joins_in_sound", 0)) for r in rows),
            "mid_phrase_pauses": sum(r.pauses for r in rows),
            "wer": word_error_rate([(normalize_text(r.text), normalize_text(r.transcript)) for r in rows]),
        }
        firsts = [r.first_audio_s for r in rows if r.first_audio_s is not None]
        if firsts:
            entry["first_audio_s"] = summarize(firsts)
        for key in ("mel_db", "level_db", "join_dip_db", "join_click_db"):
            values = [r.extra[key] for r in rows if key in r.extra]
            if values:
                entry[key] = {"median": float(np.median(values)), "max": float(np.max(values))}
        systems[name] = entry
    return {"systems": systems}


def format_prosody(summary: dict[str, Any]) -> str:
    lines = [("| system | clips | duration / whole (median) | speech span / whole | mid-phrase pauses "
              "> 250 ms | WER | first audio p50 | log-mel vs whole | level | joins in sound / all | "
              "worst dip there | worst join click |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in summary["systems"].items():
        first = s.get("first_audio_s")
        first_ms = f"{1000 * first['p50']:.0f} ms" if first else "-"
        joins = f"{s['joins_in_sound']} / {s['joins']}" if s["joins"] else "-"

        def fig(key: str, unit: str, s: dict[str, Any] = s) -> str:
            v = s.get(key)
            return f"{v['median']:.2f} {unit} (max {v['max']:.2f})" if v else "-"

        lines.append(
            f"| {name} | {s['clips']} | {s['duration_ratio']['p50']:.3f} | {s['speech_ratio']['p50']:.3f} | "
            f"{s['mid_phrase_pauses']} | {100 * s['wer']:.1f} % | {first_ms} | "
            f"{fig('mel_db', 'dB')} | {fig('level_db', 'dB')} | "
            f"{joins} | "
            f"{fig('join_dip_db', 'dB')} | {fig('join_click_db', 'dB')} |"
        )
    return "\n".join(lines)
