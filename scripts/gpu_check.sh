#!/usr/bin/env bash
# Runs on a GPU machine (NVIDIA driver; Python with PyTorch for the comparison; no Rust) what
# scripts/gpu_prepare.sh built: every test of the GPU test binaries, ignored ones included
# (each binary's other tests pass on any machine), then the GPU bench rows and PyTorch's
# figures for the same workloads in the same run. Results go to RESULTS (default: the
# `results` folder next to this script, or $OUT/results when $OUT is set): one log per test
# binary, bench_cuda.jsonl (Tessera) and bench_pytorch_cuda.jsonl. Exits non-zero when a test
# binary fails; the benches still run.
#
#   gpu_check.sh                 # everything
#   ONLY="device bench" gpu_check.sh   # only the binaries whose names contain a word of ONLY
#                                       # ("bench" selects the bench rows)
set -uo pipefail

dir="$(cd "$(dirname "$0")" && pwd)"
results="${RESULTS:-${OUT:+$OUT/results}}"
results="${results:-$dir/results}"
mkdir -p "$results"
export TESSERA_CONFORMANCE="${TESSERA_CONFORMANCE:-$dir/conformance}"
reps="${REPS:-10}"

selected() {
    [ -z "${ONLY:-}" ] && return 0
    for word in $ONLY; do
        case "$1" in *"$word"*) return 0 ;; esac
    done
    return 1
}

nvidia-smi -L 2>&1 | tee "$results/gpus.txt" || echo "nvidia-smi not found" | tee "$results/gpus.txt"
gpus=$(grep -c '^GPU ' "$results/gpus.txt" || true)

failed=()
for bin in "$dir"/bin/*; do
    name="$(basename "$bin")"
    [ "$name" = bench ] && continue
    selected "$name" || continue
    args=(--include-ignored --test-threads 1 --nocapture)
    # NCCL's two-rank tests need two GPUs; with fewer only the one-GPU tests run.
    if [ "$name" = nccl_gpu ] && [ "${gpus:-0}" -lt 2 ]; then
        args=(--ignored --test-threads 1 one_gpu)
    fi
    echo "== $name ${args[*]}"
    if "$bin" "${args[@]}" >"$results/$name.log" 2>&1; then
        echo "   ok ($(grep -h '^test result' "$results/$name.log" | tail -1))"
    else
        echo "   FAILED: see $results/$name.log"
        tail -20 "$results/$name.log"
        failed+=("$name")
    fi
done

if selected bench && [ -x "$dir/bin/bench" ]; then
    echo "== bench (GPU rows, $reps reps)"
    "$dir/bin/bench" --json --only cuda --reps "$reps" | tee "$results/bench_cuda.jsonl"
    if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
        echo "== PyTorch, same workloads"
        python3 "$dir/bench_pytorch_cuda.py" --reps "$reps" | tee "$results/bench_pytorch_cuda.jsonl"
    else
        echo "PyTorch with CUDA not importable: no PyTorch figures" | tee "$results/bench_pytorch_cuda.jsonl"
    fi
fi

if [ ${#failed[@]} -gt 0 ]; then
    echo "failed: ${failed[*]}"
    exit 1
fi
echo "all GPU test binaries passed; results in $results"
