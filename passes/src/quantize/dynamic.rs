//! `quantize_dynamic`: every `call_module` f32 Linear becomes a call of an owned
//! `DynamicQuantizedLinear` (int8 weights, activations quantized per call). Other layers,
//! linears of other dtypes and the traced model's modules are left alone; a linear also
//! called elsewhere gets one quantized copy per call site.

use super::{build_error, module_at};
use crate::{Changed, Pass, Result};
use tessera_fx::{GraphModule, NodeId, NodeKind};
use tessera_nn::layers::Linear;
use tessera_nn::quantized::DynamicQuantizedLinear;
use tessera_nn::{ModuleExt, ModuleKind};
use tessera_tensor::DType;

/// Dynamic int8 quantization of Linear layers; `per_channel` picks per-output-channel
/// weight scales (else one per tensor), `reduce_range` quantizes activations to `[0, 127]`
/// as PyTorch's x86 (fbgemm) engine does (`[0, 255]` without it).
pub struct QuantizeDynamic {
    pub per_channel: bool,
    pub reduce_range: bool,
}

impl QuantizeDynamic {
    /// PyTorch's x86 engine: `reduce_range` on.
    pub fn new(per_channel: bool) -> Self {
        QuantizeDynamic {
            per_channel,
            reduce_range: true,
        }
    }
}

impl Pass for QuantizeDynamic {
    fn name(&self) -> &'static str {
        "quantize_dynamic"
    }

    fn run(&self, gm: &mut GraphModule) -> Result<Changed> {
        let order: Vec<NodeId> = gm.graph.nodes().collect();
        let mut changed = false;
        for id in order {
            let NodeKind::CallModule {
                target,
                kind: ModuleKind::Linear,
                ..
            } = gm.graph.node(&id)?.kind.clone()
            else {
                continue;
            };
            let Some(linear) = module_at(gm, &target)?.as_any().downcast_ref::<Linear>() else {
                continue;
            };
            // The int8 kernels take f32 activations: other dtypes stay float.
            if linear.weight.dtype() != DType::F32 {
                continue;
            }
            let mut quantized = DynamicQuantizedLinear::from_float(linear, self.per_channel)
                .map_err(|e| build_error(self.name(), &target, e))?;
            quantized.reduce_range = self.reduce_range;
            let (quantized_kind, repr) = (quantized.kind(), tessera_nn::repr(&quantized));
            let name = gm.fresh_name(&format!("{target}_dynamic_quantized"));
            gm.add_owned_module_replacing(&name, Box::new(quantized), &target)?;
            let operands = gm.graph.operands(&id)?;
            let meta = gm.graph.node(&id)?.meta.clone();
            let new = gm.graph.insert_before(&id, |g| {
                let refs: Vec<&NodeId> = operands.iter().collect();
                g.call_module(&name, quantized_kind, &repr, &refs, meta)
            })?;
            gm.graph.replace_all_uses_with(&id, &new)?;
            gm.graph.erase(&id)?;
            changed = true;
        }
        Ok(Changed::from_bool(changed))
    }
}
