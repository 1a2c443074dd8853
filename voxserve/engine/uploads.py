"""A shared budget of upload bytes held by transcription requests that are not decoded yet.

Uploads are read in full before a request takes a transcription slot, so a client that
stalls mid-upload holds a connection, never a slot. What bounds the memory (and spool
files) of all those uploads together is this budget: a request takes its share as each
piece of the body arrives and gives it back once its audio is decoded or the request
ends. A piece that would pass the budget fails the request at once with 429: waiting
would let clients that upload slowly hold memory for others that wait on them.

Only the event loop uses it; no I/O, no asyncio.
"""

from __future__ import annotations

from voxserve.errors import Overloaded

__all__ = ["UploadBudget", "UploadLease"]

RETRY_AFTER_S = 2.0
"""What a refused upload is told to wait: buffered uploads end within seconds (they are
decoded, or time out when their clients stall)."""


class UploadBudget:
    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError("the upload budget must be positive")
        self.capacity = capacity
        self.held = 0
        """Bytes held by live requests now."""
        self.refused = 0
        """Uploads refused with 429 since start."""

    def lease(self) -> UploadLease:
        return UploadLease(self)


class UploadLease:
    """One request's share of the budget; `release` is idempotent, and a released lease
    takes nothing more."""

    def __init__(self, budget: UploadBudget):
        self._budget = budget
        self.held = 0
        """Bytes this request holds now."""
        self._released = False

    def take(self, n: int) -> None:
        """Hold `n` more bytes; raises Overloaded (429) if that would pass the budget."""
        budget = self._budget
        if self._released:
            raise RuntimeError("upload lease already released")
        if budget.held + n > budget.capacity:
            budget.refused += 1
            mib = budget.capacity / (1024 * 1024)
            raise Overloaded(
                f"the server is already receiving {mib:g} MiB of uploads, its limit; "
                "retry later or send a smaller file",
                retry_after=RETRY_AFTER_S,
            )
        budget.held += n
        self.held += n

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._budget.held -= self.held
            self.held = 0
