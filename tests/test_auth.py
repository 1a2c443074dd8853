"""API-key auth through the real server: every /v1 route needs the key, /health and
(by default) /metrics stay open, and the OpenAI SDK's `api_key` works with it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace

import httpx
import openai
import pytest

from tests.conftest import RunningServer, run_server
from voxserve.cli import build_parser, main, server_config
from voxserve.config import ASRConfig, ServerConfig

KEY = "vx-test-4f9c2a7e1b"
SPEECH = {"model": "tts-1", "voice": "alloy", "input": "Hello there. This is a short test.",
          "response_format": "pcm"}  # fmt: skip


def _config(**kwargs: object) -> ServerConfig:
    # ASR off: the auth check runs before any route, and the server starts faster.
    return replace(ServerConfig(asr=ASRConfig(enabled=False)), api_key=KEY, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def keyed() -> Iterator[RunningServer]:
    with run_server(_config()) as running:
        yield running


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _assert_refused(r: httpx.Response) -> None:
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == "Bearer"
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] in ("authentication_error", "invalid_request_error")
    assert error["code"] == "invalid_api_key" and error["param"] is None
    assert KEY not in r.text


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/models"),
        ("GET", "/v1/audio/voices"),
        ("POST", "/v1/audio/speech"),
        ("POST", "/v1/audio/transcriptions"),
        ("GET", "/v1/no-such-route"),
    ],
)
@pytest.mark.parametrize(
    "headers",
    [
        {},
        _bearer("wrong-key"),
        _bearer(KEY[:-1]),
        _bearer(KEY + "x"),
        {"Authorization": KEY},
        {"Authorization": f"Basic {KEY}"},
        {"Authorization": "Bearer"},
    ],
    ids=["missing", "wrong", "prefix", "longer", "no-scheme", "basic", "empty"],
)
def test_v1_routes_refuse_a_missing_or_wrong_key(
    keyed: RunningServer, method: str, path: str, headers: dict[str, str]
) -> None:
    r = httpx.request(method, keyed.base_url + path, headers=headers, json=SPEECH, timeout=30)
    _assert_refused(r)


def test_the_key_opens_the_models_list(keyed: RunningServer) -> None:
    r = httpx.get(f"{keyed.base_url}/v1/models", headers=_bearer(KEY), timeout=30)
    assert r.status_code == 200, r.text
    assert any(m["id"] == "tts-1" for m in r.json()["data"])
    lower = httpx.get(f"{keyed.base_url}/v1/models", headers={"authorization": f"bearer {KEY}"})
    assert lower.status_code == 200  # the scheme is case-insensitive (RFC 7235)


def test_the_key_opens_a_streaming_speech_request(keyed: RunningServer) -> None:
    sizes: list[int] = []
    with httpx.stream(
        "POST", f"{keyed.base_url}/v1/audio/speech", json=SPEECH, headers=_bearer(KEY), timeout=60
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "audio/pcm"
        sizes = [len(chunk) for chunk in r.iter_bytes()]
    assert sum(sizes) / 2 / 24000 > 1.0
    assert len([s for s in sizes if s]) > 1  # it streamed in pieces


def test_openai_sdk_with_the_key(keyed: RunningServer) -> None:
    client = openai.OpenAI(base_url=f"{keyed.base_url}/v1", api_key=KEY, max_retries=0, timeout=60)
    assert "tts-1" in [m.id for m in client.models.list()]
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=SPEECH["input"], response_format="pcm"
    ) as response:
        total = sum(len(chunk) for chunk in response.iter_bytes())
    assert total / 2 / 24000 > 1.0


def test_openai_sdk_with_a_wrong_key_raises_authentication_error(keyed: RunningServer) -> None:
    client = openai.OpenAI(base_url=f"{keyed.base_url}/v1", api_key="sk-wrong", max_retries=0, timeout=60)
    with pytest.raises(openai.AuthenticationError) as caught:
        client.audio.speech.create(model="tts-1", voice="alloy", input=SPEECH["input"])
    assert caught.value.status_code == 401
    assert caught.value.code == "invalid_api_key"


def test_health_and_metrics_stay_open_and_count_refusals(keyed: RunningServer) -> None:
    assert httpx.get(f"{keyed.base_url}/v1/models").status_code == 401
    assert httpx.get(f"{keyed.base_url}/health").json() == {"status": "ok"}
    metrics = httpx.get(f"{keyed.base_url}/metrics")
    assert metrics.status_code == 200
    assert 'status="401"' in metrics.text


def test_metrics_require_key_closes_metrics_only(make_server) -> None:
    with make_server(_config(metrics_require_key=True)) as running:
        _assert_refused(httpx.get(f"{running.base_url}/metrics"))
        _assert_refused(httpx.get(f"{running.base_url}/metrics", headers=_bearer("nope")))
        r = httpx.get(f"{running.base_url}/metrics", headers=_bearer(KEY))
        assert r.status_code == 200 and "voxserve_http_requests" in r.text
        assert httpx.get(f"{running.base_url}/health").status_code == 200


def test_the_key_never_reaches_the_logs(
    keyed: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        httpx.get(f"{keyed.base_url}/v1/models", headers=_bearer(KEY))
        httpx.get(f"{keyed.base_url}/v1/models", headers=_bearer(KEY + "-wrong"))
    assert KEY not in caplog.text
    assert KEY not in repr(keyed.state.config)


# -- the command line: flag, environment variable, and settings that do not fit ----------


def _serve_args(*argv: str):
    return build_parser().parse_args(["serve", *argv])


def test_cli_reads_the_key_from_the_environment() -> None:
    config = server_config(_serve_args(), {"VOXSERVE_API_KEY": KEY})
    assert config.api_key == KEY and not config.metrics_require_key


def test_cli_flag_wins_over_the_environment() -> None:
    config = server_config(_serve_args("--api-key", "from-flag", "--metrics-require-key"),
                           {"VOXSERVE_API_KEY": KEY})  # fmt: skip
    assert config.api_key == "from-flag" and config.metrics_require_key


def test_cli_without_a_key_serves_openly() -> None:
    assert server_config(_serve_args(), {}).api_key is None


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["--metrics-require-key"], {}),
        (["--api-key", ""], {}),
        ([], {"VOXSERVE_API_KEY": ""}),
        (["--api-key", "two words"], {}),
    ],
    ids=["metrics-without-key", "empty-flag", "empty-env", "space"],
)
def test_cli_rejects_settings_that_do_not_fit(argv: list[str], env: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        server_config(_serve_args(*argv), env)


def test_serve_exits_2_on_a_bad_setting(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.delenv("VOXSERVE_API_KEY", raising=False)
    assert main(["serve", "--metrics-require-key", "--no-asr"]) == 2
    assert "needs an API key" in capsys.readouterr().err
