"""Fuzz every operation of the real server from its own `/openapi.json` with schemathesis.

The schema is loaded from the running server. Each operation gets a fixed number of
generated requests, valid and invalid, derandomized and never shrunk, so a run is the same
every time and bounded. Every response must be free of 5xx and match the document: a
declared status code and media type, and a body and headers that fit the declared schemas.
Invalid requests must be refused with a 4xx.

schemathesis' own pytest entry point (`from_fixture`) does not run on pytest 9.2, so each
operation is a plain parametrized test that drives hypothesis with the operation's
strategies; the list of operations comes from the same builder the server serves.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx
import hypothesis
import pytest
import requests
import schemathesis
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from starlette.routing import Route

from tests.conftest import RunningServer
from voxserve.api.openapi import openapi_document
from voxserve.api.schemas import SPEECH_MODELS
from voxserve.api.transcriptions import ASR_MODELS

if TYPE_CHECKING:
    from schemathesis.specs.openapi.schemas import OpenApiCase

MAX_EXAMPLES = 30
"""Generated requests per operation: enough to reach each field's edges, and the whole run
stays well under a minute on two cores (a long TTS input takes a while to speak)."""

SETTINGS = hypothesis.settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
    suppress_health_check=list(hypothesis.HealthCheck),
    print_blob=False,
)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]

OPERATIONS = [
    (method.upper(), path) for path, item in openapi_document()["paths"].items() for method in item
]


@pytest.fixture(scope="module")
def api_schema(server: RunningServer) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{server.base_url}/openapi.json", timeout=10)


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        yield s


@pytest.fixture(scope="module")
def known(server: RunningServer) -> dict[str, dict[str, list[Any]]]:
    """Per operation, values the server accepts, asked of the server, so that most valid
    requests get past the model and voice checks; and a real clip to transcribe."""
    state = server.state
    with httpx.Client(base_url=server.base_url, timeout=60) as c:
        voices = [v["id"] for v in c.get("/v1/audio/voices").json()["voices"]]
        clip = c.post(
            "/v1/audio/speech",
            json={
                "model": "tts-1",
                "voice": "alloy",
                "input": "Hello there.",
                "response_format": "wav",
            },
        ).content
    asr: dict[str, list[Any]] = {"model": [*ASR_MODELS, server.asr.name], "file": [clip]}
    return {
        "/v1/audio/speech": {
            "model": [*SPEECH_MODELS, state.engine.default_model.name],
            "voice": voices + [{"id": v} for v in voices],
        },
        "/v1/audio/transcriptions": asr,
        "/v1/audio/translations": asr,
    }


def steer(case: OpenApiCase, data: st.DataObject, known: dict[str, list[Any]]) -> None:
    """Mostly swap a generated value for one the server knows. The case stays valid: any
    string is a valid model or voice to the schema, the server knows only some."""
    if (
        not isinstance(case.body, dict)
        or case.meta is None
        or not case.meta.generation.mode.is_positive
    ):
        return
    body = dict(case.body)  # the generated dict may be shared with other cases
    for name, values in known.items():
        if name in body:
            choice = data.draw(st.one_of(st.sampled_from(values), st.none()), label=name)
            if choice is not None:
                body[name] = choice
    case.body = body


def _with_mutation(case: OpenApiCase) -> bool:
    """A negative case that really breaks the schema (the negative strategy also yields
    unmutated, valid cases when it finds nothing to break)."""
    return case.meta is not None and bool(getattr(case.meta.phase.data, "mutations", ()))


CASES = [
    (method, path, mode)
    for method, path in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode.is_positive or method == "POST"
]


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("method", "path", "mode"), CASES, ids=[f"{m} {p} {g.value}" for m, p, g in CASES]
)
def test_operation_holds_its_schema(
    api_schema: schemathesis.BaseSchema,
    session: requests.Session,
    known: dict[str, dict[str, list[Any]]],
    method: str,
    path: str,
    mode: GenerationMode,
) -> None:
    operation = api_schema[path][method]

    @SETTINGS
    @hypothesis.given(case=operation.as_strategy(mode), data=st.data())
    def run(case: OpenApiCase, data: st.DataObject) -> None:
        steer(case, data, known.get(path, {}))
        checks = [*CHECKS, negative_data_rejection] if _with_mutation(case) else CHECKS
        case.call_and_validate(session=session, checks=checks, timeout=60)

    run()


def test_document_is_valid_and_lists_every_route(
    server: RunningServer, api_schema: schemathesis.BaseSchema
) -> None:
    api_schema.validate()  # against the OpenAPI 3.1 meta-schema
    served = httpx.get(f"{server.base_url}/openapi.json", timeout=10).json()
    # The playground page and its static files are not part of the API.
    api = [r for r in server.app.routes if isinstance(r, Route) and r.include_in_schema]
    routes = {(m, r.path) for r in api for m in (r.methods or set()) - {"HEAD"}}
    assert {(m.upper(), p) for p, item in served["paths"].items() for m in item} == routes
