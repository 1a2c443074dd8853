"""API-key auth through the real server: every /v1 route needs the key, /health and
(by default) /metrics stay open, and the OpenAI SDK's `api_key` works with it. The same
server also lists the hosts it answers for (`allowed_hosts`, against DNS rebinding): a
foreign `Host` is refused on every route and on the WebSocket, before auth."""

from __future__ import annotations

import argparse
import json
import logging
import socket
from collections.abc import Iterator
from dataclasses import replace

import httpx
import openai
import pytest

from tests.conftest import API_KEY, RunningServer, run_server
from voxserve.api.hosts import split_host
from voxserve.cli import build_parser, main, server_config
from voxserve.config import ASRConfig, ServerConfig

KEY = "vx-test-4f9c2a7e1b"
SPEECH = {"model": "tts-1", "voice": "alloy", "input": "Hello there. This is a short test.",
          "response_format": "pcm"}  # fmt: skip


HOSTS = ("127.0.0.1", "*.voxserve.test")


def _config(**kwargs: object) -> ServerConfig:
    # ASR off: the auth check runs before any route, and the server starts faster.
    base = ServerConfig(asr=ASRConfig(enabled=False), allowed_hosts=HOSTS)
    return replace(base, api_key=KEY, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def keyed() -> Iterator[RunningServer]:
    with run_server(_config()) as running:
        yield running


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _assert_refused(r: httpx.Response, key: str = KEY) -> None:
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == "Bearer"
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] in ("authentication_error", "invalid_request_error")
    assert error["code"] == "invalid_api_key" and error["param"] is None
    assert key not in r.text


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
    with openai.OpenAI(base_url=f"{keyed.base_url}/v1", api_key=KEY, max_retries=0, timeout=60) as client:
        assert "tts-1" in [m.id for m in client.models.list()]
        with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=SPEECH["input"], response_format="pcm"
        ) as response:
            total = sum(len(chunk) for chunk in response.iter_bytes())
    assert total / 2 / 24000 > 1.0


def test_openai_sdk_with_a_wrong_key_raises_authentication_error(keyed: RunningServer) -> None:
    with (
        openai.OpenAI(base_url=f"{keyed.base_url}/v1", api_key="sk-wrong", max_retries=0, timeout=60) as client,
        pytest.raises(openai.AuthenticationError) as caught,
    ):
        client.audio.speech.create(model="tts-1", voice="alloy", input=SPEECH["input"])
    assert caught.value.status_code == 401
    assert caught.value.code == "invalid_api_key"


def test_health_and_metrics_stay_open_and_count_refusals(keyed: RunningServer) -> None:
    assert httpx.get(f"{keyed.base_url}/v1/models").status_code == 401
    assert httpx.get(f"{keyed.base_url}/health").json() == {"status": "ok"}
    metrics = httpx.get(f"{keyed.base_url}/metrics")
    assert metrics.status_code == 200
    assert 'status="401"' in metrics.text


def test_metrics_require_key_closes_metrics_only(keyed_server: RunningServer) -> None:
    running = keyed_server  # API_KEY, with metrics_require_key
    assert running.state.config.metrics_require_key
    _assert_refused(httpx.get(f"{running.base_url}/metrics"), API_KEY)
    _assert_refused(httpx.get(f"{running.base_url}/metrics", headers=_bearer("nope")), API_KEY)
    r = httpx.get(f"{running.base_url}/metrics", headers=_bearer(API_KEY))
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


def _serve_args(*argv: str) -> argparse.Namespace:
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


