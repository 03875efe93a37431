"""Measures how much Tessera's compiled models and PyTorch (eager and torch.compile) slow down
when one core of the machine is kept busy by another process (issue 10, item 6: PyTorch's OpenMP
was seen to collapse 15-80x then). Each round runs Tessera's bench (examples/bench.rs) and
scripts/bench_pytorch.py alternately, first on an idle machine, then with a spinning process
pinned to core 1 (`taskset -c 1`), and prints a Markdown table: each workload's median per
round idle and busy, and the median over rounds of the busy / idle ratio, with the load average
(`os.getloadavg`) at each run and the CPU's vector extensions, as BENCHMARKS.md records them.

Usage: python scripts/bench_contention.py --python /path/to/venv/bin/python [--rounds 2]
       [--threads 2] [--reps 7] [--only cnn_infer_b64,resnet18_infer_b1] [--busy-core 1]
Build the bench first: cargo build --release --example bench
"""

import argparse
import json
import os
import statistics
import subprocess
import sys


def rows(command):
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return {r["name"]: r["median_ms"] for r in map(json.loads, filter(None, out.splitlines()))}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--python", required=True, help="a python with torch and torchvision")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--only", default="cnn_infer_b64,resnet18_infer_b1")
    parser.add_argument("--busy-core", type=int, default=1)
    args = parser.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    common = ["--threads", str(args.threads), "--reps", str(args.reps), "--only", args.only]
    rust = [os.path.join(root, "target/release/examples/bench"), "--json", *common]
    torch = [args.python, os.path.join(root, "scripts/bench_pytorch.py"), *common]
    # One sample per (round, load, system): {workload: ms}, and the load average before it.
    samples = {}
    loads = []
    for r in range(args.rounds):
        for busy in (False, True):
            spinner = None
            if busy:
                spin = [sys.executable, "-c", "while True: pass"]
                spinner = subprocess.Popen(["taskset", "-c", str(args.busy_core), *spin])
            try:
                for system, command in (("tessera", rust), ("pytorch", torch)):
                    loads.append(f"{'busy' if busy else 'idle'} {system} {os.getloadavg()[0]:.2f}")
                    samples[(r, busy, system)] = rows(command)
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
    flags = open("/proc/cpuinfo").read().split("flags\t\t: ")[1].split("\n")[0].split()
    vector = [f for f in ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni") if f in flags]
    print(f"{args.rounds} rounds, {args.threads} threads, core {args.busy_core} busy in the busy runs, "
          f"{' '.join(vector)}")
    print(f"load average before each run: {'; '.join(loads)}")
    print()
    print("| system | workload | idle ms per round | one core busy, ms per round | slowdown (median of rounds) |")
    print("|---|---|---|---|---|")
    for system, label in (("tessera", "Tessera"), ("pytorch", "PyTorch")):
        for name in samples[(0, False, system)]:
            idle = [samples[(r, False, system)].get(name) for r in range(args.rounds)]
            busy = [samples[(r, True, system)].get(name) for r in range(args.rounds)]
            if None in idle or None in busy:
                continue
            kind = name
            if system == "pytorch":
                kind = name.replace("_compiled", " (torch.compile)") if name.endswith("_compiled") else f"{name} (eager)"
            fmt = lambda xs: ", ".join(f"{x:.3g}" for x in xs)
            slowdown = statistics.median(b / i for b, i in zip(busy, idle))
            print(f"| {label} | {kind} | {fmt(idle)} | {fmt(busy)} | {slowdown:.2f}x |")


if __name__ == "__main__":
    main()
