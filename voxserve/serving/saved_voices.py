"""Saved voices: a voice or blend stored under a name, used as any built-in voice is.

A saved voice is `{name, voice}`: `voice` is what a request's `voice` may say for one
loaded model (a voice, an OpenAI name, or a Kokoro blend such as
`af_bella(2)+am_adam(1)`), checked when it is saved; the model it belongs to is kept
with it. Requests use it by its name or its id, as the request's voice (or
`voice: {"id": ...}`) or in a markup tag.

They live in one folder that the server owns (`--tts-saved-voices-dir`), one JSON file
per voice, named by its id. A file is written to a temporary name, flushed to disk and
renamed over (then the folder is flushed), so a crash mid-write leaves the old set
whole: a file is there entirely or not at all, and leftover temporary files are ignored
and removed at start. Every process that names the same folder sees the same set: every
lookup and every listing reads the folder's file names, and the files new since the last
read when they changed (a save or a delete anywhere), so Ray replicas on one node share
it as it is, and replicas on other nodes when the folder is on storage they all mount
(NFS, a shared volume). A lookup costs one listing of the folder (at most a few hundred
names) when nothing changed. Bounded: `--tts-max-saved-voices` voices, names of at most
`MAX_NAME` characters.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from voxserve.errors import InvalidRequest, NotFound

__all__ = ["MAX_NAME", "NAME_RULE", "SavedVoice", "SavedVoices", "default_folder"]

log = logging.getLogger(__name__)

MAX_NAME = 64
"""The longest saved voice name."""
NAME_RULE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
"""A saved voice's name: a letter, then letters, digits, `_` and `-`. It must read the
same in a JSON body, a URL and an inline `[voice:name]` tag."""
MAX_FILE_BYTES = 4096
"""A saved voice's file is under 1 kB; a larger one in the folder is not ours."""
_ID = re.compile(r"voice_[0-9a-f]{24}")


def default_folder() -> Path:
    """`$XDG_DATA_HOME/voxserve/voices`, or `~/.local/share/voxserve/voices`."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "voxserve" / "voices"


@dataclass(frozen=True)
class SavedVoice:
    id: str
    name: str
    voice: str
    """The voice or blend, as a request's `voice` would name it."""
    model: str
    """The voice model it belongs to (its own name, `kokoro`, `en_US-joe-medium`)."""
    created_at: int

    def describe(self, openai_model: str | None = None, language: str | None = None) -> dict[str, object]:
        """As `GET /v1/audio/voices` lists it, beside the built-in voices (`openai_model`
        and `language`: its model's)."""
        return {
            "id": self.id, "name": self.name, "alias_of": None, "model": self.model,
            "openai_model": openai_model, "language": language, "gender": None,
            "saved": True, "voice": self.voice, "created_at": self.created_at,
        }  # fmt: skip


