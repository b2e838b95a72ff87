"""Writes ``tests/data/families/<model_type>/config.json`` from
``transformers``' own config classes (their defaults are released models:
DeepSeek-V3, gpt-oss-120b, Llama 4 Scout, Gemma 3 ...), and beside them
``counts.json``: the parameters of each family's ``transformers`` model
built from that config on the meta device.  The main test suite checks the
graphs' parameter counts against these without ``transformers``
(``tests/test_hf_families.py``); ``tests/test_torch_hf_families.py`` checks
them against ``transformers`` itself.

Run with the packages of ``requirements-torch.txt``:

    python tests/make_family_configs.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "data" / "families"
#: every family read from a config.json, by model_type
FAMILIES = ("gpt2", "llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "phi3", "olmo2",
            "gemma2", "gemma3_text", "gemma3", "granitemoe", "glm4_moe", "deepseek_v2", "deepseek_v3", "gpt_oss",
            "llama4_text", "llama4", "gemma", "granite", "helium", "seed_oss", "glm", "glm4", "olmoe", "exaone4",
            "smollm3", "ernie4_5", "gpt_neox", "phi", "starcoder2", "stablelm", "cohere", "olmo")
#: the one value a class leaves unset that its model needs: DeepseekV2Config has no default top-k (both
#: released DeepSeek-V2 models route each token to 6 experts)
GIVEN = {"deepseek_v2": {"num_experts_per_tok": 6}}


def config(family: str):
    """The config class's defaults (with :data:`GIVEN`)."""
    from transformers import AutoConfig

    return AutoConfig.for_model(family, **GIVEN.get(family, {}))


def decoder_config(cfg):
    """The config of the decoder a model_type's causal LM is built from
    (a multimodal config's text part)."""
    return getattr(cfg, "text_config", None) or cfg


def count(cfg) -> int:
    """Parameters of the causal LM ``transformers`` builds from ``cfg``, on
    the meta device (nothing allocated; shared tensors once)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(decoder_config(cfg))
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    import transformers

    counts = {}
    for family in FAMILIES:
        cfg = config(family)
        folder = OUT / family
        folder.mkdir(parents=True, exist_ok=True)
        cfg.to_json_file(str(folder / "config.json"), use_diff=False)
        counts[family] = count(cfg)
        print(f"{family:14} {counts[family]:>18,}", file=sys.stderr)
    record = {"transformers": transformers.__version__, "parameters": counts}
    (OUT / "counts.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
