"""``collect``: analyse many traces once each, in parallel, into one dataset.

The per-trace work (:func:`analyse_trace`: open, analyze, steps) is one pure function of the
trace and the settings, so it runs unchanged in a local process pool (the default) or on a
Dask cluster (``--dask tcp://HOST:PORT`` or ``--dask local``): the same function, the same
records, an identical dataset. Only the parent writes the dataset.

A trace that fails is listed with its one-line reason and the others still land. A worker
process that dies (killed, out of memory) breaks a local pool: the traces it had not finished
are tried once more, each in a pool of its own, and a trace that kills its worker again is
reported as failed, never silently dropped. A worker hands its record back through a file, so
that one killed while doing so cannot leave the pool waiting on half a message
(:func:`_safe_in_file`). Dask retries a task whose worker died by itself
(``distributed.scheduler.allowed-failures``) and then reports it.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import NamedTuple, TypeVar

from specnsys.attribution.window import parse_window
from specnsys.cores import (
    set_worker_environment,
    share_of_cores,
    usable_cores,
    worker_environment,
)
from specnsys.errors import BadInputError, SpecnsysError, UsageError
from specnsys.ingest.cache import tmp_prefix
from specnsys.ingest.connection import HAND_BACK_PREFIX
from specnsys.library_floors import too_old_message
from specnsys.memory_room import available_memory
from specnsys.metrics import registry
from specnsys.metrics.registry import Metric
from specnsys.runset.dataset import MANIFEST, Dataset, RunRecord, Settings, run_id_of
from specnsys.runset.labels import Labeler
from specnsys.runset.sizing import PoolSize, pool_size

__all__ = ["CollectResult", "analyse_trace", "collect", "find_traces"]

TRACE_SUFFIXES = (".sqlite", ".nsys-rep")
_END_S = 10.0  # how long an ended worker may take to exit


@dataclass
class CollectResult:
    """What one collect did: runs analysed, kept as they were, and failed (with reasons)."""

    dataset: Path
    analysed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "dataset": str(self.dataset),
            "analysed": self.analysed,
            "unchanged": self.unchanged,
            "failed": self.failed,
            "warnings": self.warnings,
        }


def find_traces(inputs: Sequence[str | Path]) -> list[Path]:
    """The traces named by *inputs*: files as given, folders searched recursively for
    ``.sqlite``/``.nsys-rep`` files in any case (``Run.SQLITE`` is read when named alone, so a
    folder does not pass over it); sorted; a report and its export count once: the export."""
    found: list[Path] = []
    for item in inputs:
        path = Path(item)
        try:
            if path.is_dir():
                found += sorted(
                    p for p in path.rglob("*")
                    if p.suffix.lower() in TRACE_SUFFIXES and p.is_file()
                )  # fmt: skip
            elif path.exists():
                found.append(path)
            else:
                raise BadInputError(f"{path}: no such trace or folder")
        except OSError as exc:
            raise BadInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    exports = {p.with_suffix("") for p in found if p.suffix.lower() == ".sqlite"}
    unique = [
        p for p in found if p.suffix.lower() == ".sqlite" or p.with_suffix("") not in exports
    ]
    return list(dict.fromkeys(p.resolve() for p in unique))


def _identity(trace: Path) -> list[int | str]:
    from specnsys.ingest.input_file import file_identity

    return list(file_identity(trace))


def analyse_trace(trace: str, settings: Settings, labels: dict[str, str]) -> RunRecord:
    """The dataset record of one trace: the work a pool or Dask worker does.

    Raises :class:`SpecnsysError` (one line) when the trace cannot be analysed."""
    import polars as pl

    from specnsys import api

    path = Path(trace)
    identity = _identity(path)
    analysis, steps = api.analyze_steps(
        path, rules=settings.get("rules"), pid=settings.get("pid"),
        use_cache=settings.get("use_cache", True), window=settings.get("window"),
    )  # fmt: skip
    doc = analysis.to_dict()
    from specnsys.runset.dataset import headline_row

    phases = pl.DataFrame(
        [{"phase": name, **row} for name, row in analysis.phases.items()],
        infer_schema_length=None,
    ) if analysis.phases else pl.DataFrame()  # fmt: skip
    requests = pl.DataFrame(analysis.latency["per_request"], infer_schema_length=None)
    return RunRecord(
        trace=str(path),
        identity=identity,
        settings=settings,
        labels=labels,
        headline=headline_row(doc),
        phases=phases,
        steps=steps,
        requests=requests,
        warnings=[*analysis.data_warnings, *(f"{path}: {w}" for w in analysis.warnings)],
    )


def _safe(
    trace: str, settings: Settings, labels: dict[str, str], metrics: tuple[Metric, ...]
) -> RunRecord | str:
    """:func:`analyse_trace` with the parent's registered *metrics* (all of them, the static
    ones included: they replace the worker's), a failure returned as its one-line reason."""
    try:
        registry.adopt(metrics)
        return analyse_trace(trace, settings, labels)
    except SpecnsysError as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    except MemoryError:
        return "out of memory while analysing"
    except Exception as exc:  # noqa: BLE001 - one trace's bug must not lose the others
        failure = f"{type(exc).__name__}: {exc}".splitlines()[0]
        return too_old_message(failure) or f"internal error: {failure}"


