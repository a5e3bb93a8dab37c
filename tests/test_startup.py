"""Start-up (issue 28): a command loads only what it needs, and a small profile is read in this
process rather than through a pool of workers. The CPU time this saves is measured in
BENCHMARKS.md ("Issue 28: start-up"), not here."""

from __future__ import annotations

import fnmatch
import gc
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import real_data

import converters
from converters import executor
from converters.cli import main
from converters.discover import discover
from converters.errors import Diagnostics
from converters.profile import input_bytes
from converters.readers import FORMATS, _matcher, candidates, reader
from fixtures.ascend_db_gen import write_ascend_db
from fixtures.ascend_pt_gen import write_ascend_pt_profile
from fixtures.host_info_gen import write_host_info
from fixtures.kineto_gen import write_kineto_traces
from fixtures.mindspore1x_gen import write_mindspore1x_profile
from fixtures.msprof_gen import write_msprof_profile
from fixtures.paddle_gen import generate_profile

HEAVY = ("matplotlib", "numpy", "dask", "distributed", "google", "pandas")
# What `info` has no use for: the report and its plots, the writers, the other analyses, a pool.
NOT_FOR_INFO = ("converters.analyses.report", "converters.analyses.diff", "converters.analyses.ops",
                "converters.analyses.comm_matrix", "converters.analyses.memory", "converters.pipeline",
                "converters.budget", "converters.writers", "concurrent.futures.process", "multiprocessing")


