"""Where the per-rank work runs: this machine's worker processes, or a Dask cluster.

Ranks are independent until written, so every command hands each rank's job (read, select,
analyse, encode) to a ``concurrent.futures.Executor`` and gathers the small results as they
arrive: a process pool of one worker per core by default (here, one rank after another, when the
input is small: ``IN_PROCESS_BELOW``), or, with ``cluster``
(``tcp://HOST:8786``, or ``$TRACE2PERFETTO_CLUSTER``), the executor of a Dask client on an existing
Dask scheduler (``dask scheduler`` / ``dask worker``, Kubernetes, SLURM via dask-jobqueue). Dask
retries a task whose worker died on another worker; we add no scheduler, transport or retry of
our own. Workers read the profile from the path they see (a shared file system).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import _malloc
from .errors import Diagnostics, InputError, Trace2PerfettoError, UsageError
from .select import format_ids

if TYPE_CHECKING:
    from concurrent.futures import Executor

CLUSTER_ENV = "TRACE2PERFETTO_CLUSTER"
# Below this many input bytes in all (``profile.input_bytes``, unpacked) the ranks are read here, one after
# another: starting a pool (importing it, forking, pickling the results back) costs more CPU than
# the reading it would spread (BENCHMARKS.md, issue 28: start-up).
IN_PROCESS_BELOW = 8 << 20


@dataclass(frozen=True)
class Where:
    """How to run the per-rank work. ``cluster``: a Dask scheduler's address, None for this
    machine. ``skip_unreadable``: leave out a rank that cannot be read (with a warning naming it)
    rather than fail. ``progress``: told of every pass over the ranks (``Profile.map``) as it starts
    (input bytes 0, of the total, rank None) and as each rank is done (bytes so far, of the total,
    that rank): the command line's progress line on a terminal."""

    cluster: str | None = None
    skip_unreadable: bool = False
    progress: Callable[[int, int, int | None], None] | None = field(default=None, compare=False)

    @classmethod
    def of(cls, cluster: str | None = None, skip_unreadable: bool = False,
           progress: Callable[[int, int, int | None], None] | None = None) -> Where:
        """``cluster``, else ``$TRACE2PERFETTO_CLUSTER``, else this machine."""
        return cls(cluster or os.environ.get(CLUSTER_ENV) or None, skip_unreadable, progress)

    @property
    def remote(self) -> bool:
        """Workers that may not see this machine's temporary files (results come back inline)."""
        return self.cluster is not None


LOCAL = Where()


class ClusterError(Trace2PerfettoError):
    """The cluster failed a rank's task (a worker that died too often, a lost connection)."""


def each_rank(work: Callable[[tuple], Any], jobs: list[tuple], ranks: list[int],
              collect: Callable[[int, Any], None], where: Where = LOCAL,
              diag: Diagnostics | None = None, input_bytes: int | None = None) -> list[int]:
    """Run ``work`` on each rank's job and hand each result to ``collect`` with its job's index,
    as it arrives; here, in job order, when the jobs read fewer than ``IN_PROCESS_BELOW`` bytes in
    all (``input_bytes``; None: not known). A rank that cannot be read (an unreadable or broken
    file) fails the command with an error naming the rank; with ``where.skip_unreadable`` it is
    left out, named in a warning in ``diag``, and returned among the indices left out, unless no
    rank is left.

    Raises:
        InputError: a rank could not be read (``skip_unreadable`` off), or none could.
        ClusterError: the cluster could not run a rank's task.
        UsageError: no Dask installed, or no scheduler at ``where.cluster``.
    """
    skipped: list[int] = []
    problems: dict[int, InputError] = {}
    with _executor(len(jobs), where, input_bytes) as pool:
        if pool is None:
            outcomes = ((index, _outcome(_run, work, job)) for index, job in enumerate(jobs))
        else:
            from concurrent.futures import as_completed

            futures = {pool.submit(_run, work, job): index for index, job in enumerate(jobs)}
            outcomes = ((futures[f], _outcome(f.result)) for f in as_completed(futures))
        for index, (result, error) in outcomes:
            if error is None:
                collect(index, result)
                continue
            unreadable = _unreadable(ranks[index], error)
            if unreadable is None and isinstance(error, Trace2PerfettoError):
                raise error
            if unreadable is None:
                raise ClusterError(f"rank {ranks[index]}: {type(error).__name__}: {error}") from error
            if not where.skip_unreadable:
                raise _with_way_out(unreadable, len(jobs)) from error
            skipped.append(index)
            problems[index] = unreadable
    if skipped and len(skipped) == len(jobs):  # nothing left to convert or analyse: no "0 ranks"
        raise Trace2PerfettoError(f"no rank could be read (--skip-unreadable leaves out only some): "
                                  f"{problems[skipped[0]]}")
    if skipped and diag is not None:
        diag.warn("unreadable_rank", f"rank {format_ids(ranks[i] for i in skipped)} left out "
                  f"(--skip-unreadable): {problems[skipped[0]]}")
    return skipped


