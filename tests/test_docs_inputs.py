"""Every command ``docs/inputs.md`` shows runs and prints what it shows: the
``console`` blocks, each in a scratch directory where the repository's
files are visible, its commands in order (a later one reads what an earlier
one wrote); a line ``...`` stands for any number of lines, the others
follow each other as shown."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

PAGE = ROOT / "docs" / "inputs.md"


def blocks(text: str) -> list[list[tuple[str, list[str]]]]:
    """The console blocks of a page: per block, ``(command, shown lines)``."""
    out = []
    for body in re.findall(r"^```console\n(.*?)^```", text, re.S | re.M):
        cmds = []
        for line in body.splitlines():
            if line.startswith("$ "):
                cmds.append((line[2:], []))
            else:
                assert cmds, f"output before any command: {line!r}"
                cmds[-1][1].append(line.rstrip())
        out.append(cmds)
    return out


def matches(shown: list[str], real: list[str]) -> bool:
    """Whether ``real`` has the ``shown`` lines: consecutive runs between
    ``...`` lines, in order, the first at the start and the last at the end
    unless a ``...`` stands before or after them."""
    parts, run = [], []
    for line in shown:
        if line == "...":
            parts.append(run)
            run = []
        else:
            run.append(line)
    parts.append(run)
    real = [r.rstrip() for r in real]
    at = 0
    for i, part in enumerate(parts):
        if not part:
            continue
        last = i == len(parts) - 1
        starts = [at] if i == 0 else range(at, len(real) - len(part) + 1)
        if last:
            starts = [s for s in starts if s == len(real) - len(part)]
        hit = next((s for s in starts if real[s:s + len(part)] == part), None)
        if hit is None:
            return False
        at = hit + len(part)
    return True


def test_the_page_shows_commands():
    assert len(blocks(PAGE.read_text())) >= 5


@pytest.mark.parametrize("index", range(len(blocks(PAGE.read_text()))))
def test_each_block_prints_what_it_shows(tmp_path, index):
    for entry in os.listdir(ROOT):  # the repository's files, visible from a scratch directory
        if not entry.startswith("."):
            os.symlink(ROOT / entry, tmp_path / entry)
    for command, shown in blocks(PAGE.read_text())[index]:
        assert command.startswith("python scheduler.py"), command
        proc = subprocess.run(["bash", "-c", f'"$PYTHON"{command[len("python"):]}'], capture_output=True, text=True,
                              cwd=tmp_path, env={**os.environ, "PYTHON": sys.executable}, timeout=120)
        real = proc.stdout.splitlines()
        assert matches(shown, real), f"$ {command}\n--- shown\n" + "\n".join(shown) + "\n--- printed\n" + \
            proc.stdout + proc.stderr
