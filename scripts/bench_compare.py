"""Runs Tessera's bench (examples/bench.rs) and PyTorch's (scripts/bench_pytorch.py)
alternately in one sitting and prints a Markdown table: each workload's median per round, and
the median over rounds of the per-round ratio against PyTorch eager and torch.compile, with the
load average and the CPU's vector extensions, as BENCHMARKS.md records them.

Usage: python scripts/bench_compare.py --python /path/to/venv/bin/python [--rounds 3]
       [--threads 2] [--reps 7] [--only NAME,...]
Build the bench first: cargo build --release --example bench
"""

import argparse
import json
import os
import statistics
import subprocess


def rows(command):
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return {r["name"]: r for r in map(json.loads, filter(None, out.splitlines()))}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--python", required=True, help="a python with torch and torchvision")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    common = ["--threads", str(args.threads), "--reps", str(args.reps)]
    only = ["--only", args.only] if args.only else []
    rust = [os.path.join(root, "target/release/examples/bench"), "--json", *common, *only]
    torch = [args.python, os.path.join(root, "scripts/bench_pytorch.py"), *common, *only]
    rounds = []
    for _ in range(args.rounds):
        load = os.getloadavg()[0]
        ours = rows(rust)
        theirs = rows(torch)
        rounds.append((load, ours, theirs))
    flags = open("/proc/cpuinfo").read().split("flags\t\t: ")[1].split("\n")[0].split()
    vector = [f for f in ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni") if f in flags]
    loads = ", ".join(f"{load:.2f}" for load, _, _ in rounds)
    print(f"{args.rounds} alternating rounds, {args.threads} threads, load average {loads}, {' '.join(vector)}")
    print()
    print("| workload | Tessera ms per round | PyTorch ms per round | ratio to PyTorch (same name) | ratio to PyTorch eager |")
    print("|---|---|---|---|---|")
    for name in rounds[0][1]:
        ours = [r[1][name]["median_ms"] for r in rounds if name in r[1]]
        theirs = [r[2][name]["median_ms"] for r in rounds if name in r[2]]
        eager = name.removesuffix("_compiled")
        base = [r[2][eager]["median_ms"] for r in rounds if eager in r[2]]
        fmt = lambda xs: ", ".join(f"{x:.3g}" for x in xs) or "-"
        ratio = lambda a, b: f"{statistics.median(x / y for x, y in zip(a, b)):.2f}x" if a and len(a) == len(b) else "-"
        print(f"| {name} | {fmt(ours)} | {fmt(theirs)} | {ratio(ours, theirs)} | {ratio(ours, base) if eager != name else '-'} |")


if __name__ == "__main__":
    main()
