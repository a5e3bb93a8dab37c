"""The command end to end: exit codes, outputs, stdout, selection, errors (design §8)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from trace_check import comparable, read_chrome_json, read_perfetto

from converters.cli import main
from fixtures.msprof_gen import write_msprof_profile


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("profile")
    write_msprof_profile(root, ranks=3, graphs=(2, 4), steps=3, seed=7)
    return root


def _ranks(decoded) -> list[int]:
    return [int(p.split()[1]) for p in decoded.processes]


def test_summary_by_default_has_step_and_overlap_lanes_of_every_rank(profile, tmp_path):
    out = tmp_path / "job.pftrace"
    assert main([str(profile), "-o", str(out)]) == 0
    decoded = read_perfetto(out.read_bytes())
    assert _ranks(decoded) == [0, 1, 2]
    groups = {s.track[0] for s in decoded.slices}
    assert groups == {"Step Trace", "Overlap Analysis"}
    lanes = {s.track[1] for s in decoded.slices if s.track[0] == "Overlap Analysis"}
    assert {"Computing", "Communication", "Free"} <= lanes


def test_rank_filter_as_written_in_the_docs(profile, tmp_path):
    out = tmp_path / "job.pftrace"
    assert main([str(profile), "--ranks", "0,2", "--kind", "summary", "-o", str(out)]) == 0
    assert _ranks(read_perfetto(out.read_bytes())) == [0, 2]


def test_both_writers_hold_the_same_slices(profile, tmp_path):
    proto, js = tmp_path / "a.pftrace", tmp_path / "a.json.gz"
    assert main([str(profile), "--kind", "detail", "-o", str(proto)]) == 0
    assert main([str(profile), "--kind", "detail", "-o", str(js)]) == 0
    a, b = read_perfetto(proto.read_bytes()), read_chrome_json(js.read_bytes())
    assert comparable(a) == comparable(b)
    assert len(a.slices) == len(b.slices) > 100


def test_graph_filter_keeps_only_that_graph(profile, tmp_path):
    out = tmp_path / "g.json"
    assert main([str(profile), "--graphs", "4", "-o", str(out)]) == 0
    lanes = {s.track for s in read_chrome_json(out.read_bytes()).slices if s.track[0] == "Step Trace"}
    assert lanes == {("Step Trace", "Graph 4")}


def test_merged_graphs_share_one_step_lane(profile, tmp_path):
    out = tmp_path / "m.json"
    assert main([str(profile), "--merge-graphs", "-o", str(out)]) == 0
    steps = [s for s in read_chrome_json(out.read_bytes()).slices if s.track[0] == "Step Trace"]
    assert {s.track[1] for s in steps} == {"Steps"}
    assert {"Graph 2 Step 1", "Graph 4 Step 3"} <= {s.name for s in steps}


def test_step_filter(profile, tmp_path):
    out = tmp_path / "s.json"
    assert main([str(profile), "--steps", "2", "--graphs", "2", "-o", str(out)]) == 0
    names = {s.name for s in read_chrome_json(out.read_bytes()).slices if s.track[0] == "Step Trace"}
    assert "Step 2" in names and not {"Step 1", "Step 3"} & names


def test_dash_o_dash_writes_the_trace_to_a_pipe(profile):
    done = subprocess.run(
        [sys.executable, "-m", "converters", str(profile), "--ranks", "1", "-o", "-"],
        capture_output=True, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert _ranks(read_perfetto(done.stdout)) == [1]
    assert b"wrote stdout" in done.stderr


def test_default_output_goes_beside_the_input(profile, tmp_path):
    import shutil

    copy = tmp_path / "myjob"
    shutil.copytree(profile, copy)
    assert main([str(copy)]) == 0
    assert (tmp_path / "myjob.pftrace").stat().st_size > 0


def test_unknown_rank_is_a_usage_error_listing_ranks_present(profile, capsys):
    assert main([str(profile), "--ranks", "5", "-o", "-"]) == 2
    err = capsys.readouterr().err
    assert "unknown rank 5" in err and "ranks present: 0-2" in err


def test_missing_directory_is_a_usage_error(tmp_path, capsys):
    assert main([str(tmp_path / "nope")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_directory_with_nothing_recognisable_says_what_was_looked_for(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hello")
    assert main([str(tmp_path), "-o", str(tmp_path / "x.pftrace")]) == 2
    err = capsys.readouterr().err
    assert "no profiler output found" in err and "info.json" in err
    assert not (tmp_path / "x.pftrace").exists()


def test_bad_option_values_exit_2(profile, capsys):
    assert main([str(profile), "--ranks", "3-1"]) == 2
    assert main([str(profile), "--kind", "everything"]) == 2
    assert main([str(profile), "-o", "trace.txt"]) == 2
    assert "cannot tell the output format" in capsys.readouterr().err


def test_help_teaches_with_examples(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "--ranks 0,1 --kind summary -o job.pftrace" in out and "ui.perfetto.dev" in out


def test_broken_input_exits_1_names_the_file_and_writes_nothing(profile, tmp_path, capsys):
    import shutil

    copy = tmp_path / "broken"
    shutil.copytree(profile, copy)
    victim = sorted(copy.glob("PROF_*/device_*/timeline/msprof_*.json"))[0]
    victim.write_bytes(b"\x00garbage" + victim.read_bytes())
    out = tmp_path / "out.pftrace"
    assert main([str(copy), "-o", str(out)]) == 1
    assert victim.name in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.glob(".out.pftrace*"))


def test_truncated_file_converts_up_to_its_last_whole_event_with_a_warning(profile, tmp_path, capsys):
    import shutil

    copy = tmp_path / "crashed"
    shutil.copytree(profile, copy)
    victim = sorted(copy.glob("PROF_*/device_*/timeline/msprof_*.json"))[-1]
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) * 2 // 3])
    out = tmp_path / "out.pftrace"
    assert main([str(copy), "-o", str(out), "--kind", "detail"]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and victim.name in err and "cut off at byte" in err
    read_perfetto(out.read_bytes())


def test_inputs_are_never_touched(profile, tmp_path):
    before = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in profile.rglob("*")}
    assert main([str(profile), "--kind", "detail", "-o", str(tmp_path / "x.pftrace")]) == 0
    assert {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in profile.rglob("*")} == before


def test_summary_is_exactly_the_summary_part_of_detail(profile, tmp_path):
    summary, detail = tmp_path / "s.pftrace", tmp_path / "d.pftrace"
    assert main([str(profile), "--kind", "summary", "-o", str(summary)]) == 0
    assert main([str(profile), "--kind", "detail", "-o", str(detail)]) == 0
    def rows(path, groups=("Step Trace", "Overlap Analysis")):
        return {(s.process, s.track, s.name, s.start_ns, s.dur_ns)
                for s in read_perfetto(path.read_bytes()).slices if s.track[0] in groups}

    assert rows(summary) == rows(detail)
    assert len(rows(summary)) == len(read_perfetto(summary.read_bytes()).slices)


def test_strict_turns_a_recovered_file_into_an_error_and_writes_nothing(profile, tmp_path, capsys):
    import shutil

    copy = tmp_path / "crashed"
    shutil.copytree(profile, copy)
    victim = sorted(copy.glob("PROF_*/device_*/timeline/msprof_*.json"))[-1]
    victim.write_bytes(victim.read_bytes()[:-200])
    out = tmp_path / "strict.pftrace"
    assert main([str(copy), "--strict", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "--strict" in err and "cut off at byte" in err and "nothing written" in err
    assert not out.exists() and not list(tmp_path.glob(".strict.pftrace*"))
    assert main([str(profile), "--strict", "-o", str(out)]) == 0  # a clean input passes


def test_quiet_prints_nothing_but_errors(profile, tmp_path, capsys):
    assert main([str(profile), "-q", "-o", str(tmp_path / "q.pftrace")]) == 0
    assert capsys.readouterr().err == ""
    assert main([str(tmp_path / "missing"), "-q"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_progress_reports_each_rank_and_reaches_the_total(profile, tmp_path):
    from converters import convert

    calls: list[tuple[int, int, int]] = []
    convert(profile, tmp_path / "p.pftrace", progress=lambda *call: calls.append(call))
    assert sorted(rank for _, _, rank in calls) == [0, 1, 2]
    assert calls[-1][0] == calls[-1][1] > 0
    assert [done for done, _, _ in calls] == sorted(done for done, _, _ in calls)


def test_progress_shows_on_a_terminal_and_not_in_a_pipe(profile, tmp_path):
    import os
    import pty

    out = tmp_path / "tty.pftrace"
    argv = [sys.executable, "-m", "converters", str(profile), "-o", str(out)]
    master, slave = pty.openpty()
    done = subprocess.run(argv, stderr=slave, stdout=subprocess.DEVNULL, check=False)
    os.close(slave)
    shown = b""
    while True:
        try:
            block = os.read(master, 1 << 16)
        except OSError:
            break
        if not block:
            break
        shown += block
    os.close(master)
    assert done.returncode == 0 and b"read " in shown and b"rank " in shown
    piped = subprocess.run(argv, capture_output=True, check=False)
    assert b"read " not in piped.stderr and b"wrote" in piped.stderr


def test_open_serves_the_trace_once_to_the_perfetto_ui(profile, tmp_path):
    import time
    import urllib.request

    out = tmp_path / "served.pftrace"
    env = {**os.environ, "BROWSER": "true"}  # no browser here: the URL and the ssh hint are printed
    child = subprocess.Popen([sys.executable, "-m", "converters", str(profile), "-o", str(out), "--open"],
                             stderr=subprocess.PIPE, env=env)
    body = None
    for _ in range(100):
        try:
            request = urllib.request.Request(f"http://127.0.0.1:9001/{out.name}",
                                             headers={"Origin": "https://ui.perfetto.dev"})
            with urllib.request.urlopen(request, timeout=2) as answer:
                assert answer.headers["Access-Control-Allow-Origin"] == "https://ui.perfetto.dev"
                body = answer.read()
            break
        except OSError:
            time.sleep(0.1)
    assert child.wait(timeout=20) == 0
    assert body == out.read_bytes()
    assert b"ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/served.pftrace" in child.stderr.read()


def test_open_needs_a_file(profile, capsys):
    assert main([str(profile), "-o", "-", "--open"]) == 2
    assert "--open serves a file" in capsys.readouterr().err
