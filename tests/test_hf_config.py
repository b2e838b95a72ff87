"""models/hf_config.py: decoder-only models from a config.json.  The real
configs' parameter counts against the published ones, the graph's shape, the
search and the baselines on small configs, and every bad config."""

from __future__ import annotations

import json
from functools import lru_cache

import pytest

from baselines import data_parallel, expert, mesh_tensorflow
from conftest import ROOT
from cost_model import build_costs, evaluate
from dp_search import search
from graph import operators, parameter_count
from models import build_graph

CONFIGS = ROOT / "tests" / "data" / "configs"
PUBLISHED = {"gpt2": 124_439_808, "llama3-8b": 8_030_261_248, "mistral-7b": 7_241_732_096,
             "mixtral-8x7b": 46_702_792_704, "qwen2-0.5b": 494_032_768}


@lru_cache(maxsize=None)
def real(name: str, **params):
    return build_graph(str(CONFIGS / name / "config.json"), **params)


def ops_by_name(g):
    return {op.name: op for op in operators(g)}


FAMILIES = ROOT / "tests" / "data" / "families"


def write(tmp_path, config: dict, name="tiny"):
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder / "config.json"


TINY_LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 8,
              "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 320,
              "max_position_embeddings": 512, "tie_word_embeddings": False}
TINY_MIXTRAL = dict(TINY_LLAMA, model_type="mixtral", num_local_experts=4, num_experts_per_tok=2)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_equals_the_published_one(name):
    assert parameter_count(real(name)) == PUBLISHED[name]


class TestGraphs:
    def test_attributes(self):
        g = real("llama3-8b")
        assert g.graph["name"] == "llama3-8b" and g.graph["cutoff"] == 1
        assert g.graph["params"] == {"batch": 128, "seq": 2048, "attention": "fused"} and g.graph["batch"] == 128
        assert g.graph["expert"] == "mesh_tensorflow" and g.graph["model_dims"] == "xghfv"
        src = g.graph["source"]
        assert src["file"] == "config.json" and len(src["sha256"]) == 64
        assert src["path"] == str(CONFIGS / "llama3-8b" / "config.json")

    def test_grouped_query_attention(self):
        """32 heads on 8 key/value heads: g = 8 groups of r = 4 query heads,
        a key and a value (u = 6 slots) of width d = 128."""
        ops = ops_by_name(real("llama3-8b", attention="materialized"))
        qkv = ops["layer0/attn/qkv"]
        assert qkv.dims == "bgusde" and qkv.space == (128, 8, 6, 2048, 128, 4096)
        q, k, v = (t.shape for t in ops["layer0/attn/split"].outputs)
        assert q == (128, 8, 4, 2048, 128) and k == v == (128, 8, 1, 2048, 128)
        assert ops["layer0/attn/scores"].dims == "bgrstdu" and ops["layer0/attn/scores"].never_split == "d"
        assert ops["layer0/mlp/gate_up"].space == (2, 128, 2048, 14336, 4096)
        assert ops["logits"].space == (128, 2048, 128256, 4096)
        assert len(ops) == 4 + 32 * (8 + 6)  # embed, norm, logits, loss; attention 8, MLP 6 per layer

    def test_gpt2_ties_the_head_to_the_embedding_and_learns_positions(self):
        g = real("gpt2")
        ops = ops_by_name(g)
        assert g.graph["params"] == {"batch": 128, "seq": 1024, "attention": "fused"}  # its limit, below 2048
        assert ops["pos_embed"].space == (128, 1024, 768, 1024) and ops["layer0/attn/qkv"].dims == "jbhsde"
        head = list(ops).index("logits")
        assert g.graph["shared"] == [(head, 1)]
        assert ops["layer0/mlp/up"].kind.pw == 1 and ops["layer0/attn/norm"].kind.name == "Norm"

    def test_mixtral_experts(self):
        ops = ops_by_name(real("mixtral-8x7b"))
        assert ops["layer0/mlp/gate"].space == (128, 2048, 8) and ops["layer0/mlp/gate"].outputs[0].shape[-1] == 2
        assert ops["layer0/mlp/dispatch"].dims == "xbse"
        assert ops["layer0/mlp/dispatch"].outputs[0].shape == (8, 128, 512, 4096)  # capacity 2 * 2048 / 8
        assert ops["layer0/mlp/gate_up"].space == (2, 8, 128, 512, 14336, 4096)
        assert ops["layer0/mlp/combine"].dims == "xbse" and ops["layer0/mlp/combine"].outputs[0].shape == (
            128, 2048, 4096)
        assert real("mixtral-8x7b").graph["active_parameters"] == 12_879_925_248

    def test_sequence_length(self):
        assert real("mistral-7b", seq=4096).graph["params"]["seq"] == 4096
        ops = ops_by_name(real("gpt2", seq=2048))  # beyond n_positions: the table keeps its rows
        assert ops["pos_embed"].space == (128, 2048, 768, 1024)
        assert parameter_count(real("gpt2", seq=2048)) == PUBLISHED["gpt2"]


