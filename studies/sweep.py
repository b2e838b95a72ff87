"""Run many settings, in parallel on the local cores, into one table.

The settings are the cartesian product of the swept values, in a fixed
order: the axes in the order given, each axis's values in the order given,
the first axis varying slowest.  Each setting runs in a worker
process (``jobs`` of them; one runs in this process) and becomes one row:
its values on the swept axes, then the result's figures (:func:`row`), or
an ``error`` with the one-line message of a setting that failed.  Rows keep
the settings' order whatever order the workers finish in.  An interrupt
stops the workers and returns the rows finished so far.
"""

from __future__ import annotations

import itertools
import math
import signal
import time
from dataclasses import replace

from errors import InputError

__all__ = ["MAX_SETTINGS", "expand", "row", "run_sweep"]

MAX_SETTINGS = 1000  # combinations a sweep may run


def expand(settings, values: dict) -> list:
    """Every combination of ``values`` (axis -> tuple, the slowest-varying
    axis first), applied to ``settings`` (a dataclass with the axes as
    fields)."""
    axes = list(values)
    n = math.prod(len(values[a]) for a in axes)
    if n > MAX_SETTINGS:
        raise InputError(f"the lists make {n:,} combinations; a sweep runs at most {MAX_SETTINGS:,}")
    return [replace(settings, **dict(zip(axes, combo))) for combo in itertools.product(*(values[a] for a in axes))]


def row(result, swept: dict, error: str | None = None) -> dict:
    """One row of the table: the swept values, then the figures of
    ``result`` (a :class:`result.Result` with at least the data-parallel
    baseline), or the ``error``.  Within a device's memory, ``KEY_fits``
    says whether each baseline fits it."""
    out = dict(swept)
    if error is not None:
        out["error"] = error
        return out
    r = result
    out.update(total_cost=r.total_cost, step_seconds=r.step_seconds, speedup=r.speedup())
    if len(r.baselines) > 1:  # with --compare: each baseline's speedup, and whether the search space holds it
        for b in r.baselines:
            if b.key != "data_parallel":
                out[f"{b.key}_speedup"] = r.speedup(b)
        for b in r.baselines:
            out[f"{b.key}_inside"] = b.in_search_space
    if r.capacity is not None:  # within a device's memory: whether each baseline fits it (a speedup it cannot run)
        for b in r.baselines:
            out[f"{b.key}_fits"] = b.fits
    from report import step_parts

    parts = dict(step_parts(r))  # the step's, on its critical path (a pipeline's slowest stage), as its report says
    out.update(compute=parts["compute"], communication=parts["exposed communication"], memory_gb=r.memory_bytes / 1e9)
    if r.search is not None:
        out.update(search_seconds=r.search.seconds, largest_K=r.search.largest_K)
    if r.bound is not None:
        out["bound"] = r.bound.status if r.bound.status != "bound" else f"within {100 * r.bound.gap:.2f}%"
    out["error"] = None
    return out


def _quiet_worker():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops the workers


def run_sweep(points: list, work, jobs: int, progress=None, on_row=None) -> tuple[list, bool]:
    """``work(point) -> row`` for every point, ``jobs`` at a time.

    Returns the rows in the points' order (``None`` for a point not run) and
    whether it was interrupted.  After each row, ``on_row(rows)`` (the rows
    so far, as returned) and ``progress(done, total)``.
    """
    rows = [None] * len(points)
    done = 0

    def finished(i, result):
        nonlocal done
        rows[i] = result
        done += 1
        if on_row:
            on_row(rows)
        if progress:
            progress(done, len(points))

    if jobs <= 1 or len(points) <= 1:
        try:
            for i, point in enumerate(points):
                finished(i, work(point))
        except KeyboardInterrupt:
            return rows, True
        return rows, False
    import multiprocessing

    pool = multiprocessing.get_context("fork").Pool(min(jobs, len(points)), initializer=_quiet_worker)
    pending = {i: pool.apply_async(work, (point,)) for i, point in enumerate(points)}
    try:
        while pending:
            for i in [i for i, a in pending.items() if a.ready()]:
                finished(i, pending.pop(i).get())
            time.sleep(0.01)
        pool.close()
        pool.join()
    except KeyboardInterrupt:
        pool.terminate()
        pool.join()
        return rows, True
    return rows, False
