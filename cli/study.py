"""A sweep from the command line: every combination of the values the flags
list, run on the local cores (``--jobs``), as one table (pandas) printed
and written with ``--output`` (.csv, .json, .md); each setting's plan in
``--plans DIR``; ``--plot`` a metric against the swept numeric setting;
``--breakdown`` the cost of each setting by operator kind.

Exit status: 0 when at least one setting gave a plan (a setting that failed
is a row with its error); 1 when none did; 130 when interrupted, after
writing the rows finished so far.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace

from cli.args import UsageError
from cli.files import check_writable, write_atomic
from errors import InputError
from settings import DECLARED, SWEEPABLE, Settings

__all__ = ["run_study"]

PLOTS = (".png", ".svg")
# a setting's part of a plan's file name
_TAGS = {s.name: s.tag for s in DECLARED if s.tag}


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep: the finished rows were written."""


def _model_name(value) -> str:
    """A model's name: a built-in one's own, a model file's without its
    extension, and for a Hugging Face ``.../NAME/config.json`` (or the
    directory holding it) the directory's, ``NAME``."""
    from errors import printable

    text = os.path.normpath(str(value))
    base = os.path.basename(text)
    if base.lower() == "config.json":
        base = os.path.basename(os.path.dirname(os.path.abspath(text)))
    elif not os.path.isdir(text):
        base = os.path.splitext(base)[0]
    return printable(base) or "model"


def model_names(values) -> dict:
    """Each model of a sweep by its name (:func:`_model_name`), made
    distinct: a second model of the same name (another directory's
    ``gpt2/config.json``) gets ``-2``, a third ``-3``..., in order."""
    out, taken = {}, set()
    for v in values:
        if v in out:
            continue
        stem = name = _model_name(v)
        n = 1
        while name.lower() in taken:  # case-insensitive file systems too
            n += 1
            name = f"{stem}-{n}"
        taken.add(name.lower())
        out[v] = name
    return out


def _name(axis: str, value) -> str:
    if axis == "graph":
        return _model_name(value)
    return f"{_TAGS.get(axis, '')}{value:.15g}" if isinstance(value, float) else f"{_TAGS.get(axis, '')}{value}"


def plan_names(points: list, axes: list) -> list[str]:
    """Each setting's plan file name (its swept values), made unique: two
    settings that would share one (model files of the same name in two
    directories) get ``-2``, ``-3``... in the settings' order.  With
    nothing swept, the plan is named after the model."""
    names, taken = [], set()
    axes = list(axes) or ["graph"]
    for pt in points:
        stem = "-".join(_name(a, getattr(pt, a)) for a in axes)
        name, n = stem, 1
        while name.lower() in taken:  # case-insensitive file systems too
            n += 1
            name = f"{stem}-{n}"
        taken.add(name.lower())
        names.append(name + ".json")
    return names


def _a_plan(path: str) -> bool:
    """Whether ``path`` holds a plan file (what ``--output`` and ``--plans``
    write: a JSON object with its ``layers`` and ``procs``)."""
    from plan_file import MAX_PLAN_BYTES
    from readers import read_json

    if not os.path.isfile(path):
        return False
    try:
        data = read_json(path, MAX_PLAN_BYTES, "plan file")
    except InputError:
        return False
    return isinstance(data, dict) and isinstance(data.get("layers"), list) and "procs" in data


def _check_plans(s: Settings, reads=None) -> None:
    """Refuse, before any work, a --plans directory we could not write, or
    one where a plan would replace the table or the plot."""
    path = s.plans
    if not path:
        raise UsageError("--plans: the directory name is empty")
    from cli.files import _loops

    if _loops(path):
        raise UsageError(f"--plans: {path} is a symbolic link that loops")
    if os.path.lexists(path) and not os.path.exists(path):
        raise UsageError(f"--plans: {path} is a link to {os.path.realpath(path)}, which does not exist")
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise UsageError(f"--plans: {path} is not a directory")
        where = path
    else:
        where = os.path.dirname(os.path.abspath(path))
        if os.path.exists(where) and not os.path.isdir(where):
            raise UsageError(f"--plans: {os.path.dirname(path)} is not a directory")
        if not os.path.isdir(where):
            raise UsageError(f"--plans: directory {where} does not exist")
    if not os.access(where, os.W_OK | os.X_OK):
        raise UsageError(f"--plans: cannot write in {where}")
    from studies.sweep import expand

    values = dict(s.sweep)
    names = plan_names(expand(replace(s, sweep=()), values), list(values))
    if reads is not None:
        for n in names:
            reads.check(os.path.join(path, n), "--plans")
    for n in names:  # a plan of an earlier run is replaced, any other file of its name kept
        target = os.path.join(path, n)
        if os.path.lexists(target) and not _a_plan(target):
            raise UsageError(f"--plans: {target} exists and is not a plan file this tool wrote: move it away first")
    ours = {os.path.realpath(os.path.join(path, n)): n for n in names}
    for flag, other in (("--output", s.output), ("--plot", s.plot)):
        if other is not None and os.path.realpath(other) in ours:
            raise UsageError(f"{flag}: {other} is also where --plans writes the plan {ours[os.path.realpath(other)]}")


