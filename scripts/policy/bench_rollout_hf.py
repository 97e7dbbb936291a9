#!/usr/bin/env python3
"""The workload of `spade model bench-rollout` (no-hint plays only) in transformers, for the
GPU comparison in scripts/policy/gpu_check.sh: ENVS x PLAYS synthetic episodes of 1..MAX_TURNS
turns on a random-init Qwen3 shape, a turn ending at a stop token (every MEAN-th id) or after
TURN_TOKENS, each observation OBS tokens. Two paths:

- generate: what our batch sampler does, in transformers: per environment, chunks of CHUNK
  plays, every turn one `model.generate` over the left-padded transcripts (prefilled again).
- generate_batch: transformers' continuous-batching API when the installed version has one
  (`model.generate_batch`): every live episode's transcript of a turn round in one call.

Prints one JSON line per path: step seconds, tokens generated, tokens/s.
"""
import argparse
import json
import random
import sys
import time

import torch


SHAPES = {  # hidden, intermediate, layers, heads, tied (as spade_policy::preset::shape)
    "qwen3-0.6b": (1024, 3072, 28, 16, True),
    "qwen3-1.7b": (2048, 6144, 28, 16, True),
    "qwen3-4b": (2560, 9728, 36, 32, True),
    "qwen3-8b": (4096, 12288, 36, 32, False),
}


def model_of(shape, device):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    h, i, n, q, tied = SHAPES[shape]
    cfg = Qwen3Config(vocab_size=151936, hidden_size=h, intermediate_size=i, num_hidden_layers=n,
                      num_attention_heads=q, num_key_value_heads=8, head_dim=128,
                      max_position_embeddings=40960, rope_theta=1e6, tie_word_embeddings=tied)
    torch.manual_seed(0)
    with torch.device(device):
        m = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    return m.eval()


def episodes(a, rng):
    system = [rng.randrange(2, 151000) for _ in range(a.context // 8)]
    out = []
    for j in range(a.envs):
        first = [rng.randrange(2, 151000) for _ in range(a.context // 32)]
        for _ in range(a.plays):
            out.append({"env": j, "ids": system + first + [rng.randrange(2, 151000) for _ in range(6)],
                        "turns": 1 + rng.randrange(a.max_turns), "turn": 0})
    return out


def after(e, new, a, rng, stops):
    e["ids"] += new
    if not new or new[-1] not in stops:
        e["ids"].append(min(stops))
    e["turn"] += 1
    more = e["turn"] < e["turns"] and len(e["ids"]) + a.context // 32 + a.turn_tokens < a.context
    if more:
        e["ids"] += [rng.randrange(2, 151000) for _ in range(a.context // 32)]
    return more


def run_generate(m, a, device):
    rng = random.Random(0)
    stops = list(range(a.mean, 151000, a.mean))
    eps = episodes(a, rng)
    generated, t = 0, time.time()
    for j in range(a.envs):
        mine = [e for e in eps if e["env"] == j]
        for c in range(0, len(mine), a.chunk):
            live = mine[c:c + a.chunk]
            while live:
                width = max(len(e["ids"]) for e in live)
                ids = torch.tensor([[0] * (width - len(e["ids"])) + e["ids"] for e in live], device=device)
                mask = torch.tensor([[0] * (width - len(e["ids"])) + [1] * len(e["ids"]) for e in live], device=device)
                with torch.no_grad():
                    out = m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=a.turn_tokens,
                                     do_sample=True, temperature=0.6, top_p=1.0, top_k=0,
                                     eos_token_id=stops, pad_token_id=0)
                keep = []
                for e, row in zip(live, out[:, width:].tolist()):
                    new = []
                    for tok in row:
                        new.append(tok)
                        if tok in stops:
                            break
                    generated += len(new)
                    if after(e, new, a, rng, set(stops)):
                        keep.append(e)
                live = keep
    torch.cuda.synchronize() if device.startswith("cuda") else None
    return time.time() - t, generated


def run_generate_batch(m, a, device):
    from transformers import GenerationConfig

    rng = random.Random(0)
    stops = list(range(a.mean, 151000, a.mean))
    eps = episodes(a, rng)
    gc = GenerationConfig(max_new_tokens=a.turn_tokens, do_sample=True, temperature=0.6, top_k=0,
                          eos_token_id=stops, pad_token_id=0, num_blocks=4096, block_size=128)
    generated, t, live = 0, time.time(), eps
    while live:
        with torch.no_grad():
            res = m.generate_batch(inputs=[e["ids"] for e in live], generation_config=gc, progress_bar=False)
        outs = [res[k] for k in sorted(res, key=lambda k: int(str(k).split("_")[-1]))] if isinstance(res, dict) else res
        keep = []
        for e, r in zip(live, outs):
            new = list(getattr(r, "generated_tokens", r))
            generated += len(new)
            if after(e, new, a, rng, set(stops)):
                keep.append(e)
        live = keep
    torch.cuda.synchronize() if device.startswith("cuda") else None
    return time.time() - t, generated


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="qwen3-0.6b", choices=sorted(SHAPES))
    p.add_argument("--envs", type=int, default=24)
    p.add_argument("--plays", type=int, default=8)
    p.add_argument("--max-turns", type=int, default=6)
    p.add_argument("--turn-tokens", type=int, default=256)
    p.add_argument("--mean", type=int, default=128)
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--chunk", type=int, default=8)
    p.add_argument("--device", default="cuda")
    p.add_argument("--threads", type=int, default=4)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    m = model_of(a.shape, a.device)
    paths = [("generate", run_generate)]
    if hasattr(m, "generate_batch"):
        paths.append(("generate_batch", run_generate_batch))
    else:
        print("bench_rollout_hf: this transformers has no generate_batch", file=sys.stderr)
    for name, fn in paths:
        try:
            s, n = fn(m, a, a.device)
            print(json.dumps({"shape": a.shape, "path": f"transformers {name}", "envs": a.envs,
                              "plays": a.plays, "context": a.context, "step_s": s, "generated": n,
                              "tokens_per_s": n / max(s, 1e-9)}), flush=True)
        except Exception as e:  # report and go on: the other path still measures
            print(json.dumps({"path": f"transformers {name}", "error": repr(e)}), flush=True)


if __name__ == "__main__":
    main()
