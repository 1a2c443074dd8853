"""The ingress deployment and the handles it calls the engine replicas through.

`Frontend` builds the ordinary app with `create_app(config, remote=...)`; `RayTTS` and
`RayASR` implement `voxserve.serving.remote`'s backends on Ray Serve deployment handles.
Streams come back as Serve streaming generators, relayed chunk by chunk, never
buffered. Errors are turned back into `VoxError`s here, in one place: a replica's own
error arrives as its cause (same status and OpenAI shape as on one machine), a replica
that died mid-request becomes `ReplicaLost` (a 500, and the end of a session it held),
and Serve's back-pressure a 429. A session's calls after its first name the replica that
holds it, and the router sends them there (`voxserve.ray.router`). The calls that clean
up after a client (ending its session on a replica, its lease given back, the leases
renewed) are made outside the client's request (`_detached`), which Serve cancels, with
the calls made under it, once the client has gone.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ray.exceptions import RayActorError, RayTaskError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError
from ray.serve.handle import DeploymentHandle, DeploymentResponse, DeploymentResponseGenerator
from starlette.applications import Starlette

from voxserve.api.app import create_app
from voxserve.config import ServerConfig
from voxserve.engine.transcribe import Transcript
from voxserve.errors import Overloaded, ReplicaLost, ServerError, Unavailable, VoxError
from voxserve.ray.loopback import bind_replica_grpc_to_node
from voxserve.ray.stats import replica_stats
from voxserve.serving.jobs import (
    LiveInput,
    LiveOpen,
    LiveReply,
    Opened,
    SegmentJob,
    SessionRef,
    SpeechJob,
    TranscriptionJob,
    TTSCatalog,
    VoiceCheck,
)
from voxserve.serving.remote import Remote, RemoteStream

if TYPE_CHECKING:
    from voxserve.ray.leases import SessionKeeper
    from voxserve.ray.replicas import ASRReplica, TTSReplica

__all__ = ["Frontend", "RayASR", "RayKeeper", "RayTTS", "as_vox_error"]

T = TypeVar("T")


def as_vox_error(exc: BaseException) -> BaseException:
    """The error to raise for `exc`, which came out of a call to a replica."""
    if isinstance(exc, VoxError) and not isinstance(exc, RayTaskError):
        return exc
    if isinstance(exc, RayTaskError):
        cause = exc.cause
        if isinstance(cause, VoxError):
            return cause
        return ServerError(f"the replica failed: {type(cause).__name__}")
    if isinstance(exc, RayActorError):
        return ReplicaLost("the replica serving this request died")
    if isinstance(exc, BackPressureError):
        return Overloaded("every replica is at capacity; retry later")
    if isinstance(exc, DeploymentUnavailableError):
        return Unavailable("no replica is available; retry later")
    return exc


async def _result(response: DeploymentResponse[Any] | DeploymentResponseGenerator[Any]) -> Any:
    assert isinstance(response, DeploymentResponse)
    try:
        return await response
    except asyncio.CancelledError:
        response.cancel()
        raise
    except Exception as exc:
        raise as_vox_error(exc) from exc


async def _detached(call: Callable[[], Awaitable[T]]) -> T:
    """`call()`'s result, the call made outside the Serve request that runs this code.
    Serve cancels every call a request has made when that request is cancelled, as an
    ingress request is once its client has gone: a call that cleans up after that client
    (ending its session on a replica, giving its lease back) would be cancelled with it,
    or never sent, and what it frees would stay held until a timer frees it."""

    async def run() -> T:  # `call()` makes the call here, in the task's empty context
        return await call()

    return await asyncio.get_running_loop().create_task(run(), context=contextvars.Context())


async def _open(generator: DeploymentResponse[Any] | DeploymentResponseGenerator[Any]) -> RemoteStream:
    """Wait for the replica's name and its `Opened`, the first items of every streamed
    reply: errors before them (429, 404...) are raised here, before any response."""
    assert isinstance(generator, DeploymentResponseGenerator)
    try:
        replica = await generator.__anext__()
        opened = await generator.__anext__()
    except BaseException as exc:
        generator.cancel()
        if isinstance(exc, Exception):
            raise as_vox_error(exc) from exc
        raise
    assert isinstance(opened, Opened)
    relay = _Relay(generator)
    return RemoteStream(str(replica), opened, relay, relay.cancel)


class _Relay:
    """A streamed reply's items after its replica's name and `Opened`, with errors as
    `VoxError`s. Unless the reply was read to its end, the replica's work is cancelled
    when reading fails or is cancelled, and at `aclose` or `cancel` (the client left, or
    gave the reply up), read or not: a plain async generator that never started would
    run no cleanup when closed, and the replica would render the whole reply for
    nobody."""

    def __init__(self, generator: DeploymentResponseGenerator[Any]):
        self._generator = generator
        self._open = True

    def __aiter__(self) -> _Relay:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._generator.__anext__()
        except StopAsyncIteration:
            self._open = False
            raise
        except BaseException as exc:
            self.cancel()
            if isinstance(exc, Exception):
                raise as_vox_error(exc) from exc
            raise

    def cancel(self) -> None:
        if self._open:
            self._open = False
            self._generator.cancel()

    async def aclose(self) -> None:
        self.cancel()


class RayTTS:
    def __init__(self, handle: DeploymentHandle[TTSReplica]):
        self._handle = handle
        self._stream = handle.options(stream=True)

    async def catalog(self) -> TTSCatalog:
        catalog: TTSCatalog = await _result(self._handle.catalog.remote())
        return catalog

    async def speech(self, job: SpeechJob) -> RemoteStream:
        return await _open(self._stream.speech.remote(job))

    async def segment(self, job: SegmentJob) -> RemoteStream:
        return await _open(self._stream.segment.remote(job))

    async def check_voice(self, check: VoiceCheck) -> None:
        await _result(self._handle.check_voice.remote(check))

    async def end_session(self, ref: SessionRef) -> None:
        await _detached(lambda: _result(self._handle.end_session.remote(ref)))

    def replica_stats(self) -> dict[str, Mapping[str, Any]]:
        return replica_stats(self._handle.app_name, self._handle.deployment_name)


class RayASR:
    def __init__(self, handle: DeploymentHandle[ASRReplica]):
        self._handle = handle
        self._stream = handle.options(stream=True)

    async def models(self) -> dict[str, dict[str, Any]]:
        models: dict[str, dict[str, Any]] = await _result(self._handle.models.remote())
        return models

    async def transcribe(self, job: TranscriptionJob) -> tuple[str, Transcript]:
        replica, transcript = await _result(self._handle.transcribe.remote(job))
        return replica, transcript

    async def stream(self, job: TranscriptionJob) -> RemoteStream:
        return await _open(self._stream.stream.remote(job))

    async def live(self, job: LiveOpen) -> RemoteStream:
        return await _open(self._stream.live.remote(job))

    async def live_input(self, batch: LiveInput) -> LiveReply:
        reply: LiveReply = await _result(self._handle.live_input.remote(batch))
        return reply

    def replica_stats(self) -> dict[str, Mapping[str, Any]]:
        return replica_stats(self._handle.app_name, self._handle.deployment_name)


class RayKeeper:
    """The session keeper's deployment (`voxserve.ray.leases`), as `LeaseKeeper`."""

    def __init__(self, handle: DeploymentHandle[SessionKeeper]):
        self._handle = handle

    async def grant(self, holder: str, lease: str) -> bool:
        granted: bool = await _result(self._handle.grant.remote(holder, lease))
        return granted

    async def release(self, holder: str, lease: str) -> None:
        await _detached(lambda: _result(self._handle.release.remote(holder, lease)))

    async def renew(self, holder: str, leases: tuple[str, ...]) -> None:
        await _detached(lambda: _result(self._handle.renew.remote(holder, leases)))


class Frontend:
    """The Serve ingress: the voxserve HTTP app, built on its replica from handles to the
    engine deployments (`serve.ingress()` calls `__serve_build_asgi_app__`)."""

    def __init__(
        self,
        config: ServerConfig,
        tts: DeploymentHandle[TTSReplica],
        asr: DeploymentHandle[ASRReplica] | None = None,
        sessions: DeploymentHandle[SessionKeeper] | None = None,
    ):
        bind_replica_grpc_to_node()
        self._config = config
        self._remote = Remote(
            RayTTS(tts),
            RayASR(asr) if asr is not None else None,
            RayKeeper(sessions) if sessions is not None else None,
        )

    def __serve_build_asgi_app__(self) -> Starlette:
        return create_app(self._config, remote=self._remote)
