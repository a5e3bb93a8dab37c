"""Two runs in one folder are two jobs, never one: ranks on wall clocks whose profiles start an hour
or more apart are a usage error naming the files on both sides (discover._one_run)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from converters import discover
from converters.cli import main
from converters.discover import ONE_JOB_NS
from converters.errors import UsageError
from fixtures.ascend_pt_gen import write_ascend_pt_profile
from fixtures.kineto_gen import write_kineto_traces
from fixtures.mindspore1x_gen import write_mindspore1x_profile

DAY_NS = 86_400 * 10**9
_BASE = re.compile(rb'"baseTimeNanoseconds": (\d+)')


@pytest.fixture(scope="module")
def gpu_job(tmp_path_factory) -> list[Path]:
    """A generated 4-rank Kineto job: its traces by rank."""
    return write_kineto_traces(tmp_path_factory.mktemp("gpu"), ranks=4, steps=1, seed=3).paths


def _moved(trace: Path, folder: Path, shift_ns: int) -> Path:
    """A copy of ``trace`` in ``folder`` recorded ``shift_ns`` later (its baseTimeNanoseconds moved:
    every ts is relative to it), as the same job run again then would write it."""
    data = trace.read_bytes()
    base = int(_BASE.search(data)[1])
    copy = folder / trace.name
    copy.write_bytes(_BASE.sub(b'"baseTimeNanoseconds": %d' % (base + shift_ns), data, count=1))
    return copy


def test_two_kineto_traces_days_apart_are_an_error_naming_both(gpu_job, tmp_path, capsys):
    """The issue's case: ranks 3 and 1 of two runs 8.5 days apart; nothing is written."""
    first = _moved(gpu_job[3], tmp_path, 0)
    later = _moved(gpu_job[1], tmp_path, int(8.5 * DAY_NS))
    out = tmp_path / "job.pftrace"
    assert main([str(tmp_path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(first) in err and str(later) in err and "8.5 days" in err and "two runs" in err
    assert not out.exists()
    for command in (["comm"], ["info"], ["overlap"], ["report", "-o", str(tmp_path / "r.html")]):
        assert main([*command[:1], str(tmp_path), *command[1:]]) == 2


def test_the_ranks_of_one_run_are_one_job(gpu_job, tmp_path):
    """The check above can fail: the same two traces as recorded are one job."""
    for trace in (gpu_job[3], gpu_job[1]):
        _moved(trace, tmp_path, 0)
    assert [r.rank for r in discover(tmp_path)] == [1, 3]


@pytest.mark.parametrize("shift_ns, one_job", [(ONE_JOB_NS - 10**9, True), (ONE_JOB_NS + 10**9, False)])
def test_the_rule_is_an_hour(gpu_job, tmp_path, shift_ns, one_job):
    _moved(gpu_job[0], tmp_path, 0)
    _moved(gpu_job[2], tmp_path, shift_ns)
    if one_job:
        assert len(discover(tmp_path)) == 2
    else:
        with pytest.raises(UsageError, match="two runs"):
            discover(tmp_path)


def test_a_mixed_folder_of_two_runs_is_an_error_naming_every_side(gpu_job, tmp_path, capsys):
    """Ascend ranks 0-1 and a GPU rank 2 of a run recorded months apart (the generators' dates)."""
    ascend = write_ascend_pt_profile(tmp_path / "npu", ranks=2, steps=1, seed=1)
    gpu = _moved(gpu_job[2], tmp_path, 0)
    assert main(["comm", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "ranks 0-1" in err and "rank 2" in err and str(gpu) in err
    assert str(ascend.ranks[0].path) in err or str(ascend.ranks[1].path) in err


def test_a_mixed_folder_of_one_run_is_one_job(gpu_job, tmp_path):
    """The same mixed folder with the GPU trace recorded when the Ascend ranks were: one job."""
    ascend = write_ascend_pt_profile(tmp_path / "npu", ranks=2, steps=1, seed=1)
    starts = [r.start_ns for r in discover(tmp_path / "npu")]
    gpu_start = discover(gpu_job[2]).pop().start_ns
    _moved(gpu_job[2], tmp_path, max(starts) + 10**9 - gpu_start)
    found = [(r.rank, r.format, r.path) for r in discover(tmp_path)]
    assert found == [(0, "ascend_pt", ascend.ranks[0].path), (1, "ascend_pt", ascend.ranks[1].path),
                     (2, "kineto", tmp_path / gpu_job[2].name)]


def test_ranks_on_their_own_clocks_are_not_judged(gpu_job, tmp_path):
    """MindSpore 1.x ranks without host_start.log count from their device's boot: no start to
    compare, so a folder of them beside a wall-clock rank is not refused (a note says they are not
    aligned)."""
    write_mindspore1x_profile(tmp_path / "legacy", ranks=2, steps=1, host_start=False, seed=1)
    _moved(gpu_job[2], tmp_path, 0)
    infos = discover(tmp_path)
    assert sorted((r.rank, r.wall_clock) for r in infos) == [(0, False), (1, False), (2, True)]
