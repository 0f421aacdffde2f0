"""The one record type every reader yields and every writer takes."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Example:
    """An article/summary pair. Summary sentences are joined by "\\n"."""

    article: str
    summary: str
    id: str = ""


@dataclasses.dataclass
class ReadStats:
    """What a reader read and dropped, and why: nothing is lost silently."""

    read: int = 0
    dropped: dict = dataclasses.field(default_factory=dict)

    def drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    @property
    def kept(self) -> int:
        return self.read - sum(self.dropped.values())

    def summary(self) -> str:
        parts = [f"read {self.read}", f"kept {self.kept}"]
        parts += [f"dropped {n} ({why})" for why, n in sorted(self.dropped.items())]
        return ", ".join(parts)
