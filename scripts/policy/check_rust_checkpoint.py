#!/usr/bin/env python3
"""Checks that a checkpoint written by spade-policy loads in Hugging Face transformers.

Usage: check_rust_checkpoint.py DIR
DIR holds what `Policy::save` wrote plus expected.json from the Rust side:
  {"prompts": [[ids]], "last_logits": [[floats]], "texts": [{"text": str, "ids": [ids]}]}
("texts" is optional: without it the tokenizer is not checked.)
Exit 0 when AutoModelForCausalLM reproduces the last-position logits within 1e-4 and
AutoTokenizer encodes every text to the same ids; 1 otherwise. Run with the torch venv
(see make_fixtures.py); crates/policy/tests/it/checkpoints.rs calls it when that venv exists.
"""

import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main(d: Path) -> int:
    torch.set_num_threads(1)
    exp = json.loads((d / "expected.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    worst = 0.0
    with torch.no_grad():
        for prompt, want in zip(exp["prompts"], exp["last_logits"]):
            got = model(torch.tensor([prompt])).logits[0, -1]
            worst = max(worst, (got - torch.tensor(want)).abs().max().item())
    ok = worst < 1e-4
    print(f"{type(model).__name__}: max |logit diff| {worst:.2e} ({'ok' if ok else 'FAIL'})")
    if "texts" not in exp:  # a checkpoint without a tokenizer (e.g. a random MoE fixture)
        return 0 if ok else 1
    tok = AutoTokenizer.from_pretrained(d)
    for case in exp.get("texts", []):
        ids = tok(case["text"], add_special_tokens=False)["input_ids"]
        if ids != case["ids"]:
            print(f"tokenizer mismatch for {case['text']!r}: {ids} != {case['ids']}")
            ok = False
    print(f"{type(tok).__name__}: {len(exp.get('texts', []))} texts checked")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1])))
