#!/usr/bin/env bash
# Builds here (Rust, no GPU needed) everything scripts/gpu_check.sh runs on a GPU machine that
# has the NVIDIA driver, Python and PyTorch but no Rust: the test binaries of every GPU-marked
# test (the ignored tests of runtime/cuda/tests/device.rs and device_conformance.rs,
# tests/compile_cuda_gpu.rs, compile_cuda_unavailable.rs and bench_cuda.rs, and the NCCL tests
# of runtime/distributed/tests/nccl_gpu.rs), the bench example, the conformance cases, and the
# two scripts, into one folder to copy over:
#
#   scripts/gpu_prepare.sh [OUT]        # OUT defaults to target/gpu-check
#   (copy OUT to the GPU machine)  OUT/gpu_check.sh
#
# The binaries are found in cargo's `--message-format=json` artifact lines, not guessed from
# file names. PROFILE=dev builds debug binaries instead of release (faster here, slow there).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/target/gpu-check}"
profile="${PROFILE:-release}"
conformance="${TESSERA_CONFORMANCE:-$root/../shared/conformance}"
cd "$root"
rm -rf "$out"
mkdir -p "$out/bin"

# The test and example executables cargo reports for `$@` (one `<target name> <path>` per
# line; not the `tessera` CLI a test build also links).
executables() {
    cargo "$@" --profile "$profile" --message-format=json \
        | jq -r 'select(.reason == "compiler-artifact" and .executable != null
                        and (.profile.test or (.target.kind | index("example"))))
                 | "\(.target.name) \(.executable)"'
}

copy_all() {
    while read -r name path; do
        cp "$path" "$out/bin/$name"
        echo "  $name <- ${path#"$root"/}"
    done
}

echo "building the GPU test binaries ($profile) into $out/bin"
executables test --no-run -p tessera-cuda --test device --test device_conformance | copy_all
executables test --no-run -p tessera --test compile_cuda_gpu --test compile_cuda_unavailable \
    --test bench_cuda | copy_all
executables test --no-run -p tessera-distributed --features nccl --test nccl_gpu | copy_all
executables build -p tessera --example bench | copy_all

if [ -d "$conformance" ]; then
    cp -r "$conformance" "$out/conformance"
else
    echo "warning: no conformance cases at $conformance (set TESSERA_CONFORMANCE)" >&2
fi
cp scripts/gpu_check.sh scripts/bench_pytorch_cuda.py "$out/"
echo "ready: $(du -sh "$out" | cut -f1) in $out; on the GPU machine run $out/gpu_check.sh"
