"""GPU figures of the torch Whisper runner, taken on a machine with no network.

Two steps, so that the GPU machine needs nothing but torch, numpy, tokenizers and
transformers (no PyAV, soxr, ctranslate2 or TTS):

  prepare  (a machine with voxserve's test install): writes DIR with voxserve's wheel, the
           compact weights (int8 per row, about 28 MiB for tiny.en) and the test clips (the
           bench's sentences spoken by voxserve's TTS, 16 kHz) with their texts.
  measure  (the GPU machine, through scripts/bench/gpu_whisper.sh, which installs the wheel
           with --no-deps first), in one run:
           - offline: RTFx of 30 s windows (sentences packed into 30 s) at each batch size,
             greedy and beam 5, through the runner with CUDA graphs (log-mel on the device
             included, the upload of the audio not), and at two sizes without graphs;
           - short clips at c=1: each clip alone, samples on the host to text on the host,
             in a window fitted to it as the engine does; p50 and p99;
           - through the ASR engine (samples in: PyAV is not there to decode uploads):
             short clips at c=1, then files of mixed lengths all at once;
           - the peer: the same weights in transformers' `pipeline("automatic-speech-
             recognition")` at each batch size, greedy and beam 5;
           - WER of every configuration on the same windows.
           It writes results.json and results.md to --out and prints the table.

Run `measure --device cpu --batches 1,2 --peer-batches 2` to check it on a CPU first.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

RATE = 16000
WINDOW = 30 * RATE
GAP_S = 0.5
"""Silence between the sentences packed into one 30 s window."""


# -- prepare (here) --------------------------------------------------------------------
def prepare(out: Path, model: Path | None) -> None:
    from voxserve.bench.asr_offline import LONG, SHORT
    from voxserve.config import TTSConfig
    from voxserve.engine.tts import TTSEngine
    from voxserve.runners.whisper.interface import bundled_model
    from voxserve.runners.whisper.weights import export_weights

    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("voxserve-*.whl"):
        old.unlink()
    root = Path(__file__).resolve().parents[2]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out), str(root)],
        check=True,
    )
    folder, name = (model, model.resolve().name) if model else bundled_model()
    size = export_weights(folder, out / f"{name}.npz")
    print(f"weights: {out / f'{name}.npz'} ({size / 2**20:.1f} MiB)")
    texts = LONG + SHORT
    tts = TTSEngine(TTSConfig(models=("piper",), fixed_prior=False, noise_scale=0.0, noise_w=0.0))
    tts.start()
    try:
        voice = tts.default_model.voices[0]
        spoken = [tts.synthesize(t, voice, sample_rate=RATE) for t in texts]
    finally:
        tts.stop()
    arrays = {f"clip{i:03d}": pcm.astype(np.int16) for i, pcm in enumerate(spoken)}
    arrays["texts"] = np.frombuffer(json.dumps(texts).encode("utf-8"), dtype=np.uint8)
    np.savez_compressed(out / "clips.npz", **arrays)  # type: ignore[arg-type]
    total = sum(len(p) for p in spoken) / RATE
    print(f"clips: {len(spoken)} ({total:.0f} s) in {out / 'clips.npz'}")


# -- measure (there) -------------------------------------------------------------------
def _clips(data: Path) -> tuple[list[np.ndarray], list[str]]:
    with np.load(data / "clips.npz") as f:
        texts = json.loads(bytes(f["texts"]).decode("utf-8"))
        audio = [f[f"clip{i:03d}"].astype(np.float32) / 32768.0 for i in range(len(texts))]
    return audio, texts


def _windows(audio: list[np.ndarray], texts: list[str]) -> tuple[list[np.ndarray], list[str]]:
    """Sentences packed in order into 30 s windows (whole sentences only, 0.5 s apart),
    zero-padded to 30 s, each with its reference text."""
    windows: list[np.ndarray] = []
    refs: list[str] = []
    gap = np.zeros(int(GAP_S * RATE), dtype=np.float32)
    parts: list[np.ndarray] = []
    words: list[str] = []
    for clip, text in zip(audio, texts, strict=True):
        length = sum(len(p) for p in parts)
        if parts and length + len(gap) + len(clip) > WINDOW - RATE // 2:
            windows.append(np.pad(np.concatenate(parts), (0, WINDOW - length)))
            refs.append(" ".join(words))
            parts, words = [], []
        parts.extend([gap, clip] if parts else [clip])
        words.append(text)
    if parts:
        length = sum(len(p) for p in parts)
        windows.append(np.pad(np.concatenate(parts), (0, WINDOW - length)))
        refs.append(" ".join(words))
    return windows, refs


def _wer(refs: list[str], hyps: list[str]) -> float:
    from voxserve.bench.metrics import word_errors

    errors = words = 0.0
    for ref, hyp in zip(refs, hyps, strict=True):
        n = len(ref.split())
        errors += word_errors(ref, hyp).wer * n
        words += n
    return errors / words


def _fitted_frames(samples: int) -> int:
    """The engine's window for a piece under 30 s (`engine/asr.py: fitted_window`): its
    audio plus 1 s, rounded up to 5 s, at least 10 s, in 10 ms frames."""
    seconds = max(10.0, math.ceil((samples / RATE + 1.0) / 5.0) * 5.0)
    return min(3000, round(seconds * 100))


class Timer:
    def __init__(self, sync: Callable[[], None]):
        self.sync = sync

    def __call__(self, fn: Callable[[], Any]) -> tuple[float, Any]:
        self.sync()
        started = time.perf_counter()
        result = fn()
        self.sync()
        return time.perf_counter() - started, result


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    import voxserve
    from voxserve.runners.whisper.torch_runner import TorchWhisperRunner

    device = args.device
    cuda = device == "cuda"
    sync: Callable[[], None] = torch.cuda.synchronize if cuda else (lambda: None)
    timer = Timer(sync)
    weights = next(args.data.glob("*.npz")) if args.weights is None else args.weights
    if weights.name == "clips.npz":
        weights = next(p for p in args.data.glob("*.npz") if p.name != "clips.npz")
    audio, texts = _clips(args.data)
    windows, refs = _windows(audio, texts)
    info: dict[str, Any] = {
        "voxserve": str(Path(voxserve.__file__).parent),
        "weights": weights.name,
        "device": torch.cuda.get_device_name(0) if cuda else platform.processor() or "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "windows": len(windows),
        "command": " ".join(sys.argv),
    }
    print(json.dumps(info, indent=2), flush=True)
    started = time.perf_counter()
    runner = TorchWhisperRunner(weights, device=device, graphs=cuda and not args.no_graphs)
    info["load_s"] = round(time.perf_counter() - started, 2)
    mel = runner.log_mel()
    language = None if runner.multilingual else "en"
    batches = [int(b) for b in args.batches.split(",")]
    beams = [int(b) for b in args.beams.split(",")]
    rows: list[dict[str, Any]] = []

    def offline(r: TorchWhisperRunner, beam: int, batch: int, mode: str) -> None:
        opts = r.options("transcribe", language, None, beam, 0.0)
        picked = [i % len(windows) for i in range(batch)]
        samples = torch.from_numpy(np.stack([windows[i] for i in picked])).to(device)
        tok = r.tokenizer("transcribe", language)

        def once() -> list[str]:
            features = mel.batch(samples)
            outs = r.decode(features, [3000] * batch, [False] * batch, opts)
            return [tok.decode(o.tokens) for o in outs]

        try:
            timer(once)  # capture and warm-up
            walls = []
            hyps: list[str] = []
            for _ in range(args.reps):
                wall, hyps = timer(once)
                walls.append(wall)
        except Exception as exc:  # noqa: BLE001 - one configuration's failure is a row
            rows.append({"what": "runner", "mode": mode, "beam": beam, "batch": batch, "error": repr(exc)[:300]})
            print(f"runner {mode} beam {beam} batch {batch}: {exc!r}", flush=True)
            return
        wall = statistics.median(walls)
        row = {
            "what": "runner", "mode": mode, "beam": beam, "batch": batch,
            "ms_per_batch": round(wall * 1000, 1), "rtfx": round(batch * 30 / wall, 1),
            "wer": round(_wer([refs[i] for i in picked], hyps), 4),
        }  # fmt: skip
        rows.append(row)
        print(row, flush=True)

    for beam in beams:
        for batch in batches:
            offline(runner, beam, batch, "graphs" if runner._graphs is not None else "eager")
    if cuda and not args.no_graphs:
        eager = TorchWhisperRunner(weights, device=device, graphs=False)
        for batch in (batches[0], batches[-1]):
            offline(eager, 1, batch, "eager")
        del eager

    # Short clips, one at a time.
    for beam in beams:
        opts = runner.options("transcribe", language, None, beam, 0.0)
        tok = runner.tokenizer("transcribe", language)
        latencies: list[float] = []
        hyps = []

        def one(clip: np.ndarray, opts: Any = opts, tok: Any = tok) -> str:
            x = torch.from_numpy(clip).to(device)
            features = mel._log_mel(x[None])[:, :, :-1]
            width = _fitted_frames(len(clip))
            real = min(features.shape[-1], width)
            padded = torch.zeros(1, runner.n_mels, width, device=device)
            padded[:, :, :real] = features[:, :, :real]
            out = runner.decode(padded, [len(clip) // 160], [False], opts)[0]
            return str(tok.decode(out.tokens))

        for clip in audio[:2]:
            timer(lambda c=clip: one(c))  # type: ignore[misc]
        for _ in range(args.clip_passes):
            for clip in audio:
                wall, text = timer(lambda c=clip: one(c))  # type: ignore[misc]
                latencies.append(wall)
                hyps.append(text)
        ms = sorted(x * 1000 for x in latencies)
        row = {
            "what": "short clips c=1", "beam": beam, "clips": len(ms),
            "p50_ms": round(ms[len(ms) // 2], 1), "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 1),
            "wer": round(_wer(texts * args.clip_passes, hyps), 4),
        }  # fmt: skip
        rows.append(row)
        print(row, flush=True)

    if not args.no_engine:
        rows.extend(_engine(args, weights, audio, texts, language))
    if not args.no_peer:
        rows.extend(_peer(args, weights, windows, refs, beams, timer, info))
    return {"info": info, "rows": rows}


def _engine(
    args: argparse.Namespace, weights: Path, audio: list[np.ndarray], texts: list[str], language: str | None
) -> list[dict[str, Any]]:
    """Through the ASR engine (its batcher, cutting, fallback and feeder; samples in, no
    upload decoding, as the engine takes a live turn): short clips one at a time, then
    files of mixed lengths all at once. Beam 5, the engine's default."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from voxserve.config import ASRConfig
    from voxserve.engine.asr import ASREngine, TranscribeOptions
    from voxserve.engine.transcribe import start_live

    rows: list[dict[str, Any]] = []
    engine = ASREngine(ASRConfig(model_dir=weights, device=args.device, runtime="torch", gpu_batch=args.engine_batch))
    engine.start()
    engine.warmup()
    options = TranscribeOptions(language=language)
    pool = ThreadPoolExecutor(4)

    async def one(samples: np.ndarray) -> str:
        t = await start_live(engine, samples, options, pool, deadline=engine.clock() + 3600)
        return (await t.collect()).text

    try:
        for clip in audio[:2]:
            asyncio.run(one(clip))
        walls, hyps = [], []
        for _ in range(args.clip_passes):
            for clip in audio:
                started = time.perf_counter()
                hyps.append(asyncio.run(one(clip)))
                walls.append(time.perf_counter() - started)
        ms = sorted(x * 1000 for x in walls)
        row = {
            "what": "engine, short clips c=1", "beam": engine.config.beam_size, "clips": len(ms),
            "p50_ms": round(ms[len(ms) // 2], 1), "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 1),
            "wer": round(_wer(texts * args.clip_passes, hyps), 4),
        }  # fmt: skip
        rows.append(row)
        print(row, flush=True)

        # Files of 1, 2, 4, 8 and 16 sentences (0.5 s apart), each start in turn.
        gap = np.zeros(int(GAP_S * RATE), dtype=np.float32)
        files, refs = [], []
        for i in range(len(audio)):
            n = (1, 2, 4, 8, 16)[i % 5]
            picked = [(i + j) % len(audio) for j in range(n)]
            files.append(np.concatenate([x for j in picked for x in (gap, audio[j])][1:]))
            refs.append(" ".join(texts[j] for j in picked))

        async def all_files() -> list[str]:
            return list(await asyncio.gather(*(one(f) for f in files)))

        started = time.perf_counter()
        hyps = asyncio.run(all_files())
        wall = time.perf_counter() - started
        seconds = sum(len(f) for f in files) / RATE
        stats = engine.snapshot()
        row = {
            "what": "engine, mixed files at once", "beam": engine.config.beam_size, "batch": len(files),
            "ms_per_batch": round(wall * 1000, 1), "rtfx": round(seconds / wall, 1), "wer": round(_wer(refs, hyps), 4),
            "audio_s": round(seconds, 1), "batches": stats["batches"], "batch_sizes": stats["batch_sizes"],
        }  # fmt: skip
        rows.append(row)
        print(row, flush=True)
    except Exception as exc:  # noqa: BLE001 - reported as a row
        rows.append({"what": "engine", "error": repr(exc)[:300]})
        print(f"engine: {exc!r}", flush=True)
    finally:
        engine.stop()
        pool.shutdown()
    return rows


def _peer(
    args: argparse.Namespace,
    weights: Path,
    windows: list[np.ndarray],
    refs: list[str],
    beams: list[int],
    timer: Timer,
    info: dict[str, Any],
) -> list[dict[str, Any]]:
    """The same weights in transformers' ASR pipeline (its own log-mel on the host, its
    own generate), each batch size, greedy and beam 5."""
    rows: list[dict[str, Any]] = []
    try:
        import tempfile

        import torch
        import transformers  # type: ignore[import-not-found, unused-ignore]
        from transformers import (  # type: ignore[import-not-found, unused-ignore]
            GenerationConfig,
            WhisperConfig,
            WhisperFeatureExtractor,
            WhisperForConditionalGeneration,
            WhisperTokenizerFast,
            pipeline,
        )

        from voxserve.runners.whisper.weights import hf_config, read_npz, to_hf

        info["transformers"] = transformers.__version__
        converted = read_npz(weights)
        config, generation = hf_config(converted)
        model = WhisperForConditionalGeneration(WhisperConfig(**config))
        state = {k: torch.from_numpy(v) for k, v in to_hf(converted).items()}
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or [m for m in missing if m != "proj_out.weight"]:
            raise ValueError(f"state dict: missing {missing}, unexpected {unexpected}")
        model.generation_config = GenerationConfig(**generation)
        dtype = torch.float16 if args.device == "cuda" else torch.float32
        model = model.to(device=args.device, dtype=dtype).eval()
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "tokenizer.json").write_bytes(converted.tokenizer_json)
            tokenizer = WhisperTokenizerFast(tokenizer_file=str(Path(tmp) / "tokenizer.json"))
        tokenizer.pad_token = "<|endoftext|>"  # batching pads with it, as Whisper's own files say
        features = WhisperFeatureExtractor(feature_size=converted.dims.n_mels)
        asr = pipeline(
            "automatic-speech-recognition", model=model, tokenizer=tokenizer,
            feature_extractor=features, device=args.device, torch_dtype=dtype,
        )  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the peer's failure is reported, not fatal
        print(f"peer: {exc!r}", flush=True)
        return [{"what": "peer", "error": repr(exc)[:500]}]
    for beam in beams:
        for batch in [int(b) for b in args.peer_batches.split(",")]:
            picked = [i % len(windows) for i in range(max(batch, len(windows)))]
            inputs = [{"raw": windows[i], "sampling_rate": RATE} for i in picked]
            kwargs = {"num_beams": beam, "max_new_tokens": 220}

            def run(items: list[dict[str, Any]] = inputs, size: int = batch, gen: dict[str, int] = kwargs) -> list[str]:
                outs = asr([dict(x) for x in items], batch_size=size, generate_kwargs=gen)
                return [o["text"] for o in outs]

            try:
                timer(lambda first=inputs[:batch]: run(first))  # type: ignore[misc]
                walls = []
                hyps: list[str] = []
                for _ in range(args.reps):
                    wall, hyps = timer(run)
                    walls.append(wall)
            except Exception as exc:  # noqa: BLE001
                rows.append({"what": "peer", "beam": beam, "batch": batch, "error": repr(exc)[:300]})
                print(f"peer beam {beam} batch {batch}: {exc!r}", flush=True)
                continue
            wall = statistics.median(walls)
            row = {
                "what": "peer", "mode": "transformers pipeline", "beam": beam, "batch": batch,
                "ms_per_batch": round(wall * 1000 * batch / len(picked), 1),
                "rtfx": round(len(picked) * 30 / wall, 1),
                "wer": round(_wer([refs[i] for i in picked], hyps), 4),
            }  # fmt: skip
            rows.append(row)
            print(row, flush=True)
    return rows


def _markdown(result: dict[str, Any]) -> str:
    info = result["info"]
    lines = [
        (
            f"Device: {info['device']}; torch {info['torch']}, CUDA {info['cuda']}, "
            f"transformers {info.get('transformers', '-')}, Python {info['python']}; weights {info['weights']}."
        ),
        f"Command: `{info['command']}`",
        "",
        "| what | mode | beam | batch | ms per batch | RTFx | p50 ms | p99 ms | WER |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['what']} | {r.get('mode', '')} | {r.get('beam', '')} | {r.get('batch', '')} | error: {r['error'][:80]} | | | | |")
            continue
        lines.append(
            f"| {r['what']} | {r.get('mode', '')} | {r['beam']} | {r.get('batch', r.get('clips', ''))} | "
            f"{r.get('ms_per_batch', '')} | {r.get('rtfx', '')} | {r.get('p50_ms', '')} | {r.get('p99_ms', '')} | "
            f"{100 * r['wer']:.1f} % |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="write the wheel, the compact weights and the clips to --out")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--model", type=Path, help="a CTranslate2 or Hugging Face Whisper folder (default: tiny.en)")
    m = sub.add_parser("measure", help="measure on this machine's device")
    m.add_argument("--data", type=Path, required=True, help="the folder `prepare` wrote")
    m.add_argument("--weights", type=Path, help="default: the one .npz of weights in --data")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    m.add_argument("--batches", default="1,8,32,64,128")
    m.add_argument("--beams", default="1,5")
    m.add_argument("--peer-batches", default="8,32,64,128")
    m.add_argument("--reps", type=int, default=3)
    m.add_argument("--clip-passes", type=int, default=3)
    m.add_argument("--no-graphs", action="store_true", help="eager decode steps only")
    m.add_argument("--no-peer", action="store_true")
    m.add_argument("--no-engine", action="store_true")
    m.add_argument("--engine-batch", type=int, default=64, help="the engine's --asr-gpu-batch")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.out, args.model)
        return 0
    result = measure(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    table = _markdown(result)
    (args.out / "results.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