def _outcome(call: Callable, *args: Any) -> tuple[Any, BaseException | None]:
    try:
        return call(*args), None
    except (Trace2PerfettoError, OSError) as e:
        return None, e
    except Exception as e:  # noqa: BLE001 - a task the cluster lost, said with its rank
        if _is_cluster_failure(e):
            return None, e
        raise


def _unreadable(rank: int, error: BaseException) -> InputError | None:
    """The error to report for a rank that could not be read, naming the rank; None if ``error``
    is no reading problem."""
    if isinstance(error, InputError):
        return InputError(error.path, f"rank {rank}" + (f": {error.where}" if error.where else ""),
                          error.reason, error.hint)
    if isinstance(error, OSError) and not _is_cluster_failure(error):
        return InputError(error.filename or "?", f"rank {rank}", f"cannot read: {error.strerror or error}")
    return None


def _with_way_out(error: InputError, ranks: int) -> InputError:
    """An unreadable rank's error, saying where other ranks are left that ``--skip-unreadable``
    reads without it (a damaged database fails one rank, not the job)."""
    if ranks < 2:
        return error
    rank = error.where.split(":")[0]
    hint = f"{error.hint}; " if error.hint else ""
    return InputError(error.path, error.where, error.reason,
                      f"{hint}--skip-unreadable leaves {rank} out and reads the other ranks")


def _is_cluster_failure(error: BaseException) -> bool:
    return type(error).__module__.startswith(("distributed", "dask")) or isinstance(error, (
        ConnectionError, TimeoutError))


@contextmanager
def _executor(jobs: int, where: Where, input_bytes: int | None) -> Iterator[Executor | None]:
    """The executor for ``jobs`` rank jobs: None to run them here, one after another (one job,
    one core, or a small input); a fork-started process pool of one worker per core; or a Dask
    client's."""
    if where.cluster is not None:
        with _dask_client(where.cluster) as client:
            yield client.get_executor(pure=False)
        return
    workers = min(jobs, os.cpu_count() or 1)
    if workers <= 1 or (input_bytes is not None and input_bytes < IN_PROCESS_BELOW):
        yield None
        return
    import multiprocessing  # only here: a small input, the usual case, starts no pool
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        yield pool


@contextmanager
def _dask_client(address: str):
    try:
        from distributed import Client
    except ImportError as e:
        raise UsageError("--cluster needs Dask: pip install 'trace2perfetto[cluster]' "
                         "(dask[distributed])") from e
    try:
        client = Client(address, timeout="10s")
    except OSError as e:
        raise UsageError(f"--cluster {address}: no Dask scheduler answers there ({e})") from e
    try:
        yield client
    finally:
        client.close()


def _run(work: Callable[[tuple], Any], job: tuple) -> Any:
    """``work(job)`` with Python's cyclic garbage collector run every 50,000 allocations rather
    than 700: a rank's records are millions of short-lived tuples and no reference cycles, and
    walking the live ones that often cost 10% of a conversion. The caller's setting is restored."""
    before = gc.get_threshold()
    gc.set_threshold(50_000, 20, 10)
    try:
        return work(job)
    finally:
        gc.set_threshold(*before)


def reuse_freed_memory() -> None:
    """Ask glibc's malloc to keep memory freed for reuse (up to 64 MiB) and to serve blocks below
    32 MiB from it: by default each batch of a few MiB is mapped afresh and returned when freed,
    and its pages faulted in again for the next (a tenth of a conversion's CPU time). The
    process, and the workers it forks, take it; elsewhere (not glibc) nothing changes. In C
    (``_malloc.c``): ctypes would cost every command 2 ms of its start-up (issue 44)."""
    _malloc.reuse_freed_memory()
