"""Saved voices through the real server: saved, listed beside the built-in voices, used by
name, by id and in markup, deleted; kept across a restart and a crash mid-write; refused
with a clear 4xx for every bad shape, each sent as the attack it would be."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.conftest import MakeServer, RunningServer, tts_config
from voxserve.serving.saved_voices import SavedVoices

KEY = "vx-saved-voices-key"


def _speak(client: httpx.Client, voice: Any, text: str = "Hello there.", **extra: Any) -> httpx.Response:
    body = {"model": "tts-1", "voice": voice, "input": text, "response_format": "pcm", **extra}
    return client.post("/v1/audio/speech", json=body)


def _config(folder: Path, **tts: Any) -> Any:
    config = tts_config(noise_w=0.0, noise_scale=0.0, saved_voices_dir=folder, **tts)
    return replace(config, asr=replace(config.asr, enabled=False))


def test_a_saved_voice_is_used_by_name_by_id_and_in_markup(make_server: MakeServer, tmp_path: Path) -> None:
    with make_server(_config(tmp_path)) as srv, httpx.Client(base_url=srv.base_url, timeout=60) as client:
        r = client.post("/v1/audio/voices", json={"name": "narrator", "voice": "joe"})
        assert r.status_code == 201, r.text
        saved = r.json()
        assert saved["id"].startswith("voice_") and saved["saved"] is True
        assert saved["model"] == "en_US-joe-medium" and saved["openai_model"] == "tts-1"

        voices = client.get("/v1/audio/voices").json()["voices"]
        assert [v["name"] for v in voices if v["saved"]] == ["narrator"]
        assert {"joe", "alloy"} <= {v["id"] for v in voices if not v["saved"]}

        plain = _speak(client, "joe").content
        assert _speak(client, "narrator").content == plain
        assert _speak(client, {"id": saved["id"]}).content == plain
        assert _speak(client, {"id": "alloy"}).status_code == 200  # built-in voices by id too
        tagged = _speak(client, "alloy", "[voice:narrator] Hello there.")
        assert tagged.status_code == 200 and tagged.content == plain

        r = client.delete(f"/v1/audio/voices/{saved['id']}")
        assert r.status_code == 200 and r.json()["deleted"] is True
        assert _speak(client, "narrator").status_code == 404
        assert client.delete(f"/v1/audio/voices/{saved['id']}").status_code == 404
        assert not list(tmp_path.glob("voice_*.json"))


def test_saved_voices_survive_a_restart_and_a_crash_mid_write(make_server: MakeServer, tmp_path: Path) -> None:
    with make_server(_config(tmp_path)) as srv, httpx.Client(base_url=srv.base_url, timeout=60) as client:
        kept = client.post("/v1/audio/voices", json={"name": "kept", "voice": "alloy"}).json()
    # What a crash leaves: a temporary file half written, and a file that is not a voice.
    (tmp_path / ".saving-x1y2").write_bytes(b'{"id": "voice_')
    (tmp_path / "voice_0123456789abcdef01234567.json").write_bytes(b"\x00\x01 not json")
    with make_server(_config(tmp_path)) as srv, httpx.Client(base_url=srv.base_url, timeout=60) as client:
        saved = [v for v in client.get("/v1/audio/voices").json()["voices"] if v["saved"]]
        assert [(v["id"], v["name"]) for v in saved] == [(kept["id"], "kept")]
        assert _speak(client, "kept").status_code == 200
        assert not list(tmp_path.glob(".saving-*"))


def test_bad_saved_voices_are_refused(make_server: MakeServer, tmp_path: Path) -> None:
    with make_server(_config(tmp_path, max_saved_voices=3)) as srv, httpx.Client(base_url=srv.base_url, timeout=60) as client:
        def save(body: Any, **kwargs: Any) -> tuple[int, str]:
            r = client.post("/v1/audio/voices", json=body, **kwargs)
            return r.status_code, r.text

        assert save({"name": "first", "voice": "joe"})[0] == 201
        for name in ("first", "alloy", "ALLOY", "joe"):  # taken, by a saved or built-in voice
            status, text = save({"name": name, "voice": "joe"})
            assert status == 400 and "is taken" in text, name
        for name in ("../../etc/passwd", "a b", "x" * 65, "<script>", "", "9lives", "名前", "a\x00b"):
            status, text = save({"name": name, "voice": "joe"})
            assert status == 400, name
        status, text = save({"name": "ghost", "voice": "nobody_at_all"})
        assert status == 404 and "nobody_at_all" in text
        status, text = save({"name": "clone", "voice": "joe", "audio_sample": "UklGRg=="})
        assert status == 400 and "cloning" in text
        r = client.post("/v1/audio/voices", files={"audio_sample": ("me.wav", b"RIFF....")}, data={"name": "me"})
        assert r.status_code == 400 and "cloning" in r.text
        r = client.post("/v1/audio/voices", json={"name": "big", "voice": "joe" + "+joe" * 2000})
        assert r.status_code == 413
        assert save({"name": "second", "voice": "joe"})[0] == 201
        assert save({"name": "third", "voice": "joe"})[0] == 201
        status, text = save({"name": "fourth", "voice": "joe"})
        assert status == 400 and "at most 3 saved voices" in text

        for key in ("joe", "alloy"):
            r = client.delete(f"/v1/audio/voices/{key}")
            assert r.status_code == 400 and "cannot be removed" in r.text
        assert client.delete("/v1/audio/voices/voice_ffffffffffffffffffffffff").status_code == 404
        # Nothing half-written: three files, each a whole voice.
        assert len(list(tmp_path.glob("voice_*.json"))) == 3 and not list(tmp_path.glob(".saving-*"))


def test_writing_needs_the_key_when_the_server_has_one(make_server: MakeServer, tmp_path: Path) -> None:
    config = replace(_config(tmp_path), api_key=KEY)
    with make_server(config) as srv, httpx.Client(base_url=srv.base_url, timeout=60) as client:
        body = {"name": "keyed", "voice": "joe"}
        assert client.post("/v1/audio/voices", json=body).status_code == 401
        auth = {"Authorization": f"Bearer {KEY}"}
        r = client.post("/v1/audio/voices", json=body, headers=auth)
        assert r.status_code == 201
        assert client.delete(f"/v1/audio/voices/{r.json()['id']}").status_code == 401
        assert client.delete(f"/v1/audio/voices/{r.json()['id']}", headers=auth).status_code == 200


def test_a_saved_blend_speaks_on_its_own_model_only(kokoro_server: RunningServer) -> None:
    with httpx.Client(base_url=kokoro_server.base_url, timeout=120) as client:
        r = client.post("/v1/audio/voices", json={"name": "duet", "voice": "af_bella(2)+am_adam(1)"})
        assert r.status_code == 201 and r.json()["model"] == "kokoro-82m-v1.0"
        try:
            spoken = _speak(client, "duet", model="tts-1-hd")
            blend = _speak(client, "af_bella(2)+am_adam(1)", model="tts-1-hd")
            assert spoken.status_code == 200
            a, b = (np.frombuffer(x.content, dtype="<i2") for x in (spoken, blend))
            assert len(a) == len(b) and np.abs(a.astype(int) - b).max() < 200
            r2 = _speak(client, "duet")  # tts-1 is Piper
            assert r2.status_code == 400 and "voice of model kokoro" in r2.text
        finally:
            client.delete(f"/v1/audio/voices/{r.json()['id']}")


@pytest.mark.parametrize("voice", ["af_bella(2)+zz_nobody(1)", "af_bella+joe"])
def test_a_blend_across_models_or_of_unknown_voices_is_refused(kokoro_server: RunningServer, voice: str) -> None:
    with httpx.Client(base_url=kokoro_server.base_url, timeout=60) as client:
        r = client.post("/v1/audio/voices", json={"name": "mixed", "voice": voice})
        assert r.status_code in (400, 404), r.text


def test_two_servers_on_one_folder_see_one_set(tmp_path: Path) -> None:
    """What Ray replicas sharing a folder see: a voice saved or deleted by one process is
    found, or gone, in the other at its next lookup."""
    one, two = SavedVoices(tmp_path, 8), SavedVoices(tmp_path, 8)
    assert two.find("shared") is None
    saved = one.add("shared", "joe", "en_US-joe-medium", taken=False)
    assert two.find("shared") == saved and two.find(saved.id) == saved
    one.remove(saved.id)
    assert two.find("shared") is None and two.all() == []
