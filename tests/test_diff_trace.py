"""``trace2perfetto diff BASE NEW -o cmp.pftrace``: both runs in one trace. It holds every slice of
each run converted alone (detail, uncapped), loads in the trace processor with nothing repaired
(both writers), starts step k of both at one instant (from the first common step, per rank),
carries the ops' deltas and a counter of step time deltas, and follows the output rules."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_trace_processor import imported
from trace_check import DecodedTrace, read_chrome_json, read_perfetto

from converters import convert
from converters.analyses.diff import Side
from converters.cli import main
from converters.comparison import DELTA_ARG, SIGNIFICANT_ARG, STEP_DELTA, alignment, write_comparison
from converters.errors import Diagnostics
from converters.model import StepKey
from fixtures.ascend_pt_gen import write_ascend_pt_profile
from tests.conftest import real_data

READ = {"pftrace": read_perfetto, "json": read_chrome_json}


def _decoded(path: Path) -> DecodedTrace:
    return READ[path.suffix[1:]](path.read_bytes())


def _alone(path: Path, out: Path) -> int:
    convert(path, out, kind="detail", max_bytes=None)
    return len(_decoded(out).slices)


@pytest.mark.parametrize("ext", ["pftrace", "json"])
@pytest.mark.parametrize("base,new", [("ascend-pt-2rank", "ascend-pt-2rank"),
                                      ("msprof-2rank", "ascend-pt-db"),
                                      ("kineto-2rank", "ascend-pt-2rank"), ("mindspore-1x", "msprof-db")])
def test_the_comparison_holds_every_slice_of_both_runs_and_loads_whole(base, new, ext, tmp_path):
    base_path, new_path = real_data(base), real_data(new)
    expected = _alone(base_path, tmp_path / f"base.{ext}") + _alone(new_path, tmp_path / f"new.{ext}")
    out = tmp_path / f"cmp.{ext}"
    result = write_comparison(Side(base_path), Side(new_path), str(out), max_bytes=None)
    decoded = _decoded(out)
    assert len(decoded.slices) == result.slices == expected
    problems, counts = imported(out, tmp_path)
    assert problems == []
    assert counts == (len(decoded.slices) + len(decoded.instants), len(decoded.counters), decoded.flows)
    sides = {name.split(" rank ")[0] for name in decoded.processes}
    assert sides == {"BASE", "NEW"}, decoded.processes


def test_a_run_against_itself_draws_each_step_at_one_instant_with_every_delta_zero(tmp_path):
    sample = real_data("ascend-pt-2rank")
    out = tmp_path / "cmp.pftrace"
    write_comparison(Side(sample), Side(sample), str(out), max_bytes=None)
    decoded = _decoded(out)
    steps = {(s.process.split(" (")[0], s.name): s.start_ns for s in decoded.slices
             if s.track[0] == "Step Trace"}
    assert steps and all(steps[f"NEW {proc.split(' ', 1)[1]}", name] == start
                         for (proc, name), start in steps.items() if proc.startswith("BASE"))
    counters = [value for _, track, _, value in decoded.counters if track[-1] == STEP_DELTA]
    assert counters and set(counters) == {0.0}
    annotated = [s.args for s in decoded.slices if DELTA_ARG in s.args]
    assert annotated and all(a[DELTA_ARG] == 0 and a[SIGNIFICANT_ARG] is False for a in annotated)
    assert {p.split(" (")[0] for p in decoded.processes} == {"BASE rank 0", "BASE rank 1", "NEW rank 0",
                                                             "NEW rank 1"}


def test_new_is_shifted_per_rank_so_its_first_common_step_starts_with_bases(tmp_path):
    """Two runs of other seeds and first steps (50-52 against 51-53): each NEW rank's step 51 starts
    where BASE's does; the counter says each common step's length minus BASE's."""
    write_ascend_pt_profile(tmp_path / "base", ranks=2, steps=3, first_step=50, seed=1)
    write_ascend_pt_profile(tmp_path / "new", ranks=2, steps=3, first_step=51, seed=2)
    out = tmp_path / "cmp.json"
    write_comparison(Side(tmp_path / "base"), Side(tmp_path / "new"), str(out), max_bytes=None)
    decoded = _decoded(out)
    steps = {(s.process.split(" (")[0], s.name): s for s in decoded.slices if s.track[0] == "Step Trace"}
    for rank in (0, 1):
        base, new = steps[f"BASE rank {rank}", "Step 51"], steps[f"NEW rank {rank}", "Step 51"]
        assert new.start_ns == base.start_ns
        deltas = sorted((ts, value) for proc, track, ts, value in decoded.counters
                        if track[-1] == STEP_DELTA and proc.startswith(f"NEW rank {rank}"))
        expected = [(steps[f"NEW rank {rank}", step].dur_ns - steps[f"BASE rank {rank}", step].dur_ns) / 1000
                    for step in ("Step 51", "Step 52")]
        assert [value for _, value in deltas] == pytest.approx(expected, abs=1e-3)
        assert deltas[0][0] == new.start_ns


def test_alignment_from_the_first_common_step_of_the_base_rank_of_that_number_else_the_lowest():
    key = StepKey
    base = {0: {key(0, 5): (100, 200), key(0, 6): (200, 320)}, 2: {key(0, 6): (1000, 1100)}}
    new = {0: {key(0, 6): (50, 150), key(0, 7): (150, 260)}, 1: {key(0, 6): (10, 30)},
           2: {key(0, 9): (7, 8)}}
    diag = Diagnostics()
    shifts, against = alignment(base, new, diag)
    assert shifts == {0: 200 - 50, 1: 200 - 10, 2: 1000 - 7}
    assert against == {0: 0, 1: 0, 2: 2}
    assert "NEW rank 2: no step in common with BASE rank 2" in " ".join(diag.messages())


def test_cli_writes_the_comparison_and_refuses_an_output_inside_an_input(tmp_path, capsys):
    sample = tmp_path / "run"
    shutil.copytree(real_data("ascend-pt-2rank") / "rank0_ascend_pt", sample / "rank0_ascend_pt")
    out = tmp_path / "cmp.pftrace"
    assert main(["diff", str(sample), str(sample), "-o", str(out), "-q"]) == 0
    assert "Step Time" in capsys.readouterr().out  # the table as without -o
    assert len(_decoded(out).slices) == 2 * _alone(sample, tmp_path / "alone.pftrace")
    inside = sample / "cmp.pftrace"
    assert main(["diff", str(sample), str(sample), "-o", str(inside)]) == 2
    assert "inside the input folder" in capsys.readouterr().err and not inside.exists()
    assert main(["diff", str(sample), str(sample), "-o", str(tmp_path / "cmp.txt")]) == 2
    assert "cannot tell the output format" in capsys.readouterr().err
