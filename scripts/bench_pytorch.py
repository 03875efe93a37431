"""PyTorch eager on the workloads of examples/bench.rs, printing the same JSON lines, so that
Tessera's figures can be compared with a baseline measured in the same run.

Usage: python scripts/bench_pytorch.py [--threads 2] [--reps 15]
Needs torch (e.g. `pip install torch==2.15.0` in a venv); the Rust tests never do.
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def timed(reps, f):
    for _ in range(3):
        f()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        f()
        samples.append((time.perf_counter() - start) * 1e3)
    samples.sort()
    return samples[len(samples) // 2], samples[0]


class SmallCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    mlp = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    x = torch.randn(256, 784)
    target = torch.randint(0, 10, (256,))
    opt = torch.optim.SGD(mlp.parameters(), lr=0.01, momentum=0.9)
    cnn = SmallCnn().eval()
    images = torch.randn(64, 3, 32, 32)
    big = torch.randn(16 << 20)

    def infer_mlp():
        with torch.no_grad():
            mlp(x)

    def train_mlp():
        opt.zero_grad()
        F.cross_entropy(mlp(x), target).backward()
        opt.step()

    def infer_cnn():
        with torch.no_grad():
            cnn(images)

    workloads = [
        ("matmul_1024", lambda: a @ b),
        ("mlp_infer_b256", infer_mlp),
        ("mlp_train_b256", train_mlp),
        ("cnn_infer_b64", infer_cnn),
        ("elementwise_16m", lambda: torch.relu(big * 1.5 + 0.25) * 0.5 - 1.0),
    ]
    for name, f in workloads:
        median, fastest = timed(args.reps, f)
        print(json.dumps({"name": name, "median_ms": median, "min_ms": fastest, "threads": args.threads}))


if __name__ == "__main__":
    main()
