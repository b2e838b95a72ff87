"""The command line of ``scheduler.py``: flags to settings (``args``), the
files it reads and writes (``files``), and running (``runner``: settings to a
result, its files and its report; ``main`` and its exit statuses)."""

from cli.args import Settings, UsageError, build_parser, parse_args
from cli.files import read_strategy_file, strategy_from_layers, write_atomic
from cli.runner import Progress, main, run

__all__ = ["Settings", "UsageError", "build_parser", "parse_args", "read_strategy_file", "strategy_from_layers",
           "write_atomic", "Progress", "main", "run"]
