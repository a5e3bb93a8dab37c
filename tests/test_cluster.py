"""The per-rank work on a real Dask cluster (a LocalCluster of worker processes on 127.0.0.1), and a
job of 4,096 ranks: the same outputs as the local run, workers killed, unreadable ranks, flat
memory on the driver, and a capped summary that keeps the ranks its policy names."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from trace_check import read_perfetto

from converters import convert, overlap_report
from converters.analyses.comm import comm_report
from converters.analyses.info import info_report
from converters.analyses.pipeline import pipeline_report
from converters.analyses.report import report_data, report_json
from converters.cli import main
from converters.errors import InputError, Trace2PerfettoError
from converters.executor import CLUSTER_ENV, Where
from fixtures.ascend_pt_gen import write_ascend_pt_profile
from fixtures.many_ranks import write_many_ranks
from fixtures.msprof_gen import write_msprof_profile
from fixtures.pipeline_gen import Job, write

distributed = pytest.importorskip("distributed", reason="dask[distributed] is a test extra")


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None, silence_logs=40) as found:
        yield found


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("job")
    write_ascend_pt_profile(root, ranks=4, steps=3, tasks_per_step=40, slow_rank=2, slow_ns=1_000_000,
                            ranks_per_host=2, host_offsets_ns=[0, 700_000], seed=4)
    return root


@pytest.mark.parametrize("kind", ["summary", "detail"])
@pytest.mark.parametrize("name", ["out.pftrace", "out.json"])
def test_the_dask_run_writes_the_same_bytes_as_the_local_run(cluster, job, tmp_path, kind, name):
    local, remote = tmp_path / f"local-{name}", tmp_path / f"dask-{name}"
    convert(job, local, kind=kind, max_bytes=None, align="collectives")
    result = convert(job, remote, kind=kind, max_bytes=None, align="collectives",
                     where=Where(cluster.scheduler_address))
    assert result.ranks == [0, 1, 2, 3]
    assert remote.read_bytes() == local.read_bytes()


def test_the_dask_run_gives_the_same_tables(cluster, job):
    where = Where(cluster.scheduler_address)
    assert overlap_report(job, where=where) == overlap_report(job)
    assert comm_report(job, where=where).ops == comm_report(job).ops
    assert info_report(job, where=where) == info_report(job)
    assert report_json(report_data(job, where=where)) == report_json(report_data(job))


def test_the_dask_run_gives_the_same_pipeline(cluster, tmp_path):
    """Two 4-stage pipelines side by side (8 ranks): the stages, micro-batches and matched
    transfers the Dask workers find are the local run's."""
    job = write(tmp_path / "pp", Job(stages=4, microbatches=4, steps=2), pipelines=2)
    remote = pipeline_report(job, where=Where(cluster.scheduler_address))
    assert remote.parts == pipeline_report(job).parts
    assert {(p.rank, p.stage) for p in remote.parts} == {(r, r % 4) for r in range(8)}


