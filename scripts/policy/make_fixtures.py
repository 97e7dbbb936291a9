#!/usr/bin/env python3
"""Writes the Hugging Face reference fixtures that crates/policy/tests/hf_reference.rs reads.

Each case is a random small Qwen3 model (transformers' Qwen3ForCausalLM, float32), Qwen3-MoE
model (Qwen3MoeForCausalLM; the `moe_*` cases), Llama or Qwen2 model (`llama_*`, `qwen2_*`) saved with `save_pretrained`, plus expected.json: prompts (token ids), the last position's logits of each
prompt run alone, and the 32-token greedy continuation of the prompts batched with left padding
(transformers' `generate`). A tokenizer case checks that the Rust `tokenizers` crate encodes like
the Python one with a Qwen-style pre-tokenizer (regex split + byte level).

Needs torch and transformers, which the project venv does not carry (CI cannot install torch):
    python3 -m venv ~/.cache/spade-studio/venv-torch
    ~/.cache/spade-studio/venv-torch/bin/pip install torch==2.11.0 transformers safetensors
    ~/.cache/spade-studio/venv-torch/bin/python scripts/policy/make_fixtures.py
Deterministic given the seeds below; every fixture directory stays well under 1 MB.
"""

import json
import shutil
import sys
from pathlib import Path

import torch
import transformers
from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

OUT = Path(__file__).resolve().parents[2] / "crates/policy/tests/fixtures"
NEW_TOKENS = 32

# name -> (seed, config overrides, save_pretrained kwargs). Shapes vary what an implementation
# gets wrong: GQA ratio, head_dim != hidden/heads, rope theta, tied/untied, biases, shards.
CASES = {
    "gqa2_tied": (1, dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=16, rope_theta=10000.0, tie_word_embeddings=True), {}),
    "gqa4_headdim32_untied": (2, dict(hidden_size=48, num_attention_heads=4, num_key_value_heads=1,
                                      head_dim=32, num_hidden_layers=3, rope_theta=1e6,
                                      tie_word_embeddings=False), {}),
    "mha_bias_theta5e5": (3, dict(hidden_size=40, num_attention_heads=3, num_key_value_heads=3,
                                  head_dim=24, rope_theta=5e5, attention_bias=True,
                                  rms_norm_eps=1e-5, tie_word_embeddings=False), {}),
    "sharded_untied": (4, dict(hidden_size=64, num_attention_heads=8, num_key_value_heads=2,
                               head_dim=8, rope_theta=1e6, tie_word_embeddings=False),
                       dict(max_shard_size="100KB")),
}
# Qwen3-MoE: top-1 and top-k > 1, norm_topk_prob both ways, dense layers among sparse ones (by
# mlp_only_layers and by decoder_sparse_step), tied and untied, head_dim defaulted (hidden /
# heads for MoE, unlike dense Qwen3) and explicit, one sharded.
MOE_CASES = {
    "moe_top1_tied": (11, dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                               num_experts=4, num_experts_per_tok=1, norm_topk_prob=False,
                               tie_word_embeddings=True), {}),
    "moe_top2_norm_untied": (12, dict(hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=16, num_experts=8, num_experts_per_tok=2,
                                      norm_topk_prob=True, rope_theta=1e6,
                                      tie_word_embeddings=False),
                             dict(max_shard_size="100KB")),
    "moe_dense_layer": (13, dict(hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
                                 head_dim=16, num_hidden_layers=3, mlp_only_layers=[1],
                                 num_experts=6, num_experts_per_tok=3, norm_topk_prob=False,
                                 tie_word_embeddings=False), {}),
    "moe_sparse_step2": (14, dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=4,
                                  head_dim=8, num_hidden_layers=4, decoder_sparse_step=2,
                                  num_experts=4, num_experts_per_tok=2, norm_topk_prob=True,
                                  tie_word_embeddings=True), {}),
}
# Llama (LlamaForCausalLM) and Qwen2 (Qwen2ForCausalLM): the families the same decoder loads
# from config.json. No q/k norm; Llama with and without attention/MLP biases and Llama 3's rope
# scaling (at a scale where the rule changes the low frequencies of a 512-token context); Qwen2
# with its fixed q/k/v biases; head_dim defaulted (hidden / heads) in all of them.
FAMILY_CASES = {
    "llama_gqa_tied": ("llama", 21, dict(hidden_size=64, num_attention_heads=4,
                                         num_key_value_heads=2, rope_theta=10000.0,
                                         tie_word_embeddings=True), {}),
    "llama_bias_rope_llama3": ("llama", 22, dict(
        hidden_size=48, num_attention_heads=3, num_key_value_heads=1, attention_bias=True,
        mlp_bias=True, rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                          high_freq_factor=4.0, original_max_position_embeddings=64)), {}),
    "qwen2_bias_untied": ("qwen2", 23, dict(hidden_size=64, num_attention_heads=8,
                                            num_key_value_heads=2, rope_theta=1e6,
                                            tie_word_embeddings=False),
                          dict(max_shard_size="100KB")),
}
MOE_BASE = dict(moe_intermediate_size=24)
BASE = dict(vocab_size=256, intermediate_size=96, num_hidden_layers=2, max_position_embeddings=512,
            eos_token_id=None, bos_token_id=None, pad_token_id=None)


