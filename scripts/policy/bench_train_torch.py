#!/usr/bin/env python3
"""The PyTorch side of `spade model bench`: one training step of a random-init Qwen3 shape with
the same recipe, timed, on the same device (`scripts/policy/bench-train` runs both sides).

Recipe (what spade-policy's `bench` does, in plain PyTorch):
- the shape's model (`--shape`: crates/policy/src/preset.rs `shape`), float32 parameters (the
  masters) with bf16 autocast for the forward and backward passes on CUDA (float32 on CPU);
- `tokens // (seq_len - 1)` random sequences of `seq_len` tokens, the first `seq_len // 4` of
  each a prompt (not trained); equal lengths, so a batch of rows with causal attention computes
  what packing does;
- the GRPO token loss of `spade_policy::grpo` (log-probs at temperature 0.6, ratio to uniform
  old log-probs, clip 0.2 / 0.28, advantages +1 / -1 by row, token-level mean);
- log-probs `--chunk-tokens` positions at a time: the backward pass is split at the final
  hidden states, each chunk's head, log-softmax and loss backpropagated at once so no logits of
  the whole batch exist, then the body gets the summed gradient (crates/policy/src/qwen3/packed.rs);
- per-layer activation checkpointing (torch.utils.checkpoint), off with `--no-recompute`;
- global gradient clipping at 1.0 and torch.optim.AdamW (lr 1e-6, weight decay 0.01, float32
  moments; fused on CUDA).
The model is written out here (RMSNorm, GQA with q/k norms and rotary embeddings, SwiGLU, and
for the MoE shapes transformers' sparse block) so that only torch is needed.

    python bench_train_torch.py --shape qwen3-0.6b --tokens 16384 --device cuda [--threads 1]

Prints one JSON line: shape, parameters, tokens, step seconds, median, tokens/s, peak memory
(torch.cuda.max_memory_allocated on CUDA; peak RSS on CPU).

`--ranks N` (CPU, Gloo) is the PyTorch side of `spade model bench --ranks N`: one process alone,
then N rank processes of this script on the same step, both with one sequence per micro-batch
(gradients accumulated), as the Rust side does. Each rank runs its share of the sequences; the
gradients are summed over the ranks with c10d all-reduces in 25 MB buckets (DDP's bucket size:
DDP's own hooks do not fit the chunked backward, which calls backward once per head chunk and
once for the body), then clipped, and the optimizer is torch's ZeroRedundancyOptimizer around
AdamW (its state sharded over the ranks, the updated parameters broadcast). Prints one JSON
line comparing the two as the Rust side's --json does.

`--ranks N --zero-stage 3` is the side of `spade model bench --ranks N --zero-stage 3`: each
decoder layer wrapped with FSDP2's `fully_shard` (its parameters sharded over the ranks,
all-gathered before its forward and again before its recomputed backward, its gradients
reduce-scattered after), the embedding, final norm and head replicated with their gradients
all-reduced (what spade keeps whole too: the chunked head runs outside any module's forward),
AdamW on the shards (foreach off: DTensor and plain parameters mix), the global gradient norm
summed over the ranks by hand.
"""
import argparse
import json
import math
import os
import resource
import socket
import subprocess
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