def _check(s: Settings, reads=None) -> None:
    for flag, on in (("--evaluate", s.evaluate), ("--profile", s.profile), ("--measure", s.measure),
                     ("-d", s.dump_graph)):
        if on:
            raise UsageError(f"{flag} runs one setting; it cannot be used with a sweep")
    from conflicts import PLAN_KEYS, check_given_plan

    swept = {a: ",".join(map(str, v)) for a, v in s.sweep if a in PLAN_KEYS}
    check_given_plan(replace(s, sweep=(), **swept))  # what --plan fixes, swept (named as its list) or not
    if s.output is not None:
        if not s.output.lower().endswith((".csv", ".json", ".md")):
            raise UsageError(f"--output: a sweep's table is written as .csv, .json or .md, not {s.output!r}")
        check_writable(s.output, "--output", reads)
    if s.plot is not None:
        if not s.plot.lower().endswith(PLOTS):
            raise UsageError(f"--plot: {s.plot!r} must end in .png or .svg")
        check_writable(s.plot, "--plot", reads)
        from studies.plot import x_axis

        try:
            x_axis([axis for axis, _ in s.sweep], dict(s.sweep))
        except ValueError as e:
            raise UsageError(f"--plot: {e}") from None
    if s.plans is not None:
        _check_plans(s, reads)


def _work(job):
    """One setting in a worker: its row, its plan (for --plans) and its
    breakdown rows (for --breakdown)."""
    from baselines import BASELINES
    from cli.args import message
    from errors import InputError
    from planner import plan
    from studies.sweep import row

    s, swept, want_plan, want_breakdown = job
    try:
        result = plan(s, baselines=BASELINES if s.compare else ("data_parallel",)).result
    except (InputError, MemoryError, OSError) as e:
        return row(None, swept, message(e)), None, None
    except Exception as e:  # a bug: the row says so, the sweep goes on
        return row(None, swept, f"internal error: {type(e).__name__}: {e}"), None, None
    text = None
    if want_plan:
        from exports import render_json

        text = render_json(result)
    parts = None
    if want_breakdown:
        from studies.breakdown import grouped, layers_frame

        by_kind = grouped(layers_frame(result), "kind")
        parts = [{**swept, "kind": k, **{c: float(by_kind.loc[k, c]) for c in by_kind.columns}} for k in by_kind.index]
    return row(result, swept), text, parts


@dataclass(frozen=True)
class Sweep:
    """What a sweep gave: the table, each setting's outcome (row, plan text,
    breakdown rows) in the settings' order, and whether it was interrupted."""

    table: object  # pandas.DataFrame
    outcomes: list
    settings: list
    axes: list
    interrupted: bool


