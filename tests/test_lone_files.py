"""One file passed alone, as these files travel (attached to an issue, copied off a cluster)."""

from __future__ import annotations

import shutil

from trace_check import read_perfetto

from converters import discover
from converters.cli import main
from fixtures.msprof_gen import write_msprof_profile


def test_an_msprof_json_alone_or_in_its_layout_converts_as_one_rank(tmp_path, capsys):
    write_msprof_profile(tmp_path / "job", ranks=1, steps=3, tasks_per_step=20, layout="cann8", seed=2)
    (inside,) = sorted((tmp_path / "job").rglob("mindstudio_profiler_output/msprof_*.json"))
    (in_layout,) = discover(inside)
    assert in_layout.wall_clock and in_layout.source_paths == (inside,)  # start_info found beside it
    alone = tmp_path / "mail" / inside.name
    alone.parent.mkdir()
    shutil.copy(inside, alone)
    (rank,) = discover(alone)
    assert (rank.rank, rank.wall_clock) == (0, False)
    slices = {}
    for name, source in (("inside", inside), ("alone", alone)):
        out = tmp_path / f"{name}.pftrace"
        assert main([str(source), "--kind", "detail", "-o", str(out)]) == 0
        slices[name] = read_perfetto(out.read_bytes()).slices
    assert "not aligned to wall time" in capsys.readouterr().err
    assert len(slices["alone"]) == len(slices["inside"]) > 20  # the same records, on its own clock


def test_a_file_no_reader_knows_is_a_usage_error(tmp_path, capsys):
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    assert main([str(other), "-o", str(tmp_path / "x.pftrace")]) == 2
    assert "not a file this tool reads alone" in capsys.readouterr().err
