"""The msprof reader on generated profiles of both layouts, and on the real sample."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from conftest import real_data

from converters import Diagnostics, InputError, Layer, Options, discover, read_profile
from fixtures.msprof_gen import write_msprof_profile


def _records(root: Path, **options):
    return list(read_profile(discover(root), Options(kind="detail", **options), Diagnostics()))


def _keys(root: Path) -> Counter:
    """Every slice with the step it was given."""
    return Counter((b.graph, b.step_id, s.rank, s.layer, s.lane, s.name, s.start_ns, s.dur_ns)
                   for b in _records(root) for s in b.slices)


@pytest.mark.parametrize("name,fmt", [("msprof-2rank", "msprof"), ("ascend-pt-2rank", "ascend_pt")])
def test_detect_real_samples_with_no_hints(name, fmt):
    ranks = discover(real_data(name))
    assert [r.format for r in ranks] == [fmt, fmt] and [r.rank for r in ranks] == [0, 1]


def test_cann8_single_file_reads_the_same_records_as_per_iteration_files(tmp_path):
    timeline = write_msprof_profile(tmp_path / "a", ranks=2, graphs=(2,), steps=3, seed=3)
    cann8 = write_msprof_profile(tmp_path / "b", ranks=2, graphs=(2,), steps=3, seed=3, layout="cann8")
    assert timeline.ranks[0].device_tasks == cann8.ranks[0].device_tasks
    # Host events carry no iteration; in one merged file they go to the step they start in,
    # which for a launch just before a step is the previous one. Device records must agree.
    a = Counter({k: n for k, n in _keys(tmp_path / "a").items() if k[3] is not Layer.HOST})
    b = Counter({k: n for k, n in _keys(tmp_path / "b").items() if k[3] is not Layer.HOST})
    assert a == b


def test_sliced_cann8_files_read_as_one(tmp_path):
    write_msprof_profile(tmp_path / "one", ranks=1, steps=4, seed=5, layout="cann8")
    write_msprof_profile(tmp_path / "many", ranks=1, steps=4, seed=5, layout="cann8", slices=3)
    a, b = _keys(tmp_path / "one"), _keys(tmp_path / "many")
    assert a == b and len(a) > 100


def test_every_task_is_read_once_with_its_step(tmp_path):
    generated = write_msprof_profile(tmp_path, ranks=2, graphs=(2, 4), steps=3, seed=1)
    batches = _records(tmp_path)
    for g in generated.ranks:
        mine = [s for b in batches if b.rank == g.rank for s in b.slices]
        assert sum(s.layer is Layer.STREAM for s in mine) == g.device_tasks
        assert sum(s.layer is Layer.COMM_TASK for s in mine) == g.hccl_tasks
        assert sum(s.layer is Layer.COMM_OP for s in mine) == g.hccl_ops
        assert Counter((b.graph, b.step_id) for b in batches if b.rank == g.rank) == {
            (graph, step): 1 for graph in g.graphs for step in range(1, g.steps + 1)
        }
    for b in batches:  # every step trace slice of a step lies inside it
        assert all(b.step.start_ns <= s.start_ns <= s.end_ns <= b.step.end_ns
                   for s in b.slices if s.layer is Layer.STEP)


def test_clock_conversion_puts_ranks_on_one_wall_clock(tmp_path):
    """The generator gives each rank its own monotonic clock; steps must line up in epoch time."""
    write_msprof_profile(tmp_path, ranks=2, steps=3, seed=2)
    starts: dict = {}
    for b in _records(tmp_path):
        starts.setdefault(b.step_id, []).append(b.step.start_ns)
    for step, values in starts.items():
        assert max(values) - min(values) < 5_000_000, f"step {step} starts {values} apart"


def test_rank_comes_from_info_json_not_the_directory_name(tmp_path):
    generated = write_msprof_profile(tmp_path, ranks=2, steps=1, seed=4)
    for g in generated.ranks:
        info = next(r for r in discover(tmp_path) if r.rank == g.rank)
        assert info.device == g.device and info.path.name == f"device_{g.device}"


def test_two_directories_claiming_one_rank_is_an_error_naming_both(tmp_path):
    generated = write_msprof_profile(tmp_path / "job", ranks=1, steps=1, seed=4)
    shutil.copytree(generated.ranks[0].prof_dir, tmp_path / "job" / (generated.ranks[0].prof_dir.name + "X"))
    with pytest.raises(InputError, match="rank 0 is also claimed by"):
        discover(tmp_path / "job")


def test_missing_rank_id_means_a_single_card_run_rank_0(tmp_path):
    generated = write_msprof_profile(tmp_path, ranks=1, steps=1, seed=4)
    info_path = next(generated.ranks[0].prof_dir.glob("device_*/info.json.[0-9]"))
    info = json.loads(info_path.read_text())
    del info["rank_id"]
    info_path.write_text(json.dumps(info))
    assert [r.rank for r in discover(tmp_path)] == [0]
