"""Browser-facing defaults and what a client can write into the logs, each test shaped as
the attack and each checking that `/health` and a normal speech request are served
meanwhile: a `text/plain` POST (a CORS simple request) gets 415, a form posted from a
foreign page's origin gets 403, control characters in a
path are escaped in the access line, a bad `x-request-id` gets 400 and is never echoed
or logged, and a client that leaves mid-body leaves one log line and no traceback. The
`Host` allow-list is tested in test_auth.py, on its keyed server."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.asr_support import speak_pcm, wav_bytes
from tests.conftest import RunningServer, wait_for
from voxserve.api.access_log import loggable

pytestmark = pytest.mark.timeout(60)

SPEECH = {"model": "tts-1", "voice": "alloy", "input": "Hello there.", "response_format": "pcm"}


def _port(srv: RunningServer) -> int:
    return int(srv.base_url.rsplit(":", 1)[1])


def _others_served(base_url: str) -> None:
    """A /health probe and one normal speech request both succeed."""
    with httpx.Client(base_url=base_url, timeout=30) as c:
        assert c.get("/health").json() == {"status": "ok"}
        r = c.post("/v1/audio/speech", json=SPEECH, headers={"x-request-id": "normal-1"})
        assert r.status_code == 200, r.text
        assert len(r.content) / 2 / 24000 > 0.3


def _raw(srv: RunningServer, head: bytes, body: bytes = b"") -> bytes:
    """Send one request as bytes (what httpx would refuse to send) and read the answer."""
    with socket.create_connection(("127.0.0.1", _port(srv)), timeout=20) as s:
        s.sendall(head + b"\r\n" + body)
        answer = b""
        while data := s.recv(65536):
            answer += data
    return answer


def _error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["code"] == code
    return dict(error)


def _streams_started(srv: RunningServer) -> float:
    value = srv.state.metrics.registry.get_sample_value("voxserve_tts_streams_started_total")
    return float(value or 0.0)


def _access_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "voxserve.access"]


# -- Content-Type: a web page may post text/plain anywhere without a preflight -----------


REFUSED_TYPES = [
    "text/plain",
    "text/plain;charset=UTF-8",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    None,
    "application/jsonp",
]


def test_a_json_endpoint_refuses_other_content_types(server: RunningServer) -> None:
    started = _streams_started(server)
    for content_type in REFUSED_TYPES:
        headers = {} if content_type is None else {"content-type": content_type}
        r = httpx.post(f"{server.base_url}/v1/audio/speech", content=json.dumps(SPEECH), headers=headers, timeout=30)
        error = _error(r, 415, "unsupported_media_type")
        assert error["param"] == "content-type"
        assert "Content-Type: application/json" in error["message"]
    assert _streams_started(server) == started  # nothing was spoken
    # A page that sends JSON must ask first (a CORS preflight), and is never allowed.
    preflight = httpx.options(
        f"{server.base_url}/v1/audio/speech",
        headers={"origin": "https://evil.example", "access-control-request-method": "POST",
                 "access-control-request-headers": "content-type"},
    )  # fmt: skip
    assert "access-control-allow-origin" not in preflight.headers
    _others_served(server.base_url)
    assert _streams_started(server) == started + 1  # the normal request was counted


def test_a_foreign_page_cannot_make_the_server_work(server: RunningServer) -> None:
    """A page on another origin may post a form (multipart, a CORS simple request) with no
    preflight: an upload to be transcribed. It is refused before the body is read; reads
    stay open (CORS keeps their answers from the page), and the server's own pages and
    clients that send no Origin are served."""
    with httpx.Client(base_url=server.base_url, timeout=30) as c:
        clip = wav_bytes(speak_pcm(c, "Turn left at the corner."))
    files, form = {"file": ("a.wav", clip)}, {"model": "whisper-1"}
    transcribed = server.state.metrics.asr_audio_seconds._value.get()
    for origin in ("https://evil.example", "null", server.base_url.replace("127.0.0.1", "localhost")):
        r = httpx.post(f"{server.base_url}/v1/audio/transcriptions", headers={"origin": origin}, timeout=30, files=files, data=form)
        error = _error(r, 403, "origin_not_allowed")
        assert error["param"] == "origin" and "--allowed-origins" in error["message"]
        r = httpx.post(f"{server.base_url}/v1/audio/speech", json=SPEECH, headers={"origin": origin}, timeout=30)
        _error(r, 403, "origin_not_allowed")
        assert httpx.get(f"{server.base_url}/v1/models", headers={"origin": origin}).status_code == 200
    assert server.state.metrics.asr_audio_seconds._value.get() == transcribed  # nothing was decoded
    for headers in ({"origin": server.base_url}, {}):
        r = httpx.post(f"{server.base_url}/v1/audio/transcriptions", headers=headers, timeout=60, files=files, data=form)
        assert r.status_code == 200 and "left" in r.json()["text"].lower(), r.text
    _others_served(server.base_url)


def test_json_with_parameters_and_the_openai_sdk_still_work(server: RunningServer) -> None:
    for content_type in ("application/json; charset=utf-8", "Application/JSON"):
        r = httpx.post(
            f"{server.base_url}/v1/audio/speech",
            content=json.dumps(SPEECH).encode(),
            headers={"content-type": content_type},
            timeout=30,
        )
        assert r.status_code == 200 and len(r.content) > 4800, r.text
    with openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0, timeout=30) as client:
        audio = client.audio.speech.create(model="tts-1", voice="alloy", input="Hello.", response_format="pcm")
    assert len(audio.content) > 4800
    spec = httpx.get(f"{server.base_url}/openapi.json").json()
    assert "415" in spec["paths"]["/v1/audio/speech"]["post"]["responses"]


# -- x-request-id: echoed and logged, so checked first ------------------------------------


def test_a_valid_request_id_is_echoed_and_logged(server: RunningServer, caplog: pytest.LogCaptureFixture) -> None:
    rid = "job-42.retry:1_" + "x" * 113  # 128 characters, the longest accepted
    with caplog.at_level(logging.INFO, logger="voxserve.access"):
        r = httpx.post(f"{server.base_url}/v1/audio/speech", json=SPEECH, headers={"x-request-id": rid}, timeout=30)
        assert r.status_code == 200 and r.headers["x-request-id"] == rid
        # A refusal with no id of its own is logged under the client's id.
        r = httpx.post(f"{server.base_url}/v1/audio/speech", content=b"{}", headers={"x-request-id": "refused-7"})
        assert r.status_code == 415
    lines = _access_lines(caplog)
    assert any(f"request_id={rid} " in line and "status=200" in line for line in lines)
    assert any("request_id=refused-7 " in line and "status=415" in line for line in lines)


BAD_IDS = [
    b"r" * 10_240,
    b"r" * 129,
    b"abc\x1b[31mred",
    b"abc\x7f",
    b"two words",
    b"id\xc3\xa9",
    b"a=b;c",
    b"ok\tstatus=200",
]


def test_a_bad_request_id_gets_400_and_is_never_echoed_or_logged(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    body = json.dumps(SPEECH).encode()
    for value in BAD_IDS:
        head = (
            b"POST /v1/audio/speech HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n"
            b"content-type: application/json\r\nx-request-id: " + value + b"\r\n"
            + f"content-length: {len(body)}\r\n".encode()
        )
        caplog.clear()
        with caplog.at_level(logging.DEBUG):
            answer = _raw(server, head, body)
        assert answer.startswith(b"HTTP/1.1 400"), (value[:20], answer[:200])
        head_out, _, payload = answer.partition(b"\r\n\r\n")
        marker = value.strip()[:12]
        assert marker not in answer
        assert marker.decode("latin-1") not in caplog.text
        if b"application/json" not in head_out:
            # ESC and DEL never reach the app: uvicorn's parser refuses them first.
            assert value in (b"abc\x1b[31mred", b"abc\x7f"), answer[:200]
            continue
        error = json.loads(payload)["error"]
        assert error["code"] == "invalid_request_id" and error["param"] == "x-request-id"
        assert b"x-request-id" not in head_out.lower()
        assert any("status=400" in line and "request_id=- " in line for line in _access_lines(caplog))
    _others_served(server.base_url)


def test_two_request_ids_are_refused_on_any_route(server: RunningServer) -> None:
    head = b"GET /v1/models HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\nx-request-id: a\r\nx-request-id: b\r\n"
    answer = _raw(server, head)
    assert answer.startswith(b"HTTP/1.1 400") and b"invalid_request_id" in answer
    r = httpx.get(f"{server.base_url}/v1/models", headers={"x-request-id": "a b"})
    assert _error(r, 400, "invalid_request_id")["param"] == "x-request-id"
    _others_served(server.base_url)


# -- the access log: one visible line per request, whatever the path holds -----------------


def test_control_characters_in_a_path_are_escaped_in_the_access_line(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    forged = b"/v1/%1b[31mred%0d%0arequest_id=x%20method=GET%20route=/health%20status=200%5c"
    with caplog.at_level(logging.INFO, logger="voxserve.access"):
        answer = _raw(server, b"GET " + forged + b" HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n")
        assert answer.startswith(b"HTTP/1.1 404")
        _others_served(server.base_url)
    lines = [line for line in _access_lines(caplog) if "status=404" in line]
    assert len(lines) == 1
    line = lines[0]
    assert line.isascii() and line.isprintable()  # no ESC, no CR/LF
    assert "route=/v1/\\x1b[31mred\\r\\nrequest_id=x\\x20method=GET\\x20route=/health\\x20status=200\\\\ " in line
    assert line.count(" ") == 5  # six fields, none split
    assert not any(m.startswith("request_id=x") for m in _access_lines(caplog))


def test_a_huge_path_is_cut_in_the_access_line(server: RunningServer, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="voxserve.access"):
        assert httpx.get(f"{server.base_url}/v1/{'a' * 8000}", timeout=30).status_code == 404
    (line,) = [line for line in _access_lines(caplog) if "status=404" in line]
    assert len(line) < 400 and "aaa..." in line


def test_loggable_escapes_everything_but_printable_ascii() -> None:
    assert loggable("/v1/audio/speech") == "/v1/audio/speech"
    assert loggable("a\x1bb\nc\rd\te\\f g\x00\u202e\U0001f600") == (
        "a\\x1bb\\nc\\rd\\te\\\\f\\x20g\\x00\\u202e\\U0001f600"
    )
    assert loggable("") == "-"
    assert loggable("x" * 300) == "x" * 256 + "..."


# -- a client that leaves mid-body ---------------------------------------------------------


@pytest.fixture()
def all_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """caplog, also fed by uvicorn's own logger (it does not propagate to the root)."""
    uvicorn_log = logging.getLogger("uvicorn.error")
    uvicorn_log.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.DEBUG):
            yield caplog
    finally:
        uvicorn_log.removeHandler(caplog.handler)


