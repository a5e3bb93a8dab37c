"""The command end to end: exit codes, outputs, stdout, selection, errors (docs/design.md §8)."""

from __future__ import annotations

import json
import os
import re
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


@pytest.mark.parametrize("command", [["critical"], ["report", "--format", "json", "-o", "-"]])
def test_analyses_show_their_reading_on_a_terminal_and_clear_it_before_their_output(profile, command):
    import pty

    master, slave = pty.openpty()
    argv = [sys.executable, "-m", "converters", command[0], str(profile), *command[1:]]
    child = subprocess.Popen(argv, stderr=slave, stdout=slave)  # both on the terminal, read as written
    os.close(slave)
    shown = b""
    while True:
        try:
            block = os.read(master, 1 << 16)
        except OSError:  # the child closed the terminal
            break
        if not block:
            break
        shown += block
    os.close(master)
    assert child.wait() == 0 and b"trace2perfetto: read 0 KiB of" in shown and b"reading" in shown
    after = shown.rsplit(b"\r\x1b[K", 1)[-1]  # after the line's last clearing: the command's own output
    assert b"trace2perfetto: read " not in after and after.strip()
    quiet = subprocess.run([*argv, "-q"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, check=False)
    assert quiet.returncode == 0 and quiet.stderr == b""


def _served(argv: list[str], name: str) -> tuple[bytes | None, bytes]:
    """(what a real HTTP client fetches of ``name`` while ``trace2perfetto argv`` serves it, its
    stderr)."""
    import time
    import urllib.request

    env = {**os.environ, "BROWSER": "true"}  # no browser here: the URL and the ssh hint are printed
    child = subprocess.Popen([sys.executable, "-m", "converters", *argv], stderr=subprocess.PIPE, env=env)
    body = None
    try:
        for _ in range(100):
            try:
                request = urllib.request.Request(f"http://127.0.0.1:9001/{name}",
                                                 headers={"Origin": "https://ui.perfetto.dev"})
                with urllib.request.urlopen(request, timeout=2) as answer:
                    assert answer.headers["Access-Control-Allow-Origin"] == "https://ui.perfetto.dev"
                    body = answer.read()
                break
            except OSError:
                time.sleep(0.1)
        assert child.wait(timeout=20) == 0
    finally:
        child.kill()  # a server left waiting (nothing fetched) would hold the port for the next test
    return body, child.stderr.read()


def test_open_serves_the_trace_once_to_the_perfetto_ui(profile, tmp_path):
    """A named output is served as named: a .pftrace stays one (never silently changed)."""
    out = tmp_path / "served.pftrace"
    body, err = _served([str(profile), "-o", str(out), "--open"], out.name)
    assert body == out.read_bytes() and body[:1] != b"{"
    assert b"ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/served.pftrace" in err
    assert b"--open: writing" not in err


def test_open_without_an_output_serves_the_json_the_ui_loads_faster_and_says_so(tmp_path):
    """No output named: PROFILER_DIR.json beside the input (our JSON loads faster in the UI than
    our .pftrace, BENCHMARKS.md), said in one line with why."""
    profile = tmp_path / "job"
    write_msprof_profile(profile, ranks=2, graphs=(2,), steps=2, seed=7)
    body, err = _served([str(profile), "--open"], "job.json")
    out = tmp_path / "job.json"
    assert body == out.read_bytes() and json.loads(body)[0]["ph"] == "M"  # a Chrome JSON array
    assert not (tmp_path / "job.pftrace").exists()
    (line,) = [line for line in err.decode().splitlines() if "--open: writing" in line]
    assert str(out) in line and "(JSON, not .pftrace)" in line and "loads our .json" in line
    assert b"ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/job.json" in err


def test_open_needs_a_file(profile, capsys):
    assert main([str(profile), "-o", "-", "--open"]) == 2
    assert "--open serves a file" in capsys.readouterr().err


# -- never over an input (issue 23, item 1) --------------------------------------------------------

@pytest.fixture(scope="module")
def lone_trace(tmp_path_factory) -> Path:
    """A torch_npu trace_view.json, as such files travel alone (attached to an issue)."""
    from fixtures.ascend_pt_gen import write_ascend_pt_profile

    root = tmp_path_factory.mktemp("ascend_pt")
    write_ascend_pt_profile(root, ranks=1, steps=2, seed=3)
    return next(root.glob("*/ASCEND_PROFILER_OUTPUT/trace_view.json"))


def _copy(source: Path, folder: Path) -> Path:
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(source, folder / source.name))


