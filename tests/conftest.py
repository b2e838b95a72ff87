"""Shared fixtures: the project root on sys.path and the reference numbers."""

from __future__ import annotations

import gzip
import json
import sys
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = Path(__file__).resolve().parent / "data" / "reference"
sys.path.insert(0, str(ROOT))

GRAPH_NAMES = ("alexnet", "resnet101", "inception3", "rnnlm", "transformer")
PROCS = (4, 8, 16, 32, 64)
SETTINGS = [(g, p) for g in GRAPH_NAMES for p in PROCS]


@lru_cache(maxsize=None)
def reference(graph: str, p: int) -> dict:
    """The original tool's numbers for one graph and device count."""
    with gzip.open(REFERENCE / f"{graph}_p{p}.json.gz", "rt") as f:
        return json.load(f)


@lru_cache(maxsize=None)
def built(graph: str, batch: int = 128, width: int | None = None):
    from models import build_graph

    return build_graph(graph, batch, width)


@lru_cache(maxsize=None)
def costed(graph: str, p: int):
    from cost_model import build_costs

    return build_costs(built(graph), p)


def run_cli(*args, cwd=None, ok=True, timeout=300, **kw):
    """``scheduler.py`` in a subprocess, as users run it (``kw``: more of
    ``subprocess.run``'s arguments); with ``ok``, it must succeed with
    nothing on stderr."""
    import subprocess

    proc = subprocess.run([sys.executable, str(ROOT / "scheduler.py"), *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout, **kw)
    if ok:
        assert proc.returncode == 0 and not_progress(proc.stderr) == "", proc.stderr
    return proc


def not_progress(stderr: str) -> str:
    """``stderr`` without the progress lines of steps that took a second or
    more (``cli/progress.py``): what a run has to say beside them."""
    from cli.progress import LINE

    return "".join(line for line in stderr.splitlines(keepends=True) if not LINE.match(line.rstrip("\n")))


def outputs_under_hash_seeds(code: str, seeds=("0", "1", "12345")) -> set[str]:
    """The distinct outputs of ``code`` (run with the project on its path)
    under several hash seeds: one output means a deterministic result."""
    import subprocess

    code = f"import sys; sys.path.insert(0, {str(ROOT)!r})\n" + code
    return {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"}).stdout for seed in seeds}


def modules_loaded_by_a_plain_run(*names: str) -> list[bool]:
    """Whether a built-in run of the command line loads each module."""
    import subprocess

    code = ("import sys, io, contextlib, cli\n"
            "with contextlib.redirect_stdout(io.StringIO()): cli.main(['-g', 'resnet101', '-p', '4'])\n"
            f"print(*[m in sys.modules for m in {list(names)!r}])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return [word == "True" for word in proc.stdout.split()]


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300)


@pytest.fixture(params=SETTINGS, ids=[f"{g}-p{p}" for g, p in SETTINGS])
def setting(request):
    return request.param


def one_line_error(proc, status: int = 2) -> str:
    """The one line a refused run prints (no traceback, the status
    ``status``), without the program's prefix."""
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("scheduler.py: error: "), lines[0]
    return lines[0].removeprefix("scheduler.py: error: ")


def tiny_llama(tmp_path, layers: int = 2, base: str = "llama3-8b"):
    """A directory holding Llama 3 8B's config (or another of
    tests/data/configs, ``base``: mixtral-8x7b keeps its 8 experts, 2 per
    token) shrunk (width 512, 8 heads, a vocabulary of 32,768) to
    ``layers`` layers."""
    cfg = json.loads((ROOT / "tests" / "data" / "configs" / base / "config.json").read_text())
    cfg.update(hidden_size=512, intermediate_size=1792, num_hidden_layers=layers, num_attention_heads=8,
               num_key_value_heads=8, vocab_size=32768)
    d = tmp_path / ("tiny-llama" if base == "llama3-8b" else f"tiny-{base}")
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def export_text(fmt: str, graph: str, procs: int, **kw) -> str:
    """The ``--export fmt`` file of the plan the settings ``kw`` give."""
    from exports.frameworks import FRAMEWORKS
    from exports.frameworks.plans import PlanView
    from planner import plan
    from settings import Settings

    p = plan(Settings(graph=graph, procs=procs, **kw))
    return FRAMEWORKS[fmt].render(PlanView(p.settings, p.graph, p.result))


def bash_array(text: str, name: str) -> list[str]:
    """The words of the bash array ``name`` the file sets, as bash itself
    reads them."""
    import shutil
    import subprocess

    assert shutil.which("bash")
    proc = subprocess.run(["bash", "-c", text + f'\nprintf "%s\\n" "${{{name}[@]}}"'],
                          capture_output=True, text=True, check=True)
    return proc.stdout.split("\n")[:-1]
