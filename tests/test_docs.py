"""The manual cannot go stale: every command README.md and docs/*.md show
runs, and prints what they show; the flags reference is what the settings'
declarations give.

A command is shown in a fenced block whose info string is ``console``: a
line ``$ COMMAND`` (a line ending in `` \\`` goes on on the next), then the
lines it prints, stdout and stderr as a terminal shows them. The lines
shown are a pattern of the whole output: a line ``...`` stands for any
number of lines, ``...`` inside a line for any text, trailing spaces are
ignored, and everything else must be equal. A last line ``[exit N]`` says
the command ends with status N (otherwise 0).

Each command runs with ``bash -o pipefail`` in a scratch directory that
holds a link to each of the repository's top-level entries (so
``scheduler.py``, ``tests/data/...`` and ``examples/...`` resolve, and a
file a command writes lands in the scratch directory), ``python`` being the
interpreter running the tests. The commands of one block share their
directory, in order (a plan written by one is read by the next). A command
must leave the repository's files as they were.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXIT = re.compile(r"\[exit (\d+)\]")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
#: the entries of the repository the scratch directory does not link
UNLINKED = {".git", ".venv", "venv", "__pycache__", ".pytest_cache", ".hypothesis"}
#: pages the README links that are added beside this one (a link to them is checked once they exist)
COMMAND_TIMEOUT = 120


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository
    line: int  # of the opening fence, 1-based
    info: str
    lines: tuple[tuple[int, str], ...]  # (line number, text without the fence's indentation)


@dataclass(frozen=True)
class Command:
    page: str
    line: int
    text: str
    expected: tuple[str, ...]
    status: int
    block: int  # the block's line
    index: int  # its place in the block


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown page."""
    out, open_, body = [], None, []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        m = FENCE.match(line)
        if open_ is None:
            if m:
                open_, body = (n, m.group(1), m.group(2), m.group(3)), []
            continue
        start, indent, fence, info = open_
        if line.strip().startswith(fence[0] * len(fence)) and not line.strip().strip(fence[0]):
            page = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
            out.append(Block(page, start, info, tuple(body)))
            open_ = None
            continue
        body.append((n, line[len(indent):] if line.startswith(indent) else line.lstrip()))
    assert open_ is None, f"{path.name}:{open_[0]}: a code block is never closed"
    return out


def commands(block: Block) -> list[Command]:
    """The commands of a ``console`` block, each with the output it shows."""
    out, current, pending = [], None, ""
    for n, text in block.lines:
        if current is None and not pending and not text.startswith("$ "):
            raise AssertionError(f"{block.page}:{n}: a console block must start with a '$ ' command line")
        if pending or text.startswith("$ "):
            text = pending + (text[2:] if not pending else text)
            if text.endswith("\\"):
                pending = text[:-1]
                continue
            pending = ""
            current = [n, text, []]
            out.append(current)
        else:
            current[2].append(text.rstrip())
    result = []
    for i, (n, text, shown) in enumerate(out):
        while shown and not shown[-1]:
            shown.pop()
        status = 0
        if shown and EXIT.fullmatch(shown[-1]):
            status = int(EXIT.fullmatch(shown.pop()).group(1))
        result.append(Command(block.page, n, text, tuple(shown), status, block.line, i))
    return result


def all_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page)]


def all_commands() -> list[Command]:
    return [c for b in all_blocks() if b.info == "console" for c in commands(b)]


# -- matching the output ---------------------------------------------------------------------------

def _line_matches(pattern: str, line: str) -> bool:
    if "..." not in pattern:
        return pattern == line
    return re.fullmatch(".*".join(map(re.escape, pattern.split("..."))), line, re.DOTALL) is not None


def matches(shown, output: list[str]) -> bool:
    """Whether ``output`` (lines, trailing spaces removed) is what ``shown``
    describes: ``...`` alone is any number of lines."""
    reach = {0}  # the output lines matched so far, for each way of matching the lines shown so far
    for line in shown:
        if not reach:
            return False
        if line == "...":
            reach = set(range(min(reach), len(output) + 1))
        else:
            reach = {j + 1 for j in reach if j < len(output) and _line_matches(line, output[j])}
    return len(output) in reach


def first_missing(shown, output: list[str]) -> str | None:
    """The first line shown that does not appear, in order, in the output."""
    j = 0
    for line in shown:
        if line == "...":
            continue
        k = next((k for k in range(j, len(output)) if _line_matches(line, output[k])), None)
        if k is None:
            return line
        j = k + 1
    return None


