"""Shared fixtures: the real samples (through TRACE2PERFETTO_REALDATA) and generated profiles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def real_data(name: str) -> Path:
    """A folder of ../shared/data/real, or skip the test with the reason."""
    root = os.environ.get("TRACE2PERFETTO_REALDATA")
    if not root:
        pytest.skip("TRACE2PERFETTO_REALDATA is not set (point it at shared/data/real)")
    path = Path(root) / name
    if not path.is_dir():
        pytest.skip(f"{path} does not exist")
    return path


@pytest.fixture
def msprof_2rank() -> Path:
    return real_data("msprof-2rank")


@pytest.fixture
def out_dir(tmp_path_factory) -> Path:
    """A folder for a test's outputs apart from its profile: an output inside an input folder is
    refused (it would be read as part of the profile next time)."""
    return tmp_path_factory.mktemp("out")
