"""Progress of long steps on stderr: on a terminal, a line redrawn as the
step goes; otherwise (a log, a pipe), one line when a step that took a
second or more ends: ``scheduler.py: searching: 452 operators in 3.2 s``
(none for a step an error ends: the error's line follows).  ``-q`` shows
none (the command line passes no progress)."""

from __future__ import annotations

import re
import sys
import time

__all__ = ["Progress", "LINE"]

#: a progress line as written where stderr is not a terminal
LINE = re.compile(r"^scheduler\.py: [a-z][a-z ,()-]*: [0-9,]+ [a-z ]+ in [0-9]+\.[0-9] s$")


class Progress:
    """Progress of the step ``what`` (counted in ``unit``) on ``stream``
    (default: stderr); ``after`` seconds: shorter steps show nothing."""

    def __init__(self, what: str = "searching", unit: str = "operators", stream=None, after: float = 1.0):
        self.what, self.unit = what, unit
        self.stream = sys.stderr if stream is None else stream
        self.tty = self.stream is not None and self.stream.isatty()
        self.after = after
        self.t0 = time.perf_counter()
        self.last = 0.0
        self.shown = False
        self.done = self.total = None

    def __call__(self, done, total):
        self.done, self.total = done, total
        if not self.tty:
            return
        now = time.perf_counter()
        if now - self.t0 > self.after and (now - self.last > 0.2 or done == total):
            self.last = now
            self.shown = True
            self.stream.write(f"\r{self.what}: {done}/{total} {self.unit}, {now - self.t0:.1f} s ")
            self.stream.flush()

    def close(self):
        if self.stream is None:
            return
        try:
            if self.tty:
                if self.shown:
                    self.stream.write("\r" + " " * 60 + "\r")
                    self.stream.flush()
                return
            took = time.perf_counter() - self.t0
            failing = sys.exc_info()[0] is not None  # closed as an error unwinds: the error's line says it
            if took >= self.after and self.total is not None and not failing:
                self.stream.write(f"scheduler.py: {self.what}: {self.total:,} {self.unit} in {took:.1f} s\n")
                self.stream.flush()
        except (OSError, ValueError):  # a closed or full stderr: progress is not worth an error
            pass