Job = tuple[str, Settings, dict[str, str]]
Outcome = RunRecord | str


def _sendable_metrics() -> tuple[Metric, ...]:
    """The registered metrics, checked to reach the worker processes (pickled by reference:
    module-level functions do, a lambda or a function defined in a function does not)."""
    metrics = registry.registered()
    for metric in metrics:
        try:
            pickle.dumps(metric)
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            raise UsageError(
                f"metric {metric.key!r} cannot be sent to collect's worker processes "
                f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}): "
                "give its compute and text as module-level functions"
            ) from None
    return metrics


@contextlib.contextmanager
def _owned_pool(
    workers: int, context: BaseContext, largest_bytes: int = 0
) -> Iterator[ProcessPoolExecutor]:
    """A process pool whose workers are ended, not waited for, when the block is left by an
    exception (Ctrl-C, SIGTERM, the consumer stopping early): they are this collect's own
    processes, and a pool's own shutdown would wait for every running trace to finish."""
    # each worker's pools sized to its share of the cores, and its allocator to the largest
    # trace (specnsys.allocator.large_input_options), before its first task loads Polars
    pool = ProcessPoolExecutor(
        max_workers=workers, mp_context=context,
        initializer=set_worker_environment,
        initargs=(worker_environment(share_of_cores(workers), largest_bytes),),
    )  # fmt: skip
    try:
        yield pool
    except BaseException:
        processes = list((getattr(pool, "_processes", None) or {}).values())
        manager = getattr(pool, "_executor_manager_thread", None)
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        for process in processes:
            process.join(_END_S)
        # The pool's own thread then drops its queues, whose semaphores are unlinked and
        # unregistered from multiprocessing's resource tracker as they go. An exit in the
        # middle of that (a Ctrl-C exits at once) left one unlinked but registered: the
        # tracker then printed two "leaked semaphore" warnings after "specnsys: interrupted"
        # (seen once in a CI run of test_ctrl_c_ends_the_workers_at_once...). Let it finish.
        if manager is not None:
            manager.join(_END_S)
        raise
    pool.shutdown(wait=True)


class _HandedBack(NamedTuple):
    """A worker's outcome left in a file of the parent's hand-back folder: what crosses the
    pool's result pipe instead of the outcome (see :func:`_safe_in_file`)."""

    path: str


