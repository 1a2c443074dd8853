"""Stage what the GPU bench carries to a lent GPU machine, cut into the parts of its calls.

A lent machine (`docs/GPU.md`) takes at most 64 MiB per call, the working tree included,
and keeps files outside the checkout only while it stays warm between back-to-back calls.
Its image has torch, numpy, onnx, onnxruntime, tokenizers, aiohttp, httpx, uvloop and
prometheus-client, but not the server's web stack, soxr, PyAV or the models. This script
writes, under `--out` (default `gpu-stage/`, ignored by git):

- `build/`: the downloaded wheels and the whole files, kept between runs;
- `call1/` .. `callN/`: what each call carries (`carry: ["gpu-stage/callK"]`): slices of
  the files below, in this order, each call filled up to `--call-mib` minus the working
  tree, and `plan.json` (every file, its sha256 and where its slices are).

The files, smallest first within what a model needs, so that each call completes one model:
1. the wheels the server lacks (pydantic, pydantic-core, starlette, uvicorn, httptools,
   python-multipart, soxr, websockets, typing-inspection, annotated-types), and
   `site-trimmed.tar.gz`: piper-tts cut to its Python and espeak-ng's English data (what
   voxserve uses of it: `espeakbridge` and the phonemizer's tables), and faster-whisper
   cut to its feature extractor and the Silero VAD model (its package root imports
   CTranslate2 and PyAV, which the image lacks);
2. the Piper voice with its float weights stored as float16 (`*.onnx.f16`, half the size;
   made float32 again there, so the weights are the voice's rounded to 11 bits);
3. Kokoro's int8 model (as joined from its four packages) and the one voice the bench and
   the warm-up use, `af_alloy`;
4. PyAV's wheel (uploads are decoded with it), Whisper tiny.en in its compact int8 form
   and the clips `voxserve bench transcribe` sends (16 kHz WAV, 3-8 s).

Run here, with network to the package index for the wheels (kept in `build/download`):
`python scripts/gpu/stage.py`. `--no-download` stages only what is present (the size check
of `make test`). It prints each call's size; `scripts/gpu/call.sh K` is the command there.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import wave
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
MIB = 2**20
CALL_MIB = 64
"""The lent machine's limit on one call's working tree, carried paths included."""
MARGIN_MIB = 2.0
"""Room kept in each call for files the checkout gains before the run."""
CALLS = 4

PY = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any")
SERVER_WHEELS = (
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "starlette==1.10.0",
    "uvicorn==0.54.0",
    "httptools==0.9.0",
    "python-multipart==0.0.34",
    "soxr==1.1.0",
    "websockets==17.4",
    "typing-inspection==0.4.5",
    "annotated-types==0.8.0",
)
"""What the server imports that the image lacks, pinned as constraints.txt pins them."""
TRIMMED_WHEELS = ("piper-tts==1.8.0", "faster-whisper==1.2.1")
AV_WHEEL = "av==18.1.0"

PIPER_VOICE = "en_US-joe-medium"
KOKORO_MODEL = "kokoro-v1.0.int8.onnx"
KOKORO_VOICE = "af_alloy"
WHISPER = "tiny.en"
CLIP_RATE = 16000

MODELS = {"piper": "tts-1", "kokoro": "tts-1-hd", "whisper": "whisper-1"}
"""The models the bench measures, each once all of its files are there."""


@dataclass
class Staged:
    """One whole file the bench needs there, and the model it belongs to (`base`: every
    model)."""

    name: str
    path: Path
    model: str
    size: int = 0
    sha256: str = ""
    slices: list[tuple[int, str, int]] = field(default_factory=list)
    """(call, slice file name, bytes), in order."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(MIB):
            digest.update(block)
    return digest.hexdigest()


def tree_bytes(root: Path = ROOT) -> int:
    """What travels of the checkout besides the carried paths: tracked files and untracked
    ones git does not ignore, as they are on disk now."""
    names = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True, check=True,
    ).stdout.split(b"\0")  # fmt: skip
    total = 0
    for name in names:
        path = root / name.decode()
        if name and path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


