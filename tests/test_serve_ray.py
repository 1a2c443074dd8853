"""A local `voxserve serve --ray --host 127.0.0.1`, run as a user runs it, in a
subprocess: every socket its process tree listens on must be on loopback, HAProxy's
admin socket private, Ray's token required by the dashboard agent's job API, and
SIGTERM must end it all within `EXIT_BUDGET_S`. It runs after the shared cluster of
tests/ray_support.py is gone, since one machine runs one Ray instance at a time.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.ray_support import RAY_MARKS, free_port, ray_processes, speech_json

pytestmark = RAY_MARKS

JOBS_API = "/api/job_agent/jobs/"
"""The dashboard agent's job API: runs any command it is given, so Ray guards it with the token."""
EXIT_BUDGET_S = 10.0


@dataclass(frozen=True)
class Proc:
    pid: int
    name: str
    started: int
    """Start time in clock ticks (/proc/PID/stat field 22): tells a reused pid apart."""


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            head, tail = f.read().rsplit(")", 1)
    except OSError:
        return None
    return [head.split("(", 1)[1], *tail.split()]


def _tree(root: int) -> list[Proc]:
    """`root` and every live process below it."""
    procs: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None:
            procs[int(entry)] = fields
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in procs and procs[pid][1] != "Z":
            found.append(Proc(pid, procs[pid][0], int(procs[pid][20])))
        todo.extend(child for child, fields in procs.items() if int(fields[2]) == pid)
    return found


def _haproxy_args(root: int, port: int) -> list[bytes]:
    """The command line of the HAProxy below `root` that listens on `port`. HAProxy is
    reloaded when the replicas change, and the old process exits: one that is gone by
    the time it is read is looked for again."""
    for _ in range(50):
        tree = _tree(root)
        serving = [proc for proc, address, p in _listeners(tree) if proc.name == "haproxy" and p == port]
        for proc in serving:
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                return Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        time.sleep(0.1)
    raise AssertionError(f"no live HAProxy listens on port {port}")


def _running(proc: Proc) -> bool:
    fields = _stat(proc.pid)
    return fields is not None and fields[1] != "Z" and int(fields[20]) == proc.started


def _listening() -> dict[int, tuple[str, int]]:
    """Socket inode -> (address, port) of every listening TCP socket on the machine."""
    found = {}
    for path, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        with open(path) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                if fields[3] != "0A":  # TCP_LISTEN
                    continue
                address, port = fields[1].split(":")
                raw = bytes.fromhex(address)
                # The kernel prints each 32-bit word in host (little-endian) order.
                words = b"".join(struct.pack("<I", w) for w in struct.unpack(f">{len(raw) // 4}I", raw))
                found[int(fields[9])] = (socket.inet_ntop(family, words), int(port, 16))
    return found