def _safe_in_file(
    trace: str, settings: Settings, labels: dict[str, str], metrics: tuple[Metric, ...],
    folder: str | None,
) -> _HandedBack | Outcome:  # fmt: skip
    """:func:`_safe`, its outcome pickled into a new file in *folder*; the file's name is
    what goes back through the pool.

    A pool worker killed while it writes its result into the result pipe leaves part of a
    message there: the pool's manager thread then waits in ``recv`` for the rest, forever,
    since the pipe's other writers keep it open, and ``collect`` hangs instead of retrying
    the trace (seen in a full test run: a worker SIGKILLed beside an 18 KB record;
    ``concurrent.futures.process`` in CPython 3.11). A write of at most ``PIPE_BUF`` bytes
    (4096 on Linux) is atomic, so a file's name arrives whole or not at all; a worker killed
    while writing the file dies like one killed during its analysis: the pool breaks and the
    trace is tried again. Where the file cannot be written (no *folder*: no temporary folder
    could be made; or the folder is full), the outcome goes through the pipe as before."""
    outcome = _safe(trace, settings, labels, metrics)
    if folder is None:
        return outcome
    try:
        fd, path = tempfile.mkstemp(dir=folder, suffix=".pickle")
        with os.fdopen(fd, "wb") as out:
            pickle.dump(outcome, out, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError:
        return outcome
    return _HandedBack(path)


def _received(value: _HandedBack | Outcome) -> Outcome:
    """The outcome a worker handed back (:func:`_safe_in_file`), its file removed; a file
    that cannot be read back makes the trace fail with that reason, never vanish."""
    if not isinstance(value, _HandedBack):
        return value
    try:
        with open(value.path, "rb") as handed:
            outcome: Outcome = pickle.load(handed)  # our own worker's file, in our own folder
    except (OSError, EOFError, pickle.UnpicklingError) as exc:
        return f"its result could not be read back from {value.path}: {exc}".splitlines()[0]
    finally:
        with contextlib.suppress(OSError):
            os.unlink(value.path)
    return outcome


@contextlib.contextmanager
def _hand_back_folder() -> Iterator[str | None]:
    """A private temporary folder for the workers' outcomes (:func:`_safe_in_file`), removed
    at the end; None where none can be made (a read-only or full temporary directory): the
    outcomes then come through the pipe, and ``collect`` still runs."""
    try:
        holder = tempfile.TemporaryDirectory(
            prefix=tmp_prefix(HAND_BACK_PREFIX), ignore_cleanup_errors=True
        )  # named after this process: the next analysis sweeps it if a SIGKILL leaves it
    except OSError:
        yield None
        return
    with holder as folder:
        yield folder


def default_workers(jobs: int, largest_bytes: int = 0) -> PoolSize:
    """Workers for *jobs* traces when the caller names no count: one per usable core, no
    more than the traces, at least one, and no more than the available memory holds
    analyses of the largest trace, of *largest_bytes* (:mod:`specnsys.runset.sizing`)."""
    return pool_size(min(jobs, usable_cores()), largest_bytes, available_memory())


def _run_pool(
    jobs: list[Job], workers: int, metrics: tuple[Metric, ...], largest_bytes: int = 0
) -> Iterator[tuple[Job, Outcome]]:
    """Run *jobs* in a local process pool; a job whose worker died is retried once alone.
    The outcomes come back through files in a private temporary folder (:func:`_safe_in_file`),
    removed when the pool is done."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")  # no fork of a process holding DuckDB threads
    retry: list[Job] = []
    with _hand_back_folder() as folder:
        with _owned_pool(workers, context, largest_bytes) as pool:
            futures: dict[Future[_HandedBack | Outcome], Job] = {
                pool.submit(_safe_in_file, *job, metrics, folder): job for job in jobs
            }
            for future in as_completed(futures):
                try:
                    outcome = _received(future.result())
                except BrokenProcessPool:
                    retry.append(futures[future])
                    continue
                yield futures[future], outcome
        for job in retry:
            dead: list[BaseProcess] | None = None
            with _owned_pool(1, context, largest_bytes) as alone:
                try:
                    outcome = _received(alone.submit(_safe_in_file, *job, metrics, folder).result())
                except BrokenProcessPool:
                    dead = _worker_processes(alone)
            yield job, outcome if dead is None else _second_death(dead)


#: Why a worker that imports the calling script can fail as it starts (Python's spawn
#: start method runs the script's top level again in every worker).
NO_MAIN_GUARD = (
    'each worker imports the script that calls collect(): call it under if __name__ == "__main__":'
)


#: The error of collect() called in a worker as the worker imports the calling script.
IN_A_STARTING_WORKER = f"collect() called in a worker process as it imported the script; {NO_MAIN_GUARD}"


def _importing_main_of_a_worker() -> bool:
    """Whether this process is a pool worker still importing its parent's main script (the
    flag multiprocessing's own check of the same reads): collect() called there would start
    a pool of its own, whose queues the failing worker then leaves to the resource tracker."""
    import multiprocessing

    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


def _pool_width(
    asked: int | None, jobs: int, largest_bytes: int, dask: str | None, warnings: list[str]
) -> int:
    """The workers for *jobs* traces: *asked* (``--workers``), else :func:`default_workers`;
    a warning in *warnings* when this machine's memory set the count, or when the asked count
    runs more analyses at once than it holds (a ``tcp://`` cluster's workers are its own)."""
    size = default_workers(jobs, largest_bytes)
    if dask is None or dask == "local":
        note = size.asked_note(asked, jobs) if asked else size.note
        if note is not None and jobs:
            warnings.append(note)
    return asked or size.workers


def _worker_processes(pool: ProcessPoolExecutor) -> list[BaseProcess]:
    """The pool's worker processes (CPython's pool keeps them in a private attribute: none
    where it has none)."""
    return list((getattr(pool, "_processes", None) or {}).values())


def _second_death(processes: list[BaseProcess]) -> str:
    """Why the lone worker retrying a trace died: the signal that ended it, the reason the
    trace fails with. A worker that exited with an error status instead never analysed
    anything: it failed as it started, as every worker will (a script that calls collect()
    without a main guard: each worker imports it and calls collect() again), so collect
    stops with one error rather than failing every trace the same way."""
    for process in processes:
        process.join(_END_S)  # dead already: this reaps it, so its exit code is known
    codes = [p.exitcode for p in processes if p.exitcode is not None]
    started_badly = [code for code in codes if code > 0]
    if started_badly:
        raise UsageError(
            f"a collect worker exited with status {started_badly[0]} as it started (its error "
            f"is printed above; where a script calls collect(), {NO_MAIN_GUARD})"
        )
    ended = [signal.Signals(-code).name for code in codes if -code in _SIGNAL_NUMBERS]
    if not ended:
        return "its worker died twice (its exit status is unknown)"
    if ended[0] == "SIGKILL":
        return "its worker died twice: killed by SIGKILL (out of memory, or killed)"
    return f"its worker died twice: ended by {ended[0]}"


_SIGNAL_NUMBERS = {int(s) for s in signal.Signals}


#: distributed's ``LocalCluster`` (typed loosely: distributed is an optional extra).
_Cluster = TypeVar("_Cluster")


def local_cluster(
    cluster_class: Callable[..., _Cluster], workers: int, largest_bytes: int = 0
) -> _Cluster:
    """``--dask local``'s cluster (*cluster_class*: distributed's ``LocalCluster``): *workers*
    single-threaded worker processes, each holding its pools to its share of the cores and
    its allocator to traces of up to *largest_bytes* (as the pool's workers), with no
    dashboard."""
    return cluster_class(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
        env=worker_environment(share_of_cores(workers), largest_bytes),
        # no dashboard, and its HTTP routes on a free local port: not Dask's default 8787,
        # which a second collect (or a dashboard already running) holds
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
    )  # fmt: skip


def _run_dask(
    jobs: list[Job], address: str, workers: int, metrics: tuple[Metric, ...],
    largest_bytes: int = 0,
) -> Iterator[tuple[Job, Outcome]]:  # fmt: skip
    """Run *jobs* on a Dask cluster at *address* (``local``: a LocalCluster of *workers* for
    traces of up to *largest_bytes*)."""
    try:
        from distributed import Client, LocalCluster
        from distributed import as_completed as dask_completed
    except ImportError:
        raise UsageError(
            "--dask needs the distributed package: pip install 'specnsys[dask]'"
        ) from None
    cluster = None
    if address == "local":
        try:
            cluster = local_cluster(LocalCluster, workers, largest_bytes)
        except RuntimeError as exc:  # distributed's "Nanny failed to start": a worker's error
            raise UsageError(
                f"--dask local: its workers failed to start ({exc}; their error is printed "
                f"above); where a script calls collect(), {NO_MAIN_GUARD}"
            ) from None
        client = Client(cluster)
    else:
        try:
            client = Client(address, timeout="30s")
        except (OSError, TimeoutError) as exc:
            raise BadInputError(f"--dask {address}: cannot reach the scheduler ({exc})") from None
    try:
        futures = {
            client.submit(_safe, *job, metrics, pure=False, key=f"specnsys-{run_id_of(Path(job[0]))}-{i}"): job
            for i, job in enumerate(jobs)
        }
        for future in dask_completed(list(futures)):
            job = futures[future]
            try:
                yield job, future.result()
            except Exception as exc:  # noqa: BLE001 - KilledWorker and the like: report it
                yield job, f"the Dask task failed: {type(exc).__name__}: {exc}".splitlines()[0]
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _failed(store: Dataset, result: CollectResult, trace: str, error: str) -> None:
    """Note that *trace* failed with the one-line *error*, kept without the path it starts
    with (the trace is the key: 'not collected: /a: /a: truncated' said it twice)."""
    reason = error.removeprefix(f"{trace}: ")
    result.failed[trace] = reason
    store.note_failure(trace, reason)


def _record(store: Dataset, result: CollectResult, job: Job, outcome: Outcome) -> None:
    """Write one job's run into *store* (its settings without ``use_cache``), or note its
    failure; *result* says which."""
    done, job_settings, _ = job
    if isinstance(outcome, str):
        _failed(store, result, done, outcome)
        return
    kept = job_settings.copy()
    kept.pop("use_cache", None)
    outcome.settings = kept
    store.write_run(run_id_of(Path(done)), outcome)
    result.analysed.append(done)
    result.warnings += outcome.warnings


def collect(
    inputs: Sequence[str | Path],
    dataset: str | Path,
    *,
    labeler: Labeler | None = None,
    rules: str | None = None,
    pid: int | None = None,
    workers: int | None = None,
    dask: str | None = None,
    use_cache: bool = True,
    progress: Callable[[str], None] | None = None,
    window: str | None = None,
) -> CollectResult:
    """Analyse each trace of *inputs* not already in *dataset* unchanged, and write them.

    Raises :class:`BadInputError` when no trace is given, or when every trace to analyse
    failed (nothing would land); single failures are in the result. *window* is every run's
    ``--window`` rule (part of the settings: another rule analyses a trace again).
    """
    if _importing_main_of_a_worker():
        raise UsageError(IN_A_STARTING_WORKER)
    traces = find_traces(inputs)
    if not traces:
        raise BadInputError("no traces given (.sqlite or .nsys-rep files, or folders of them)")
    metrics = _sendable_metrics()  # before anything is written
    labeler = labeler or Labeler()
    store = Dataset(dataset)
    result = CollectResult(Path(dataset))
    if window is not None:
        parse_window(window)  # a bad rule is one line before any worker starts
    settings: Settings = {"rules": rules, "pid": pid, "specnsys": _version()}
    if window is not None:  # absent for the default: datasets collected before keep matching
        settings["window"] = window
    jobs: list[Job] = []
    sizes: dict[str, int] = {}
    for trace in traces:
        labels = labeler.labels(trace)
        run_settings: Settings = {**settings, "labels": labels}
        try:
            identity = _identity(trace)
        except SpecnsysError as exc:
            _failed(store, result, str(trace), str(exc))
            continue
        if store.unchanged(run_id_of(trace), identity, run_settings):
            result.unchanged.append(str(trace))
            continue
        jobs.append((str(trace), {**run_settings, "use_cache": use_cache}, labels))
        sizes[str(trace)] = int(identity[0])
    # Largest first (the longest-processing-time rule): a pool that gets the big traces last
    # ends on one of them while the other workers idle. The sort is stable: ties keep the
    # order the traces were found in.
    jobs.sort(key=lambda job: -sizes[job[0]])
    largest = max(sizes.values(), default=0)
    n = _pool_width(workers, len(jobs), largest, dask, result.warnings)
    outcomes = (
        _run_dask(jobs, dask, n, metrics, largest) if dask
        else _run_pool(jobs, n, metrics, largest) if jobs else iter(())
    )  # fmt: skip
    try:
        for job, outcome in outcomes:
            _record(store, result, job, outcome)
            if progress is not None:
                progress(job[0])
    finally:
        # Interrupted or not: end the workers now (closing the generator runs its clean-up)
        # and record what landed, so the dataset's manifest and tables agree.
        close = getattr(outcomes, "close", None)
        if close is not None:
            close()
        if result.analysed or result.failed or store.root.exists():
            store.finish()
    result.analysed.sort()
    if jobs and not result.analysed and not result.unchanged:
        raise _every_trace_failed(result.failed, store.root / MANIFEST)
    return result


def _every_trace_failed(failed: dict[str, str], manifest: Path) -> BadInputError:
    """The one line for a collect where nothing landed: how many failed, the first by path
    (the workers end in any order) with its reason, and where every reason is kept."""
    first = min(failed)
    if len(failed) == 1:
        return BadInputError(f"every trace failed; first: {first}: {failed[first]}")
    return BadInputError(
        f"every trace failed ({len(failed)} traces); first: {first}: {failed[first]}; each "
        f"reason in {manifest} (failed)"
    )


def _version() -> str:
    from specnsys import __version__

    return __version__
