#!/usr/bin/env bash
# The CUDA checks of spade-policy, run on the GPU machine (an H200 with PyTorch 2.11.0 / CUDA 13
# under /opt/torch/.venv, no Rust) from binaries built here by scripts/policy/gpu_build.sh.
# Builds nothing. Run from the repository root with target/gpu-bundle carried along:
#
#   scripts/policy/gpu_check.sh            # ~7 min: tests on CPU + CUDA (mixed precision, packed /
#                                          # chunked / recomputed gradients included), the
#                                          # inference bench, then one 16k-token training step
#                                          # at the 0.6B and 4B shapes, ours and PyTorch's
#                                          # (bench_train_torch.py: bf16 autocast, float32 AdamW,
#                                          # checkpointing, chunked log-probs) side by side
#                                          # (scripts/policy/bench-train: medians, the ratio)
#
# Writes tests.log, bench-*.log, train-SHAPE.log (bench-train's summary) and train-SHAPE/ (each
# side's JSON lines and log) under $OUT (or /tmp/spade-gpu-check). Exit
# status: the tests' (the benches report, they do not fail). SKIP_TRAIN=1 skips the training
# benches; TRAIN_SHAPES (default "qwen3-0.6b qwen3-4b") and TRAIN_TOKENS (16384) change them.
# SKIP_ROLLOUT=1 skips the rollout-engine benches (ROLLOUT_SHAPES, default "qwen3-0.6b qwen3-4b").
# SKIP_MOE=1 skips the Qwen3-MoE benches (a 30B-A3B-shaped 4-layer stack: training step and
# engine generation).
set -uo pipefail
BUNDLE="${BUNDLE:-target/gpu-bundle}"
PY="${TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
OUT="${OUT:-/tmp/spade-gpu-check}"
mkdir -p "$OUT"
for f in "$BUNDLE/it" "$BUNDLE/policy-bench" "$BUNDLE/train-bench" "$PY"; do
    [ -x "$f" ] || { echo "gpu_check: missing $f" >&2; exit 2; }
done
# The binaries were linked against this project's libtorch 2.11.0; load the machine's own
# 2.11.0 (with libtorch_cuda.so) instead.
TORCH_LIB=$("$PY" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
export LD_LIBRARY_PATH="$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Tests find their fixtures and scripts in this checkout, not where they were built.
export CARGO_MANIFEST_DIR="$PWD/crates/policy"
export SPADE_REQUIRE_CUDA="${SPADE_REQUIRE_CUDA:-1}" OMP_NUM_THREADS=4
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$OUT/gpu.txt"
if "$PY" -c 'import transformers' 2>/dev/null; then
    export SPADE_TORCH_PYTHON="$PY"   # enables the Rust -> transformers checkpoint test
    HAVE_HF=1
else
    echo "gpu_check: no transformers in $PY; the transformers side of the bench is skipped"
    HAVE_HF=0
fi

echo "== tests (CPU and CUDA)"
timeout 240 "$BUNDLE/it" --test-threads 1 2>&1 | tee "$OUT/tests.log"
status=${PIPESTATUS[0]}

for size in tiny small; do
    echo "== bench $size on CUDA (bf16)"
    args=(--device cuda --threads 4 --repeats 3 --rounds 1 --size "$size" --dir "/tmp/spade-bench-$size"
          --script scripts/policy/bench_torch.py)
    if [ "$HAVE_HF" = 1 ]; then args+=(--python "$PY"); else args+=(--python /nonexistent); fi
    timeout 90 "$BUNDLE/policy-bench" "${args[@]}" 2>&1 | tee "$OUT/bench-$size.log"
done
if [ "${SKIP_TRAIN:-0}" != 1 ]; then
    for shape in ${TRAIN_SHAPES:-qwen3-0.6b qwen3-4b}; do
        tokens="${TRAIN_TOKENS:-16384}"
        echo "== training step $shape, $tokens tokens: spade (bf16 + float32 masters, recompute) and PyTorch (same recipe)"
        # scripts/policy/bench-train runs both with the same flags and prints medians and the
        # ratio; the bundle's train-bench takes `spade model bench`'s flags.
        timeout 180 scripts/policy/bench-train --shape "$shape" --tokens "$tokens" --seq-len 2048 \
            --device cuda --threads 4 --steps 3 --warmup 1 --rounds 1 \
            --spade "$BUNDLE/train-bench" --python "$PY" --out "$OUT/train-$shape" \
            2>&1 | tee "$OUT/train-$shape.log"
    done
fi
if [ "${SKIP_ROLLOUT:-0}" != 1 ] && [ -x "$BUNDLE/rollout-bench" ]; then
    # The rollout engine: 64 and 192 concurrent episodes at 1k and 4k context, 0.6B and 4B
    # shapes; the batch sampler once per shape (64 episodes, 1k) as today's path; transformers'
    # generate (and generate_batch where it exists) on the same workload.
    for shape in ${ROLLOUT_SHAPES:-qwen3-0.6b qwen3-4b}; do
        for ctx in 1024 4096; do
            for envs in 8 24; do
                echo "== rollout $shape, $((envs * 8)) episodes, context $ctx: engine"
                timeout 120 "$BUNDLE/rollout-bench" "$shape" "$envs" 8 "$ctx" cuda engine 256 \
                    2> "$OUT/rollout-$shape-$envs-$ctx.log" | tee "$OUT/rollout-$shape-$envs-$ctx.json"
            done
        done
        echo "== rollout $shape, 64 episodes, context 1024: batch sampler"
        timeout 120 "$BUNDLE/rollout-bench" "$shape" 8 8 1024 cuda sampler 256 \
            2> "$OUT/rollout-$shape-sampler.log" | tee "$OUT/rollout-$shape-sampler.json"
        if [ "$HAVE_HF" = 1 ]; then
            echo "== rollout $shape, 64 episodes, context 1024: transformers"
            timeout 150 "$PY" scripts/policy/bench_rollout_hf.py --shape "$shape" --envs 8 --plays 8 \
                --context 1024 --device cuda 2> "$OUT/rollout-$shape-hf.log" | tee "$OUT/rollout-$shape-hf.json"
        fi
    done
fi
if [ "${SKIP_MOE:-0}" != 1 ]; then
    # Qwen3-MoE: 30B-A3B's layer shapes (128 experts of 768, top-8, hidden 2,048), 4 layers
    # (3.1 B parameters: bf16 weights 6 GB, float32 masters 12 GB, moments 25 GB). A training
    # step ours and PyTorch's (transformers' sparse block), then one step's generation on the
    # engine (forward tokens/s); peak memory in each side's JSON.
    echo "== training step qwen3-30b-a3b-4l, 8k tokens: spade and PyTorch"
    timeout 240 scripts/policy/bench-train --shape qwen3-30b-a3b-4l --tokens 8190 --seq-len 2048 \
        --device cuda --threads 4 --steps 2 --warmup 1 --rounds 1 \
        --spade "$BUNDLE/train-bench" --python "$PY" --out "$OUT/train-qwen3-30b-a3b-4l" \
        2>&1 | tee "$OUT/train-qwen3-30b-a3b-4l.log"
    if [ -x "$BUNDLE/rollout-bench" ]; then
        echo "== rollout qwen3-30b-a3b-4l, 64 episodes, context 1024: engine"
        timeout 150 "$BUNDLE/rollout-bench" qwen3-30b-a3b-4l 8 8 1024 cuda engine 256 \
            2> "$OUT/rollout-moe.log" | tee "$OUT/rollout-moe.json"
    fi
fi
echo "gpu_check: tests exit status $status; logs in $OUT"
exit "$status"
