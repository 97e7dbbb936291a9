#!/usr/bin/env python3
"""The PyTorch side of `spade model bench`: one training step of a random-init Qwen3 shape with
the same recipe, timed, on the same device.

Recipe (what spade-policy does, in plain PyTorch): float32 parameters (the masters) with bf16
autocast for the forward and backward passes on CUDA (float32 on CPU), per-layer activation
checkpointing (torch.utils.checkpoint), a policy-gradient token loss over `tokens` predicted
tokens in sequences of `seq_len` (the same token count; equal lengths, so a batch of rows with
causal attention computes what packing does), global gradient clipping at 1.0 and
torch.optim.AdamW (float32 moments; fused on CUDA). The model is written out here (RMSNorm,
GQA with q/k norms and rotary embeddings, SwiGLU) so that only torch is needed.

    python bench_train_torch.py --shape qwen3-0.6b --tokens 16384 --device cuda [--threads 1]

Prints one JSON line: shape, parameters, tokens, step seconds, median, tokens/s, peak memory
(torch.cuda.max_memory_allocated on CUDA; peak RSS on CPU).
"""
import argparse
import json
import math
import resource
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

# (hidden, intermediate, layers, query heads, tied): Qwen3's config.json values; vocabulary
# 151,936, head_dim 128, 8 key/value heads, rope theta 1e6 (crates/policy/src/preset.rs).
SHAPES = {
    "qwen3-0.6b": (1024, 3072, 28, 16, True),
    "qwen3-1.7b": (2048, 6144, 28, 16, True),
    "qwen3-4b": (2560, 9728, 36, 32, True),
    "qwen3-8b": (4096, 12288, 36, 32, False),
}
VOCAB, HEAD_DIM, KV_HEADS, THETA, EPS = 151_936, 128, 8, 1e6, 1e-6


class Layer(nn.Module):
    def __init__(self, h, inter, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.RMSNorm(h, eps=EPS)
        self.ln2 = nn.RMSNorm(h, eps=EPS)
        self.q = nn.Linear(h, heads * HEAD_DIM, bias=False)
        self.k = nn.Linear(h, KV_HEADS * HEAD_DIM, bias=False)
        self.v = nn.Linear(h, KV_HEADS * HEAD_DIM, bias=False)
        self.o = nn.Linear(heads * HEAD_DIM, h, bias=False)
        self.qn = nn.RMSNorm(HEAD_DIM, eps=EPS)
        self.kn = nn.RMSNorm(HEAD_DIM, eps=EPS)
        self.gate = nn.Linear(h, inter, bias=False)
        self.up = nn.Linear(h, inter, bias=False)
        self.down = nn.Linear(inter, h, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        y = self.ln1(x)
        q = self.qn(self.q(y).view(b, t, self.heads, HEAD_DIM)).transpose(1, 2)
        k = self.kn(self.k(y).view(b, t, KV_HEADS, HEAD_DIM)).transpose(1, 2)
        v = self.v(y).view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
        rot = lambda z: z * cos + torch.cat([-z[..., HEAD_DIM // 2:], z[..., : HEAD_DIM // 2]], -1) * sin
        a = F.scaled_dot_product_attention(rot(q), rot(k), v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
        y = self.ln2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Model(nn.Module):
    def __init__(self, shape):
        super().__init__()
        h, inter, layers, heads, tied = SHAPES[shape]
        self.embed = nn.Embedding(VOCAB, h)
        self.layers = nn.ModuleList(Layer(h, inter, heads) for _ in range(layers))
        self.norm = nn.RMSNorm(h, eps=EPS)
        self.head = None if tied else nn.Linear(h, VOCAB, bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids):
        t = ids.shape[1]
        inv = 1.0 / THETA ** (torch.arange(0, HEAD_DIM, 2, device=ids.device).float() / HEAD_DIM)
        f = torch.arange(t, device=ids.device).float()[:, None] * inv
        cos, sin = torch.cat([f.cos()] * 2, -1), torch.cat([f.sin()] * 2, -1)
        x = self.embed(ids)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        for l in self.layers:
            x = checkpoint(l, x, cos, sin, use_reentrant=False) if self.training else l(x, cos, sin)
        x = self.norm(x)
        w = self.embed.weight if self.head is None else self.head.weight
        return F.linear(x, w)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    model = Model(a.shape).to(dev)
    n_seq = max(1, a.tokens // (a.seq_len - 1))
    ids = torch.randint(0, VOCAB, (n_seq, a.seq_len), device=dev)
    prompt = max(1, a.seq_len // 4)
    mask = torch.zeros(n_seq, a.seq_len - 1, device=dev)
    mask[:, prompt - 1:] = 1.0
    adv = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(n_seq)], device=dev)[:, None]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01, fused=cuda)
    old = -math.log(VOCAB)
    times = []
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    for i in range(a.warmup + a.steps):
        if cuda:
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            logits = model(ids[:, :-1])
        logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        ratio = torch.exp(logp - old)
        surrogate = torch.minimum(ratio * adv, ratio.clamp(0.8, 1.28) * adv)
        loss = -(surrogate * mask).sum() / mask.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if cuda:
            torch.cuda.synchronize(dev)
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    peak = torch.cuda.max_memory_allocated(dev) if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({
        "side": "pytorch", "shape": a.shape, "torch": torch.__version__, "device": str(dev),
        "threads": a.threads, "parameters": sum(p.numel() for p in model.parameters()),
        "tokens": n_seq * (a.seq_len - 1), "sequences": n_seq, "step_s": times, "median_s": med,
        "tokens_per_s": n_seq * (a.seq_len - 1) / med, "peak_bytes": peak,
        "peak_source": "torch.cuda.max_memory_allocated" if cuda else "peak resident set",
    }))


if __name__ == "__main__":
    main()
