"""The streams admission has let in that the TTS engine runs no stream for yet: grants
not yet submitted, and slots that sessions keep between two segments.

Admission weighs each stream at its own model's cost (`engine/admission.py`). A burst's
grants come faster than their coroutines reach `TTSEngine.submit`, and a session keeps
its slot while it has no stream, so the engine counts both under the model each was let
in for. Not thread-safe: the engine calls it under its lock.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Container, Mapping

__all__ = ["Admitted"]


class Admitted:
    """Grants and parked slots, by the model each was taken for (None: the newcomer
    named none)."""

    def __init__(self, grants: int):
        """`grants`: the most grants remembered (the streams and the line admission holds)."""
        self._let_in: deque[str | None] = deque(maxlen=grants)
        """The model of each stream `let_in` and not yet `submitted`, oldest first."""
        self._parked: Counter[str | None] = Counter()
        """Admitted slots that sessions keep between two segments, by model (`park`)."""

    def let_in(self, model: str | None) -> None:
        """Admission granted a slot to a newcomer of `model`."""
        self._let_in.append(model)

    def submitted(self, model: str) -> None:
        """A stream of `model` reached the engine: its grant (or one of no model) is used."""
        for name in (model, None):
            if name in self._let_in:
                self._let_in.remove(name)
                return

    def park(self, model: str | None) -> None:
        """A session keeps its admitted slot, taken for `model`, with no stream in it
        until its next segment (`serving/speech_session.py: HeldSlot`)."""
        self._parked[model] += 1

    def unpark(self, model: str | None) -> None:
        """That slot is in use again, or given back."""
        self._parked[model] -= 1
        if self._parked[model] <= 0:
            del self._parked[model]

    def counted(self, live: Mapping[str, int], admitted: int, models: Container[str]) -> tuple[dict[str, int], int]:
        """The streams admission counts, by model: the `live` ones, and those admitted
        but not yet submitted (`admitted` minus the live ones) under the model each was
        let in for, the newest grants; and how many of those have no model among
        `models`, which count at the costliest model's cost. Were every grant counted at
        the costliest, each stream of a cheap model in a burst would weigh as one of the
        costliest, and the load rule would hold a burst that fits. Parked slots count
        under the model each was taken for."""
        counted = dict(live)
        unsubmitted = max(0, admitted - sum(counted.values()))
        for name, n in self._parked.items():
            n = min(n, unsubmitted)
            if name is not None and name in models and n > 0:
                counted[name] = counted.get(name, 0) + n
                unsubmitted -= n
        named = list(self._let_in)[len(self._let_in) - unsubmitted :] if unsubmitted else []
        for name in named:
            if name is not None and name in models:
                counted[name] = counted.get(name, 0) + 1
                unsubmitted -= 1
        return counted, unsubmitted