class SavedVoices:
    """The saved voices of one folder (see the module's docstring); thread-safe."""

    def __init__(self, folder: Path, limit: int):
        self.folder = folder
        self.limit = limit
        self._lock = threading.Lock()
        self._voices: dict[str, SavedVoice] = {}
        self._seen: frozenset[str] | None = None
        """The voice files the folder held when it was last read (None: no folder). A
        voice's file never changes once written (a new voice gets a new id), so the
        names alone tell whether anything changed."""
        self._clean()
        self._reload()

    def find(self, key: str) -> SavedVoice | None:
        """The saved voice of this name or id, or None: as the folder holds it now (a
        voice another process deleted is gone here too)."""
        with self._lock:
            if self._changed():
                self._reload()
            return self._lookup(key)

    def all(self) -> list[SavedVoice]:
        with self._lock:
            if self._changed():
                self._reload()
            return sorted(self._voices.values(), key=lambda v: (v.created_at, v.name))

    def add(self, name: str, voice: str, model: str, taken: bool) -> SavedVoice:
        """Save `voice` (of `model`) as `name`; `taken`: a built-in voice has that name.
        400 for a name that is taken or not a safe identifier, or past the limit."""
        check_name(name)
        with self._lock:
            if self._changed():
                self._reload()
            if taken or self._lookup(name) is not None:
                raise InvalidRequest(
                    f"voice name {name!r} is taken; choose another name, or delete the saved voice first",
                    param="name",
                    code="voice_name_taken",
                )
            if len(self._voices) >= self.limit:
                raise InvalidRequest(
                    f"this server keeps at most {self.limit} saved voices; delete one first",
                    param="name",
                    code="too_many_saved_voices",
                )
            saved = SavedVoice(f"voice_{secrets.token_hex(12)}", name, voice, model, int(time.time()))
            self._write(saved)
            self._voices[saved.id] = saved
            return saved

    def remove(self, key: str) -> SavedVoice:
        """Delete the saved voice of this id (or name); 404 for none."""
        with self._lock:
            if self._changed():
                self._reload()
            found = self._lookup(key)
            if found is None:
                raise NotFound(f"no saved voice has id {key[:80]!r}; GET /v1/audio/voices lists them", param="id")
            with contextlib.suppress(FileNotFoundError):
                (self.folder / f"{found.id}.json").unlink()
            _sync_folder(self.folder)
            del self._voices[found.id]
            if self._seen is not None:
                self._seen = self._seen - {f"{found.id}.json"}
            return found

    # -- the folder ------------------------------------------------------------------
    def _lookup(self, key: str) -> SavedVoice | None:
        found = self._voices.get(key)
        if found is not None:
            return found
        return next((v for v in self._voices.values() if v.name == key), None)

    def _names(self) -> frozenset[str] | None:
        try:
            with os.scandir(self.folder) as entries:
                return frozenset(e.name for e in entries if e.name.startswith("voice_") and e.name.endswith(".json"))
        except FileNotFoundError:
            return None

    def _changed(self) -> bool:
        return self._names() != self._seen

    def _reload(self) -> None:
        """Read the files that appeared since the last read; forget those gone."""
        self._seen = self._names()
        voices: dict[str, SavedVoice] = {}
        for name in sorted(self._seen or ()):
            known = self._voices.get(name.removesuffix(".json"))
            saved = known if known is not None else _read(self.folder / name)
            if saved is not None and len(voices) < self.limit:
                voices[saved.id] = saved
        self._voices = voices

    def _write(self, saved: SavedVoice) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        data = json.dumps(asdict(saved)).encode()
        fd, tmp = tempfile.mkstemp(prefix=".saving-", dir=self.folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.folder / f"{saved.id}.json")
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _sync_folder(self.folder)
        self._seen = (self._seen or frozenset()) | {f"{saved.id}.json"}

    def _clean(self) -> None:
        """Remove temporary files a crash mid-write left."""
        if not self.folder.is_dir():
            return
        for path in self.folder.glob(".saving-*"):
            with contextlib.suppress(OSError):
                path.unlink()


def check_name(name: str) -> None:
    if not NAME_RULE.fullmatch(name):
        raise InvalidRequest(
            f"voice name {name[:80]!r} is not a safe name; use a letter, then up to {MAX_NAME - 1} "
            "letters, digits, '_' or '-'",
            param="name",
            code="invalid_voice_name",
        )


def _read(path: Path) -> SavedVoice | None:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ValueError("too large")
        data = json.loads(path.read_bytes())
        saved = SavedVoice(
            str(data["id"]), str(data["name"]), str(data["voice"]), str(data["model"]), int(data["created_at"])
        )
        if not _ID.fullmatch(saved.id) or path.stem != saved.id or not NAME_RULE.fullmatch(saved.name):
            raise ValueError("not a saved voice")
        return saved
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("saved voice %s is unreadable and left out: %s", path, exc)
        return None


def _sync_folder(folder: Path) -> None:
    """Flush the folder's entries (a rename or an unlink) to disk, where the OS can."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