def sweep(s: Settings, progress=None, keep_plans: bool = False) -> Sweep:
    """Run every setting of ``s``'s lists, ``--jobs`` at a time; with
    ``--plans`` (or ``keep_plans``) each outcome holds its plan's JSON."""
    from dp_search import cores
    from studies.sweep import expand, run_sweep
    from studies.tables import frame

    values = dict(s.sweep)
    try:
        points = expand(replace(s, sweep=()), values)
    except ValueError as e:
        raise UsageError(str(e)) from None
    axes = list(values)
    jobs = min(s.jobs or cores(), len(points))
    if jobs > 1:  # each worker gets its share of the memory and of the cores
        from dp_search import default_memory_limit

        share = (default_memory_limit() / 1e9 if s.mem_limit_gb is None else s.mem_limit_gb) / jobs
        threads = max(1, cores() // jobs)
        points = [replace(pt, mem_limit_gb=share, threads=threads) for pt in points]
    models = model_names([pt.graph for pt in points])  # a model file by its name, as the plans' files are
    work = [(pt, {a: models[pt.graph] if a == "graph" else getattr(pt, a) for a in axes},
             keep_plans or s.plans is not None, s.breakdown) for pt in points]
    outcomes, interrupted = run_sweep(work, _work, jobs, progress, on_row=_partial_table(s.output))
    return Sweep(frame([o[0] if o is not None else None for o in outcomes]), outcomes, points, axes, interrupted)


def _partial_table(path):
    """With ``--output``, a callback that rewrites the table after each row,
    so a sweep stopped by force keeps what it finished."""
    if path is None:
        return None
    from studies.tables import frame, render_file

    def write(outcomes):
        if not any(_planned(o) for o in outcomes):
            return  # the user's file stays as it was until a setting gives a plan
        try:
            write_atomic(path, render_file(frame([o[0] for o in outcomes if o is not None]), path))
        except OSError:
            pass  # the final write reports it

    return write


def _planned(outcome) -> bool:
    """Whether a setting ran and gave a plan (its row has no error)."""
    return outcome is not None and outcome[0].get("error") is None


def run_study(s: Settings, out=None, reads=None):
    """Run the sweep the settings ask for; print and write its table
    (``reads``: the files it reads, which no output may replace)."""
    out = sys.stdout if out is None else out
    _check(s, reads)
    from cli.progress import Progress
    from studies.tables import render, render_file

    progress = None if s.summary else Progress("sweep", "settings")  # -q: no progress either
    try:
        sw = sweep(s, progress)
    finally:
        if progress is not None:
            progress.close()
    df, axes = sw.table, sw.axes
    fixed = _fixed(s, axes)
    counts = " x ".join(f"{len(v)} {SWEEPABLE[a]}" for a, v in s.sweep)
    n = len(sw.settings)
    print(f"PaSE sweep: {n} setting{'s' * (n != 1)}{f' ({counts})' if counts else ''}{'; ' + fixed if fixed else ''}",
          file=out)
    print(render(df), file=out)
    if s.breakdown:
        parts = [p for o in sw.outcomes if o is not None and o[2] for p in o[2]]
        if parts:
            import pandas as pd

            from studies.breakdown import table

            print("\nCost by operator kind (FLOP; re-distribution charged to the layer that reads the tensor):",
                  file=out)
            print(table(pd.DataFrame(parts)), file=out)
    failures = []
    planned = any(_planned(o) for o in sw.outcomes)
    if s.plans is not None and planned:
        try:
            os.makedirs(s.plans, exist_ok=True)
        except OSError as e:
            failures.append(f"--plans: could not make {s.plans}: {e.strerror or e}")
        for name, o in zip(plan_names(sw.settings, axes), sw.outcomes):
            if not failures and o is not None and o[1] is not None:
                try:
                    write_atomic(os.path.join(s.plans, name), o[1])
                except OSError as e:
                    failures.append(f"--plans: could not write {name}: {e.strerror or e}")
    if s.output is not None and planned:  # else the user's file stays as it was
        try:
            write_atomic(s.output, render_file(df, s.output))
        except OSError as e:
            failures.append(f"--output: could not write {s.output}: {e.strerror or e}")
    if s.plot is not None and planned:
        from studies.plot import plot

        try:
            plot(df, s.plot, s.metric, axes, fixed)
        except OSError as e:
            failures.append(f"--plot: could not write {s.plot}: {e.strerror or e}")
    if sw.interrupted:
        raise SweepInterrupted()
    if failures:
        raise OSError(failures[0])
    if "total_cost" not in df or df["total_cost"].isna().all():
        raise MemoryError("no setting of the sweep gave a plan" + (" (each row says why)" if len(df) else ""))
    return sw


def _fixed(s: Settings, axes) -> str:
    """The settings every row shares, for the title."""
    shown = []
    for name in SWEEPABLE:
        value = getattr(s, name)
        if name not in axes and value is not None:
            shown.append(f"{SWEEPABLE[name]} {_name(name, value) if name == 'graph' else value}")
    return ", ".join(shown)
