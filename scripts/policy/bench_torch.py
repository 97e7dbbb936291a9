#!/usr/bin/env python3
"""The PyTorch / transformers side of crates/policy/benches/policy.rs: the same checkpoint, the
same inputs, the same thread count, the same two workloads, timed the same way.

  generation: greedy `model.generate` (KV cache, DynamicCache), batch B, N new tokens
  grpo step:  forward + backward + clip_grad_norm_ + AdamW.step over B x T tokens, with the
              loss of spade_policy::grpo (clip 0.2/0.28, token-level mean, completion mask)

Usage: bench_torch.py DIR --threads N --repeats R --device cpu|cuda
DIR holds the checkpoint and bench_inputs.json written by the Rust bench. Prints one JSON line.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, repeats: int, device: str) -> list[float]:
    fn()  # warm-up, as on the Rust side
    out = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    inp = json.loads((args.dir / "bench_inputs.json").read_text())
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(args.dir, dtype=dtype).to(args.device)

    prompts = torch.tensor(inp["gen_prompts"], device=args.device)
    new = inp["new_tokens"]

    def gen():
        with torch.no_grad():
            model.eval()
            model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts),
                           do_sample=False, max_new_tokens=new, min_new_tokens=new,
                           pad_token_id=0, eos_token_id=None)

    gen_times = timed(gen, args.repeats, args.device)

    ids = torch.tensor(inp["train_ids"], device=args.device)
    mask = torch.tensor(inp["train_mask"], dtype=torch.float32, device=args.device)[:, 1:]
    adv = torch.tensor(inp["advantages"], device=args.device)[:, None]
    old = torch.tensor(inp["old_logprobs"], device=args.device)[:, 1:]
    temp, lo, hi = inp["temperature"], inp["clip_low"], inp["clip_high"]
    opt = torch.optim.AdamW(model.parameters(), lr=inp["lr"], betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    model.train()

    def step():
        logits = model(ids[:, :-1]).logits.float() / temp
        logp = logits.log_softmax(-1).gather(2, ids[:, 1:, None]).squeeze(-1)
        ratio = (logp - old).exp()
        surr = torch.minimum(ratio * adv, ratio.clamp(1 - lo, 1 + hi) * adv)
        loss = (-surr * mask).sum() / mask.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()

    step_times = timed(step, args.repeats, args.device)
    b, n = prompts.shape[0], new
    print(json.dumps({
        "gen_tokens_per_s": b * n / statistics.median(gen_times),
        "gen_s": gen_times,
        "grpo_step_s": statistics.median(step_times),
        "step_s": step_times,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
