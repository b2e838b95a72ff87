"""Running the tool: settings to a :class:`result.Result`, its files and its
report; exit statuses (see :func:`main`)."""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from dataclasses import replace

from cli.args import (
    DOT_FILE,
    FLAGS,
    MODEL_PARAMS,
    PROG,
    Settings,
    UsageError,
    parse_args,
)
from cli.files import (
    check_writable,
    read_strategy_file,
    strategy_from_layers,
    write_atomic,
)
from errors import InputError, SettingError
from models import MODELS


class OutputFailed(OSError):
    """A result file could not be written (the report was printed)."""

class Progress:
    """Progress on stderr, only when it is a terminal and the work is slow."""

    def __init__(self, what: str = "searching", unit: str = "operators"):
        self.what, self.unit = what, unit
        self.on = sys.stderr is not None and sys.stderr.isatty()
        self.t0 = time.perf_counter()
        self.last = 0.0
        self.shown = False

    def __call__(self, done, total):
        if not self.on:
            return
        now = time.perf_counter()
        if now - self.t0 > 1.0 and (now - self.last > 0.2 or done == total):
            self.last = now
            self.shown = True
            sys.stderr.write(f"\r{self.what}: {done}/{total} {self.unit}, {now - self.t0:.1f} s ")
            sys.stderr.flush()

    def close(self):
        if self.shown:
            sys.stderr.write("\r" + " " * 60 + "\r")
            sys.stderr.flush()


def _with_file_settings(s: Settings, recorded: dict) -> Settings:
    """Flags not given on the command line come from the strategy file."""
    names = ("graph", "procs", "distinct_rows") + MODEL_PARAMS
    updates = {k: recorded[k] for k in names if k in recorded and k not in s.explicit}
    if "graph" in updates and "model" in recorded:
        updates["graph"] = _find_model(recorded["model"], s.evaluate)
    elif "graph" in updates and updates["graph"] not in MODELS:
        raise UsageError(f"--evaluate: the file names an unknown graph {updates['graph']!r}")
    merged = replace(s, **updates)
    if merged.graph in MODELS:
        takes = {p.name for p in MODELS[merged.graph].params}
        stray = [k for k in MODEL_PARAMS if k in updates and k not in takes]
        if stray:
            theirs = recorded["model"].get("source") if isinstance(recorded.get("model"), dict) else recorded.get("graph")
            if theirs is not None and theirs != merged.graph:  # -g named another model: say that first
                raise UsageError(f"--evaluate: {s.evaluate} is a strategy for {theirs}, not for {merged.graph}")
            raise UsageError(f"--evaluate: the file records {stray[0]} {updates[stray[0]]!r}, "
                             f"but {merged.graph} has no such parameter")
    return merged


CLUSTER_SETTINGS = ("flops", "bw", "inter_bw", "gpus_per_node", "latency", "precision", "device_memory")


def _cluster(s: Settings, recorded: dict):
    """The cluster the settings, a cluster file, a device preset and a
    strategy file's record describe (see ``cluster/config.py``)."""
    from cluster.config import check_fields, read_cluster_file, resolve

    file_fields = None
    if s.cluster is not None:
        try:
            file_fields = read_cluster_file(s.cluster)
        except ValueError as e:
            raise UsageError(f"--cluster: {e}") from None
    old = recorded.get("cluster")
    if not isinstance(old, dict):  # files written before the cluster was recorded
        old = {k: recorded[k] for k in ("flops", "bw") if k in recorded}
    try:
        old = check_fields(old, "the strategy file's \"cluster\"")
    except ValueError as e:
        raise UsageError(f"--evaluate: {e}") from None
    return resolve({k: getattr(s, k) for k in CLUSTER_SETTINGS}, device=s.device, file_fields=file_fields,
                   recorded=old)


def _find_model(model: dict, path: str) -> str:
    """The model file a strategy file names: where it was, or beside the
    strategy file."""
    for where in (model.get("path"), os.path.join(os.path.dirname(path), model["source"])):
        if isinstance(where, str) and where and os.path.exists(where):
            return where
    raise UsageError(f"--evaluate: {path} is a strategy for {model['source']}, which is not at "
                     f"{model.get('path') or model['source']}; give the model with -g")


def _check_model(g, recorded: dict, path: str) -> None:
    """Refuse a strategy file written for another model than ``g``."""
    source = g.graph.get("source")
    mine = f"{source['file']} (sha256 {source['sha256'][:12]})" if source else g.graph["name"]
    model = recorded.get("model")
    if model is not None:
        if source is None or source["sha256"] != model["sha256"]:
            raise UsageError(f"--evaluate: {path} is a strategy for {model['source']} "
                             f"(sha256 {model['sha256'][:12]}), not for {mine}")
    elif "graph" in recorded and (source is not None or recorded["graph"] != g.graph["name"]):
        raise UsageError(f"--evaluate: {path} is a strategy for {recorded['graph']}, not for {mine}")