@pytest.mark.parametrize("command", [[], ["report"]])
def test_an_output_named_as_the_input_is_refused_and_the_input_kept(lone_trace, tmp_path, capsys, command):
    trace = _copy(lone_trace, tmp_path / "issue")
    before = trace.read_bytes()
    (tmp_path / "link.json").symlink_to(trace)
    os.link(trace, tmp_path / "hard.json")
    for target in (trace, tmp_path / "issue" / ".." / "issue" / "trace_view.json", tmp_path / "link.json",
                   tmp_path / "hard.json"):
        assert main([*command, str(trace), "-o", str(target), "--format", "json"]) == 2, target
        err = capsys.readouterr().err
        assert f"{target}: the output would replace the input {trace}" in err and "nothing written" in err
    assert trace.read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "issue").iterdir()) == ["trace_view.json"]  # no temporary


@pytest.mark.parametrize("command", [[], ["report"]])
def test_an_output_inside_the_profile_is_refused(profile, tmp_path, capsys, command):
    before = sorted(profile.rglob("*"))
    prof = next(profile.glob("PROF_*"))
    (tmp_path / "into").symlink_to(prof, target_is_directory=True)
    for target in (profile / "job.json", prof / "device_0" / "job.json", tmp_path / "into" / "job.json"):
        assert main([*command, str(profile), "-o", str(target)]) == 2, target
        assert "the output would go inside the input folder" in capsys.readouterr().err
    assert sorted(profile.rglob("*")) == before
    assert main([*command, str(prof), "-o", str(tmp_path / "beside.json")]) == 0  # beside it: fine


# -- options (issue 23, item 11) --------------------------------------------------------------------

def test_a_format_the_output_name_contradicts_is_a_usage_error(profile, tmp_path, capsys):
    for argv in (["--format", "json", "-o", str(tmp_path / "x.pftrace")],
                 ["--format", "perfetto", "-o", str(tmp_path / "x.json.gz")],
                 ["report", "--format", "json", "-o", str(tmp_path / "x.html")],
                 ["report", "--format", "html", "-o", str(tmp_path / "x.json")]):
        command, rest = (argv[:1], argv[1:]) if argv[0] == "report" else ([], argv)
        assert main([*command, str(profile), *rest]) == 2, argv
        assert "contradicts the output's name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    assert main([str(profile), "--format", "json", "-o", str(tmp_path / "x.trace")]) == 0  # a name saying
    # no format takes the one asked for


@pytest.mark.parametrize("command", [[], ["info"], ["overlap"], ["comm"], ["comm", "--matrix"], ["report"]])
def test_steps_absent_from_the_profile_are_a_usage_error_listing_those_present(profile, tmp_path, capsys,
                                                                               command):
    out = ["-o", str(tmp_path / "out.json")] if command in ([], ["report"]) else []
    assert main([*command, str(profile), "--steps", "99", *out]) == 2
    assert "unknown step 99; steps present: 1-3" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    assert main([*command, str(profile), "--steps", "2,99", *out]) == 0  # some present: said, not fatal
    assert "step 99 in no kept rank; steps present: 1-3" in capsys.readouterr().err


