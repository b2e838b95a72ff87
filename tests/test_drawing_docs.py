"""docs/drawing.md as a user reads it: every command its console blocks
show runs, from a scratch directory that sees the repository's files, and
prints the lines shown, in order (``...``: any lines); every picture the
page shows is drawn by one of its commands, and the committed picture is
the size that command draws."""

from __future__ import annotations

import re
import shlex
import struct
import subprocess
import sys

from conftest import ROOT

PAGE = ROOT / "docs" / "drawing.md"


def blocks(text: str) -> list[list[str]]:
    """The lines of each ``console`` block."""
    return [b.splitlines() for b in re.findall(r"```console\n(.*?)```", text, re.S)]


def commands(text: str) -> list[tuple[str, list[str]]]:
    """``(command, lines shown after it)`` in the page's order."""
    out = []
    for lines in blocks(text):
        for line in lines:
            if line.startswith("$ "):
                out.append((line[2:], []))
            else:
                out[-1][1].append(line.rstrip())
    return out


def shown_in(shown: list[str], output: str) -> bool:
    """Whether the shown lines (``...`` aside) appear in ``output`` in order."""
    lines = iter(line.rstrip() for line in output.splitlines())
    return all(any(line == want for line in lines) for want in shown if want != "...")


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_the_matcher_needs_the_lines_in_order():
    assert shown_in(["a", "...", "c"], "a\nb\nc\n") and not shown_in(["c", "a"], "a\nb\nc\n")
    assert not shown_in(["a", "d"], "a\nb\nc\n")


def test_every_command_prints_what_the_page_shows_and_draws_its_pictures(tmp_path):
    text = PAGE.read_text()
    for entry in ROOT.iterdir():  # the repository's files, seen from a scratch directory
        if entry.name not in (".git",) and not entry.name.startswith(".pytest"):
            (tmp_path / entry.name).symlink_to(entry)
    ran = commands(text)
    assert len(ran) >= 8
    for command, shown in ran:
        args = shlex.split(command)
        assert args[:2] == ["python", "scheduler.py"], command
        proc = subprocess.run([sys.executable, *args[1:]], capture_output=True, text=True, cwd=tmp_path,
                              timeout=300)
        assert shown_in(shown, proc.stdout + proc.stderr), (command, proc.stdout[-3000:], proc.stderr)
        assert (proc.returncode == 0) == ("error:" not in "\n".join(shown)), (command, proc.stderr)
    pictures = re.findall(r"!\[[^\]]+\]\(img/([^)]+\.png)\)", text)
    assert len(pictures) >= 5
    drawn = {a[a.index("--draw") + 1] for a in (shlex.split(c) for c, _ in ran) if "--draw" in a}
    for name in pictures:
        assert name in drawn, name  # a command of the page draws it
        committed = (ROOT / "docs" / "img" / name).read_bytes()
        assert png_size(committed) == png_size((tmp_path / name).read_bytes()), name
