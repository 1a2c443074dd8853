"""Run HAProxy for Ray Serve with only the listeners a local `serve --ray` wants.

Ray Serve 2.60 renders HAProxy's config from a fixed template that puts a stats page
(`listen stats`, `bind *:8404`) and a Prometheus endpoint (`frontend prometheus`,
`bind :9101`) on every interface and makes the admin socket mode 666. None of this is
configurable. A local `voxserve serve --ray` points `RAY_SERVE_HAPROXY_BINARY_PATH` at a
small script that runs this file with the real binary's path and HAProxy's arguments:

    python haproxy_guard.py REAL_HAPROXY -db -f CONFIG [...]

It rewrites CONFIG in place (under the same lock Serve takes to write it): the two
sections go, the admin socket becomes mode 600. Then it execs the real binary with
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
MODE = re.compile(r"\bmode \d+")


class UnsafeConfig(ValueError):
    """The config still exposes something after the rewrite."""


def private_config(text: str) -> str:
    """`text` without the stats and Prometheus sections, with the admin socket mode 600."""
    out: list[str] = []
    dropping = False
    for line in text.splitlines(keepends=True):
        section = SECTION.match(line)
        if section:
            dropping = (section.group(1), section.group(2)) in DROPPED_SECTIONS
        if dropping:
            continue
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


def _rewrite(path: str) -> None:
    # Serve holds this lock while it writes the config.
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            with open(path) as f:
                text = f.read()
            fixed = private_config(text)
            if fixed != text:
                tmp = f"{path}.guard"
                with open(tmp, "w") as f:
                    f.write(fixed)
                os.replace(tmp, path)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def main(argv: list[str]) -> int:
    """`argv` = [REAL_HAPROXY, *haproxy_args]; execs HAProxy, or returns 2 if unsafe."""
    if not argv:
        print("usage: haproxy_guard.py REAL_HAPROXY [HAPROXY ARGS...]", file=sys.stderr)
        return 2
    real, args = argv[0], argv[1:]
    try:
        _rewrite(_config_path(args))
    except (OSError, UnsafeConfig) as exc:
        print(f"voxserve haproxy guard: refusing to start HAProxy: {exc}", file=sys.stderr)
        return 2
    os.execv(real, [real, *args])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
