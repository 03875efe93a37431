"""PyTorch's figures for the GPU rows of examples/bench.rs (`bench --json --only cuda`), printed
as the same JSON lines so both come from one run on one GPU (scripts/gpu_check.sh runs both):

- copy_d2d_64m_cuda: `y.copy_(x)` of 64M f32 on the device, with its bandwidth (`gbs`: bytes
  read plus written per second), the reference the elementwise rows are held to;
- elementwise_64m_cuda (eager) and elementwise_64m_cuda_compiled (torch.compile): the chain
  `relu(x * 1.5 + 0.25) * 0.5` on 64M f32, with `gbs` and `fraction_of_copy`;
- resnet18_infer_b64_cuda: torchvision's ResNet-18 (eval, cuDNN, f32, TF32 off as Tessera's
  default FMA path) at batch 64, 224x224;
- launch_overhead_cuda_no_graphs / launch_overhead_cuda_graphs: microseconds per kernel of 100
  tiny adds launched one by one, and replayed from one captured CUDA graph (`us_per_kernel`).

Usage: python scripts/bench_pytorch_cuda.py [--reps 10] [--only NAME,...]
Needs torch with CUDA and torchvision; the Rust tests never do.
"""

import argparse
import json
import time

import torch

ELEMENTS = 64 << 20
BYTES_MOVED = 2 * ELEMENTS * 4


def timed(reps, f):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        f()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) * 1e3)
    samples.sort()
    return samples[len(samples) // 2], samples[0]


def chain(x):
    return torch.relu(x * 1.5 + 0.25) * 0.5


def copy_row(reps):
    x = torch.rand(ELEMENTS, device="cuda")
    y = torch.empty_like(x)
    return timed(reps, lambda: y.copy_(x))


def elementwise_row(reps, compiled):
    x = torch.rand(ELEMENTS, device="cuda")
    f = torch.compile(chain) if compiled else chain
    with torch.no_grad():
        return timed(reps, lambda: f(x))


def resnet18_row(reps):
    import torchvision

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    model = torchvision.models.resnet18().cuda().eval()
    x = torch.randn(64, 3, 224, 224, device="cuda")
    with torch.no_grad():
        return timed(reps, lambda: model(x))


KERNELS = 100


def launch_row(reps, graphs):
    x = torch.zeros(16, device="cuda")

    def adds():
        for _ in range(KERNELS):
            x.add_(1.0)

    if not graphs:
        return timed(reps, adds)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        adds()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        adds()
    return timed(reps, graph.replay)


ROWS = {
    "copy_d2d_64m_cuda": copy_row,
    "elementwise_64m_cuda": lambda reps: elementwise_row(reps, False),
    "elementwise_64m_cuda_compiled": lambda reps: elementwise_row(reps, True),
    "resnet18_infer_b64_cuda": resnet18_row,
    "launch_overhead_cuda_no_graphs": lambda reps: launch_row(reps, False),
    "launch_overhead_cuda_graphs": lambda reps: launch_row(reps, True),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    only = [o for o in args.only.split(",") if o]
    copy_gbs = None
    for name, run in ROWS.items():
        if only and not any(o in name for o in only):
            continue
        median, fastest = run(args.reps)
        row = {"name": name, "median_ms": median, "min_ms": fastest, "source": "pytorch",
               "device": torch.cuda.get_device_name(0)}
        if name.startswith(("copy", "elementwise")):
            row["gbs"] = BYTES_MOVED / (median * 1e-3) / 1e9
            if copy_gbs is None:
                copy_gbs = row["gbs"]
            else:
                row["fraction_of_copy"] = row["gbs"] / copy_gbs
        if name.startswith("launch_overhead"):
            row["us_per_kernel"] = median * 1e3 / KERNELS
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
