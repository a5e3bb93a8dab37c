"""Errors the library raises, and the diagnostics it collects while reading.

Library code raises these and never prints or exits; the CLI catches ``Trace2PerfettoError``
once, prints one line and returns ``exit_code``.
"""

from __future__ import annotations

import os
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


class TemporaryWriteError(Trace2PerfettoError):
    """A temporary file (the conversion's spool, a reader's spill) could not be written, most often
    as its disk is full: names the folder it goes to and ``TMPDIR``, which moves it."""

    def __init__(self, folder: str, reason: str) -> None:
        self.folder, self.reason = folder, reason
        super().__init__(f"{folder}: cannot write temporary files: {reason} (set TMPDIR to a folder with "
                         "room for them; the output is not written there)")

    def __reduce__(self):  # raised in worker processes
        return (TemporaryWriteError, (self.folder, self.reason))


class temporary_writes:  # lower case, as contextlib.suppress: a with statement's word
    """``with temporary_writes(path):`` writes to the temporary file ``path`` (None: the temporary
    folder): an OSError they raise (``No space left on device``) becomes a ``TemporaryWriteError``
    naming its folder, not a failure to read an input. A class, not ``contextlib.contextmanager``'s
    generator: every spill and spool write goes through it (456,000 times in a summary conversion of
    8,300 steps of 8 XSpace devices), and entering a generator costs 3x more."""

    __slots__ = ("_path",)

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self._path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: object) -> None:
        if isinstance(error, OSError):
            import tempfile  # for this message only

            path = self._path
            folder = os.path.dirname(os.fspath(path)) if path is not None else tempfile.gettempdir()
            raise TemporaryWriteError(as_text(folder), error.strerror or str(error)) from None


# The warning a reader gives of a file of which its summary read keeps nothing, all of it left out
# by design (host events, tasks that do not compute: drawn with --kind detail only). True of a
# summary trace; an analysis that draws nothing says for itself what it found (``analyses.ops``).
NOTHING_DRAWN = "nothing_drawn"
# The warning that a rank holds no range of ``--step-marker`` (``readers.common.markers``): an error where
# no kept rank holds one (``select.check_steps``).
STEP_MARKER_UNMATCHED = "step_marker"


@dataclass
class Diagnostics:
    """Recoverable problems met while reading, counted by kind with the first example kept.

    Each kind (e.g. ``truncated_file``) is one counter, in the spirit of Perfetto's stats table,
    so a million bad records make one line, not a million. A warning about a whole rank or folder
    (one left out, one not aligned) names it as its ``subject``: the line names every one.
    """

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)
    subjects: dict[str, list[str]] = field(default_factory=dict)  # kind -> what each warning was about
    notes: dict[str, str] = field(default_factory=dict)  # facts, not damage: --strict ignores them
    # the step ids read in the kept ranks and graphs, kept or not: what ``--steps`` is checked
    # against once read (``select.check_steps``), as steps are known only then
    steps: set[int] = field(default_factory=set)

    def warn(self, kind: str, message: str, subject: str | None = None) -> None:
        """Count a problem of ``kind``; ``subject``: the rank or folder it is about, if a whole one."""
        message = as_text(message)  # it names files: shown on stderr, and in reports
        if self.examples.get(kind) == message:  # the same file read twice says it once
            return
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.examples.setdefault(kind, message)
        if subject is not None:
            self.subjects.setdefault(kind, []).append(subject)

    def note(self, kind: str, message: str) -> None:
        """Something the user must know that is no damage (a rank not aligned to wall time)."""
        self.notes.setdefault(kind, as_text(message))

    def forget(self, kind: str) -> None:
        """Take back the warnings of ``kind``: ones not true of what the caller does with the read."""
        self.counts.pop(kind, None)
        self.examples.pop(kind, None)
        self.subjects.pop(kind, None)

    def merge(self, other: Diagnostics) -> None:
        """Add another reader's counts (the first example of each kind stays)."""
        for kind, count in other.counts.items():
            self.counts[kind] = self.counts.get(kind, 0) + count
            self.examples.setdefault(kind, other.examples[kind])
            if kind in other.subjects:
                self.subjects.setdefault(kind, []).extend(other.subjects[kind])
        for kind, message in other.notes.items():
            self.notes.setdefault(kind, message)
        self.steps |= other.steps

    def messages(self) -> list[str]:
        """One line per kind: the first example, and how many more there were (which, where each was
        about a rank or folder); then the notes."""
        lines = []
        for kind, count in self.counts.items():
            others = self.subjects.get(kind, [])[1:]
            named = f": {', '.join(others)}" if others and len(others) == count - 1 else ""
            more = f" (and {count - 1} more like it{named})" if count > 1 else ""
            lines.append(self.examples[kind] + more)
        return lines + list(self.notes.values())

    def __bool__(self) -> bool:
        """Whether the input needed recovery (notes do not count)."""
        return bool(self.counts)


def as_text(name: str | os.PathLike) -> str:
    """A file or folder name as text that any UTF-8 output can carry: the bytes of a name that are
    not UTF-8 (which ``os.fsdecode`` keeps as lone surrogates, so the file can still be opened)
    written as ``\\xNN`` escapes. Names become text this way wherever they reach an output (a
    trace, a JSON document, a report, a warning)."""
    text = os.fsdecode(name)
    if text.isascii():
        return text
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