def _cost_model(s: Settings, recorded: dict):
    """The cost model the settings (and a strategy file's record) ask for."""
    from cost_model import CostModel

    rules = {}
    if s.sparse_embeddings:
        rules = {"embedding_lookup": True, "embedding_sync": "best"}
    elif "embedding_lookup" in recorded or "embedding_sync" in recorded:
        rules = {k: recorded[k] for k in ("embedding_lookup", "embedding_sync") if k in recorded}
    optimizer = s.optimizer if s.optimizer is not None else recorded.get("optimizer", "adam")
    return CostModel(_cluster(s, recorded), distinct_rows=s.distinct_rows, optimizer=optimizer, **rules)


def _model_params(s: Settings) -> dict:
    return {k: getattr(s, k) for k in MODEL_PARAMS if getattr(s, k) is not None}


def run(s: Settings, out=None):
    """Do what the settings ask; return the :class:`result.Result` (a list of
    rows for a sweep).  Every check comes before any file is written."""
    out = sys.stdout if out is None else out
    if s.sweep or s.plans or s.plot:
        from cli.study import run_study

        return run_study(s, out)
    if s.evaluate is not None and (s.profile or s.measure):
        raise UsageError("--profile and --measure time a search; they cannot be used with --evaluate")
    if s.output is not None:
        if not s.output.lower().endswith((".json", ".csv")):
            raise UsageError(f"--output: {s.output!r} must end in .json or .csv")
        check_writable(s.output, "--output")
    if s.dump_graph:
        check_writable(DOT_FILE, "--dump-graph")
    from report import render_csv, render_dot, render_json, render_text

    s, g, result = plan(s, out)
    # The files first, then the report, which is printed even when a file
    # could not be written (a full disk): the error follows it.
    files = []
    if s.output is not None:
        files.append(("--output", s.output, render_csv if s.output.lower().endswith(".csv") else render_json, result))
    if s.dump_graph:
        files.append(("--dump-graph", DOT_FILE, render_dot, g))
    failed = None
    for flag, path, render, what in files:
        try:
            write_atomic(path, render(what))
        except OSError as e:
            failed = failed or OutputFailed(f"{flag}: could not write {path}: {e.strerror or e}")
            continue
        if flag == "--dump-graph":
            print(f"Wrote the graph ({g.number_of_nodes()} operators, {g.number_of_edges()} edges) to "
                  f"{os.path.abspath(DOT_FILE)}", file=out)
    print(render_text(result, summary=s.summary), file=out)
    if s.breakdown:
        from studies.breakdown import render

        print(render(result, result.baseline("data_parallel") if s.compare else None), file=out)
    if failed is not None:
        raise failed
    return result


def plan(s: Settings, out=None, baselines=None):
    """The computation the settings ask for, without any output: the settings
    as a strategy file completes them, the graph, and the result (searched,
    or the file's strategy evaluated), with ``baselines`` (keys; default:
    all three with ``--compare``, else none)."""
    layers, recorded = None, {}
    if s.evaluate is not None:
        recorded, layers = read_strategy_file(s.evaluate)
        s = _with_file_settings(s, recorded)

    from cost_model import build_costs, check_procs, evaluate, make_result
    from dp_search import default_memory_limit
    from graph import operators
    from models import build_graph

    check_procs(s.procs)
    model = _cost_model(s, recorded)
    g = build_graph(s.graph, **_model_params(s))
    limit = default_memory_limit() if s.mem_limit_gb is None else int(s.mem_limit_gb * 1e9)
    if layers is not None:
        _check_model(g, recorded, s.evaluate)
        strategy = strategy_from_layers(g, layers, s.evaluate, s.procs)
        rules_from = s.evaluate if not s.sparse_embeddings and any(
            k in recorded for k in ("embedding_lookup", "embedding_sync")) else None
        result = make_result(g, evaluate(g, strategy, model, s.procs), model, s.procs, "evaluate",
                             source=s.evaluate, rules_from=rules_from)
        most = max(d.devices for d in strategy)
        if most < s.procs:
            result = replace(result, notes=result.notes + (
                f"This strategy uses at most {most} of the {s.procs} devices.",))
    else:
        progress = Progress("building the cost tables", "edges") if out is not None else None
        try:
            costed = build_costs(g, s.procs, model, memory_limit=limit, progress=progress)
        finally:
            if progress is not None:
                progress.close()
        result = _search(s, g, model, costed, limit, out)
        most = max(int(c.prod(axis=1).max()) for c in costed.configs)
        if most < s.procs:
            used = max(layer.devices for layer in result.layers)
            result = replace(result, notes=result.notes + (
                f"No operator can use more than {most} of the {s.procs} devices (no configuration splits further "
                f"at cutoff {g.graph['cutoff']}); this strategy uses at most {used}.",))
    if s.distinct_rows is not None:
        why = None
        if not any(op.kind.sparse_rows for op in operators(g)):
            why = f"{g.graph['name']} has no embedding"
        elif model.embedding_sync == "dense" and not s.compare:
            why = "embedding gradients are all-reduced densely (use --sparse-embeddings or --compare)"
        if why:
            result = replace(result, notes=result.notes + (f"--distinct-rows has no effect here: {why}.",))
    from baselines import BASELINES, compare

    keys = baselines if baselines is not None else (BASELINES if s.compare else ())
    if keys:
        result = result.with_baselines(compare(g, s.procs, model, keys))
    if not math.isfinite(result.total_cost):
        raise InputError("the total cost is not a finite number; choose realistic --flops and --bw")
    return s, g, result