def test_serve_exits_2_on_a_bad_setting(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("VOXSERVE_API_KEY", raising=False)
    assert main(["serve", "--metrics-require-key", "--no-asr"]) == 2
    assert "needs an API key" in capsys.readouterr().err


# -- the Host allow-list, against DNS rebinding ----------------------------------------


def _raw(srv: RunningServer, head: bytes) -> bytes:
    """Send a request's head as bytes (Host values httpx would not send) and read the answer."""
    with socket.create_connection(("127.0.0.1", int(srv.base_url.rsplit(":", 1)[1])), timeout=20) as s:
        s.sendall(head + b"\r\n")
        answer = b""
        while data := s.recv(65536):
            answer += data
    return answer


def _others_served(srv: RunningServer) -> None:
    """A /health probe and one normal speech request (with the key) both succeed."""
    with httpx.Client(base_url=srv.base_url, timeout=30, headers=_bearer(KEY)) as c:
        assert c.get("/health").json() == {"status": "ok"}
        r = c.post("/v1/audio/speech", json=SPEECH)
        assert r.status_code == 200 and len(r.content) / 2 / 24000 > 0.5, r.text


@pytest.mark.parametrize(
    "host", [b"evil.example", b"evil.example:8000", b"voxserve.test", b"127.0.0.1.evil.example", b"localhost"]
)
def test_a_foreign_host_is_refused_on_every_route(keyed: RunningServer, host: bytes) -> None:
    for path in (b"/health", b"/v1/models", b"/metrics"):
        answer = _raw(keyed, b"GET " + path + b" HTTP/1.1\r\nhost: " + host + b"\r\nconnection: close\r\n")
        assert answer.startswith(b"HTTP/1.1 421"), answer[:200]
        body = answer.partition(b"\r\n\r\n")[2]
        error = json.loads(body)["error"]
        assert error["code"] == "invalid_host" and error["param"] == "host"
        assert host not in body
    _others_served(keyed)


def test_a_rebound_speech_request_is_refused_and_listed_hosts_are_served(keyed: RunningServer) -> None:
    # What a page on evil.example sends once its name resolves to 127.0.0.1: refused
    # before auth, so even a page that somehow has the key gets nothing.
    r = httpx.post(f"{keyed.base_url}/v1/audio/speech", json=SPEECH, headers={"host": "evil.example", **_bearer(KEY)})
    assert r.status_code == 421 and r.json()["error"]["code"] == "invalid_host", r.text
    port = keyed.base_url.rsplit(":", 1)[1]
    for host in ("api.voxserve.test", "API.voxserve.test:443", f"127.0.0.1:{port}"):
        assert httpx.get(f"{keyed.base_url}/health", headers={"host": host}).status_code == 200
    _others_served(keyed)  # httpx sends Host: 127.0.0.1:PORT


def test_no_host_or_two_hosts_are_refused(keyed: RunningServer) -> None:
    assert _raw(keyed, b"GET /health HTTP/1.0\r\n").startswith(b"HTTP/1.1 421")
    two = b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\nhost: evil.example\r\nconnection: close\r\n"
    assert _raw(keyed, two)[:12] in (b"HTTP/1.1 421", b"HTTP/1.1 400")


def _handshake(host: bytes) -> bytes:
    return (
        b"GET /v1/audio/speech/stream HTTP/1.1\r\nhost: " + host + b"\r\nupgrade: websocket\r\n"
        b"connection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"sec-websocket-version: 13\r\nauthorization: Bearer " + KEY.encode() + b"\r\n"
    )


def test_a_websocket_from_a_foreign_host_is_refused(keyed: RunningServer) -> None:
    assert _raw(keyed, _handshake(b"evil.example")).startswith(b"HTTP/1.1 403")
    port = keyed.base_url.rsplit(":", 1)[1].encode()
    with socket.create_connection(("127.0.0.1", int(port)), timeout=10) as s:
        s.sendall(_handshake(b"127.0.0.1:" + port) + b"\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 101")
    _others_served(keyed)


def test_split_host() -> None:
    assert split_host("Example.COM:8000") == ("example.com", "8000")
    assert split_host("example.com") == ("example.com", None)
    assert split_host("[::1]:8000") == ("[::1]", "8000")
    assert split_host("[::1]") == ("[::1]", None)
    assert split_host("::1") == ("::1", None)


def test_cli_allowed_hosts() -> None:
    config = server_config(_serve_args("--allowed-hosts", " api.example.com, localhost:8000 ,"), {})
    assert config.allowed_hosts == ("api.example.com", "localhost:8000")
    assert server_config(_serve_args(), {}).allowed_hosts == ()
