#!/usr/bin/env bash
# Builds (here, on a CPU machine) the spade-policy binaries that scripts/policy/gpu_check.sh
# runs on the GPU machine: the integration tests (`it`) and the side-by-side bench, linked
# against libtorch_cuda so that libtorch's CUDA backend loads there.
#
# Why a stub: Rust links with --as-needed, which drops libtorch_cuda.so (nothing references its
# symbols; its static initialisers register the CUDA backend), so it must be forced with
# --no-as-needed (shared/toolchain.md). The CPU libtorch of scripts/setup has no
# libtorch_cuda.so (the CUDA wheel's is ~1 GB), but the linker only needs a library with that
# soname to record DT_NEEDED; at run time the GPU machine's real one is found through
# LD_LIBRARY_PATH (it precedes the binaries' DT_RUNPATH).
#
# Usage: scripts/policy/gpu_build.sh   -> target/gpu-bundle/{it,policy-bench,train-bench,rollout-bench} (release builds in
# target/gpu, so the normal target/ is untouched; the first build takes ~10 min on 2 cores).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="$ROOT/target/gpu"
STUB="$CARGO_TARGET_DIR/stub"
BUNDLE="$ROOT/target/gpu-bundle"
mkdir -p "$STUB" "$BUNDLE"
if [ ! -f "$STUB/libtorch_cuda.so" ]; then
    echo 'void spade_libtorch_cuda_stub(void) {}' \
        | cc -shared -fPIC -x c - -o "$STUB/libtorch_cuda.so" -Wl,-soname,libtorch_cuda.so
fi
LINK="-Wl,--no-as-needed,-L$STUB,-ltorch_cuda,--as-needed"
build() { # $1: cargo target selector, $2: bundle name
    local exe
    exe=$(cargo rustc --release -p spade-policy $1 --message-format=json -- -C "link-arg=$LINK" \
        | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable"): print(m["executable"])' \
        | tail -1)
    cp "$exe" "$BUNDLE/$2"
    if ! readelf -d "$BUNDLE/$2" | grep -q 'libtorch_cuda.so'; then
        echo "gpu_build: $2 does not need libtorch_cuda.so; the CUDA backend would not load" >&2
        exit 1
    fi
}
build "--test it" it
build "--bench policy" policy-bench
build "--example train_bench" train-bench
build "--example rollout_bench" rollout-bench
strip "$BUNDLE/it" "$BUNDLE/policy-bench" "$BUNDLE/train-bench" "$BUNDLE/rollout-bench" 2>/dev/null || true
du -sh "$BUNDLE"/*
echo "gpu_build: done; carry target/gpu-bundle and run scripts/policy/gpu_check.sh on the GPU machine"
