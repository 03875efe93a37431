"""Writes the torchvision fixtures of tessera-nn's model tests (run once; the tests never need
PyTorch): the ordered state-dict keys and shapes of torchvision's resnet18, resnet34,
resnet50, vgg11_bn, mobilenet_v2 and vit_b_16 (default sizes; one `key dim,dim,...` line per
tensor in `torchvision_keys/<model>.txt`), and the outputs of resnet34,
resnet50 and vgg11_bn (10 classes) in eval mode on a [1, 3, 32, 32] input, with every
state-dict tensor filled by the formula below (so no weights are stored), in float32, plus
the float32-vs-float64 discrepancy the tests derive their tolerance from.

    /tmp/tv/bin/python scripts/torchvision_models.py

Generated with torch 2.15.0 and torchvision 0.29.2 (CPU).
Weight formula, for the p-th state-dict entry (0-based, state_dict order) and its j-th element
(row-major): k = (7 j^2 + 13 j + 101 p) mod 1021 (exact integers), s = (2k + 1) / 1021 - 1, a
pseudo-random value in (-1, 1) that both languages compute bit for bit;
  num_batches_tracked: 0;  tensors of 2+ dims: s * sqrt(3 / fan_in), fan_in = numel / shape[0];
  running_var: 1 + 0.25 (1 + s);  other 1-D `weight`: 1 + 0.1 s;  anything else: 0.1 s.
Input element j: the same s with p = 0.
"""

import math
import os

import torch
import torchvision
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "crates", "nn", "tests", "fixtures")


def pseudo_random(numel, p):
    j = torch.arange(numel, dtype=torch.int64)
    k = (7 * j * j + 13 * j + 101 * p) % 1021
    return (2 * k + 1).double() / 1021 - 1


def formula(key, p, shape):
    numel = math.prod(shape)
    s = pseudo_random(numel, p)
    if key.endswith("num_batches_tracked"):
        return torch.zeros(shape, dtype=torch.int64)
    if len(shape) >= 2:
        v = s * math.sqrt(3.0 / (numel / shape[0]))
    elif key.endswith("running_var"):
        v = 1.0 + 0.25 * (1.0 + s)
    elif key.endswith("weight"):
        v = 1.0 + 0.1 * s
    else:
        v = 0.1 * s
    return v.reshape(shape)


def fill(model):
    state = model.state_dict()
    filled = {k: formula(k, p, list(t.shape)) for p, (k, t) in enumerate(state.items())}
    model.load_state_dict(filled)


def main():
    torch.manual_seed(0)
    builders = {
        "resnet18": lambda n: torchvision.models.resnet18(num_classes=n),
        "resnet34": lambda n: torchvision.models.resnet34(num_classes=n),
        "resnet50": lambda n: torchvision.models.resnet50(num_classes=n),
        "vgg11_bn": lambda n: torchvision.models.vgg11_bn(num_classes=n),
        "mobilenet_v2": lambda n: torchvision.models.mobilenet_v2(num_classes=n),
        "vit_b_16": lambda n: torchvision.models.vit_b_16(num_classes=n),
    }
    os.makedirs(os.path.join(FIXTURES, "torchvision_keys"), exist_ok=True)
    for name, build in builders.items():
        model = build(1000)
        lines = [
            f"{k} {','.join(str(d) for d in t.shape)}\n" for k, t in model.state_dict().items()
        ]
        with open(os.path.join(FIXTURES, "torchvision_keys", f"{name}.txt"), "w") as f:
            f.writelines(lines)

    numel = 3 * 32 * 32
    x = pseudo_random(numel, 0).reshape(1, 3, 32, 32)
    tensors = {"input": x.float()}
    metadata = {}
    for name in ["resnet34", "resnet50", "vgg11_bn"]:
        model = builders[name](10).double().eval()
        fill(model)
        with torch.no_grad():
            exact = model(x)
            model.float()
            out = model(x.float())
        tensors[f"{name}/output"] = out
        metadata[f"{name}/f32_vs_f64_maxabs"] = repr((out.double() - exact).abs().max().item())
        print(name, out, metadata[f"{name}/f32_vs_f64_maxabs"])
    save_file(tensors, os.path.join(FIXTURES, "torchvision_outputs.safetensors"), metadata)


if __name__ == "__main__":
    main()
