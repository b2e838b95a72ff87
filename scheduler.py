"""PaSE: find an efficient parallelization strategy for training a DNN on p devices.

A reimplementation of "PaSE: Parallelization Strategies for Efficient DNN
Training" (Elango, IPDPS 2021): builds the computation graph, costs every
configuration of every operator, and finds the exact minimum-cost strategy.

    python scheduler.py -g resnet101 -p 32
    python scheduler.py -g model.onnx -p 32 -b 64
    python scheduler.py -g llama3-8b/config.json -p 64 --seq 4096
    python scheduler.py -g transformer -p 64 --output plan.json
    python scheduler.py --evaluate plan.json
    python scheduler.py -g alexnet -p 8 -d --measure

The command line lives in ``cli/``; this file only starts it, so that an
interrupt at any moment of the start ends quietly (exit status 130).
"""

try:  # from the first line until the run starts, an interrupt ends quietly (cli.runner.main takes over)
    import os
    import signal
    import sys

    # numpy asks for huge pages on large arrays; where the kernel then compacts memory on each one
    # (transparent huge pages' defrag set to "madvise", the common default) a search's tables cost
    # ~2 ms per MB to allocate instead of ~0.3 (Transformer at p = 1024: 3.6 s to 2.3 s).  Set it to
    # 1 to have numpy ask again.
    os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")

    def _interrupted(signum=None, frame=None):
        if sys.stderr is not None:
            sys.stderr.write("scheduler.py: interrupted\n")
            sys.stderr.flush()
        os._exit(130)

    if __name__ == "__main__" and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # ignored: stays so
        signal.signal(signal.SIGINT, _interrupted)
    from cli import main
except KeyboardInterrupt:  # before the handler was in place
    import os
    import sys

    if sys.stderr is not None:
        sys.stderr.write("scheduler.py: interrupted\n")
    os._exit(130)


def _leave(status: int) -> None:
    """Exit with ``status``.  Once numba is loaded (large searches), the
    interpreter's teardown of it takes ~0.2 s: with the report written and
    flushed and every file closed, the process ends without it, unless a
    profiler or tracer (coverage) waits for the exit to write its data."""
    if "numba" in sys.modules and sys.getprofile() is None and sys.gettrace() is None:
        try:
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:
                    stream.flush()
        except KeyboardInterrupt:
            _interrupted()
        except (OSError, ValueError):  # the usual exit reports nothing more either: main has said it all
            pass
        else:
            os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    _leave(main())
