"""Progress of long steps on stderr, shown only when it is a terminal."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


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
