"""The MindSpore 2.0 CPU reader on generated profiles (``fixtures.mindspore_cpu_gen``): steps, host
operators and their op types, the filing rule for steps 1 and 2 that start together, the clock."""

from __future__ import annotations

from converters import discover
from converters.analyses.ops import ops_report
from converters.errors import Diagnostics
from converters.profile import Kind, Options, read_profile
from fixtures.mindspore_cpu_gen import write_mindspore2_cpu_profile


def test_steps_ops_and_clock(tmp_path):
    made = write_mindspore2_cpu_profile(tmp_path, rank=3, steps=5, seed=2, shuffle=True)
    [info] = discover(tmp_path)
    assert (info.rank, info.format, info.wall_clock) == (3, "mindspore_cpu", False)
    batches = list(read_profile([info], Options(kind=Kind.DETAIL), Diagnostics()))
    assert [b.step_id for b in batches] == made.steps
    assert sum(len(b.slices) for b in batches) == made.records
    first, second = batches[0], batches[1]
    assert first.step.start_ns == second.step.start_ns and first.step.end_ns < second.step.end_ns
    # step 1's ops are in step 1 (the shortest step holding them), the rest of step 2's span in step 2
    assert all(s.start_ns < first.step.end_ns for s in first.slices)
    assert all(s.start_ns >= first.step.end_ns for s in second.slices if s.lane != "Steps")
    rows = ops_report(tmp_path)
    assert {r.name: r.count for r in rows} == made.op_runs and {r.core_type for r in rows} == {"CPU"}