def test_strict_fails_on_arrows_left_out(tmp_path, capsys):
    from fixtures.ascend_db_gen import write_ascend_db

    folder = tmp_path / "rank0_ascend_pt"  # the generator's first launch is skewed after its task
    write_ascend_db(folder / "ASCEND_PROFILER_OUTPUT", steps=2, tasks_per_step=20, planes=2, seed=3)
    (folder / "profiler_info_0.json").write_text('{"rank_id": 0}')
    out = tmp_path / "x.pftrace"
    assert main([str(folder), "--kind", "detail", "-o", str(out)]) == 0
    assert "arrows whose end begins before their start" in capsys.readouterr().err
    assert main([str(folder), "--kind", "detail", "--strict", "-o", str(out.with_suffix(".json"))]) == 1
    assert "--strict" in capsys.readouterr().err and not out.with_suffix(".json").exists()


def test_skip_unreadable_with_no_readable_rank_is_an_error(profile, tmp_path, capsys):
    import shutil

    copy = tmp_path / "broken"
    shutil.copytree(profile, copy)
    for victim in copy.glob("PROF_*/device_*/timeline/msprof_*.json"):
        victim.write_bytes(b"\x00garbage" + victim.read_bytes())
    out = tmp_path / "out.pftrace"
    for command in ([], ["report"]):
        assert main([*command, str(copy), "--skip-unreadable", "-o", str(out)]) == 1
        assert "no rank could be read" in capsys.readouterr().err and not out.exists()
    for command in (["info"], ["overlap"], ["comm"]):
        assert main([*command, str(copy), "--skip-unreadable"]) == 1
        assert "no rank could be read" in capsys.readouterr().err


def test_every_command_takes_the_common_options(profile, tmp_path, capsys):
    import shutil

    copy = tmp_path / "crashed"  # a cut-off file: a warning on stderr, which -q silences
    shutil.copytree(profile, copy)
    victim = sorted(copy.glob("PROF_*/device_*/timeline/msprof_*.json"))[-1]
    victim.write_bytes(victim.read_bytes()[:-200])
    common = ["--ranks", "0,1", "--graphs", "2", "--steps", "1-3", "--skip-unreadable"]
    for command, fmt in (("info", "json"), ("overlap", "csv"), ("comm", "json"), ("convert", "json"),
                         ("report", "json")):
        out = ["-o", str(tmp_path / f"{command}.json")] if command in ("convert", "report") else []
        assert main([command, str(copy), *common, "--format", fmt, *out]) == 0, command
        assert "cut off at byte" in capsys.readouterr().err, command
        assert main([command, str(copy), *common, "--format", fmt, "-q", *out]) == 0, command
        assert capsys.readouterr().err == "", command


def test_convert_is_a_subcommand_and_the_default(profile, tmp_path):
    a, b = tmp_path / "a.pftrace", tmp_path / "b.pftrace"
    assert main(["convert", str(profile), "-o", str(a)]) == 0
    assert main([str(profile), "-o", str(b)]) == 0
    assert a.read_bytes() == b.read_bytes()


def test_help_lists_every_subcommand_on_one_line_and_the_exit_codes(capsys):
    from converters.cli import COMMANDS

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("convert", "info", "overlap", "ops", "memory", "comm", "report", "pipeline"):
        assert re.search(rf"^  {name} +\S.*$", out, re.MULTILINE), name
    assert set(COMMANDS) == {"convert", "info", "overlap", "ops", "memory", "comm", "report", "diff",
                             "critical", "pipeline"}
    assert "exit codes: 0 done, 1 input broken beyond recovery" in out and "2 usage error" in out
    for name in COMMANDS:
        assert main([name, "--help"]) == 0
        assert "exit codes:" in capsys.readouterr().out