class TestSearch:
    @pytest.mark.parametrize("config", [TINY_LLAMA, TINY_MIXTRAL, dict(TINY_LLAMA, num_key_value_heads=8),
                                        dict(TINY_LLAMA, model_type="gpt2")], ids=["gqa", "moe", "mha", "gpt2"])
    def test_search_is_never_dearer_than_the_baselines(self, tmp_path, config):
        g = build_graph(str(write(tmp_path, config)), batch=8, seq=16)
        costed = build_costs(g, 8)
        r = search(costed)
        assert r.cost == pytest.approx(evaluate(g, r.strategy).total, rel=1e-12)
        for strategy in (data_parallel(g, 8), expert(g, 8)[0]):
            assert r.cost <= evaluate(g, strategy).total * (1 + 1e-12)

    def test_mesh_tensorflow_splits_experts_heads_hidden_and_vocabulary(self, tmp_path):
        g = build_graph(str(write(tmp_path, TINY_MIXTRAL)), batch=8, seq=16)
        mt = {op.name: dict(zip(op.dims, d.config)) for op, d in zip(operators(g), mesh_tensorflow(g, 2, 4))}
        assert mt["layer0/mlp/gate_up"] == {"j": 1, "x": 4, "b": 2, "s": 1, "f": 1, "e": 1}  # experts, not f too
        assert mt["layer0/attn/qkv"]["g"] == 2 and mt["layer0/attn/qkv"]["b"] == 2  # 2 key/value heads
        assert mt["logits"]["v"] == 4 and mt["layer0/mlp/norm"] == {"b": 2, "s": 1, "e": 1}


BAD = [
    ({"hidden_size": 64}, "missing key 'model_type'"),
    (dict(TINY_LLAMA, model_type="bert"), "model_type 'bert' is not a decoder family the tool reads "
                                          "(gpt2, llama, mistral, mixtral, qwen2, qwen3, qwen2_moe"),
    ({k: v for k, v in TINY_LLAMA.items() if k != "hidden_size"}, "missing key 'hidden_size'"),
    ({k: v for k, v in TINY_LLAMA.items() if k != "vocab_size"}, "missing key 'vocab_size'"),
    (dict(TINY_LLAMA, num_attention_heads=80), "num_attention_heads 80 is more than hidden_size 64"),
    (dict(TINY_LLAMA, num_key_value_heads=3), "num_key_value_heads 3 does not divide num_attention_heads 8"),
    ({"model_type": "gpt2", "n_embd": 100, "n_layer": 2, "n_head": 12, "vocab_size": 10, "n_positions": 8},
     "n_head 12 does not divide n_embd 100"),
    (dict(TINY_LLAMA, hidden_size="64"), "hidden_size must be a positive integer, got '64'"),
    (dict(TINY_LLAMA, num_hidden_layers=0), "num_hidden_layers must be a positive integer, got 0"),
    (dict(TINY_LLAMA, num_hidden_layers=100000), "num_hidden_layers is 100,000; the tool plans at most 1,000 layers"),
    (dict(TINY_LLAMA, tie_word_embeddings="yes"), "tie_word_embeddings must be true or false"),
    (dict(TINY_MIXTRAL, num_experts_per_tok=5), "num_experts_per_tok 5 is more than the 4 experts"),
    ({k: v for k, v in TINY_MIXTRAL.items() if k != "num_local_experts"}, "missing key 'num_local_experts'"),
    ([1, 2], "not a model config"),
    (dict(TINY_LLAMA, layer_types=["full_attention"]),
     "layer_types must be a list of 2 of full_attention, sliding_attention, chunked_attention"),
    ({"model_type": "llama4"}, "a llama4 config needs its text_config (an object)"),
    ({"model_type": "gemma3", "text_config": dict(TINY_LLAMA)}, "text_config's model_type 'llama' is not gemma3_text"),
    (dict(TINY_MIXTRAL, model_type="qwen3_moe", mlp_only_layers=[5]),
     "mlp_only_layers must be a list of layer numbers from 0 to 1"),
    (dict(TINY_MIXTRAL, model_type="deepseek_v3", moe_intermediate_size=32, n_group=3,
          first_k_dense_replace=0),
     "n_group 3 does not divide the 4 experts"),
    (dict(TINY_MIXTRAL, num_experts_per_tok=None), "num_experts_per_tok is null; the tool needs a number"),
    (dict(TINY_MIXTRAL, model_type="deepseek_v3", moe_intermediate_size=32, q_lora_rank=0, kv_lora_rank=16,
          qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, first_k_dense_replace=0),
     "q_lora_rank must be a positive integer, got 0"),  # null or left out: no low-rank queries
    # every n-th layer with n = 0: once an internal error (a modulo, a range step of 0)
    (dict(TINY_MIXTRAL, model_type="qwen3_moe", moe_intermediate_size=32, decoder_sparse_step=0),
     "decoder_sparse_step must be a positive integer, got 0"),
    (dict(TINY_MIXTRAL, model_type="llama4_text", intermediate_size_mlp=64, interleave_moe_layer_step=0),
     "interleave_moe_layer_step must be a positive integer, got 0"),
]


