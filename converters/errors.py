"""Errors the library raises, and the diagnostics it collects while reading.

Library code raises these and never prints or exits; the CLI catches ``Trace2PerfettoError``
once, prints one line and returns ``exit_code``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


class Trace2PerfettoError(Exception):
    """Base of every error the library raises on purpose. Exit code 1."""

    exit_code = 1


class UsageError(Trace2PerfettoError):
    """A bad option, an unknown rank or graph, or nothing recognisable in a directory."""

    exit_code = 2


class InputError(Trace2PerfettoError):
    """An input file that is broken beyond recovery: says which file, where, and what was expected."""

    def __init__(self, path: Path | str, where: str, reason: str, hint: str = "") -> None:
        self.path, self.where, self.reason, self.hint = Path(path), where, reason, hint
        message = f"{path}: {where}: {reason}" if where else f"{path}: {reason}"
        super().__init__(message + (f" ({hint})" if hint else ""))

    def __reduce__(self):  # raised in worker processes: pickle with the constructor's arguments
        return (InputError, (self.path, self.where, self.reason, self.hint))


@dataclass
class Diagnostics:
    """Recoverable problems met while reading, counted by kind with the first example kept.

    Each kind (e.g. ``truncated_file``) is one counter, in the spirit of Perfetto's stats table,
    so a million bad records make one line, not a million.
    """

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # facts, not damage: --strict ignores them
    # the step ids read in the kept ranks and graphs, kept or not: what ``--steps`` is checked
    # against once read (``select.check_steps``), as steps are known only then
    steps: set[int] = field(default_factory=set)

    def warn(self, kind: str, message: str) -> None:
        if self.examples.get(kind) == message:  # the same file read twice says it once
            return
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.examples.setdefault(kind, message)

    def note(self, kind: str, message: str) -> None:
        """Something the user must know that is no damage (a rank not aligned to wall time)."""
        self.notes.setdefault(kind, message)

    def merge(self, other: Diagnostics) -> None:
        """Add another reader's counts (the first example of each kind stays)."""
        for kind, count in other.counts.items():
            self.counts[kind] = self.counts.get(kind, 0) + count
            self.examples.setdefault(kind, other.examples[kind])
        for kind, message in other.notes.items():
            self.notes.setdefault(kind, message)
        self.steps |= other.steps

    def messages(self) -> list[str]:
        """One line per kind: the first example, and how many more there were; then the notes."""
        lines = []
        for kind, count in self.counts.items():
            more = f" (and {count - 1} more like it)" if count > 1 else ""
            lines.append(self.examples[kind] + more)
        return lines + list(self.notes.values())

    def __bool__(self) -> bool:
        """Whether the input needed recovery (notes do not count)."""
        return bool(self.counts)
