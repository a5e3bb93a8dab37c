"""A trace_view.json of real size in the order that broke streaming readers.

Real files are hundreds of MB, and torch_npu writes the process and thread names after the
events they name. A reader that names lanes as it streams loses every event (the steps among
them) that comes before the names; this file puts all names at the very end.
"""

from __future__ import annotations

import csv

import pytest

from converters import overlap_report
from converters.info import profile_info
from fixtures.ascend_pt_gen import write_ascend_pt_profile

COLUMNS = {"Computing": "computing_ns", "Communication(Not Overlapped)": "not_overlapped_ns",
           "Overlapped": "overlapped_ns", "Communication": "communication_ns", "Free": "free_ns",
           "Stage": "stage_ns", "Bubble": "bubble_ns", "Preparing": "preparing_ns",
           "Communication(Not Overlapped and Exclude Receive)": "not_overlapped_excluding_receive_ns"}


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    root = tmp_path_factory.mktemp("large")
    generated = write_ascend_pt_profile(root, ranks=1, steps=14, tasks_per_step=6000, metadata_last=True,
                                        with_kernel_details=False, seed=11)
    trace = next(generated.ranks[0].path.glob("ASCEND_PROFILER_OUTPUT/trace_view.json"))
    assert trace.stat().st_size > 220_000_000
    return generated


def test_every_step_of_a_220_mb_trace_with_its_names_last_equals_the_truth(large):
    rank_dir = large.ranks[0].path
    with open(rank_dir / "ASCEND_PROFILER_OUTPUT/step_trace_time.csv", newline="") as f:
        truth = {int(row["Step"]): row for row in csv.DictReader(f)}
    rows = overlap_report(large.root)
    assert [r.step for r in rows] == large.ranks[0].steps == sorted(truth)
    for row in rows:
        for column, attribute in COLUMNS.items():
            want, got = float(truth[row.step][column]) * 1000, getattr(row, attribute)
            assert abs(got - want) <= max(0.001 * want, 1000), (row.step, column)


def test_info_counts_the_steps(large):
    (rank,) = profile_info(large.root).ranks
    assert [s.step for s in rank.steps] == large.ranks[0].steps