# (vocabulary, hidden, intermediate, layers, query heads, key/value heads, head_dim, tied):
# crates/policy/src/preset.rs `shape`. tiny and small are CPU-sized (the tiny preset's
# architecture and the 34M-parameter `small` of benches/policy.rs); the qwen3 ones are Qwen3's
# config.json values. RoPE theta 1e6, RMSNorm eps 1e-6 for all.
SHAPES = {
    "tiny": (4096, 256, 768, 4, 4, 2, 64, True),
    "small": (16384, 512, 1536, 8, 8, 4, 64, True),
    "qwen3-0.6b": (151_936, 1024, 3072, 28, 16, 8, 128, True),
    "qwen3-1.7b": (151_936, 2048, 6144, 28, 16, 8, 128, True),
    "qwen3-4b": (151_936, 2560, 9728, 36, 32, 8, 128, True),
    "qwen3-8b": (151_936, 4096, 12288, 36, 32, 8, 128, False),
    "tiny-moe": (4096, 256, 768, 4, 4, 2, 64, True),
    "qwen3-30b-a3b-4l": (151_936, 2048, 6144, 4, 32, 4, 128, False),
    # SmolLM2-135M-Instruct (Llama layout: no q/k norms, theta 1e5, eps 1e-5).
    "smollm2-135m": (49_152, 576, 1536, 30, 9, 3, 64, True),
}
# Llama-layout shapes: (RoPE theta, RMSNorm eps), and no q/k norms.
LLAMA = {"smollm2-135m": (1e5, 1e-5)}
# Qwen3-MoE shapes: (experts, experts per token, expert width); every layer sparse, top-k
# weights renormalised (preset.rs: `tiny-moe`, and Qwen3-30B-A3B's config with 4 layers).
MOE = {
    "tiny-moe": (8, 2, 192),
    "qwen3-30b-a3b-4l": (128, 8, 768),
}
THETA, EPS = 1e6, 1e-6
# spade_policy::grpo::GrpoConfig's defaults: the sampling temperature (spade-spec.md, "Play")
# and the clip range (DAPO's clip-higher, from the paper).
TEMPERATURE, CLIP_LOW, CLIP_HIGH = 0.6, 0.2, 0.28


