"""Running the tool from the command line: settings to a result
(:func:`planner.plan`), its files and its report; exit statuses (see
:func:`main`)."""

from __future__ import annotations

import os
import signal
import sys
import threading

from cli.args import DOT_FILE, PROG, UsageError, message, parse_args
from cli.files import Reads, check_writable, write_atomic
from cli.progress import Progress
from errors import InputError, plain
from settings import Settings


class OutputFailed(OSError):
    """A result file could not be written (the report was printed)."""


class StdoutFailed(OSError):
    """The standard output could not be written (a full disk)."""


class DoesNotFit(Exception):
    """With ``--require-fit``: the plan does not fit the device memory (the
    report was printed, no file written)."""


class _Checked:
    """The standard output, whose write errors say that it was the standard
    output that failed (a broken pipe stays one: the reader went away)."""

    def __init__(self, stream):
        self._stream = stream

    def _failed(self, e: OSError) -> StdoutFailed:
        reason = e.strerror or str(e) or type(e).__name__
        return StdoutFailed(f"cannot write the standard output: {reason[:1].lower()}{reason[1:]}")

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise self._failed(e) from None

    def flush(self):
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as e:
            raise self._failed(e) from None

    def __getattr__(self, name):
        return getattr(self._stream, name)


def run(s: Settings, out=None):
    """Do what the settings ask; return the :class:`result.Result` (the
    sweep for a sweep).  Every check comes before any file is written."""
    out = sys.stdout if out is None else out
    stdout = out
    from cli.exporting import Rendered, checked_exports, render_exports

    reads = Reads(s)  # no output may replace one of these
    exports = checked_exports(s, reads)
    from cli.drawing import checked_drawing

    drawing = checked_drawing(s, exports, reads)
    if "metric" in s.explicit and s.plot is None:
        raise UsageError("--metric chooses what --plot shows: give --plot FILE with it")
    if "jobs" in s.explicit and not s.sweep:
        raise UsageError("--jobs runs a sweep's settings at once: give a list, e.g. -p 8,16,32")
    if s.calibrate is not None:
        from cli.calibrating import run_calibration

        return run_calibration(s, out, reads)
    if s.save_cluster is not None:
        raise UsageError("--save-cluster writes what --calibrate fits: give --calibrate FILE")
    if s.require_fit and (s.sweep or s.plans or s.plot):
        raise UsageError("--require-fit checks the plan of one run; it cannot be used with a sweep, --plans or --plot")
    if s.sweep or s.plans or s.plot:
        from cli.study import run_study

        return run_study(s, out, reads)
    from exports import FORMATS, for_path

    output = None
    if s.output is not None:
        output = for_path(s.output)
        if output is None:
            endings = " or ".join(f.suffix for f in FORMATS.values() if f.reads == "result")
            raise UsageError(f"--output: {s.output!r} must end in {endings}")
        check_writable(s.output, "--output", reads)
    if s.dump_graph:
        check_writable(DOT_FILE, "--dump-graph", reads)
        _check_own_dot(DOT_FILE)
    from planner import plan
    from report import render_text

    planned = plan(s, progress=None if s.summary else Progress)  # -q: no progress either
    s, g, result, profile = planned
    rendered = render_exports(exports, planned)  # a format that cannot express the plan says so before any file
    stdout_export = next((text for e, text in rendered if e.path is None), None)
    if stdout_export is not None:  # stdout holds the export alone; the report goes to stderr
        import io

        out = sys.stderr if sys.stderr is not None else io.StringIO()
    if profile is not None:
        print("Profile of the search (top 15 by cumulative time):", file=out)
        print(profile, file=out)
        print(file=out)
    if s.require_fit and result.fits is False:  # the report, then the one line; no file
        print(render_text(result, summary=s.summary), file=out)
        out.flush()  # the report before the error, where both go to one place
        account = result.cost_model.cluster.headroom_account
        room = f" ({account})" if account else ""
        raise DoesNotFit(f"--require-fit: the plan needs {plain(result.memory_bytes / 1e9, 4)} GB per device, more "
                         f"than the {plain(result.capacity / 1e9, 4)} GB of a device{room}")
    # The files first, then the report, which is printed even when a file
    # could not be written (a full disk): the error follows it.
    files = []
    if output is not None:
        files.append(("--output", s.output, output))
    if s.dump_graph:
        files.append(("--dump-graph", DOT_FILE, FORMATS["dot"]))
    files += [(e.flag, e.path, Rendered(text)) for e, text in rendered if e.path is not None]
    failed = None
    for flag, path, fmt in files:
        try:
            write_atomic(path, fmt.render(result, g))
        except OSError as e:
            failed = failed or OutputFailed(f"{flag}: could not write {path}: {e.strerror or e}")
            continue
        if flag == "--dump-graph":
            print(f"Wrote the graph ({g.number_of_nodes()} operators, {g.number_of_edges()} edges) to "
                  f"{os.path.abspath(DOT_FILE)}", file=out)
    if drawing is not None:
        from cli.drawing import write_drawing

        try:
            print(write_drawing(planned, s.draw, drawing), file=out)
        except OSError as e:
            failed = failed or OutputFailed(f"--draw: could not write {s.draw}: {e.strerror or e}")
    print(render_text(result, summary=s.summary), file=out)
    if s.breakdown:
        from studies.breakdown import render

        print(render(result, result.baseline("data_parallel") if s.compare else None), file=out)
    if stdout_export is not None:
        stdout.write(stdout_export)
    if failed is not None:
        raise failed
    return result


