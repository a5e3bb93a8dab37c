"""The profilers' SQLite databases, opened read-only and looked up by name (tables and columns
drift between versions).

A database is opened immutable, so nothing appears beside it (SQLite in WAL mode would otherwise
create ``-shm``); one with a non-empty ``-wal`` (a crashed writer) is read from a temporary copy
of both, as immutable mode would ignore the WAL.

Shared by the readers of the databases: ``ascend_db`` (``ascend_pytorch_profiler_{rank}.db``,
``msprof_*.db``) and ``ascend_analysis`` (the profiler's ``analysis.db``).
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from ...errors import Diagnostics, InputError

SAMPLE_ROWS = 1024  # counter and memory rows fetched and made into samples at once (_db_core.samples)
# said with every error of a database file
HINT = "expected a profiler database (ascend_pytorch_profiler_{rank}.db or msprof_*.db)"
# A damaged file: a page SQLite cannot read, or text that is not UTF-8 (a table's name with a byte
# flipped), met only when a query reaches it
DAMAGED = (sqlite3.DatabaseError, UnicodeDecodeError)


class read_only:
    """The database, read-only, leaving nothing beside it; a non-empty WAL is read from a copy.
    ``uri`` is what it opened, for a connection of C's own (readers/c/ascend_db_rows.c's ``Rows``)."""

    def __init__(self, path: Path, diag: Diagnostics) -> None:
        self.path, self.diag, self.copy, self.uri = path, diag, None, ""

    def __enter__(self) -> sqlite3.Connection:
        path, wal = self.path, self.path.with_name(self.path.name + "-wal")
        if wal.is_file() and wal.stat().st_size > 0:
            self.copy = tempfile.TemporaryDirectory(prefix="trace2perfetto-db-")
            shutil.copy(path, Path(self.copy.name) / path.name)
            shutil.copy(wal, Path(self.copy.name) / wal.name)
            self.diag.note("wal_copy", f"{path}: its write-ahead log holds data not yet in the file "
                           "(the writer did not close it); read from a copy of both")
            path = Path(self.copy.name) / path.name
            uri = f"file:{path}?mode=ro"
        else:
            uri = f"file:{path}?mode=ro&immutable=1"
        self.uri = uri
        try:
            self.db = sqlite3.connect(uri, uri=True)
        except sqlite3.Error as e:
            raise InputError(self.path, "", f"cannot open as SQLite: {e}", hint=HINT) from None
        return self.db

    def __exit__(self, *_: object) -> None:
        self.db.close()
        if self.copy is not None:
            self.copy.cleanup()


class Schema:
    """Table names and, on demand, their columns (PRAGMA table_info)."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self.db = db
        try:
            self.tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except DAMAGED as e:
            raise InputError(path, "", f"not an SQLite database, or a damaged one ({e})",
                             hint=HINT) from None
        self._columns: dict[str, set[str]] = {}

    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            self._columns[table] = ({row[1] for row in self.db.execute(f'PRAGMA table_info("{table}")')}
                                    if table in self.tables else set())
        return self._columns[table]

    def select(self, alias: str, table: str, names: tuple[str, ...],
               strings: tuple[str, ...] = ()) -> tuple[str, str]:
        """(fields, joins): ``alias."col"`` for each column the table has, NULL for each it lacks;
        the ``strings`` columns resolved through ``STRING_IDS`` by SQLite itself (a large
        database's table of strings grows with it, so it is never loaded; an id it lacks stays a
        number)."""
        expressions, joins = self.expressions(alias, table, names, strings)
        return ", ".join(expressions[n] for n in names), joins

    def expressions(self, alias: str, table: str, names: tuple[str, ...],
                    strings: tuple[str, ...] = ()) -> tuple[dict[str, str], str]:
        """({name: SQL expression}, joins): what ``select`` selects, by name, for queries that
        compute with the columns."""
        have, lookup = self.columns(table), {"id", "value"} <= self.columns("STRING_IDS")
        expressions, joins = {}, ""
        for n in names:
            if n not in have:
                expressions[n] = "NULL"
            elif n in strings and lookup:
                expressions[n] = f'COALESCE({alias}_{n}.value, {alias}."{n}")'
                joins += f' LEFT JOIN STRING_IDS {alias}_{n} ON {alias}_{n}.id = {alias}."{n}"'
            else:
                expressions[n] = f'{alias}."{n}"'
        return expressions, joins

    def resolved(self, alias: str, name: str, expression: str) -> str:
        """SQL: true where a string column's ``expression`` (from ``expressions``) is TEXT or NULL:
        its id found in ``STRING_IDS`` with a text, or none given (cheaper than testing the value)."""
        if not expression.startswith("COALESCE("):
            return text(expression)
        return f"(typeof({alias}_{name}.value) = 'text' OR {alias}.\"{name}\" IS NULL)"


def text(expression: str) -> str:
    """SQL: true where the value is TEXT or NULL (a string column's id ``STRING_IDS`` resolved)."""
    return f"typeof({expression}) IN ('text', 'null')"


def enum_names(db: sqlite3.Connection, schema: Schema, table: str) -> dict[int, str]:
    """An ``ENUM_*`` table's names by id; empty where the table (or its id and name) is missing."""
    columns = schema.columns(table)
    if "id" not in columns or "name" not in columns:
        return {}
    return {row[0]: row[1] for row in db.execute(f'SELECT id, name FROM "{table}"')}


def plain_key(key: Any) -> bool:
    """Whether the rows of a counter's key (a value, or a tuple of them) may share their lanes, as
    ``_db_core.samples`` finds them: str, int or None each (1 == 1.0 == True, but their lanes differ)."""
    parts = key if type(key) is tuple else (key,)
    return all(part is None or type(part) in (str, int) for part in parts)