class Moe(nn.Module):
    """Qwen3-MoE's sparse block as transformers 5.24 computes it (modeling_qwen3_moe.py):
    float32 softmax router, top-k renormalised, then per routed expert one SwiGLU over exactly
    its tokens, scattered back with index_add_."""

    def __init__(self, h, experts, top_k, inter):
        super().__init__()
        self.top_k, self.experts = top_k, experts
        self.router = nn.Linear(h, experts, bias=False)
        self.gate_up = nn.Parameter(torch.empty(experts, 2 * inter, h))
        self.down = nn.Parameter(torch.empty(experts, h, inter))

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs = torch.softmax(self.router(x), -1, dtype=torch.float)
        w, idx = torch.topk(probs, self.top_k, -1)
        w = (w / w.sum(-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(x)
        with torch.no_grad():
            hit = torch.bincount(idx.reshape(-1), minlength=self.experts).nonzero().flatten().tolist()
        for e in hit:
            tok, pos = torch.where(idx == e)
            g, u = F.linear(x[tok], self.gate_up[e]).chunk(2, -1)
            y = F.linear(F.silu(g) * u, self.down[e]) * w[tok, pos, None]
            out = out.index_add(0, tok, y.to(out.dtype))
        return out.reshape(shape)


class Layer(nn.Module):
    def __init__(self, h, inter, heads, kv_heads, head_dim, moe=None, eps=EPS, qk_norm=True):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.ln1 = nn.RMSNorm(h, eps=eps)
        self.ln2 = nn.RMSNorm(h, eps=eps)
        self.q = nn.Linear(h, heads * head_dim, bias=False)
        self.k = nn.Linear(h, kv_heads * head_dim, bias=False)
        self.v = nn.Linear(h, kv_heads * head_dim, bias=False)
        self.o = nn.Linear(heads * head_dim, h, bias=False)
        self.qn = nn.RMSNorm(head_dim, eps=eps) if qk_norm else nn.Identity()
        self.kn = nn.RMSNorm(head_dim, eps=eps) if qk_norm else nn.Identity()
        self.moe = Moe(h, *moe) if moe else None
        if not moe:
            self.gate = nn.Linear(h, inter, bias=False)
            self.up = nn.Linear(h, inter, bias=False)
            self.down = nn.Linear(inter, h, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        d = self.head_dim
        y = self.ln1(x)
        q = self.qn(self.q(y).view(b, t, self.heads, d)).transpose(1, 2)
        k = self.kn(self.k(y).view(b, t, self.kv_heads, d)).transpose(1, 2)
        v = self.v(y).view(b, t, self.kv_heads, d).transpose(1, 2)
        rot = lambda z: z * cos + torch.cat([-z[..., d // 2:], z[..., : d // 2]], -1) * sin
        a = F.scaled_dot_product_attention(rot(q), rot(k), v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
        y = self.ln2(x)
        if self.moe is not None:
            return x + self.moe(y)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Model(nn.Module):
    def __init__(self, shape, recompute):
        super().__init__()
        vocab, h, inter, layers, heads, kv_heads, head_dim, tied = SHAPES[shape]
        self.head_dim, self.recompute = head_dim, recompute
        self.theta, eps = LLAMA.get(shape, (THETA, EPS))
        self.embed = nn.Embedding(vocab, h)
        moe = MOE.get(shape)
        qk_norm = shape not in LLAMA
        self.layers = nn.ModuleList(Layer(h, inter, heads, kv_heads, head_dim, moe, eps, qk_norm)
                                    for _ in range(layers))
        self.norm = nn.RMSNorm(h, eps=eps)
        self.head = None if tied else nn.Linear(h, vocab, bias=False)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def head_weight(self):
        return self.embed.weight if self.head is None else self.head.weight

    def hidden(self, ids):
        """Final hidden states [B, T, hidden]."""
        t, d = ids.shape[1], self.head_dim
        inv = 1.0 / self.theta ** (torch.arange(0, d, 2, device=ids.device).float() / d)
        f = torch.arange(t, device=ids.device).float()[:, None] * inv
        cos, sin = torch.cat([f.cos()] * 2, -1), torch.cat([f.sin()] * 2, -1)
        x = self.embed(ids)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        for l in self.layers:
            x = checkpoint(l, x, cos, sin, use_reentrant=False) if self.recompute else l(x, cos, sin)
        return self.norm(x)


def backward_chunked(model, ids, mask, adv, old, chunk, autocast):
    """Forward and backward of the GRPO loss with the head `chunk` positions at a time (see the
    module doc); returns the loss."""
    with autocast():
        hidden = model.hidden(ids[:, :-1])
    n_seq, t = ids.shape[0], ids.shape[1] - 1
    h = hidden.detach().requires_grad_(True)
    flat = h.view(n_seq * t, -1)
    targets = ids[:, 1:].reshape(-1)
    m = mask.reshape(-1)
    a = adv.expand(n_seq, t).reshape(-1)
    n = m.sum()
    w = model.head_weight()
    total = 0.0
    for s in range(0, n_seq * t, chunk):
        e = min(s + chunk, n_seq * t)
        with autocast():
            logits = F.linear(flat[s:e], w)
        logp = torch.log_softmax(logits.float() / TEMPERATURE, -1).gather(-1, targets[s:e, None]).squeeze(-1)
        ratio = torch.exp(logp - old)
        surrogate = torch.minimum(ratio * a[s:e], ratio.clamp(1 - CLIP_LOW, 1 + CLIP_HIGH) * a[s:e])
        loss = -(surrogate * m[s:e]).sum() / n
        loss.backward()
        total += loss.item()
    hidden.backward(h.grad)
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--no-recompute", action="store_true", help="keep every activation")
    ap.add_argument("--chunk-tokens", type=int, default=4096, help="positions per head chunk")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ranks", type=int, default=1, help="data-parallel ranks (CPU, Gloo)")
    ap.add_argument("--zero-stage", type=int, default=2, choices=[2, 3],
                    help="with --ranks: 2 (ZeroRedundancyOptimizer) or 3 (FSDP2 per layer)")
    a = ap.parse_args()
    if a.ranks > 1:
        return ranks_main(a)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    model = Model(a.shape, recompute=not a.no_recompute).to(dev)
    vocab = SHAPES[a.shape][0]
    ids, mask, adv = data(a, dev)
    n_seq = ids.shape[0]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01, fused=cuda)
    # Uniform old log-probs, as the Rust side: a random-init model is close to uniform.
    old = -math.log(vocab)
    autocast = lambda: torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda)
    times = []
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    for i in range(a.warmup + a.steps):
        if cuda:
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        backward_chunked(model, ids, mask, adv, old, a.chunk_tokens, autocast)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if cuda:
            torch.cuda.synchronize(dev)
        s = time.perf_counter() - t0
        if i >= a.warmup:
            times.append(s)
            print(f"bench_train_torch: step {i - a.warmup + 1} took {s:.3f} s", file=sys.stderr)
    med = statistics.median(times)
    peak = torch.cuda.max_memory_allocated(dev) if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({
        "side": "pytorch", "shape": a.shape, "torch": torch.__version__, "device": str(dev),
        "threads": torch.get_num_threads(), "parameters": sum(p.numel() for p in model.parameters()),
        "tokens": n_seq * (a.seq_len - 1), "sequences": n_seq, "recompute": not a.no_recompute,
        "chunk_tokens": a.chunk_tokens, "step_s": times,
        "kind": "bf16 autocast, float32 masters" if cuda else "float32", "median_s": med,
        "tokens_per_s": n_seq * (a.seq_len - 1) / med, "peak_bytes": peak,
        "peak_source": "torch.cuda.max_memory_allocated" if cuda else "peak resident set",
    }))


def data(a, dev):
    """The step's sequences, prompt mask and advantages (the same on every rank: seed 0)."""
    vocab = SHAPES[a.shape][0]
    n_seq = max(1, a.tokens // (a.seq_len - 1))
    ids = torch.randint(0, vocab, (n_seq, a.seq_len), device=dev)
    prompt = max(1, a.seq_len // 4)
    mask = torch.zeros(n_seq, a.seq_len - 1, device=dev)
    mask[:, prompt - 1:] = 1.0
    adv = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(n_seq)], device=dev)[:, None]
    return ids, mask, adv


def all_reduce_grads(params, bucket_bytes=25 << 20):
    """Sums every gradient over the ranks, in flat buckets of about `bucket_bytes`."""
    import torch.distributed as dist
    bucket, size = [], 0
    def flush():
        if bucket:
            flat = torch.cat([p.grad.reshape(-1) for p in bucket])
            dist.all_reduce(flat)
            off = 0
            for p in bucket:
                n = p.grad.numel()
                p.grad.copy_(flat[off:off + n].view_as(p.grad))
                off += n
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        bucket.append(p)
        size += p.grad.numel() * p.grad.element_size()
        if size >= bucket_bytes:
            flush()
            bucket, size = [], 0
    flush()


def sharded_steps(a, rank, world):
    """This rank's timed steps, one sequence per micro-batch; world 1: one process alone.
    `--zero-stage 3`: FSDP2 (see the module doc); else ZeroRedundancyOptimizer."""
    import torch.distributed as dist
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Model(a.shape, recompute=not a.no_recompute)
    fsdp = world > 1 and a.zero_stage == 3
    if fsdp:
        from torch.distributed.fsdp import fully_shard
        for layer in model.layers:
            fully_shard(layer)
    params = list(model.parameters())
    if fsdp:
        from torch.distributed.tensor import DTensor
        ends = [p for p in params if not isinstance(p, DTensor)]
        shards = [p for p in params if isinstance(p, DTensor)]
        opt = torch.optim.AdamW(params, lr=1e-6, weight_decay=0.01, foreach=False)
    elif world > 1:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, lr=1e-6,
                                      weight_decay=0.01)
    else:
        opt = torch.optim.AdamW(params, lr=1e-6, weight_decay=0.01)

    def sum_and_clip():
        if not fsdp:
            if world > 1:
                all_reduce_grads(params)
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            return
        all_reduce_grads(ends)
        # The global norm: each rank's shards once, the replicated ends once.
        sq = torch.as_tensor(sum(p.grad.to_local().double().pow(2).sum()
                                 for p in shards if p.grad is not None), dtype=torch.float64)
        dist.all_reduce(sq)
        sq += sum(p.grad.double().pow(2).sum() for p in ends)
        norm = float(sq.sqrt())
        if norm > 1.0:
            for p in params:
                if p.grad is not None:
                    p.grad.mul_(1.0 / (norm + 1e-6))

    ids, mask, adv = data(a, torch.device("cpu"))
    n_seq = ids.shape[0]
    # The loss is a token mean over the whole step's batch, whichever rank computes a part.
    n_tokens = mask.sum()
    old = -math.log(SHAPES[a.shape][0])
    autocast = lambda: torch.autocast("cpu", enabled=False)
    times = []
    for i in range(a.warmup + a.steps):
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for s in range(rank, n_seq, world):
            # backward_chunked means over the sequence's own tokens; the advantage's factor
            # (positive, so the clipped surrogate scales with it) makes that the batch's mean.
            share = mask[s:s + 1].sum() / n_tokens
            backward_chunked(model, ids[s:s + 1], mask[s:s + 1], adv[s:s + 1] * share, old,
                             a.chunk_tokens, autocast)
        sum_and_clip()
        opt.step()
        dt = time.perf_counter() - t0
        if i >= a.warmup:
            times.append(dt)
            print(f"bench_train_torch: rank {rank} of {world}: step {i - a.warmup + 1} took "
                  f"{dt:.3f} s", file=sys.stderr)
    return {
        "rank": rank, "median_s": statistics.median(times), "step_s": times,
        "tokens": n_seq * (a.seq_len - 1), "sequences": n_seq,
        "peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def ranks_main(a):
    """`--ranks N`: in a rank (RANK set) its steps as one JSON line; else one process alone,
    then N ranks, compared."""
    import torch.distributed as dist
    if a.device != "cpu":
        sys.exit("bench_train_torch: --ranks runs on the CPU (Gloo)")
    if "RANK" in os.environ:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        dist.init_process_group("gloo", rank=rank, world_size=world)
        print(json.dumps(sharded_steps(a, rank, world)), flush=True)
        dist.destroy_process_group()
        return
    one = sharded_steps(a, 0, 1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:]
    procs = []
    for r in range(a.ranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(a.ranks), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS=str(a.threads))
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True))
    results = []
    for r, p in enumerate(procs):
        out, _ = p.communicate()
        if p.returncode != 0:
            for q in procs:
                q.kill()
            sys.exit(f"bench_train_torch: rank {r} failed ({p.returncode})")
        results.append(json.loads(out.strip().splitlines()[-1]))
    # A step ends when its slowest rank's does (they meet in the all-reduce).
    step = max(r["median_s"] for r in results)
    tokens = one["tokens"]
    one_rate = tokens / one["median_s"]
    per_rank = tokens / a.ranks / step
    print(json.dumps({
        "side": "pytorch", "torch": torch.__version__, "shape": a.shape, "ranks": a.ranks,
        "threads_per_rank": a.threads, "tokens_per_step": tokens,
        "zero_stage": a.zero_stage,
        "optimizer": ("FSDP2 fully_shard per layer, ends replicated, AdamW" if a.zero_stage == 3
                      else "ZeroRedundancyOptimizer(AdamW), gradients all-reduced in 25 MB buckets"),
        "one_process": {"median_s": one["median_s"], "tokens_per_s": one_rate,
                        "peak_bytes": one["peak_bytes"]},
        "ranks_run": {"step_s": step, "rank_median_s": [r["median_s"] for r in results],
                      "tokens_per_s_per_rank": per_rank, "tokens_per_s": per_rank * a.ranks,
                      "peak_bytes": [r["peak_bytes"] for r in results]},
        "per_rank_ratio": per_rank / one_rate,
    }))


if __name__ == "__main__":
    main()