def output_lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def test_the_matching_rules():
    out = ["PaSE strategy: alexnet", "", "Search: GENERATESEQ, 0.001 s", "Total cost: 5.00"]
    assert matches(["PaSE strategy: alexnet", "...", "Total cost: 5.00"], out)
    assert matches(["...", "Search: GENERATESEQ, ... s", "..."], out)
    assert matches(["PaSE strategy: alexnet", "", "Search: GENERATESEQ, ... s", "Total cost: 5.00"], out)
    assert not matches(["PaSE strategy: alexnet", "Total cost: 5.00"], out)  # lines left out need '...'
    assert not matches(["...", "Total cost: 5.0"], out)  # the whole line
    assert not matches(["Total cost: 5.00", "...", "PaSE strategy: alexnet"], out)  # in order
    assert not matches(["...", "Search: GENERATESEQ, 0.002 s", "..."], out)
    assert first_missing(["PaSE strategy: alexnet", "...", "Total cost: 6.00"], out) == "Total cost: 6.00"


def test_a_console_block_is_read_as_commands(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Text\n\n  ```console\n  $ python scheduler.py -p 0\n  scheduler.py: error: ...\n  [exit 2]\n"
                    "  $ python scheduler.py \\\n  -p 8 -q\n  PaSE strategy: alexnet, batch 128, p = 8\n  ...\n\n"
                    "  ```\n")
    (block,) = blocks(page)
    first, second = commands(block)
    assert (first.line, first.text, first.expected, first.status) == (
        4, "python scheduler.py -p 0", ("scheduler.py: error: ...",), 2)
    assert (second.text, second.expected, second.status, second.index) == (
        "python scheduler.py -p 8 -q", ("PaSE strategy: alexnet, batch 128, p = 8", "..."), 0, 1)


# -- running a block's commands --------------------------------------------------------------------

def _snapshot() -> dict[str, tuple[int, int]]:
    """The repository's files (but caches and git's own) and their times and sizes."""
    out = {}
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in UNLINKED and not d.startswith(".")]
        for f in files:
            if f.endswith((".pyc", ".pyo")):
                continue
            st = os.stat(os.path.join(top, f))
            out[os.path.join(top, f)] = (st.st_mtime_ns, st.st_size)
    return out


class Scratch:
    """The directories the commands of each block run in, made on first use
    in this process; a command the process has not seen runs the block's
    earlier commands first (the tests of one block may run apart)."""

    def __init__(self, factory):
        self.factory = factory
        self.dirs: dict[tuple[str, int], tuple[Path, int]] = {}
        self.bin = factory.mktemp("bin")
        python = self.bin / "python"
        python.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
        python.chmod(0o755)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(PATH=f"{self.bin}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}", PYTHONUNBUFFERED="1",
                   COLUMNS="80", PYTHONHASHSEED="0")
        return env

    def fresh(self) -> Path:
        d = self.factory.mktemp("docs")
        for entry in ROOT.iterdir():
            if entry.name not in UNLINKED:
                (d / entry.name).symlink_to(entry)
        return d

    def run(self, cmd: Command, block: list[Command]) -> subprocess.CompletedProcess:
        key = (cmd.page, cmd.block)
        where, done = self.dirs.get(key, (None, 0))
        if where is None or done > cmd.index:
            where, done = self.fresh(), 0
        for earlier in block[done:cmd.index]:
            self._run(earlier, where)
        proc = self._run(cmd, where)
        self.dirs[key] = (where, cmd.index + 1)
        return proc

    def _run(self, cmd: Command, where: Path) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-o", "pipefail", "-c", cmd.text], cwd=where, env=self.env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=COMMAND_TIMEOUT)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return Scratch(tmp_path_factory)


COMMANDS = all_commands()


@pytest.mark.parametrize("cmd", COMMANDS, ids=[f"{c.page}:{c.line}" for c in COMMANDS])
def test_a_shown_command_prints_what_is_shown(cmd, scratch):
    block = [c for c in COMMANDS if (c.page, c.block) == (cmd.page, cmd.block)]
    before = _snapshot()
    proc = scratch.run(cmd, block)
    out = output_lines(proc.stdout)
    where = f"{cmd.page}:{cmd.line}: $ {cmd.text}"
    assert proc.returncode == cmd.status, (f"{where}\nexits {proc.returncode}, the page shows {cmd.status}:\n"
                                           + "\n".join(out[-20:]))
    missing = first_missing(cmd.expected, out)
    why = (f"this line shown is not printed (after those before it): {missing!r}" if missing is not None else
           "every line shown is printed, but with lines between or around them: mark those with a '...' line")
    assert matches(cmd.expected, out), f"{where}\nprints what the page does not show: {why}\n--- printed:\n" + \
        "\n".join(out)
    changed = sorted(p for p, v in _snapshot().items() if before.get(p) != v)
    assert not changed, f"{where}\nwrites into the repository: {', '.join(changed)}"


