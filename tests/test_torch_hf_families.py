"""Every decoder family against ``transformers`` itself: the graph read from
a config made by the family's own config class (its defaults are a
released model; nothing written by hand) has exactly the parameters of
the ``transformers`` model built from the same config on the meta device.
Needs ``requirements-torch.txt``; skipped, with one message, without it."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers", reason="transformers is not installed (pip install -r requirements-torch.txt)")
pytest.importorskip("torch", reason="transformers is not installed (pip install -r requirements-torch.txt)")

import make_family_configs as families  # noqa: E402
from conftest import ROOT  # noqa: E402
from graph import parameter_count  # noqa: E402
from models import build_graph  # noqa: E402

SHIPPED = ROOT / "tests" / "data" / "families"


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads((SHIPPED / "counts.json").read_text())


@pytest.mark.parametrize("family", families.FAMILIES)
def test_the_graph_has_the_parameters_of_the_transformers_model(tmp_path, family):
    cfg = families.config(family)
    folder = tmp_path / family
    cfg.save_pretrained(str(folder))
    g = build_graph(str(folder), batch=2, seq=64)
    assert parameter_count(g) == families.count(cfg)


@pytest.mark.parametrize("family", families.FAMILIES)
def test_the_shipped_configs_are_the_classes(recorded, family):
    """The configs the main suite reads are what the generator writes with
    this transformers (and the counts recorded beside them its models')."""
    import transformers

    shipped = json.loads((SHIPPED / family / "config.json").read_text())
    if recorded["transformers"] != transformers.__version__:
        pytest.skip(f"configs written by transformers {recorded['transformers']}")
    assert shipped == json.loads(families.config(family).to_json_string(use_diff=False))
    assert recorded["parameters"][family] == families.count(families.config(family))


def test_released_sizes():
    assert families.count(families.config("deepseek_v3")) == 671_026_404_352
    assert round(families.count(families.config("gpt_oss")) / 1e9, 1) == 116.8  # gpt-oss-120b
