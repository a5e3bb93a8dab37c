"""The quick tier's lists (tests/conftest.py) name tests that exist: a renamed file or test would
otherwise fall silently into the quick tier, or out of its example counts."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import CHECK_EXAMPLES, CHECK_SAMPLES, SLOW_FILES, SLOW_TESTS

TESTS = Path(__file__).parent


def _defined() -> set[str]:
    return {name for path in TESTS.rglob("test_*.py")
            for name in re.findall(r"^def (test_\w+)\(", path.read_text(), re.M)}


def test_every_slow_file_and_test_exists():
    files = {path.name for path in TESTS.rglob("test_*.py")}
    assert not set(SLOW_FILES) - files, "listed slow in tests/conftest.py, but no such file"
    assert not set(SLOW_TESTS) - _defined(), "listed slow in tests/conftest.py, but no such test"


def test_every_test_given_its_own_example_count_exists():
    assert not set(CHECK_EXAMPLES) - _defined(), "in CHECK_EXAMPLES (tests/conftest.py), but no such test"


def test_the_quick_tier_reads_samples_the_tests_read():
    read = {name.split("/")[0] for path in TESTS.rglob("*.py")
            for name in re.findall(r'real_data\("([^"]+)"', path.read_text())}
    assert CHECK_SAMPLES <= read | {"msprof-2rank"}  # the msprof_2rank fixture reads that one