@pytest.mark.parametrize("config, message", BAD, ids=[m for _, m in BAD])
def test_bad_configs(tmp_path, config, message):
    path = write(tmp_path, config)
    with pytest.raises(ValueError, match="^" + str(path).replace(".", r"\.") + ": ") as e:
        build_graph(str(path))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_files_that_are_not_configs(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{oops")
    with pytest.raises(ValueError, match="not valid JSON"):
        build_graph(str(path))
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="not a text file"):
        build_graph(str(path))


def test_parameters_it_does_not_take(tmp_path):
    path = write(tmp_path, TINY_LLAMA)
    with pytest.raises(ValueError, match=r"width is not a parameter of tiny \(it takes batch, seq, attention\)"):
        build_graph(str(path), width=128)
    with pytest.raises(ValueError, match="seq must be an integer from 1"):
        build_graph(str(path), seq=0)
    g = build_graph(str(tmp_path / "tiny"), batch=4)  # the directory holding the config
    assert g.graph["params"] == {"batch": 4, "seq": 512, "attention": "fused"}  # the config's limit, below 2048


@pytest.mark.parametrize("family, left_out, given", [
    ("mistral", ("num_key_value_heads",), {"num_key_value_heads": 8}),
    ("starcoder2", ("num_key_value_heads",), {"num_key_value_heads": 2}),
    ("gemma2", ("num_key_value_heads", "head_dim"), {"num_key_value_heads": 4, "head_dim": 256}),
    ("seed_oss", ("num_key_value_heads", "head_dim"), {"num_key_value_heads": 8, "head_dim": 128}),
    ("qwen3", ("head_dim",), {"head_dim": 128}),
    ("llama", ("num_key_value_heads", "head_dim"), None),  # the class sets none: the heads, the width over them
])
def test_a_size_left_out_takes_the_config_class_default(tmp_path, family, left_out, given):
    """A key a config leaves out is what transformers' config class
    defaults it to where the class sets a number (Mistral's 8 key/value
    heads, Seed-OSS's head width of 128: once the heads and the width over
    them, 11% and 17% too many parameters for Mistral and StarCoder2);
    where it sets none, the heads and the width over them, as the classes
    derive them."""
    cfg = json.loads((FAMILIES / family / "config.json").read_text())
    bare = {k: v for k, v in cfg.items() if k not in left_out}
    count = parameter_count(build_graph(str(write(tmp_path, bare, "bare")), batch=1, seq=16))
    if given is None:
        given = {"num_key_value_heads": bare["num_attention_heads"],
                 "head_dim": bare["hidden_size"] // bare["num_attention_heads"]}
    assert count == parameter_count(build_graph(str(write(tmp_path, {**bare, **given}, "given")), batch=1, seq=16))


def test_gemma3_s_released_text_config_leaves_out_its_heads(tmp_path):
    """Gemma 3 4B's released config gives its text model's width, layers
    and feed-forward only: the heads (8), key/value heads (4) and head
    width (256) are Gemma3TextConfig's; transformers' text model of it has
    3,880,263,168 parameters."""
    text = {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 34,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024}
    g = build_graph(str(write(tmp_path, {"model_type": "gemma3", "text_config": text})), batch=1, seq=16)
    assert parameter_count(g) == 3_880_263_168


@pytest.mark.parametrize("family, text", [("gemma3", "gemma3_text"), ("llama4", "llama4_text")])
def test_a_multimodal_config_says_its_text_model_alone_is_planned(family, text):
    """Gemma 3's and Llama 4's configs hold a vision tower beside the
    decoder; the report says the text model is what is planned (its
    parameter count is the text model's), rather than leave it unsaid."""
    from conftest import run_cli

    out = run_cli("-g", FAMILIES / family, "-p", 8, "-q").stdout
    assert f"{family} is a multimodal {family} model: its text model ({text}, the config's text_config) is planned, " \
           "not its vision tower." in out.splitlines()
    assert "multimodal" not in run_cli("-g", FAMILIES / "llama", "-p", 8, "-q").stdout


def test_a_size_given_as_null_is_derived_not_the_class_number(tmp_path):
    """Null is not left out: the classes derive a null key/value head count
    from the heads (Mistral's 8 applies only where the key is absent)."""
    cfg = json.loads((FAMILIES / "mistral" / "config.json").read_text())
    null = parameter_count(build_graph(str(write(tmp_path, {**cfg, "num_key_value_heads": None}, "null")), batch=1,
                                       seq=16))
    heads = parameter_count(build_graph(str(write(tmp_path, {**cfg, "num_key_value_heads": cfg["num_attention_heads"]},
                                                  "heads")), batch=1, seq=16))
    absent = parameter_count(build_graph(str(write(tmp_path, {k: v for k, v in cfg.items()
                                                              if k != "num_key_value_heads"}, "absent")),
                                         batch=1, seq=16))
    assert null == heads == 8_047_038_464 and absent == 7_241_732_096
