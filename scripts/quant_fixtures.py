"""Writes the int8 conformance fixtures from PyTorch's x86 engine; tests only read them. Run
once from the repository root with torch installed (`pip install torch==2.15.0 safetensors`):

- crates/nn/tests/fixtures/quant_x86.safetensors: the dynamic int8 Linear on fixed weights
  and inputs, per tensor and per channel.
- passes/tests/fixtures/quant_x86_static.safetensors: FX static post-training quantization
  of conv -> average pool -> conv+ReLU (weights with exact ties), calibrated on fixed
  batches: int8 weights, weight and activation scales and zero points, u8 outputs of each
  layer (the pool on the channels-last u8 tensor PyTorch's quantized conv writes).
"""
import copy

import torch
from safetensors.torch import save_file
from torch.ao.quantization import QConfig, QConfigMapping, MinMaxObserver, PerChannelMinMaxObserver
from torch.ao.quantization.quantize_fx import prepare_fx, convert_fx

torch.backends.quantized.engine = "x86"


def dynamic_fixture(path):
    torch.manual_seed(0)
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

    save_file({k: v.contiguous() for k, v in out.items()}, path)
    print({k: tuple(v.shape) for k, v in out.items()})


def static_fixture(path):
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.AvgPool2d(2),
        torch.nn.Conv2d(4, 5, 3, padding=1),
        torch.nn.ReLU(),
    ).eval()
    with torch.no_grad():
        conv1, conv2 = model[0], model[2]
        conv1.weight.copy_(torch.randn(4, 3, 3, 3) * 0.3)
        conv1.weight[0, 0, 0, 0] = -1.0  # -127.5 steps of channel 0's scale
        m = 0.635
        ties = (torch.arange(27, dtype=torch.float32) - 13.0 + 0.5) * (m / 127.5)
        conv1.weight[1] = ties.reshape(3, 3, 3)
        conv1.weight[1, 2, 2, 2] = m
        conv1.bias[0] = 0.1  # moves the output zero point to an odd value
        conv2.weight.copy_(torch.randn(5, 4, 3, 3) * 0.3)
        conv2.weight[0, 0, 0, 0] = -0.5
        conv2.weight[1] = torch.linspace(-0.3, 0.3, 36).reshape(4, 3, 3)
    calibration = [torch.randn(2, 3, 6, 6) for _ in range(3)]
    x = torch.randn(2, 3, 6, 6) * 1.5
    out = {k: v.detach().clone() for k, v in model.state_dict().items()}
    out["input"] = x.clone()
    for i, batch in enumerate(calibration):
        out[f"calibration/{i}"] = batch.clone()
    activation = MinMaxObserver.with_args(dtype=torch.quint8)
    weights = {
        "per_channel": PerChannelMinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_channel_symmetric),
        "per_tensor": MinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_tensor_symmetric),
    }
    for name, weight in weights.items():
        qconfig = QConfig(activation=activation, weight=weight)
        prepared = prepare_fx(copy.deepcopy(model), QConfigMapping().set_global(qconfig), example_inputs=(x,))
        with torch.no_grad():
            for batch in calibration:
                prepared(batch)
        observers = [prepared.activation_post_process_0, prepared.activation_post_process_1, prepared.activation_post_process_3]
        for where, observer in zip(["input", "conv1", "conv2"], observers):
            out[f"{name}/{where}/range"] = torch.stack([observer.min_val, observer.max_val]).float()
        q = convert_fx(prepared)
        qconv1, qpool, qconv2 = getattr(q, "0"), getattr(q, "1"), getattr(q, "2")
        for layer, w in [("conv1", qconv1.weight()), ("conv2", qconv2.weight())]:
            out[f"{name}/{layer}/weight_int8"] = w.int_repr().to(torch.int32)
            if name == "per_tensor":
                out[f"{name}/{layer}/weight_scale"] = torch.tensor([w.q_scale()], dtype=torch.float64)
                out[f"{name}/{layer}/weight_zero_point"] = torch.tensor([w.q_zero_point()], dtype=torch.int64)
            else:
                out[f"{name}/{layer}/weight_scale"] = w.q_per_channel_scales().to(torch.float64)
                out[f"{name}/{layer}/weight_zero_point"] = w.q_per_channel_zero_points().to(torch.int64)
        in_scale = float(getattr(q, "0_input_scale_0"))
        in_zp = int(getattr(q, "0_input_zero_point_0"))
        qparams = {
            "input": (in_scale, in_zp),
            "conv1": (qconv1.scale, qconv1.zero_point),
            "conv2": (qconv2.scale, qconv2.zero_point),
        }
        for where, (scale, zp) in qparams.items():
            out[f"{name}/{where}/scale"] = torch.tensor([scale], dtype=torch.float64)
            out[f"{name}/{where}/zero_point"] = torch.tensor([zp], dtype=torch.int64)
        with torch.no_grad():
            xq = torch.quantize_per_tensor(x, in_scale, in_zp, torch.quint8)
            y1 = qconv1(xq)
            pooled = qpool(y1)
            y2 = qconv2(pooled)
            out[f"{name}/input_u8"] = xq.int_repr().to(torch.int32)
            out[f"{name}/conv1_u8"] = y1.int_repr().to(torch.int32)
            out[f"{name}/pool_u8"] = pooled.int_repr().to(torch.int32)
            out[f"{name}/conv2_u8"] = y2.int_repr().to(torch.int32)
            out[f"{name}/output"] = q(x).detach().clone()
            assert torch.equal(out[f"{name}/output"], y2.dequantize())
    save_file({k: v.contiguous() for k, v in out.items()}, path)
    print(path, sorted(out))

if __name__ == "__main__":
    dynamic_fixture("crates/nn/tests/fixtures/quant_x86.safetensors")
    static_fixture("passes/tests/fixtures/quant_x86_static.safetensors")
