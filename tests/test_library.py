"""``import trace2perfetto``: the library under its own name (docs/library.md), installed by
``pip install -e .`` (``make run``), from any directory, with the same objects as ``converters``."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest

import trace2perfetto


def _python(code: str, cwd) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter of this venv, from ``cwd``, finding the package only as
    installed (no PYTHONPATH, not the repository's folder)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_library_imports_by_its_name_from_any_directory(tmp_path):
    done = _python("import trace2perfetto as t; t.convert; t.ops_report; t.Profile; t.frame; "
                   "import converters.profile; assert t.Profile is converters.profile.Profile; "
                   "print(t.__file__)", tmp_path)
    assert done.returncode == 0, done.stderr
    assert not done.stdout.startswith(str(tmp_path))


def test_importing_it_loads_nothing_before_a_name_is_used(tmp_path):
    """Names load on first use: a script that only imports it pays for no reader or writer."""
    done = _python("import sys, trace2perfetto; "
                   "print(sorted(m for m in sys.modules if m.startswith('converters')))", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("name", trace2perfetto.__all__)
def test_every_public_name_is_the_code_s_own_object_and_says_what_it_does(name):
    """One object under both names (no class twice: isinstance holds whichever name made it), and
    a docstring for each."""
    value = getattr(trace2perfetto, name)
    module, attribute = trace2perfetto._HOMES[name]
    assert value is getattr(sys.modules[module], attribute)
    assert (inspect.getdoc(value) or "").strip(), f"{name} has no docstring"


def test_every_command_has_its_report_function():
    """Each analysis command's computation is a ``*_report`` of the library (``report``: its data)."""
    from converters.cli import COMMANDS

    reports = {name for name in trace2perfetto.__all__ if name.endswith("_report")}
    analyses = set(COMMANDS) - {"convert", "report"}
    assert {f"{name}_report" for name in analyses} <= reports
    assert {"convert", "report_data"} <= set(trace2perfetto.__all__)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nonesuch'"):
        trace2perfetto.nonesuch  # noqa: B018
