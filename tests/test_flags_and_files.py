"""What the flags do against the files a run reads and writes
(``docs/inputs.md``): inputs that are not regular files, outputs that would
replace an input, flags against a plan given whole, the memory bound while a
model is read, ``--require-fit`` and the exit statuses, and the messages a
hand-edited file or a path gets."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from conftest import ROOT, run_cli

CONFIGS = ROOT / "tests" / "data" / "configs"
ONNX = ROOT / "tests" / "data" / "onnx"


def run(*args, cwd, ok=True, **kw):
    return run_cli(*args, cwd=cwd, ok=ok, **kw)


def one_line_error(proc, status: int = 2) -> str:
    """The one line a refused run prints, without the program's prefix."""
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("scheduler.py: error: "), lines[0]
    return lines[0].removeprefix("scheduler.py: error: ")


def files_in(path) -> dict:
    """Every file under ``path`` with its bytes (links as their target)."""
    out = {}
    for root, _, names in os.walk(path):
        for n in names:
            p = os.path.join(root, n)
            out[os.path.relpath(p, path)] = os.readlink(p) if os.path.islink(p) else open(p, "rb").read()
    return out


# -- inputs that are not regular files -------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("args, name", [
    (["-g", "x.json"], "x.json"), (["-g", "x.onnx"], "x.onnx"), (["--evaluate", "x.json"], "x.json"),
    (["--cluster", "x.json"], "x.json"), (["--calibrate", "x.json", "--device", "h100"], "x.json"),
])
def test_a_fifo_is_refused_not_waited_on(tmp_path, args, name):
    os.mkfifo(tmp_path / name)
    msg = one_line_error(run(*args, "-p", 8, cwd=tmp_path, ok=False, timeout=60))
    assert msg.endswith(f"{name} is a FIFO, not a regular file"), msg


@pytest.mark.parametrize("flag", ["-g", "--evaluate", "--cluster"])
def test_a_link_that_loops_is_named_so(tmp_path, flag):
    os.symlink("loop.json", tmp_path / "loop.json")
    msg = one_line_error(run(flag, "loop.json", "-p", 8, cwd=tmp_path, ok=False))
    assert msg.endswith("loop.json is a symbolic link that loops"), msg