@pytest.mark.parametrize("route", ["/v1/audio/speech", "/v1/audio/transcriptions"])
def test_a_client_that_leaves_mid_body_leaves_one_log_line(
    server: RunningServer, all_logs: pytest.LogCaptureFixture, route: str
) -> None:
    if route == "/v1/audio/speech":
        content_type = b"application/json"
        part = b'{"model": "tts-1", "voice": "alloy", "input": "' + b"word " * 200
    else:
        content_type = b"multipart/form-data; boundary=b0undary"
        part = (
            b'--b0undary\r\ncontent-disposition: form-data; name="file"; filename="a.wav"\r\n'
            b"content-type: audio/wav\r\n\r\nRIFF" + bytes(20_000)
        )
    head = (
        b"POST " + route.encode() + b" HTTP/1.1\r\nhost: 127.0.0.1\r\nx-request-id: leaver-1\r\n"
        b"content-type: " + content_type + b"\r\ncontent-length: 200000\r\n"
    )
    sock = socket.create_connection(("127.0.0.1", _port(server)), timeout=10)
    with sock:
        sock.sendall(head + b"\r\n" + part)
        _others_served(server.base_url)  # while the upload hangs half-sent
        time.sleep(0.2)
        all_logs.clear()
    wait_for(lambda: any("request_id=leaver-1" in m for m in _access_lines(all_logs)), timeout=10)
    time.sleep(0.5)  # a traceback, if any, would follow the access line
    records = [r for r in all_logs.records if r.levelno >= logging.INFO]
    assert [r.getMessage() for r in records] == [next(m for m in _access_lines(all_logs))]
    (line,) = _access_lines(all_logs)
    assert f"route={route} " in line and "status=499" in line
    assert not any(r.exc_info for r in all_logs.records)
    assert "Traceback" not in all_logs.text
    _others_served(server.base_url)
