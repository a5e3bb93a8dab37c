"""A trace_view.json of real size in the order that broke streaming readers.

Real files are hundreds of MB, and torch_npu writes the process and thread names after the
events they name (the generator puts them at the very end of real-sized files). A reader that
names lanes as it streams loses every event before the names, the steps among them: the old
reader printed one row without a step. This is the one test here of that size: it runs in
``make test`` and takes well under a minute on 2 cores (the same orders are tested on small files
read in small batches in tests/readers/test_ascend_pt_generated.py and test_chrome_trace.py).
"""

from __future__ import annotations

import csv
import io
import shutil

import pytest

from converters.cli import main
from fixtures.ascend_pt_gen import write_ascend_pt_profile

COLUMNS = ("Computing", "Communication(Not Overlapped)", "Overlapped", "Communication", "Free", "Stage",
           "Bubble", "Communication(Not Overlapped and Exclude Receive)", "Preparing")


@pytest.fixture
def large(tmp_path):
    """The 250 MB profile, deleted afterwards: pytest keeps its last runs' folders."""
    generated = write_ascend_pt_profile(tmp_path, ranks=1, steps=16, tasks_per_step=6000,
                                        with_kernel_details=False, seed=11)  # names last: real size
    yield generated
    shutil.rmtree(generated.ranks[0].path)


def test_every_step_of_a_250_mb_trace_with_its_names_last_equals_the_truth(large, tmp_path, capsys):
    (rank,) = large.ranks
    output = rank.path / "ASCEND_PROFILER_OUTPUT"
    trace = output / "trace_view.json"
    assert trace.stat().st_size > 250_000_000
    assert trace.read_bytes()[-300:].count(b'"ph":"M"') > 3  # the names are at the end
    with open(output / "step_trace_time.csv", newline="") as f:
        truth = {row["Step"]: row for row in csv.DictReader(f)}
    assert main(["overlap", str(tmp_path), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [row["Step"] for row in rows] == [str(step) for step in rank.steps] == list(truth)
    for row in rows:
        for column in COLUMNS:
            want, got = float(truth[row["Step"]][column]), float(row[column])
            assert abs(got - want) <= max(0.001 * want, 1), (row["Step"], column)
