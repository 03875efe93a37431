"""Writes crates/nn/tests/fixtures/quant_x86.safetensors: PyTorch's x86 (fbgemm) dynamic int8
Linear on fixed weights and inputs, per tensor and per channel, for the int8 conformance
tests. Run once with torch installed (`pip install torch==2.15.0 safetensors`); tests only read
the file.
"""
import torch
from safetensors.torch import save_file

torch.manual_seed(0)
torch.backends.quantized.engine = "x86"
out = {}

lin = torch.nn.Linear(16, 8)
with torch.no_grad():
    lin.weight.copy_(torch.randn(8, 16) * 0.5)
    # Exact ties: the largest magnitude of row 0 is -1.0, so it sits at -127.5 steps;
    # row 1 holds values at k + 0.5 steps of its scale.
    lin.weight[0, 0] = -1.0
    lin.weight[1, :] = torch.linspace(-0.635, 0.635, 16)
x = torch.randn(4, 16) * 2.0
x[0, 0] = 0.0

out["weight"] = lin.weight.detach().clone()
out["bias"] = lin.bias.detach().clone()
out["input"] = x.clone()

for name, qconfig in [
    ("per_tensor", torch.ao.quantization.default_dynamic_qconfig),
    ("per_channel", torch.ao.quantization.per_channel_dynamic_qconfig),
]:
    model = torch.nn.Sequential(lin)
    q = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear: qconfig}, dtype=torch.qint8)
    w = q[0].weight()
    out[f"{name}/weight_int8"] = w.int_repr().to(torch.int32)
    if name == "per_tensor":
        out[f"{name}/scale"] = torch.tensor([w.q_scale()], dtype=torch.float64)
        out[f"{name}/zero_point"] = torch.tensor([w.q_zero_point()], dtype=torch.int64)
    else:
        out[f"{name}/scale"] = w.q_per_channel_scales().to(torch.float64)
        out[f"{name}/zero_point"] = w.q_per_channel_zero_points().to(torch.int64)
    with torch.no_grad():
        out[f"{name}/output"] = q(x).detach().clone()

save_file({k: v.contiguous() for k, v in out.items()}, "crates/nn/tests/fixtures/quant_x86.safetensors")
print({k: tuple(v.shape) for k, v in out.items()})