def randomize(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Scales weights up from transformers' 0.02 init and perturbs every norm weight and bias,
    so a missing norm, a wrong bias or a swapped head cannot hide behind near-uniform logits."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(0.15 * noise)


def make_case(name: str, seed: int, overrides: dict, save_kwargs: dict, moe: bool = False,
              family: str = "qwen3") -> None:
    gen = torch.Generator().manual_seed(seed)
    if family == "llama":
        cfg = transformers.LlamaConfig(**{**BASE, **overrides})
        model = transformers.LlamaForCausalLM(cfg).eval()
    elif family == "qwen2":
        cfg = transformers.Qwen2Config(**{**BASE, **overrides})
        model = transformers.Qwen2ForCausalLM(cfg).eval()
    elif moe:
        cfg = Qwen3MoeConfig(**{**BASE, **MOE_BASE, **overrides})
        model = Qwen3MoeForCausalLM(cfg).eval()
    else:
        cfg = Qwen3Config(**{**BASE, **overrides})
        model = Qwen3ForCausalLM(cfg).eval()
    randomize(model, gen)
    out = OUT / name
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(out, **save_kwargs)
    for extra in ["generation_config.json"]:
        (out / extra).unlink(missing_ok=True)

    lengths = [7, 4]
    prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=gen).tolist() for n in lengths]
    with torch.no_grad():
        last = [model(torch.tensor([p])).logits[0, -1].tolist() for p in prompts]
        width = max(lengths)
        ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        gen_kwargs = dict(do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                          pad_token_id=0, eos_token_id=None)
        batched = model.generate(input_ids=ids, attention_mask=mask, **gen_kwargs)[:, width:]
        # The batch must agree with each prompt alone, or padding handling is wrong here.
        for row, p in zip(batched.tolist(), prompts):
            alone = model.generate(input_ids=torch.tensor([p]), **gen_kwargs)[0, len(p):].tolist()
            assert row == alone, f"{name}: batched and unbatched greedy differ"
    expected = dict(prompts=prompts, last_logits=last, greedy=batched.tolist(),
                    transformers=transformers.__version__, torch=torch.__version__)
    if moe:
        # The router load-balancing loss (load_balancing_loss_func) over the first prompt but
        # its last token: the positions a packed training pass of that sequence runs.
        with torch.no_grad():
            routed = model(torch.tensor([prompts[0][:-1]]), output_router_logits=True)
        expected["aux_loss_prefix"] = routed.aux_loss.item()
    (out / "expected.json").write_text(json.dumps(expected) + "\n")
    size = sum(f.stat().st_size for f in out.iterdir())
    assert size < 1_000_000, f"{name} is {size} bytes"
    print(f"{name}: {size // 1024} KiB, files {sorted(f.name for f in out.iterdir())}")


def make_tokenizer_case() -> None:
    """A byte-level BPE with Qwen2/3's pre-tokenizer regex, trained on a few lines here."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    qwen_regex = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(qwen_regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>",
                                                                  "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = [
        "class GuessEnv:\n    def reset(self, seed=None):\n        return 'Guess a number', {}\n",
        "The agent answers in \\boxed{42}; the last boxed expression is the action.",
        "I'll say it's done: we've 12345 tools, they're ready. Ünïcödé ✓ 数学 推理",
    ] * 20
    tok.train_from_iterator(corpus, trainer)
    out = OUT / "tokenizer_qwen_style"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    tok.save(str(out / "tokenizer.json"))
    texts = ["<|im_start|>user\nWhat's 2+2? Answer in \\boxed{}.<|im_end|>\n",
             "def step(self, action):\n\treturn obs, 1.0, True, False, {}",
             "  spaces   and\r\nnewlines\n\n", "Ünïcödé ✓ 数学", "it'S THEY'LL"]
    expected = [dict(text=t, ids=tok.encode(t).ids) for t in texts]
    (out / "expected.json").write_text(json.dumps(expected, ensure_ascii=False) + "\n")
    print(f"tokenizer_qwen_style: {len(expected)} texts")


def main() -> int:
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)
    only = set(sys.argv[1:])
    for name, (seed, overrides, save_kwargs) in CASES.items():
        if not only or name in only:
            make_case(name, seed, overrides, save_kwargs)
    for name, (seed, overrides, save_kwargs) in MOE_CASES.items():
        if not only or name in only:
            make_case(name, seed, overrides, save_kwargs, moe=True)
    for name, (family, seed, overrides, save_kwargs) in FAMILY_CASES.items():
        if not only or name in only:
            make_case(name, seed, overrides, save_kwargs, family=family)
    if not only or "tokenizer_qwen_style" in only:
        make_tokenizer_case()
    return 0


if __name__ == "__main__":
    sys.exit(main())
