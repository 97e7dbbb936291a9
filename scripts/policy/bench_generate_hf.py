#!/usr/bin/env python3
"""The transformers side of `spade model bench-generate`: greedy `model.generate` on the same
checkpoint directory and the same prompt token ids (the JSON that `--prompts-out` writes), each
row decoding exactly NEW_TOKENS tokens (no stop token), at each batch size; left padding with
an attention mask for batches of prompts of different lengths, a KV cache, float32.

Prints one JSON line per batch size: median seconds over REPEATS timed runs (after one
untimed), tokens/s, and the thread count torch reports.
"""
import argparse
import json
import statistics
import time

import torch
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", required=True, help="JSON from spade model bench-generate --prompts-out")
    ap.add_argument("--batch", default="1,32")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    spec = json.load(open(a.prompts))
    model = AutoModelForCausalLM.from_pretrained(spec["checkpoint"], torch_dtype=torch.float32)
    model.eval()
    # Any id works as padding: the attention mask hides it.
    pad = model.config.eos_token_id if isinstance(model.config.eos_token_id, int) else 0
    for b in [int(x) for x in a.batch.split(",")]:
        prompts = spec["prompts"][:b]
        longest = max(len(p) for p in prompts)
        ids = torch.tensor([[pad] * (longest - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompts])
        times = []
        for i in range(a.repeats + 1):
            t0 = time.perf_counter()
            with torch.inference_mode():
                out = model.generate(
                    input_ids=ids, attention_mask=mask, do_sample=False,
                    max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens,
                    pad_token_id=pad, use_cache=True,
                )
            s = time.perf_counter() - t0
            assert out.shape[1] - longest == a.new_tokens, out.shape
            if i > 0:
                times.append(s)
        median = statistics.median(times)
        print(json.dumps({
            "side": "transformers", "batch": b, "threads": torch.get_num_threads(),
            "new_tokens": a.new_tokens, "median_s": median,
            "tokens_per_s": b * a.new_tokens / median, "times_s": times,
        }), flush=True)


if __name__ == "__main__":
    main()
