"""The command line of ``scheduler.py``: flags to settings (``args``), the
files it writes (``files``), progress on the terminal (``progress``),
sweeps (``study``) and running (``runner``: settings to a result with
:func:`planner.plan`, its files and its report; ``main`` and its exit
statuses)."""

from cli.args import UsageError, build_parser, parse_args
from cli.files import write_atomic
from cli.progress import Progress
from cli.runner import main, run
from settings import Settings

__all__ = ["Settings", "UsageError", "build_parser", "parse_args", "write_atomic", "Progress", "main", "run"]