# -- the files ---------------------------------------------------------------------------
def download(folder: Path, specs: tuple[str, ...]) -> list[Path]:
    """Wheels for the GPU machine's Python (3.12, x86-64 Linux), without dependencies."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
         "--python-version", PY, "--implementation", "cp",
         *[x for p in PLATFORMS for x in ("--platform", p)], "-d", str(folder), *specs],
        check=True,
    )  # fmt: skip
    found = []
    for spec in specs:
        stem = spec.split("==")[0].replace("-", "_").lower()
        version = spec.split("==")[1]
        wheels = [w for w in folder.glob("*.whl") if w.name.lower().startswith(f"{stem}-{version}-")]
        if len(wheels) != 1:
            raise SystemExit(f"expected one wheel for {spec} in {folder}, found {wheels}")
        found.append(wheels[0])
    return found


def _keep_piper(name: str) -> bool:
    """piper-tts's files that voxserve uses: its Python, the espeak-ng bridge and the
    phonemizer tables with English only (the other languages' dictionaries, the Arabic and
    Hebrew models, the images and the training code stay behind)."""
    if not name.startswith("piper/"):
        return name.startswith("piper_tts-")
    data = "piper/espeak-ng-data/"
    if name.startswith(data):
        rest = name[len(data) :]
        if rest.endswith("_dict"):
            return rest == "en_dict"
        if rest.startswith("lang/"):
            return rest.startswith("lang/gmw/en")
        return True
    return not name.endswith(".onnx") and not name.startswith(("piper/img/", "piper/train/", "piper/templates/"))


FASTER_WHISPER_INIT = '''"""faster-whisper, trimmed for a GPU machine: its feature extractor and the Silero VAD
model. The package root of the full wheel imports CTranslate2 and PyAV."""
'''


def _keep_faster_whisper(name: str) -> bool:
    return name.startswith(("faster_whisper/assets/", "faster_whisper-")) or name in (
        "faster_whisper/feature_extractor.py",
        "faster_whisper/version.py",
    )


def trimmed_site(piper_wheel: Path, faster_whisper_wheel: Path, out: Path) -> Path:
    """One archive to unpack into the install folder: piper-tts and faster-whisper, cut
    to what voxserve uses."""
    with tarfile.open(out, "w:gz") as tar:
        for wheel, keep in ((piper_wheel, _keep_piper), (faster_whisper_wheel, _keep_faster_whisper)):
            with zipfile.ZipFile(wheel) as z:
                for info in z.infolist():
                    if info.is_dir() or not keep(info.filename):
                        continue
                    data = z.read(info)
                    entry = tarfile.TarInfo(info.filename)
                    entry.size = len(data)
                    entry.mode = 0o755 if info.filename.endswith(".so") else 0o644
                    tar.addfile(entry, io.BytesIO(data))
        init = FASTER_WHISPER_INIT.encode()
        entry = tarfile.TarInfo("faster_whisper/__init__.py")
        entry.size = len(init)
        entry.mode = 0o644
        tar.addfile(entry, io.BytesIO(init))
    return out


FP16_KEY = "voxserve.float16_initializers"


def half_onnx(model: Path, out: Path) -> Path:
    """`model` with its float32 initializers stored as float16, their names listed in the
    metadata; `full_onnx` makes it a float32 graph again."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(model))
    names = []
    for i, init in enumerate(graph.graph.initializer):
        if init.data_type == onnx.TensorProto.FLOAT:
            array = numpy_helper.to_array(init)
            graph.graph.initializer[i].CopyFrom(numpy_helper.from_array(array.astype(np.float16), init.name))
            names.append(init.name)
    graph.metadata_props.add(key=FP16_KEY, value=json.dumps(names))
    onnx.save(graph, str(out))
    return out


