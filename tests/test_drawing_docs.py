"""docs/drawing.md's pictures are what its commands draw: each picture the
page shows is drawn by a command of one of its console blocks, and that
command, run with the block's commands before it as the page's tests run
them (tests/test_docs.py checks what they print), draws a picture of the
committed one's size."""

from __future__ import annotations

import re
import struct
import subprocess
import sys

from conftest import ROOT
from test_docs import UNLINKED, blocks, commands

PAGE = ROOT / "docs" / "drawing.md"


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def drawn_by(name: str):
    """The console block's commands up to the one that draws ``name``."""
    for block in blocks(PAGE):
        if block.info != "console":
            continue
        cmds = commands(block)
        for i, c in enumerate(cmds):
            if re.search(rf"--draw {re.escape(name)}(\s|$)", c.text):
                return cmds[:i + 1]
    return None


def test_every_picture_is_drawn_by_a_command_of_the_page_at_its_size(tmp_path):
    pictures = re.findall(r"!\[[^\]]+\]\(img/([^)]+\.png)\)", PAGE.read_text())
    assert len(pictures) >= 5
    for entry in ROOT.iterdir():  # the repository's files, seen from a scratch directory
        if entry.name not in UNLINKED:
            (tmp_path / entry.name).symlink_to(entry)
    ran = set()
    for name in pictures:
        cmds = drawn_by(name)
        assert cmds is not None, f"no command of the page draws {name}"
        for c in cmds:
            if c.text not in ran:
                proc = subprocess.run(["bash", "-o", "pipefail", "-c", c.text.replace("python ", f"{sys.executable} ",
                                                                                      1)],
                                      cwd=tmp_path, capture_output=True, text=True, timeout=300)
                assert proc.returncode == 0, (c.text, proc.stderr)
                ran.add(c.text)
        committed = (ROOT / "docs" / "img" / name).read_bytes()
        assert png_size(committed) == png_size((tmp_path / name).read_bytes()), name