def test_every_page_shows_commands():
    """The collection found the pages and their commands."""
    pages = {c.page for c in COMMANDS}
    assert "README.md" in pages and len(pages) >= 8


# -- no command shown outside console blocks -------------------------------------------------------

RUNNABLE = re.compile(r"^(\$\s+)?(python3?|pip3?|pytest|bash|sh|jq|dot|cat|git|make|\.ci/|\./|benchmarks/\S+\.py)"
                      r"(\s|$)|scheduler\.py\s+-")
#: the README's install commands: they install, which the tests cannot do; .ci/run runs the second
INSTALL_RUN = ("python3 -m venv .venv && . .venv/bin/activate && pip install -r requirements.txt && "
               "python scheduler.py -g resnet101 -p 32")


def _ci_command() -> str:
    """The first command ``.ci/run`` runs: the README's install-and-test command."""
    return [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith(
        ("#", "set ", "cd "))][0]


def _outside_console(page: Path) -> list[tuple[int, str]]:
    """Lines of ``page`` that are code outside ``console`` blocks: fenced
    blocks of another kind and indented blocks."""
    text = page.read_text().splitlines()
    fenced = {}
    for b in blocks(page):
        for n, line in b.lines:
            fenced[n] = b.info
    out = []
    for n, line in enumerate(text, 1):
        if n in fenced:
            if fenced[n] != "console":
                out.append((n, line.strip()))
        elif line.startswith("    ") and line.strip() and (n == 1 or not text[n - 2].strip()
                                                             or text[n - 2].startswith("    ")):
            out.append((n, line.strip()))
    return out


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_no_command_is_shown_outside_a_console_block(page):
    rel = str(page.relative_to(ROOT))
    found = [(n, line) for n, line in _outside_console(page) if RUNNABLE.search(line)]
    if rel == "README.md":
        installs = [line for _, line in found]
        assert installs == [INSTALL_RUN, _ci_command()], installs
        return
    assert not found, "\n".join(f"{rel}:{n}: {line}" for n, line in found)


def test_the_install_commands_are_what_ci_runs_and_name_real_files():
    ci = _ci_command()
    assert ci.startswith(INSTALL_RUN.split("pip install")[0])
    for command in (INSTALL_RUN, ci):
        for req in re.findall(r"-r (\S+)", command):
            assert (ROOT / req).is_file(), req
            assert all("==" in line or line.startswith("-r ") for line in (ROOT / req).read_text().splitlines()
                       if line.strip() and not line.startswith("#")), f"{req}: every requirement pinned"
    assert ci.endswith("pip install -r requirements-dev.txt && python -m pytest -q")


def test_the_main_job_of_the_install_command_runs(scratch):
    job = INSTALL_RUN.rsplit("&& ", 1)[1]
    proc = scratch._run(Command("README.md", 0, job, (), 0, 0, 0), scratch.fresh())
    assert proc.returncode == 0, proc.stdout
    lines = output_lines(proc.stdout)
    assert lines[0] == "PaSE strategy: resnet101, batch 128, p = 32" and lines[-1].startswith("Total cost: ")


