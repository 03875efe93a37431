"""Writes the fixtures of the quantized torch.fx checkpoint test
(passes/tests/passes/fx_quantized_state_dict.rs); tests only read them. Run once from the
repository root with torch installed (`pip install torch==2.15.0 safetensors`).

The model (`QNet` there): conv1 (3 -> 4, 3x3, padding 1) -> relu -> max pool 2 -> flatten
-> fc (64 -> 5), in eval mode, statically quantized by `prepare_fx`/`convert_fx` with
activations observed by `MinMaxObserver(quint8)` and weights by
`PerChannelMinMaxObserver(qint8, per_channel_symmetric)`, calibrated on one batch.
`torch.flatten` keeps the pooled u8 tensor quantized, as Tessera does. Writes to
passes/tests/fixtures/:

- qexport_model.pt: the float model's state dict.
- qexport_io.safetensors: the calibration batch (`input`) and the converted model's output
  for it (`output`).
- qexport_keys.txt: the converted model's state-dict keys in order, each with what it holds.
- qexport_converted.pt: the converted model's state dict (`torch.save(quantized.state_dict())`).

`python scripts/qexport_fixtures.py --check FILE` instead loads FILE (a `.pt` state dict
that Tessera wrote for its converted graph module) strictly into PyTorch's converted model
and prints the largest difference between that model's output and the fixture's.
"""
import sys

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.ao.quantization import (
    MinMaxObserver,
    PerChannelMinMaxObserver,
    QConfig,
    QConfigMapping,
)
from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

DIR = "passes/tests/fixtures"


class QNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(64, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.relu(self.conv1(x))), 1))


def converted(model, x):
    qconfig = QConfig(
        activation=MinMaxObserver.with_args(dtype=torch.quint8),
        weight=PerChannelMinMaxObserver.with_args(
            dtype=torch.qint8, qscheme=torch.per_channel_symmetric
        ),
    )
    prepared = prepare_fx(model, QConfigMapping().set_global(qconfig), (x,))
    prepared(x)
    return convert_fx(prepared)


def describe(value):
    """What a state-dict value holds, as the Rust test spells it."""
    if isinstance(value, torch.dtype):
        return f"dtype {str(value).removeprefix('torch.')}"
    if isinstance(value, tuple):
        return "tuple(" + ", ".join(describe(v) for v in value) + ")"
    if value is None:
        return "None"
    dtype = str(value.dtype).removeprefix("torch.")
    if value.is_quantized:
        dtype += " " + str(value.qscheme()).removeprefix("torch.")
    return f"{dtype} {list(value.shape)}"


def main():
    torch.manual_seed(0)
    model = QNet().eval()
    x = torch.randn(4, 3, 8, 8)
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        io = load_file(f"{DIR}/qexport_io.safetensors")
        model.load_state_dict(torch.load(f"{DIR}/qexport_model.pt"))
        quantized = converted(model, io["input"])
        print(quantized.load_state_dict(torch.load(sys.argv[2]), strict=True))
        with torch.no_grad():
            out = quantized(io["input"])
        print("max |output - fixture|:", (out - io["output"]).abs().max().item())
        return
    torch.save(model.state_dict(), f"{DIR}/qexport_model.pt")
    quantized = converted(model, x)
    with torch.no_grad():
        out = quantized(x)
    save_file({"input": x, "output": out.contiguous()}, f"{DIR}/qexport_io.safetensors")
    torch.save(quantized.state_dict(), f"{DIR}/qexport_converted.pt")
    with open(f"{DIR}/qexport_keys.txt", "w") as f:
        for key, value in quantized.state_dict().items():
            f.write(f"{key}: {describe(value)}\n")


if __name__ == "__main__":
    main()