@pytest.mark.parametrize("command, target", [
    ("convert", "converters.pipeline.convert"), ("info", "converters.analyses.info.info_report"),
    ("overlap", "converters.analyses.overlap.overlap_report"),
    ("comm", "converters.analyses.comm.comm_report"), ("report", "converters.analyses.report.report_data"),
    ("critical", "converters.analyses.critical.critical_report"),
])
def test_an_internal_error_is_one_line_and_exit_1_in_every_command(profile, tmp_path, capsys, monkeypatch,
                                                                    command, target):
    def broken(*args, **kwargs):
        raise ValueError("a bug\nin two lines")

    monkeypatch.setattr(target, broken)
    out = tmp_path / "out.json"
    assert main([command, str(profile), *(["-o", str(out)] if command in ("convert", "report") else [])]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("trace2perfetto: error: internal error ValueError: a bug in two lines")
    assert "please report it" in err and not out.exists()


def test_slow_rank_totals_and_means_are_labelled_as_what_they_are(tmp_path, capsys):
    import json

    from fixtures.ascend_pt_gen import write_ascend_pt_profile

    root = tmp_path / "slow"
    write_ascend_pt_profile(root, ranks=4, steps=3, tasks_per_step=20, planes=2, slow_rank=2,
                            slow_ns=400_000, seed=3)
    assert main(["comm", str(root), "--slow-ranks", "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    for row in document["slow_ranks"]:
        mine = [s for s in document["steps"] if s["Rank"] == row["Rank"]]
        assert row["Wait Caused(ms)"] == pytest.approx(sum(s["Wait Caused(ms)"] for s in mine), abs=1e-5)
        mean = sum(s["Step Time(ms)"] for s in mine) / len(mine)
        assert row["Mean Step(ms)"] == pytest.approx(mean, abs=1e-5)
    assert document["slow_ranks"][0]["Rank"] == 2 and document["slow_ranks"][0]["Wait Caused(ms)"] > 0
    assert main(["comm", str(root), "--slow-ranks"]) == 0
    out = capsys.readouterr().out
    assert "means per step" not in out
    assert "Wait Caused, Wait Suffered and Last Arrivals: totals over the kept steps; Mean: per step" in out


def test_an_output_that_is_a_pipe_is_written_into_not_replaced(profile, tmp_path):
    """`-o /dev/null` or a named pipe: the bytes go into it; it is never replaced by a file (as
    root, renaming over /dev/null would replace the device)."""
    import stat
    import time

    fifo = tmp_path / "pipe.pftrace"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    child = subprocess.Popen([sys.executable, "-m", "converters", str(profile), "-q", "-o", str(fifo)])
    data = b""
    while True:
        try:
            block = os.read(reader, 1 << 16)
        except BlockingIOError:  # a writer, nothing to read yet
            block = None
        if block:
            data += block
        elif child.poll() is not None:
            break
        else:
            time.sleep(0.01)
    os.close(reader)
    assert child.returncode == 0
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert _ranks(read_perfetto(data)) == [0, 1, 2]


def test_a_rank_left_out_is_named_also_when_the_json_is_encoded_twice(tmp_path, out_dir, capsys):
    """Every event hours before the collection start the ranks say, so the JSON's origin is
    settled after a first encoding and the ranks are encoded once more: the rank the first pass
    left out as unreadable is still named (and so --strict still fails on it)."""
    import json

    from fixtures.ascend_pt_gen import write_ascend_pt_profile

    root = tmp_path / "job"
    write_ascend_pt_profile(root, ranks=3, steps=2, tasks_per_step=20, seed=5)
    for path in root.glob("*/profiler_info_*.json"):
        info = json.loads(path.read_bytes())
        info["end_info"]["collectionTimeEnd"] += 3 * 3600 * 10**9  # the collection start, 3 hours on
        path.write_text(json.dumps(info))
        if info["rank_id"] == 2:
            (path.parent / "ASCEND_PROFILER_OUTPUT/trace_view.json").write_bytes(b'"not a trace"')
            (path.parent / "ASCEND_PROFILER_OUTPUT/kernel_details.csv").unlink()
    out = out_dir / "job.json"
    assert main([str(root), "-o", str(out), "--skip-unreadable"]) == 0
    assert re.search(r"warning: rank 2 left out \(--skip-unreadable\)", capsys.readouterr().err)
    assert main([str(root), "-o", str(out_dir / "strict.json"), "--skip-unreadable", "--strict"]) == 1