@pytest.fixture(scope="module")
def small_profile(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ascend_pt")
    write_ascend_pt_profile(root, ranks=2, steps=3, seed=5)
    return root


def _loaded_after(code: str) -> list[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"],
                         check=True, capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    return out.stdout.split()


def test_importing_the_cli_loads_no_heavy_library():
    loaded = _loaded_after("import converters.cli")
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []


def test_info_loads_only_what_it_needs(small_profile):
    run = f"import converters.cli\nconverters.cli.main(['info', {str(small_profile)!r}, '-q'])"
    loaded = _loaded_after(run)
    assert [m for m in loaded if m.split(".")[0] in HEAVY or m.startswith(NOT_FOR_INFO)] == []


# What only the other formats need, by the real sample read: its reader alone is imported (its
# folder alone shows that reader's clue: Paddle's files are no Kineto trace), nor msgspec where the
# model decodes no args, nor pickle where nothing is spilled that marshal cannot write; and for one
# rank without collectives, no communication matching, nor the overlap report, nor csv.
_READERS = tuple(f"converters.readers.{name}" for name in FORMATS)
NOT_FOR_ONE_FORMAT = {
    "mindspore-1x": (*(r for r in _READERS if not r.endswith("mindspore1x")), "converters.readers.ascend_db",
                     "converters.readers.chrome_trace", "msgspec", "sqlite3", "pickle", "hashlib"),
    "paddle-cpu-chrome": (*(r for r in _READERS if not r.endswith("paddle")), "converters.readers.launches",
                          "converters.readers.ascend_db", "converters.readers.ascend_analysis", "sqlite3",
                          "pickle", "hashlib", "statistics", "converters.communication",
                          "converters.analyses.overlap", "csv"),
}


@pytest.mark.parametrize("sample", sorted(NOT_FOR_ONE_FORMAT))
def test_info_loads_only_the_reader_of_its_format(sample):
    run = f"import converters.cli\nconverters.cli.main(['info', {str(real_data(sample))!r}, '-q'])"
    loaded = _loaded_after(run)
    assert [m for m in loaded if m.startswith(NOT_FOR_ONE_FORMAT[sample])] == []


def test_help_loads_no_reader():
    loaded = _loaded_after("import converters.cli\ntry:\n    converters.cli.main(['--help'])\n"
                           "except SystemExit:\n    pass")
    assert [m for m in loaded if m.startswith(_READERS)] == []


def test_the_program_leaves_what_it_loaded_to_the_exit(capsys):
    """Run as the program (its own command line), the command freezes what is loaded so far, which
    the collector then leaves alone (the collections at the exit cost most). Called with arguments
    (a library, these tests), it leaves the collector alone."""
    run = "import gc, sys\nfrom converters.cli import main\nsys.argv = ['trace2perfetto', '--help']\n" \
          "main()\nprint(gc.get_freeze_count())"
    out = subprocess.run([sys.executable, "-c", run], check=True, capture_output=True, text=True,
                         cwd=Path(__file__).parent.parent)
    assert int(out.stdout.split()[-1]) > 10_000
    frozen = gc.get_freeze_count()
    assert main(["--help"]) == 0
    assert gc.get_freeze_count() == frozen


def _generated(root: Path) -> list[Path]:
    """Small profiles of every format the generators write, each in a folder of its own under ``root``."""
    made = {"ascend_pt": lambda r: write_ascend_pt_profile(r, ranks=1, steps=1),
            "ascend_ms": lambda r: write_ascend_pt_profile(r, ranks=1, steps=1, framework="ms"),
            "ascend_db": lambda r: write_ascend_db(r / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT", steps=1),
            "timeline": lambda r: write_msprof_profile(r, ranks=1, steps=1),
            "cann8": lambda r: write_msprof_profile(r, ranks=1, steps=1, layout="cann8"),
            "mindspore1x": lambda r: write_mindspore1x_profile(r, ranks=1, steps=1),
            "host_info": lambda r: write_host_info(r, steps=1),
            "kineto": lambda r: write_kineto_traces(r, ranks=1, steps=1),
            "kineto_gz": lambda r: write_kineto_traces(r, ranks=1, steps=1, gzip=True),
            "paddle": lambda r: generate_profile(r, steps=1),
            "paddle_pb": lambda r: generate_profile(r, form="protobuf", steps=1)}
    for name, write in made.items():
        write(root / name)
    return [root / name for name in made]


def test_a_clue_matches_names_as_fnmatch_does(tmp_path):
    """Discovery matches the clues' globs without compiling them: as fnmatch would, on every name
    of every generated format and real sample, and on names made to catch a piece taken twice."""
    names = {"a", "ab", "aba", "abab", "step_trace_raw__detail_time.csv", "step_trace_raw_0_detail_time.csv",
             "x.paddle_trace.json.gz", ".json", "json", "x.json.gz.json", "device_", "_ascend_pt"}
    roots = _generated(tmp_path)
    if os.environ.get("TRACE2PERFETTO_REALDATA"):
        roots.append(Path(os.environ["TRACE2PERFETTO_REALDATA"]))
    for root in roots:
        for folder, subdirs, files in os.walk(root):
            names.update([Path(folder).name, *subdirs, *files])
    globs = [g for clue in FORMATS.values() for g in (*clue.named, *clue.holds, *clue.except_held)]
    for glob in [*globs, "a*b*a", "*ab*ab*", "a**b", "[ab]*", "a?"]:
        test = _matcher((glob,))
        assert [n for n in sorted(names) if bool(test(n)) != fnmatch.fnmatchcase(n, glob)] == [], glob


def test_every_folder_a_reader_recognises_shows_its_clue(tmp_path):
    """A clue is necessary: a folder a reader recognises (or warns of) that did not show it would
    be passed over. Every folder of every real sample and generated format."""
    roots = _generated(tmp_path)
    if os.environ.get("TRACE2PERFETTO_REALDATA"):
        roots.append(Path(os.environ["TRACE2PERFETTO_REALDATA"]))
    recognised = set()
    for root in roots:
        for folder, subdirs, files in os.walk(root):
            here = Path(folder)
            shown = {found.name for found in candidates(here, subdirs + files)}
            for name in FORMATS:
                declared = reader(name)
                missing = declared.missing_data or (lambda _: None)
                if declared.sniff(here) or missing(here):
                    recognised.add(name)
                    assert name in shown, f"{here}: {name} recognises it, but it shows no {name} clue"
    assert recognised == set(FORMATS)


def test_the_package_names_load_on_first_use():
    from converters import CommReport, Format, comm_report, convert, step_overlap

    assert converters.discover is discover  # the function, not the submodule of its name
    assert callable(convert) and callable(comm_report) and callable(step_overlap)
    assert Format("json") is Format.JSON and CommReport.__name__ == "CommReport"
    assert set(converters.__all__) <= set(dir(converters))
    with pytest.raises(AttributeError):
        converters.no_such_name  # noqa: B018


def _count_pools(monkeypatch) -> list[str]:
    """Count the pools started (each takes a multiprocessing context), on a machine of 4 cores."""
    started: list[str] = []
    get_context = multiprocessing.get_context

    def counting(method=None):
        started.append(method)
        return get_context(method)

    monkeypatch.setattr(multiprocessing, "get_context", counting)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    return started


def test_a_small_profile_is_read_without_a_pool(small_profile, monkeypatch, capsys):
    started = _count_pools(monkeypatch)
    assert main(["info", str(small_profile), "--format", "json"]) == 0
    in_process = capsys.readouterr()
    assert started == []
    monkeypatch.setattr(executor, "IN_PROCESS_BELOW", 0)  # as large as any: a pool, the same output
    assert main(["info", str(small_profile), "--format", "json"]) == 0
    assert started == ["fork"]
    assert capsys.readouterr() == in_process


def test_a_compressed_file_counts_by_what_it_holds():
    infos = discover(real_data("kineto-2rank"), Diagnostics())
    for info in infos:
        stored, unpacked = input_bytes(info), input_bytes(info, unpacked=True)
        assert stored == sum(p.stat().st_size for p in info.source_paths + info.host_paths if p.is_file())
        assert unpacked > 5 * stored