def _listeners(procs: list[Proc]) -> list[tuple[Proc, str, int]]:
    sockets = _listening()
    found = []
    for proc in procs:
        try:
            fds = os.listdir(f"/proc/{proc.pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{proc.pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and int(target[8:-1]) in sockets:
                found.append((proc, *sockets[int(target[8:-1])]))
    return found


def _settled_listeners(root: int, owners: set[str]) -> tuple[list[Proc], list[tuple[Proc, str, int]]]:
    """The process tree below `root` and its listening sockets, read once every name in
    `owners` listens: while HAProxy reloads (when the replicas change) the old process has
    closed its socket and the new one may not have bound yet."""
    for _ in range(50):
        tree = _tree(root)
        listeners = _listeners(tree)
        if owners <= {proc.name for proc, _, _ in listeners}:
            return tree, listeners
        time.sleep(0.1)
    raise AssertionError(f"not all of {owners} listen: {sorted({proc.name for proc, _, _ in listeners})}")


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _ray_token(procs: list[Proc]) -> str:
    """The token the server's Ray instance uses. The server sets a per-run one after it
    starts, so its own /proc environ (fixed at exec) lacks it; Ray's daemons, started
    later, carry it from birth. Falls back to a token file named there."""
    for proc in procs:
        try:
            with open(f"/proc/{proc.pid}/environ", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
        if b"RAY_AUTH_TOKEN" in env:
            return env[b"RAY_AUTH_TOKEN"].decode()
        if b"RAY_AUTH_TOKEN_PATH" in env:
            return Path(env[b"RAY_AUTH_TOKEN_PATH"].decode()).read_text().strip()
    return (Path.home() / ".ray" / "auth_token").read_text().strip()


def test_local_serve_ray_is_private_and_stops_on_sigterm(tmp_path: Path) -> None:
    if ray_processes():
        pytest.skip("another Ray cluster is running on this machine")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    command = [sys.executable, "-m", "voxserve.cli", "serve", "--ray", "--host", "127.0.0.1",
               "--port", str(port), "--tts-workers", "1", "--no-asr", "--tts-models", "piper"]
    with open(log, "wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert server.poll() is None, f"serve --ray exited during start-up:\n{log.read_text()[-3000:]}"
            try:
                if httpx.get(f"{base}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"serve --ray never became ready:\n{log.read_text()[-3000:]}"
            time.sleep(0.3)

        # Served meanwhile: a health probe and one normal request.
        with httpx.Client(base_url=base, timeout=60) as c:
            assert c.get("/health").json() == {"status": "ok"}
            r = c.post("/v1/audio/speech", json=speech_json("Only this machine can reach my ports."))
            assert r.status_code == 200 and len(r.content) > 4800

        # Not vacuous: Ray's daemons, the replicas and HAProxy are all in the list.
        tree, listeners = _settled_listeners(server.pid, {"gcs_server", "raylet", "haproxy"})
        owners = {proc.name for proc, _, _ in listeners}
        assert any(name.startswith("ray::ServeRepli") for name in owners), owners
        public = [(proc.name, address, p) for proc, address, p in listeners if not _loopback(address)]
        assert not public, f"listening beyond loopback: {public}"
        assert ("127.0.0.1", port) in {(address, p) for proc, address, p in listeners if proc.name == "haproxy"}

        # HAProxy's admin socket: mode 0600, in a directory only this user can enter.
        args = _haproxy_args(server.pid, port)
        config = Path(args[args.index(b"-f") + 1].decode())
        admin = config.with_name("admin.sock")
        assert stat.S_ISSOCK(admin.stat().st_mode) and stat.S_IMODE(admin.stat().st_mode) == 0o600
        private = next(p for p in config.parents if p.name.startswith("vxray-"))
        assert stat.S_IMODE(private.stat().st_mode) == 0o700 and private.stat().st_uid == os.getuid()
        assert "listen stats" not in config.read_text()

        # Ray's token guards the dashboard agent's job API (which runs any command); its
        # other ports are gRPC (token-checked too) and a metrics page.
        agent = next(proc for proc in tree if proc.name.startswith("ray::DashboardA"))
        token = {"Authorization": f"Bearer {_ray_token(tree)}"}
        answered = []
        for _, _, agent_port in (item for item in listeners if item[0] == agent):
            try:
                url = f"http://127.0.0.1:{agent_port}{JOBS_API}nothing"
                answered.append((httpx.get(url, timeout=2).status_code,
                                 httpx.get(url, headers=token, timeout=2).status_code))
            except httpx.TransportError:
                continue  # a gRPC port
        guarded = [authed for bare, authed in answered if bare == 401]
        assert guarded and all(authed not in (401, 403) for authed in guarded), answered

        started = time.monotonic()
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=EXIT_BUDGET_S + 20)
        took = time.monotonic() - started
        print(f"serve --ray exited {code} {took:.1f} s after SIGTERM")
        assert code == 0 and took < EXIT_BUDGET_S, (code, took, log.read_text()[-2000:])
        # Leftovers get a moment to be reaped, not to finish exiting.
        deadline = time.monotonic() + 1.0
        while (left := [proc for proc in tree if _running(proc)]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not left, f"still running after serve --ray exited: {left}"
        assert not private.exists()
    finally:
        if server.poll() is None:
            stray = _tree(server.pid)
            for proc in stray:
                os.kill(proc.pid, signal.SIGKILL)
            server.wait(30)
