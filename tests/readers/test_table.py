"""A format is one module and one row of the table: every module that declares a reader is in
``readers.FORMATS`` under its own name (else discovery would never ask it), every row's module
declares one, and what discovery says it looked for names every format."""

from __future__ import annotations

import importlib
import pkgutil

import converters.readers as readers
from converters.readers import FORMATS, looked_for, read_alone, reader
from converters.readers.base import Reader


def _declaring() -> set[str]:
    """The modules beside the table that declare a ``READER``."""
    found = set()
    for module in pkgutil.iter_modules(readers.__path__):
        if module.ispkg or module.name.startswith("_") or module.name.endswith("_pb2"):
            continue
        if isinstance(getattr(importlib.import_module(f"converters.readers.{module.name}"), "READER", None),
                      Reader):
            found.add(module.name)
    return found


def test_every_declared_reader_has_one_row_and_every_row_a_reader():
    assert _declaring() == set(FORMATS)
    for name in FORMATS:
        assert reader(name).name == name  # the name its ranks carry is the row's


def test_what_was_looked_for_names_every_format():
    said = looked_for()
    assert all(f"{name}: {reader(name).folder}" in said for name in FORMATS)
    assert all(lone in read_alone() for name in FORMATS for lone in reader(name).lone_files)
