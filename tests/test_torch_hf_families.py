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


#: a family's switches flipped from its class's defaults (what its released sizes set otherwise), each on a small
#: model: the parameters must still be the transformers model's
SMALL = dict(num_hidden_layers=2, hidden_size=256, intermediate_size=512, num_attention_heads=8,
             num_key_value_heads=4, head_dim=32, vocab_size=1000, pad_token_id=0, bos_token_id=0, eos_token_id=0)
VARIANTS = [("gpt_neox", dict(use_parallel_residual=False, attention_bias=False, num_key_value_heads=8)),
            ("stablelm", dict(use_parallel_residual=True, use_qkv_bias=True, qk_layernorm=True)),
            ("starcoder2", dict(use_bias=False, sliding_window=128)),
            ("cohere", dict(use_qk_norm=True, attention_bias=True)),
            ("phi", dict(qk_layernorm=True)),
            ("olmo", dict(attention_bias=True)),
            ("glm4", dict(attention_bias=False)),
            ("seed_oss", dict(attention_bias=False, attention_out_bias=True, mlp_bias=True)),
            ("helium", dict(attention_bias=True, mlp_bias=True)),
            ("ernie4_5", dict(use_bias=True, tie_word_embeddings=False))]


@pytest.mark.parametrize("family, switches", VARIANTS, ids=[f for f, _ in VARIANTS])
def test_switches_off_the_defaults(tmp_path, family, switches):
    from transformers import AutoConfig

    cfg = AutoConfig.for_model(family, **{**SMALL, **switches})
    cfg.save_pretrained(str(tmp_path))
    assert parameter_count(build_graph(str(tmp_path), batch=2, seq=64)) == families.count(cfg)
