"""Writes the torch.fx `fuse` state-dict fixtures; tests only read them. Run once from the
repository root with torch installed (`pip install torch==2.15.0 safetensors`).

The model (the same architecture as `FuseNet` in passes/tests/passes/fx_state_dict.rs):
conv1 -> bn1 -> relu -> layer1.0 (conv1 -> bn1 -> relu -> conv2 -> bn2, + input, relu) ->
adaptive average pool -> flatten -> head -> head_bn -> fc, in eval mode with fixed weights
and running statistics. Writes to passes/tests/fixtures/:

- fuse_model.pt: the float model's state dict (`torch.save(model.state_dict())`).
- fuse_fused.pt: the state dict of `torch.fx.experimental.optimization.fuse(model)`.
- fuse_keys.txt: the fused state dict's keys in order, each with its shape.
- fuse_io.safetensors: an input and the fused model's output for it.

`python scripts/fuse_fixtures.py --check FILE` instead loads FILE (a `.pt` state dict that
Tessera wrote for its folded graph module) strictly into PyTorch's fused model and prints the
largest difference between its output and the fixture's.
"""
import sys

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.fx.experimental.optimization import fuse

DIR = "passes/tests/fixtures"


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(y)) + x)


class FuseNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()
        self.layer1 = nn.Sequential(Block(4))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.head = nn.Linear(4, 6)
        self.head_bn = nn.BatchNorm1d(6)
        self.fc = nn.Linear(6, 5)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.flatten(self.pool(self.layer1(x)))
        return self.fc(self.head_bn(self.head(x)))


def model():
    torch.manual_seed(0)
    m = FuseNet()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d)):
                n = mod.num_features
                mod.weight.copy_(torch.rand(n) + 0.5)
                mod.bias.copy_(torch.randn(n) * 0.1)
                mod.running_mean.copy_(torch.randn(n) * 0.2)
                mod.running_var.copy_(torch.rand(n) + 0.5)
                mod.num_batches_tracked.fill_(7)
    return m.eval()


def main():
    m = model()
    fused = fuse(m)
    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        out = fused(x)
        assert torch.allclose(out, m(x), atol=1e-5)
    state = fused.state_dict()
    torch.save(m.state_dict(), f"{DIR}/fuse_model.pt")
    torch.save(state, f"{DIR}/fuse_fused.pt")
    with open(f"{DIR}/fuse_keys.txt", "w") as f:
        for k, v in state.items():
            f.write(f"{k} {list(v.shape)}\n")
    save_file({"input": x, "output": out.contiguous()}, f"{DIR}/fuse_io.safetensors")
    print({k: list(v.shape) for k, v in state.items()})


def check(path):
    fused = fuse(model())
    print(fused.load_state_dict(torch.load(path, weights_only=True), strict=True))
    io = load_file(f"{DIR}/fuse_io.safetensors")
    with torch.no_grad():
        diff = (fused(io["input"]) - io["output"]).abs().max().item()
    print(f"max |output - fixture output| = {diff}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--check"]:
        check(sys.argv[2])
    else:
        main()