def _search(s: Settings, g, model, costed, limit, out):
    from dp_search import search, search_within
    from cost_model import make_result
    from result import MemoryBound

    capacity = model.cluster.memory

    def once(progress=None):
        if capacity is None:
            return search(costed, s.algo, memory_limit=limit, progress=progress, threads=s.threads)
        return search_within(costed, capacity * 1e9, s.algo, memory_limit=limit, progress=progress,
                             threads=s.threads)

    if s.profile:
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        r = once()
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(15)
        print("Profile of the search (top 15 by cumulative time):", file=out)
        print(buf.getvalue().strip("\n"), file=out)
        print(file=out)
    else:
        progress = Progress() if out is not None else None  # a sweep's workers stay quiet
        try:
            r = once(progress)
        finally:
            if progress is not None:
                progress.close()
    timings = ()
    if s.measure:
        for _ in range(2):
            once()
        timings = tuple(_found(once()).seconds for _ in range(5))
    bound = None
    if capacity is not None:
        bound = MemoryBound(capacity * 1e9, r.status, r.lower_bound, r.gap, r.lam, r.searches, r.least_memory)
    found = _found(r)
    return make_result(g, costed.figures(found.index), model, s.procs, "search",
                       search=replace(found.stats, timings=timings), bound=bound)


def _found(r):
    """The search result of a search, or of one held within the memory."""
    return getattr(r, "result", r)


def message(e: Exception) -> str:
    """The one line a user sees: a setting's error under its flag."""
    if isinstance(e, SettingError):
        return f"{FLAGS.get(e.name, e.name)} {e.problem}"
    return str(e) or type(e).__name__


def _say(line: str) -> None:
    """One line on stderr, if there is a stderr."""
    if sys.stderr is not None:
        try:
            print(line, file=sys.stderr)
        except OSError:
            pass


def main(argv=None) -> int:
    """Exit statuses: 0 done; 2 a bad command line or input (a flag's value, a
    file the tool cannot use); 1 the run could not be done (it would not fit
    the memory limit, nothing fits the device, a file could not be written,
    or an internal error); 130 interrupted; 141 the reader of the report
    went away."""
    if sys.stdout is None:  # started with stdout closed: the report goes nowhere
        sys.stdout = open(os.devnull, "w")
    signals = []  # the interrupts received

    def interrupt(signum, frame):
        signals.append(signum)
        raise KeyboardInterrupt

    try:
        s = parse_args(argv)
        if (threading.current_thread() is threading.main_thread()  # from here an interrupt unwinds (files stay whole)
                and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN):  # started with it ignored: it stays so
            signal.signal(signal.SIGINT, interrupt)
        run(s)
        sys.stdout.flush()
    except KeyboardInterrupt:  # a sweep has written the rows finished so far
        return _interrupted()
    except BrokenPipeError:  # the reader went away (| head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as e:
        if signals:  # an interrupt inside an extension's import surfaces as an ImportError
            return _interrupted()
        if isinstance(e, InputError):  # a setting or input the tool cannot use
            _say(f"{PROG}: error: {message(e)}")
            return 2
        if isinstance(e, (MemoryError, OSError)):  # the run could not be done
            _say(f"{PROG}: error: {message(e)}")
            return 1
        # a bug of the tool: one line all the same, and how to report it
        _say(f"{PROG}: internal error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} "
             "(please report it with the command line)")
        return 1
    return 0


def _interrupted() -> int:
    _say(f"{PROG}: interrupted")
    return 130


if __name__ == "__main__":
    sys.exit(main())
