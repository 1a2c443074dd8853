"""The access log: one line per request, with id, route, status and timings, no text."""

from __future__ import annotations

import logging

import httpx
import pytest


def test_one_access_line_per_request_without_the_text(
    client: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "Please read my private note aloud."
    with caplog.at_level(logging.INFO, logger="voxserve.access"):
        r = client.post(
            "/v1/audio/speech",
            json={"model": "tts-1", "voice": "alloy", "input": secret, "response_format": "pcm"},
            headers={"x-request-id": "req_test_123"},
        )
        assert r.status_code == 200
        client.get("/health")
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "voxserve.access"]
    speech = [line for line in lines if "route=/v1/audio/speech" in line]
    assert len(speech) == 1
    line = speech[0]
    assert "request_id=req_test_123" in line and "status=200" in line and "method=POST" in line
    assert "ttfb_ms=" in line and "ttfb_ms=-" not in line and "duration_ms=" in line
    assert "private note" not in " ".join(lines)
    assert any("route=/health" in line for line in lines)