MAX_MESSAGE = 2000  # characters of an error's line: an input echoed back whole (a path of 100,000) is cut


def _say(line: str) -> None:
    """One line on stderr, if there is a stderr (its middle cut where it
    passes :data:`MAX_MESSAGE` characters)."""
    line = " ".join(line.splitlines())
    if len(line) > MAX_MESSAGE:
        line = line[:MAX_MESSAGE - 505] + " ... " + line[-500:]
    if sys.stderr is not None:
        try:
            print(line, file=sys.stderr)
        except OSError:
            pass


def _check_own_dot(path: str) -> None:
    """Refuse to replace a ``graph.dot`` that ``-d`` did not write (its
    first line is not :data:`exports.DOT_MARK`): the user's own file."""
    from exports import DOT_MARK

    if not os.path.isfile(path):
        return
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            first = f.readline(len(DOT_MARK) + 2).rstrip("\r\n")
    except OSError as e:
        raise UsageError(f"--dump-graph: cannot read {path}: {e.strerror or e}") from None
    if first != DOT_MARK:
        raise UsageError(f"--dump-graph: {os.path.abspath(path)} does not start with the line -d writes (a file of "
                         "your own, or one an older version wrote): move it away first")


def main(argv=None) -> int:
    """The command line's run (:func:`_main`), Python's hook for errors it
    cannot raise and the interrupt's handler restored after it."""
    hook = sys.unraisablehook
    handler = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    try:
        return _main(argv)
    finally:
        sys.unraisablehook = hook
        if handler is not None:  # the caller's (scheduler.py's: a quiet exit 130) once the run has ended
            signal.signal(signal.SIGINT, handler)


def _main(argv=None) -> int:
    """Exit statuses: 0 done (a plan costed with --plan or --evaluate is
    reported, and exits 0, whether it fits the device memory or not); 2 a
    bad command line or input (a flag's value, a file the tool cannot use,
    flags that contradict each other); 1 the run could not be done (it would
    not fit the memory limit, nothing fits the device, a file could not be
    written, or an internal error); 3 with --require-fit, the plan does not
    fit the device memory (reported, nothing written); 130 interrupted; 141
    the reader of the report went away."""
    if sys.stdout is None:  # started with stdout closed: the report goes nowhere
        sys.stdout = open(os.devnull, "w")
    signals = []  # the interrupts received

    def interrupt(signum, frame):
        signals.append(signum)
        raise KeyboardInterrupt

    swallowed = []  # interrupts raised where Python could not unwind

    def unraisable(u, previous=sys.unraisablehook):
        # an interrupt that came while Python ran what cannot raise (an import lock's weak-reference callback,
        # a finaliser): kept, not printed, and the run ends as interrupted (the report may be out by then)
        if signals and u.exc_type is not None and issubclass(u.exc_type, KeyboardInterrupt):
            swallowed.append(u.exc_type)
        else:
            previous(u)

    try:
        s = parse_args(argv)
        if (threading.current_thread() is threading.main_thread()  # from here an interrupt unwinds (files stay whole)
                and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN):  # started with it ignored: it stays so
            signal.signal(signal.SIGINT, interrupt)
            sys.unraisablehook = unraisable
        out = _Checked(sys.stdout)
        run(s, out)
        out.flush()
        if swallowed:
            raise KeyboardInterrupt
    except KeyboardInterrupt:  # a sweep has written the rows finished so far
        return _interrupted()
    except DoesNotFit as e:
        if signals:  # interrupted on the way (where Python could not raise it)
            return _interrupted()
        _say(f"{PROG}: error: {e}")
        return 3
    except BrokenPipeError:  # the reader went away (| head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except StdoutFailed as e:  # what is left in its buffer goes nowhere, rather than fail again at exit
        _say(f"{PROG}: error: {e}")
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1
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