def test_the_cluster_comes_from_the_environment_too(cluster, job, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(CLUSTER_ENV, cluster.scheduler_address)
    assert main(["overlap", str(job), "--format", "csv"]) == 0
    by_env = capsys.readouterr().out
    monkeypatch.delenv(CLUSTER_ENV)
    assert main(["overlap", str(job), "--format", "csv"]) == 0
    assert capsys.readouterr().out == by_env


def test_no_scheduler_there_is_a_usage_error(job, tmp_path, capsys):
    assert main([str(job), "-o", str(tmp_path / "x.pftrace"), "--cluster", "tcp://127.0.0.1:9"]) == 2
    assert "no Dask scheduler answers" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.fixture
def broken(tmp_path) -> Path:
    """Four ranks, rank 2's trace_view.json no array of events: it cannot be read."""
    root = tmp_path / "broken"
    write_ascend_pt_profile(root, ranks=4, steps=2, tasks_per_step=20, seed=5)
    (path,) = [p for p in root.rglob("trace_view.json") if "profiler_info_2.json" in
               {q.name for q in p.parent.parent.iterdir()}]
    path.write_bytes(b'"not a trace"')
    (path.parent / "kernel_details.csv").unlink()
    return root


@pytest.mark.parametrize("remote", [False, True])
def test_an_unreadable_rank_is_named_or_left_out_with_a_warning(cluster, broken, tmp_path, remote, capsys):
    where = ["--cluster", cluster.scheduler_address] if remote else []
    out = tmp_path / "o.pftrace"
    assert main([str(broken), "-o", str(out), *where]) == 1
    err = capsys.readouterr().err
    assert re.search(r"error: .*trace_view\.json: rank 2", err), err
    assert not out.exists()
    assert main([str(broken), "-o", str(out), "--skip-unreadable", *where]) == 0
    err = capsys.readouterr().err
    assert re.search(r"warning: rank 2 left out \(--skip-unreadable\): .*trace_view\.json", err), err
    assert [p.split()[1] for p in read_perfetto(out.read_bytes()).processes] == ["0", "1", "3"]
    with pytest.raises(InputError, match="rank 2"):
        overlap_report(broken, where=Where(cluster.scheduler_address) if remote else Where())


def test_a_file_the_worker_may_not_read_is_reported_by_rank():
    from converters.executor import _unreadable

    error = _unreadable(7, PermissionError(13, "Permission denied", "/shared/rank7/trace_view.json"))
    assert str(error) == "/shared/rank7/trace_view.json: rank 7: cannot read: Permission denied"


def test_a_worker_killed_mid_run_changes_nothing_or_fails_cleanly(cluster, tmp_path):
    """SIGKILL the worker process running a rank: Dask reruns the task on the other worker (or
    the command fails with a clear error); either way never a partial or different file."""
    root = tmp_path / "big"
    write_msprof_profile(root, ranks=4, graphs=(2,), steps=30, tasks_per_step=400, seed=6)
    expected = tmp_path / "local.pftrace"
    convert(root, expected, kind="detail", max_bytes=None)
    out = tmp_path / "dask.pftrace"
    client = distributed.Client(cluster.scheduler_address)
    pids = client.run(os.getpid)
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = convert(root, out, kind="detail", max_bytes=None,
                                        where=Where(cluster.scheduler_address))
        except Trace2PerfettoError as e:
            outcome["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    victim = None
    deadline = time.monotonic() + 60
    while victim is None and time.monotonic() < deadline and thread.is_alive():
        busy = [worker for worker, tasks in client.processing().items() if tasks]
        victim = busy[0] if busy else None
        time.sleep(0.05)
    assert victim is not None, "no task ever ran"
    os.kill(pids[victim], signal.SIGKILL)
    thread.join(300)
    client.close()
    assert not thread.is_alive()
    if "error" in outcome:
        assert "rank" in str(outcome["error"]) and not out.exists()
    else:
        assert out.read_bytes() == expected.read_bytes()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]


# -- 4,096 ranks -------------------------------------------------------------------------------------

# VmHWM, not getrusage's ru_maxrss: that one keeps the peak of the process before it exec'd python,
# which is pytest's own when the child was vforked from it
_DRIVER = """\
import re, sys
from converters.cli import main
code = main(sys.argv[1:])
peak = re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)
print(f"driver peak RSS {int(peak) // 1024} MiB", file=sys.stderr)
sys.exit(code)
"""


def _driver(*argv: str) -> tuple[str, str, int]:
    """Run the command in a process of its own: (stdout, stderr, the driver's own peak RSS in MiB;
    its worker processes are children and not counted)."""
    done = subprocess.run([sys.executable, "-c", _DRIVER, *argv], capture_output=True, text=True, timeout=900,
                          cwd=Path(__file__).parent.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, done.stderr, int(re.search(r"driver peak RSS (\d+) MiB", done.stderr).group(1))


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    return write_many_ranks(tmp_path_factory.mktemp("many") / "job", ranks=4096, steps=2)


def test_4096_ranks_overlap_and_comm_cover_every_rank_in_bounded_memory(many):
    out, _, rss = _driver("overlap", str(many.root), "--format", "csv")
    rows = out.splitlines()[1:]
    assert len(rows) == 4096 * 2 and {row.split(",")[0] for row in rows} == {str(r) for r in range(4096)}
    assert rss < 300
    out, _, rss = _driver("comm", str(many.root), "--format", "csv")
    rows = out.splitlines()[1:]
    assert {row.split(",")[0] for row in rows} == {str(r) for r in range(4096)} and rss < 300
    last = {row.split(",")[15] for row in rows}  # Last Rank: the slow one, in every collective
    assert last == {str(many.slow_rank)}


def test_4096_ranks_capped_summary_keeps_the_ranks_its_policy_names(many, tmp_path):
    out = tmp_path / "job.pftrace"
    _, err, rss = _driver(str(many.root), "-o", str(out), "--max-size", "4M")
    assert rss < 300
    named = re.search(r"ranks kept by interest: most wait caused (\d+), slowest (\d+), fastest (\d+), "
                      r"median (\d+)", err)
    assert named, err
    assert int(named.group(1)) == many.slow_rank  # the slow rank made every other rank wait
    kept = {int(p.split()[1]) for p in read_perfetto(out.read_bytes()).processes}
    assert {int(n) for n in named.groups()} <= kept and 100 < len(kept) < 4096
    assert out.stat().st_size <= 4 * 2**20
    left_out = int(re.search(r"left out: (\d+) ranks", err).group(1))
    assert left_out == 4096 - len(kept)


def test_4096_ranks_pipeline_in_bounded_memory(tmp_path):
    """1,024 pipelines of 4 stages side by side (4,096 ranks, 2 steps): every rank's stage and
    schedule, the driver's memory flat (its workers read the ranks; it holds small rows)."""
    job = write(tmp_path / "pp", Job(stages=4, microbatches=2, steps=2, user_ranges=False), pipelines=1024)
    out, _, rss = _driver("pipeline", str(job), "--format", "csv")
    rows = [row.split(",") for row in out.splitlines()[1:]]
    assert len(rows) == 4096 * 2
    assert {(int(r[0]), int(r[1]), int(r[2])) for r in rows} == {(rank, rank % 4, 4) for rank in range(4096)}
    assert {r[5] for r in rows} == {"GPipe"}
    assert rss < 300
