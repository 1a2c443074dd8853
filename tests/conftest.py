"""Shared fixtures: real voxserve servers on loopback, run by uvicorn in a thread.

The session-wide `server` uses default settings. `make_server` starts one with a custom
config (small admission limits, fault hooks...) and stops it when the block ends.
"""

from __future__ import annotations

import contextlib
import gc
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import httpx
import numpy as np
import pytest
import uvicorn
from starlette.applications import Starlette

from tests import model_cache
from voxserve.api.app import create_app
from voxserve.api.server import uvicorn_config
from voxserve.config import ASRConfig, ServerConfig, TTSConfig
from voxserve.engine.adapters.piper import PiperVoice
from voxserve.engine.admission import Admission
from voxserve.engine.asr import ASREngine
from voxserve.engine.tts import TTSEngine
from voxserve.engine.uploads import UploadBudget
from voxserve.runners.piper.onnx_runner import PiperModel
from voxserve.serving.remote import Remote, RemoteState
from voxserve.serving.state import AppState, ASRSide

if TYPE_CHECKING:
    from xdist.remote import Producer
    from xdist.scheduler import LoadScopeScheduling

    from tests.ray_support import RayDeployment

T = TypeVar("T")


@dataclass
class RunningServer:
    base_url: str
    app: Starlette
    server: uvicorn.Server

    @property
    def state(self) -> AppState:
        """The AppState of a single-machine server, once started."""
        state = self.app.state.vox
        assert isinstance(state, AppState), "a Ray-style front end: use remote_state"
        return state

    @property
    def remote_state(self) -> RemoteState:
        """The RemoteState of a server started with `remote`, once started."""
        state = self.app.state.vox
        assert isinstance(state, RemoteState), "a single-machine server: use state"
        return state

    # The parts of AppState that only some configurations have, for tests that need them.
    @property
    def asr_side(self) -> ASRSide:
        side = self.state.asr
        assert side is not None, "this server runs without ASR"
        return side

    @property
    def asr(self) -> ASREngine:
        return self.asr_side.engine

    @property
    def asr_admission(self) -> Admission:
        return self.asr_side.admission

    @property
    def uploads(self) -> UploadBudget:
        return self.asr_side.uploads


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def run_server(
    config: ServerConfig | None = None,
    engine: TTSEngine | None = None,
    remote: Remote | None = None,
    kokoro: bool = False,
    fixed_prior: bool = False,
    asr_nice: bool = False,
) -> Iterator[RunningServer]:
    """A server on a free loopback port; with `remote`, a Ray-style front end whose
    engines are the given backends.

    Servers load Piper alone unless `kokoro` is set: Kokoro adds 3 s to each start, and
    only the tests about it use it (tests/test_kokoro_voice.py). They serve Piper's prior
    on its dynamic graph unless `fixed_prior` is set: the fixed-length copies cost ~1 s of
    CPU after each start; the session `server` and tests/test_model_split.py use them.
    Their transcriptions run at the speech threads' priority unless `asr_nice` is set: at
    the default nice 10 they get only what other processes leave, so on a shared machine
    every ASR test would take as long as its neighbours let it. The tests of the default
    priority and of overload set it (tests/test_limits.py, tests/test_overload.py)."""
    port = _free_port()
    config = replace(config or ServerConfig(), host="127.0.0.1", port=port)
    if not kokoro:
        config = replace(config, tts=replace(config.tts, models=tuple(m for m in config.tts.models if m != "kokoro")))
    if not fixed_prior:
        config = replace(config, tts=replace(config.tts, fixed_prior=False))
    if not asr_nice:
        config = replace(config, asr=replace(config.asr, nice=0))
    made_dir = None
    if config.tts.saved_voices_dir is None:  # never the user's own folder
        made_dir = Path(tempfile.mkdtemp(prefix="voxserve-voices-"))
        config = replace(config, tts=replace(config.tts, saved_voices_dir=made_dir))
    app = create_app(config, engine, remote)
    # The production uvicorn settings (connection limits included), quieter logs.
    server = uvicorn.Server(uvicorn_config(app, config, log_level="warning", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.02)
    try:
        yield RunningServer(f"http://127.0.0.1:{port}", app, server)
    finally:
        server.should_exit = True
        thread.join(15)
        if made_dir is not None:
            shutil.rmtree(made_dir, ignore_errors=True)


MakeServer = Callable[[ServerConfig], contextlib.AbstractContextManager[RunningServer]]
"""The `make_server` fixture: a server with this config for the length of a `with` block."""


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Every model file a new machine joins, splits or converts on first use, built
    before the first test (tests/model_cache.py), and what each step cost. It runs in
    the process that starts pytest, before any xdist worker starts, so the workers find a
    warm cache and never build the same file at once. On an empty cache, as `make test`
    gives every run, the steps add up to about 18 s of a 2-core machine, the prior's
    fixed-length copies half of it, and take about 12 s, Piper's beside the others'; on a
    warm one, about a second."""
    if hasattr(session.config, "workerinput") or session.config.option.collectonly:
        return
    started = time.perf_counter()
    _CACHE_COST.update(model_cache.fill())
    _CACHE_WALL.append(time.perf_counter() - started)


_CACHE_COST: dict[str, float] = {}
"""What the cache fill took per step, reported at the end of the run."""
_CACHE_WALL: list[float] = []
"""How long the cache fill took in all (Piper's steps run beside the others)."""


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _CACHE_COST:
        terminalreporter.section("model caches")
        for name, seconds in _CACHE_COST.items():
            terminalreporter.write_line(f"{seconds:6.1f} s  {name}")
        terminalreporter.write_line(
            f"{sum(_CACHE_WALL):6.1f} s  in all, before the first test (Piper's steps beside the others)"
        )


@pytest.fixture(scope="session")
def server() -> Iterator[RunningServer]:
    # Default settings, except that synthesis is made deterministic (no noise), so that
    # tests can compare separate requests for the same text and transcripts of TTS audio
    # are the same on every run.
    with run_server(tts_config(noise_w=0.0, noise_scale=0.0), fixed_prior=True) as running:
        # The same text gives the same audio only once the prior's copies serve.
        piper = running.state.engine.models["en_US-joe-medium"]
        assert isinstance(piper, PiperVoice) and isinstance(piper.model, PiperModel)
        onnx_model = piper.model
        wait_for(lambda: onnx_model.acoustic.fixed_lengths, 60)
        yield running


class _Shared(Generic[T]):
    """A server that several modules share: started by the first test that asks for it,
    stopped right after the last one, not at the end of the session. While it lives it
    counts in this process's RSS, which tests/test_overload.py measures through the
    server's /metrics: share only between modules on one side of it, or set `adjacent`,
    and the modules that use it run one after another, where the first of them stood
    (`pytest_collection_modifyitems`). `modules` names every module that uses it: on
    xdist workers they run on one worker, one after another (`pytest_xdist_make_scheduler`),
    and collection fails if another module asks for it."""

    def __init__(
        self,
        name: str,
        start: Callable[[], contextlib.AbstractContextManager[T]],
        modules: tuple[str, ...],
        adjacent: bool = False,
    ) -> None:
        self.name, self.start, self.modules, self.adjacent = name, start, modules, adjacent
        self.last: str | None = None
        """The node id of the last selected test that uses it."""
        self._stack = contextlib.ExitStack()
        self._running: T | None = None

    def get(self) -> T:
        if self._running is None:
            self._running = self._stack.enter_context(self.start())
        return self._running

    def stop(self) -> None:
        self._running = None
        self._stack.close()


API_KEY = "vx-test-shared-5e2b"
"""The key of `keyed_server`."""
_KEYED = _Shared(
    "keyed_server",
    lambda: run_server(replace(ServerConfig(asr=ASRConfig(enabled=False)), api_key=API_KEY, metrics_require_key=True)),
    ("test_auth.py", "test_playground.py", "test_ws.py"),
    # tests/test_auth.py stands before tests/test_overload.py, the others after it.
    adjacent=True,
)
_TIGHT = _Shared(
    "tight_server",
    lambda: run_server(ServerConfig(
        tts=replace(TTSConfig(), max_streams=1, max_queue=0),
        asr=replace(ASRConfig(), max_requests=1, max_queue=0, workers=1),
    )),
    ("test_asr_api.py", "test_bench.py"),
)


_KOKORO = _Shared(
    "kokoro_server",
    lambda: run_server(
        ServerConfig(tts=replace(TTSConfig(), models=("piper", "kokoro"), noise_w=0.0, noise_scale=0.0)), kokoro=True
    ),
    ("test_kokoro_voice.py", "test_word_timings.py", "test_markup.py", "test_saved_voices.py"),
    # ~700 MB while it lives: its modules run together, away from tests/test_overload.py.
    adjacent=True,
)


def _ray_cluster() -> contextlib.AbstractContextManager[RayDeployment]:
    from tests.ray_support import running_deployment  # imports Ray: only where it is used

    return running_deployment()


_RAY = _Shared("ray_deployment", _ray_cluster, ("test_ray.py", "test_ray_ws.py"))
_SHARED: tuple[_Shared[Any], ...] = (_KEYED, _TIGHT, _KOKORO, _RAY)
_ONE_CLUSTER = ("test_ray.py", "test_ray_ws.py", "test_serve_ray.py")
"""The modules that start a Ray cluster: two clusters on one machine at once would fight
over Ray's ports and its session folder."""


def _worker_groups() -> dict[str, str]:
    """The modules that must run on one worker, each to the name of its group: those that
    share a server, and those that start a Ray cluster."""
    group: dict[str, str] = {}
    for name, modules in [*((shared.name, shared.modules) for shared in _SHARED), ("ray", _ONE_CLUSTER)]:
        joined = {group.get(module, module) for module in modules}
        for module, was in list(group.items()):
            if was in joined:
                group[module] = name
        group.update(dict.fromkeys(modules, name))
    return group


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> LoadScopeScheduling | None:
    """`--dist loadfile`, with each `_worker_groups` group as one file: a worker takes a
    module, or a group of them, whole and runs it in collection order, so it starts each
    module-scoped server once and each shared server once, and stops it after its last
    test (`_Shared.last`)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    groups = _worker_groups()

    class LoadGroupedFiles(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return groups.get(module.rsplit("/", 1)[-1], module)

    return LoadGroupedFiles(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each `adjacent` shared server's modules, moved up to run right after the first of
    them, in their own order; every other test keeps its place. A module that uses a
    shared server but is not among its `modules` is refused: on xdist it could run on
    another worker."""
    for shared in _SHARED:
        users = {item.path for item in items if shared.name in getattr(item, "fixturenames", ())}
        unlisted = sorted(path.name for path in users if path.name not in shared.modules)
        if unlisted:
            raise pytest.UsageError(f"{', '.join(unlisted)} use {shared.name}: add them to its modules in tests/conftest.py")
        if not users or not shared.adjacent:
            continue
        first = next(i for i, item in enumerate(items) if item.path in users)
        moved = [item for item in items if item.path in users]
        rest = [item for item in items if item.path not in users]
        at = len([item for item in items[:first] if item.path not in users])
        items[:] = rest[:at] + moved + rest[at:]


def pytest_collection_finish(session: pytest.Session) -> None:
    for shared in _SHARED:
        shared.last = next((item.nodeid for item in reversed(session.items) if shared.name in getattr(item, "fixturenames", ())), None)
    # The servers under test run in this process, whose heap (pytest, every collected
    # test, every test module's imports) is many times a server's: a full collection of
    # it stalled an in-process server for ~200 ms, which a server process never sees.
    # What is alive now lives for the session; set it aside from every later collection.
    gc.collect()
    gc.freeze()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    for shared in _SHARED:
        if item.nodeid == shared.last:
            shared.stop()


def pytest_sessionfinish() -> None:
    for shared in _SHARED:
        shared.stop()


@pytest.fixture()
def keyed_server() -> RunningServer:
    """A server that asks for API_KEY everywhere, /metrics included, and runs no ASR.
    Shared by tests/test_auth.py, tests/test_playground.py and tests/test_ws.py."""
    return _KEYED.get()


@pytest.fixture()
def tight_server() -> RunningServer:
    """One speech stream and one transcription (on one ASR worker) at a time, and no
    queue for either: the next request gets 429. Shared by tests/test_asr_api.py and
    tests/test_bench.py."""
    return _TIGHT.get()


@pytest.fixture()
def kokoro_server() -> RunningServer:
    """Piper and Kokoro, Piper without noise (the same text gives the same audio).
    Shared by tests/test_kokoro_voice.py and tests/test_word_timings.py: a start with
    Kokoro costs seconds of the machine."""
    return _KOKORO.get()


@pytest.fixture()
def ray_deployment() -> RayDeployment:
    """The two-node Ray cluster with voxserve deployed (tests/ray_support.py). Shared by
    tests/test_ray.py and tests/test_ray_ws.py: starting it costs half a minute of the
    machine."""
    return _RAY.get()


@pytest.fixture(scope="session")
def base_url(server: RunningServer) -> str:
    return server.base_url


@pytest.fixture(scope="session")
def long_speech(base_url: str) -> list[np.ndarray]:
    """The bench's twenty long sentences (`voxserve.bench.asr_offline.LONG`), spoken once
    by the session's server at 24 kHz: tests/test_asr_long.py and tests/test_whisper_torch.py
    transcribe them."""
    from tests.asr_support import LONG, speak_all

    return speak_all(base_url, LONG)


@pytest.fixture(scope="session")
def short_speech(base_url: str) -> list[np.ndarray]:
    """`tests.asr_support.SHORT`, spoken once by the session's server at 24 kHz: the tests
    that upload one of them, or all four, to the transcription endpoint share it."""
    from tests.asr_support import SHORT, speak_all

    return speak_all(base_url, SHORT)


@pytest.fixture()
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=60) as c:
        yield c


@pytest.fixture()
def make_server() -> MakeServer:
    return run_server


def tts_config(**kwargs: object) -> ServerConfig:
    return ServerConfig(tts=replace(TTSConfig(), **kwargs))  # type: ignore[arg-type]


def wait_for(predicate: Callable[[], object], timeout: float) -> float:
    """Poll `predicate` every 2 ms until it is true; returns the seconds it took, or fails
    the test after `timeout`."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError("condition not reached in time")
        time.sleep(0.002)
    return time.monotonic() - start


def silent_speech_reader(srv: RunningServer, text: str) -> socket.socket:
    """A connection that asks for a speech stream of `text` and then reads nothing, with a
    4 KB receive buffer, so the server's writes stall soon. The caller closes it."""
    body = httpx.Request(
        "POST", "http://x/", json={"model": "tts-1", "voice": "alloy", "response_format": "pcm", "input": text}
    ).content
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", int(srv.base_url.rsplit(":", 1)[1])))
    sock.sendall(
        b"POST /v1/audio/speech HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    return sock