def full_onnx(model: Path, out: Path) -> Path:
    """The float32 graph of a `half_onnx` file."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(model))
    props = {p.key: p.value for p in graph.metadata_props}
    names = set(json.loads(props[FP16_KEY]))
    for i, init in enumerate(graph.graph.initializer):
        if init.name in names:
            array = numpy_helper.to_array(init).astype(np.float32)
            graph.graph.initializer[i].CopyFrom(numpy_helper.from_array(array, init.name))
    kept = [p for p in graph.metadata_props if p.key != FP16_KEY]
    del graph.metadata_props[:]
    graph.metadata_props.extend(kept)
    onnx.save(graph, str(out))
    return out


def make_clips(out: Path, count: int) -> Path:
    """`count` clips of the bench's short sentences spoken by the bundled Piper voice, as
    16 kHz WAV with their texts, in one tar."""
    from voxserve.bench.asr_offline import LONG
    from voxserve.config import TTSConfig
    from voxserve.engine.tts import TTSEngine

    texts = [LONG[i % len(LONG)] for i in range(count)]
    tts = TTSEngine(TTSConfig(models=("piper",), fixed_prior=False, noise_scale=0.0, noise_w=0.0))
    tts.start()
    try:
        voice = tts.default_model.voices[0]
        spoken = [tts.synthesize(t, voice, sample_rate=CLIP_RATE) for t in texts]
    finally:
        tts.stop()
    with tarfile.open(out, "w") as tar:
        for i, (text, pcm) in enumerate(zip(texts, spoken, strict=True)):
            buf = io.BytesIO()
            with wave.open(buf, "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(CLIP_RATE)
                w.writeframes(np.asarray(pcm, dtype=np.int16).tobytes())
            for name, data in ((f"clip{i:03d}.wav", buf.getvalue()), (f"clip{i:03d}.txt", text.encode())):
                entry = tarfile.TarInfo(name)
                entry.size = len(data)
                tar.addfile(entry, io.BytesIO(data))
    return out


def build_files(build: Path, fetch: bool, clips: int) -> list[Staged]:
    """Every file, in the order the calls carry them. Without `fetch`, only those whose
    sources are here already (no wheel is downloaded)."""
    from voxserve.runners.kokoro.onnx_runner import default_voices_dir, model_file
    from voxserve.runners.piper.onnx_runner import bundled_voice
    from voxserve.runners.whisper.interface import bundled_model
    from voxserve.runners.whisper.weights import export_weights

    build.mkdir(parents=True, exist_ok=True)
    wheels_dir = build / "download"
    files: list[Staged] = []
    have = {w.name: w for w in wheels_dir.glob("*.whl")} if wheels_dir.is_dir() else {}

    def wheels(specs: tuple[str, ...]) -> list[Path]:
        if fetch:
            return download(wheels_dir, specs)
        found = []
        for spec in specs:
            stem, version = spec.split("==")
            prefix = f"{stem.replace('-', '_').lower()}-{version}-"
            found += [w for name, w in have.items() if name.lower().startswith(prefix)]
        return found

    for wheel in wheels(SERVER_WHEELS):
        files.append(Staged(f"wheels/{wheel.name}", wheel, "base"))
    trim = wheels(TRIMMED_WHEELS)
    if len(trim) == 2:
        site = trimmed_site(trim[0], trim[1], build / "site-trimmed.tar.gz")
        files.append(Staged("site-trimmed.tar.gz", site, "base"))

    voice = bundled_voice()
    f16 = build / f"{PIPER_VOICE}.onnx.f16"
    if not f16.exists() or f16.stat().st_mtime < voice.model.stat().st_mtime:
        half_onnx(voice.model, f16)
    files.append(Staged(f"piper/{PIPER_VOICE}.onnx.f16", f16, "piper"))
    files.append(Staged(f"piper/{PIPER_VOICE}.onnx.json", voice.config, "piper"))

    files.append(Staged(f"kokoro/{KOKORO_MODEL}", model_file(), "kokoro"))
    files.append(Staged(f"kokoro/{KOKORO_VOICE}.bin", default_voices_dir() / f"{KOKORO_VOICE}.bin", "kokoro"))

    for wheel in wheels((AV_WHEEL,)):
        files.append(Staged(f"wheels-asr/{wheel.name}", wheel, "whisper"))
    weights = build / f"{WHISPER}.npz"
    if not weights.exists():
        export_weights(bundled_model()[0], weights)
    files.append(Staged(f"whisper/{WHISPER}.npz", weights, "whisper"))
    tar = build / f"clips-{clips}.tar"
    if not tar.exists():
        make_clips(tar, clips)
    files.append(Staged("whisper/clips.tar", tar, "whisper"))
    for f in files:
        f.size = f.path.stat().st_size
        f.sha256 = _sha256(f.path)
    return files


# -- the calls ---------------------------------------------------------------------------
def plan_calls(files: list[Staged], room: int, calls: int) -> list[int]:
    """Fill calls in order, `room` bytes each, slicing files where a call is full; returns
    the bytes each call carries. Raises SystemExit when `calls` are not enough."""
    used = [0]
    for f in files:
        left = f.size
        offset = 0
        while left or not f.slices:
            if used[-1] >= room:
                used.append(0)
            take = min(left, room - used[-1])
            call = len(used)
            f.slices.append((call, f"{len(f.slices):02d}-{f.name.replace('/', '_')}", take))
            used[-1] += take
            offset += take
            left -= take
            if not left:
                break
    if len(used) > calls:
        raise SystemExit(f"{sum(used) / MIB:.1f} MiB need {len(used)} calls of {room / MIB:.1f} MiB; {calls} allowed")
    return used


def ready_in(files: list[Staged]) -> dict[str, int]:
    """The call in which each model has all of its files (and the base's)."""
    base = max((s[0] for f in files if f.model == "base" for s in f.slices), default=1)
    ready: dict[str, int] = {}
    for model in MODELS:
        own = [s[0] for f in files if f.model == model for s in f.slices]
        if own:
            ready[model] = max(base, *own)
    return ready


def write_calls(files: list[Staged], out: Path, used: list[int], tree: int) -> dict[str, object]:
    for old in out.glob("call*"):
        shutil.rmtree(old)
    for f in files:
        with f.path.open("rb") as src:
            for call, name, size in f.slices:
                folder = out / f"call{call}"
                folder.mkdir(parents=True, exist_ok=True)
                with (folder / name).open("wb") as dst:
                    left = size
                    while left:
                        block = src.read(min(left, 8 * MIB))
                        dst.write(block)
                        left -= len(block)
    plan: dict[str, object] = {
        "files": [{k: v for k, v in asdict(f).items() if k != "path"} for f in files],
        "ready": ready_in(files),
        "tree_bytes": tree,
        "calls": [],
    }
    for k in range(1, len(used) + 1):
        folder = out / f"call{k}"
        folder.mkdir(exist_ok=True)
        (folder / "plan.json").write_text(json.dumps(plan, indent=1))
    calls = []
    for k in range(1, len(used) + 1):
        carried = sum(p.stat().st_size for p in (out / f"call{k}").iterdir())
        calls.append({"call": k, "carried_bytes": carried, "with_tree_bytes": carried + tree})
    plan["calls"] = calls
    for k in range(1, len(used) + 1):
        (out / f"call{k}" / "plan.json").write_text(json.dumps(plan, indent=1))
    return plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "gpu-stage")
    parser.add_argument("--no-download", action="store_true", help="stage only the wheels already downloaded")
    parser.add_argument("--clips", type=int, default=24, help="clips for the transcription bench")
    parser.add_argument("--call-mib", type=float, default=CALL_MIB)
    parser.add_argument("--calls", type=int, default=CALLS)
    args = parser.parse_args(argv)
    files = build_files(args.out / "build", not args.no_download, args.clips)
    tree = tree_bytes()
    room = int((args.call_mib - MARGIN_MIB) * MIB) - tree
    used = plan_calls(files, room, args.calls)
    plan = write_calls(files, args.out, used, tree)
    for f in files:
        print(f"{f.size / MIB:8.2f} MiB  {f.name}  (calls {sorted({s[0] for s in f.slices})})")
    print(f"working tree: {tree / MIB:.2f} MiB")
    for call in plan["calls"]:  # type: ignore[attr-defined]
        print(f"call {call['call']}: {call['carried_bytes'] / MIB:.2f} MiB carried, {call['with_tree_bytes'] / MIB:.2f} MiB with the tree")
    print("models measured in calls:", plan["ready"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