def test_the_checks_find_a_command_outside_a_console_block(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Text\n\n    python scheduler.py -g alexnet\n\n```sh\ncat x.toml\n```\n\n```console\n"
                    "$ python scheduler.py -g alexnet\n```\n\n```toml\n# python is fine in a comment\n```\n")
    found = [(n, line) for n, line in _outside_console(page) if RUNNABLE.search(line)]
    assert found == [(3, "python scheduler.py -g alexnet"), (6, "cat x.toml")]


@pytest.mark.parametrize("example,published,within", [
    ("llama3-70b", 70_553_706_496, 0),  # Llama 3 70B's published count (70.6B)
    ("gpt3-175b", 175e9, 0.005),  # GPT-3 175B (Brown et al. 2020): 174.6B with the 50,257-word embedding tied
])
def test_the_example_configs_have_the_published_sizes(example, published, within):
    import json

    from graph import parameter_count
    from models import build_graph

    path = ROOT / "examples" / example / "config.json"
    g = build_graph(str(path), batch=1, seq=16)
    assert abs(parameter_count(g) - published) <= within * published
    cfg = json.loads(path.read_text())
    if example == "gpt3-175b":  # the published shape
        assert (cfg["n_layer"], cfg["n_embd"], cfg["n_head"], cfg["n_positions"], cfg["vocab_size"]) == \
            (96, 12288, 96, 2048, 50257)


def test_the_extending_page_code_plans(tmp_path):
    """The kind and the model docs/extending.md shows, run together: the
    model plans, with the kind's cost worked out by hand."""
    code = [("\n".join(line for _, line in b.lines)) for b in blocks(ROOT / "docs" / "extending.md")
            if b.info == "python"]
    assert len(code) == 2
    driver = 'import cli\nsys.exit(cli.main(["-g", "mlp", "-p", "4", "-m", "512"]))\n'
    proc = subprocess.run([sys.executable, "-c", f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                           + "\n".join(code) + "\n" + driver], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("PaSE strategy: mlp, batch 128, width 512, p = 4\n")
    row = next(line.split() for line in proc.stdout.splitlines() if line.split()[1:3] == ["scale", "Scale"])
    devices = math.prod(int(c) for c in row[4].strip("()").split(","))
    assert float(row[5]) == pytest.approx(2 * 128 * 512 / devices, rel=1e-3)


# -- links ----------------------------------------------------------------------------------------

LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings."""
    out = set()
    fenced = {n for b in blocks(page) for n, _ in b.lines}
    for n, line in enumerate(page.read_text().splitlines(), 1):
        if n not in fenced and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def _links():
    for page in PAGES:
        fenced = {n for b in blocks(page) for n, _ in b.lines}
        for n, line in enumerate(page.read_text().splitlines(), 1):
            if n in fenced:
                continue
            for target in LINK.findall(line):
                if not re.match(r"[a-z]+://|mailto:", target):
                    yield page, n, target


LINKS = list(_links())


@pytest.mark.parametrize("page,line,target", LINKS,
                         ids=[f"{p.relative_to(ROOT)}:{n}:{t}" for p, n, t in LINKS])
def test_a_link_leads_somewhere(page, line, target):
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    rel = os.path.relpath(dest, ROOT)
    where = f"{page.relative_to(ROOT)}:{line}: {target}"
    assert dest.exists(), f"{where}: no such file"
    if anchor and dest.suffix == ".md":
        assert anchor in _anchors(dest), f"{where}: no heading of {rel} gives #{anchor}"


def test_the_readme_leads_to_every_page():
    linked = {os.path.relpath((ROOT / t.partition("#")[0]).resolve(), ROOT)
              for p, _, t in LINKS if p.name == "README.md" and t.partition("#")[0]}
    pages = {str(p.relative_to(ROOT)) for p in PAGES[1:]}
    assert pages <= linked, sorted(pages - linked)


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) < 300


# -- the flags reference ---------------------------------------------------------------------------

def test_the_flags_reference_is_what_the_declarations_give():
    from cli.flags_reference import COMMAND, reference

    assert (ROOT / "docs" / "flags.md").read_text() == reference(), \
        f"docs/flags.md differs from the settings' declarations: run `{COMMAND}`"


def test_the_flags_reference_lists_every_flag_help_shows():
    proc = subprocess.run([sys.executable, str(ROOT / "scheduler.py"), "--help"], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0
    flags = {part.split()[0] for line in proc.stdout.splitlines() if line.startswith("  -")
             for part in line.strip().split("  ")[0].split(", ")}
    assert len(flags) > 60 and {"--recompute", "--zero", "--pp", "--plan", "--search", "--calibrate",
                                "--headroom", "--attention", "--help"} <= flags
    page = (ROOT / "docs" / "flags.md").read_text()
    assert not [f for f in flags if f"`{f}`" not in page]
    # grouped as --help groups them: the sweeps' flags under their heading
    sweeps = page.split("\n## Sweeps\n")[1]
    assert all(f"`{f}`" in sweeps for f in ("--jobs", "--plans", "--plot", "--metric"))
    assert "`--procs`" not in sweeps


# -- the published figures ---------------------------------------------------------------------------

def test_the_published_table_is_what_the_benchmark_prints():
    """docs/frameworks.md's table of published figures and its summary lines
    are what ``benchmarks/published.py --markdown`` prints today."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "published.py"), "--markdown"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    printed = [line for line in proc.stdout.splitlines() if line.strip()]
    summaries = [line for line in printed if not line.startswith("|")]
    assert len(printed) > 60 and len(summaries) >= 7
    page = (ROOT / "docs" / "frameworks.md").read_text().splitlines()
    start = page.index(printed[0])
    shown = [line.removeprefix("- ") for line in page[start:start + len(printed) + 1] if line.strip()]
    assert shown == printed, "docs/frameworks.md's published table is stale: run " \
                             "`python benchmarks/published.py --markdown`"


def test_the_family_count_the_front_pages_give_is_the_tools():
    """The README and docs/llm.md say how many Hugging Face families the
    tool reads: the number models.hf_config.FAMILIES holds."""
    from models.hf_config import FAMILIES

    for page in ("README.md", "docs/llm.md"):
        said = {int(n) for n in re.findall(r"(\d+) families", (ROOT / page).read_text())}
        assert said == {len(FAMILIES)}, (page, said)
