"""The `VOXSERVE_*` environment variables: the one place voxserve reads its own settings
from the environment, once, at start-up.

A flag always wins over its variable. `voxserve.cli` reads an `Environment` when it builds
the server's config and passes values on; nothing below it (engine, api, runners) reads
`VOXSERVE_*`. This module does not touch variables that voxserve sets for the libraries
it runs (Ray, glibc, Hugging Face): those are written where they are needed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["VARIABLES", "Environment"]

VARIABLES = {
    "VOXSERVE_HOST": "interface to bind, as `--host`",
    "VOXSERVE_PORT": "TCP port to bind, as `--port`",
    "VOXSERVE_API_KEY": "the API key, as `--api-key` (visible to child processes: prefer a key file)",
    "VOXSERVE_API_KEY_FILE": "a file holding the API key, as `--api-key-file`",
}
"""Every variable read, with what it sets (the README's table lists the same)."""


@dataclass(frozen=True)
class Environment:
    """The `VOXSERVE_*` variables that were set; None for those that were not."""

    host: str | None = None
    port: int | None = None
    api_key: str | None = None
    api_key_file: Path | None = None

    @classmethod
    def read(cls, environ: Mapping[str, str] | None = None) -> Environment:
        """Read them from `environ` (default: this process's environment).

        Raises ValueError for a port that is not a number. An empty VOXSERVE_API_KEY is
        kept (the config refuses it); an empty VOXSERVE_API_KEY_FILE counts as unset."""
        env = os.environ if environ is None else environ
        port = env.get("VOXSERVE_PORT")
        try:
            number = None if port is None else int(port)
        except ValueError:
            raise ValueError(f"VOXSERVE_PORT must be a port number, not {port!r}") from None
        key_file = env.get("VOXSERVE_API_KEY_FILE")
        return cls(
            host=env.get("VOXSERVE_HOST"),
            port=number,
            api_key=env.get("VOXSERVE_API_KEY"),
            api_key_file=Path(key_file) if key_file else None,
        )
