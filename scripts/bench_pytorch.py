"""PyTorch eager and torch.compile on the workloads of examples/bench.rs, printing the same
JSON lines, so that Tessera's figures can be compared with a baseline measured in the same run.

Usage: python scripts/bench_pytorch.py [--threads 2] [--reps 15] [--only NAME,...] [--no-compile]
Needs torch and torchvision (e.g. `pip install torch==2.15.0 torchvision==0.29.2` in a venv);
the Rust tests never do. `*_compiled` rows time a torch.compile'd model after its first call;
`compile_*_ms` rows time that first call (tracing, Inductor code generation and the C++
compile) of a fresh model after `torch._dynamo.reset()` with Inductor's caches off, once.
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


def transformer_block():
    """The transformer block of examples/bench_compiled.rs."""
    return nn.TransformerEncoderLayer(256, 4, dim_feedforward=1024, dropout=0.0, batch_first=True).eval()


def first_call_ms(make_model, x):
    """Milliseconds of the first call of a freshly compiled model (its compile time), cold:
    Inductor's caches (in memory and on disk) are off, or the graphs compiled earlier in the
    process (the *_compiled rows) would be found again."""
    torch._inductor.config.force_disable_caches = True
    torch._dynamo.reset()
    model = torch.compile(make_model())
    start = time.perf_counter()
    with torch.no_grad():
        model(x)
    return (time.perf_counter() - start) * 1e3


def mlp_model():
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


def compiled_train_step(model, x, target):
    """A training step of torch.compile'd `model` (forward and backward compiled by
    AOTAutograd) with the baseline's SGD: what `tessera::compile_train_step` is compared with."""
    compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        F.cross_entropy(compiled(x), target).backward()
        opt.step()

    return step


def first_train_step_ms(x, target):
    """Milliseconds of the first training step of a freshly compiled MLP (its compile time),
    cold, as `first_call_ms`."""
    torch._inductor.config.force_disable_caches = True
    torch._dynamo.reset()
    step = compiled_train_step(mlp_model(), x, target)
    start = time.perf_counter()
    step()
    return (time.perf_counter() - start) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--only", default="", help="comma-separated name fragments to run")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile rows")
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

    import torchvision

    resnet = torchvision.models.resnet18().eval()
    image = torch.randn(1, 3, 224, 224)
    block = transformer_block()
    tokens = torch.randn(8, 128, 256)

    def elementwise(t):
        return torch.relu(t * 1.5 + 0.25) * 0.5 - 1.0

    def inference(model, inp):
        def run():
            with torch.no_grad():
                model(inp)

        return run

    workloads = [
        ("matmul_1024", lambda: a @ b),
        ("mlp_infer_b256", infer_mlp),
        ("mlp_train_b256", train_mlp),
        ("cnn_infer_b64", infer_cnn),
        ("resnet18_infer_b1", inference(resnet, image)),
        ("elementwise_16m", lambda: elementwise(big)),
        ("transformer_block_b8", inference(block, tokens)),
    ]
    if not args.no_compile:
        compiled_elementwise = torch.compile(elementwise)
        workloads += [
            ("mlp_infer_b256_compiled", inference(torch.compile(mlp.eval()), x)),
            ("cnn_infer_b64_compiled", inference(torch.compile(cnn), images)),
            ("resnet18_infer_b1_compiled", inference(torch.compile(resnet), image)),
            ("elementwise_16m_compiled", lambda: compiled_elementwise(big)),
            ("transformer_block_b8_compiled", inference(torch.compile(block), tokens)),
            ("mlp_train_b256_compiled", compiled_train_step(mlp_model(), x, target)),
        ]
    only = [o for o in args.only.split(",") if o]
    for name, f in workloads:
        if only and not any(o in name for o in only):
            continue
        median, fastest = timed(args.reps, f)
        print(json.dumps({"name": name, "median_ms": median, "min_ms": fastest, "threads": args.threads}), flush=True)
    if not args.no_compile:
        for name, make, inp in [
            ("compile_small_cnn_ms", lambda: SmallCnn().eval(), images),
            ("compile_resnet18_ms", lambda: torchvision.models.resnet18().eval(), image),
            ("compile_transformer_block_ms", transformer_block, tokens),
        ]:
            if only and not any(o in name for o in only):
                continue
            ms = first_call_ms(make, inp)
            print(json.dumps({"name": name, "median_ms": ms, "min_ms": ms, "threads": args.threads}), flush=True)
        if not only or any(o in "compile_mlp_train_ms" for o in only):
            ms = first_train_step_ms(x, target)
            print(json.dumps({"name": "compile_mlp_train_ms", "median_ms": ms, "min_ms": ms, "threads": args.threads}), flush=True)


if __name__ == "__main__":
    main()
