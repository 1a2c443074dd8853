"""Run HAProxy for Ray Serve with only the listeners a local `serve --ray` wants.

Ray Serve 2.60 renders HAProxy's config from a fixed template that puts a stats page
(`listen stats`, `bind *:8404`) and a Prometheus endpoint (`frontend prometheus`,
`bind :9101`) on every interface and makes the admin socket mode 666. None of this is
configurable. A local `voxserve serve --ray` points `RAY_SERVE_HAPROXY_BINARY_PATH` at a
small script that runs this file with the real binary's path and HAProxy's arguments:

    python haproxy_guard.py REAL_HAPROXY -db -f CONFIG [...]

    python haproxy_guard.py --frontend-host HOST REAL_HAPROXY -db -f CONFIG [...]

It rewrites CONFIG in place (under the same lock Serve takes to write it): the two
sections go, the admin socket becomes mode 600, and with `--frontend-host` the client
frontends bind to HOST. That lets the launcher tell Serve 127.0.0.1, so that Serve's
own HTTP ports (its fallback proxy, each ingress replica's direct port) stay on
loopback, while HAProxy alone listens where the user asked. Then it execs the real binary with
the unchanged arguments, so the process Serve waits on and signals is HAProxy itself,
and Serve still recognizes it by CONFIG on its command line. The rewrite is
idempotent; a config in which the admin socket is not restricted afterwards is
refused (exit status 2), so a future template change fails closed.

Runs as a plain script in the HAProxy manager's process tree: standard library only,
no voxserve or Ray imports, nothing but the rewrite and the exec.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import re
import sys

__all__ = ["main", "private_config"]

DROPPED_SECTIONS = {("frontend", "prometheus"), ("listen", "stats")}
"""HAProxy sections removed from the config: Ray's stats page and Prometheus exporter."""
SECTION = re.compile(r"^(global|defaults|frontend|backend|listen|peers|resolvers|userlist|cache|program|http-errors|ring|mailers)\b(?:[ \t]+(\S+))?")
ADMIN_SOCKET = re.compile(r"^(\s*stats socket \S+)(.*)$")
BIND = re.compile(r"^(\s*bind )(\S+):(\d+)(.*)$")
MODE = re.compile(r"\bmode \d+")


class UnsafeConfig(ValueError):
    """The config still exposes something after the rewrite."""


def frontend_address(host: str) -> str:
    """How HAProxy's config spells the address `host` (Serve's own rule: any -> `*`)."""
    return "*" if host in ("", "0.0.0.0", "::") else host


def private_config(text: str, frontend_host: str | None = None) -> str:
    """`text` without the stats and Prometheus sections, with the admin socket mode 600,
    and (if given) every client frontend bound to `frontend_host`."""
    out: list[str] = []
    dropping = in_frontend = False
    for line in text.splitlines(keepends=True):
        section = SECTION.match(line)
        if section:
            dropping = (section.group(1), section.group(2)) in DROPPED_SECTIONS
            in_frontend = section.group(1) == "frontend"
        if dropping:
            continue
        bind = BIND.match(line.rstrip("\n"))
        if bind and in_frontend and frontend_host is not None:
            line = f"{bind.group(1)}{frontend_address(frontend_host)}:{bind.group(3)}{bind.group(4)}\n"
        socket = ADMIN_SOCKET.match(line.rstrip("\n"))
        if socket:
            rest = socket.group(2)
            rest = MODE.sub("mode 600", rest) if MODE.search(rest) else f" mode 600{rest}"
            line = f"{socket.group(1)}{rest}\n"
        out.append(line)
    result = "".join(out)
    for line in result.splitlines():
        socket = ADMIN_SOCKET.match(line)
        if socket and "mode 600" not in socket.group(2):
            raise UnsafeConfig(f"admin socket left open: {line.strip()}")
    return result


def _config_path(args: list[str]) -> str:
    for flag, value in itertools.pairwise(args):
        if flag == "-f":
            return value
    raise UnsafeConfig("no -f CONFIG in the HAProxy arguments")


def _rewrite(path: str, frontend_host: str | None) -> None:
    # Serve holds this lock while it writes the config.
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            with open(path) as f:
                text = f.read()
            fixed = private_config(text, frontend_host)
            if fixed != text:
                tmp = f"{path}.guard"
                with open(tmp, "w") as f:
                    f.write(fixed)
                os.replace(tmp, path)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def main(argv: list[str]) -> int:
    """`argv` = [--frontend-host HOST] REAL_HAPROXY *haproxy_args; execs HAProxy, or
    returns 2 if the config is unsafe."""
    frontend_host = None
    if argv[:1] == ["--frontend-host"] and len(argv) > 1:
        frontend_host, argv = argv[1], argv[2:]
    if not argv:
        print("usage: haproxy_guard.py [--frontend-host HOST] REAL_HAPROXY [HAPROXY ARGS...]", file=sys.stderr)
        return 2
    real, args = argv[0], argv[1:]
    try:
        _rewrite(_config_path(args), frontend_host)
    except (OSError, UnsafeConfig) as exc:
        print(f"voxserve haproxy guard: refusing to start HAProxy: {exc}", file=sys.stderr)
        return 2
    os.execv(real, [real, *args])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
