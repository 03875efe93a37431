//! Rendering a kernel's external GEMM call: before the nest, the block of the product that
//! the outer iterations `begin..end` need is computed by calling the imported
//! `tessera_gemm_f32`/`_f64` (the `gemm` crate) with pointers offset to the block's first row.

use crate::render::Renderer;
use cranelift_codegen::ir::{AbiParam, InstBuilder, Signature, Value, types};
use cranelift_codegen::isa::CallConv;
use cranelift_frontend::FunctionBuilder;
use tessera_kernel::{GemmCall, Kernel, ScalarType};

/// The symbol of the GEMM a kernel calls, if it calls one.
pub fn gemm_symbol(kernel: &Kernel) -> Option<String> {
    let g = kernel.gemm.as_ref()?;
    let ty = kernel.buffers.get(g.out.index())?.ty;
    Some(format!("tessera_gemm_{ty}"))
}

/// `fn(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c)`, all 64-bit.
pub fn gemm_signature(call_conv: CallConv) -> Signature {
    let mut sig = Signature::new(call_conv);
    for _ in 0..10 {
        sig.params.push(AbiParam::new(types::I64));
    }
    sig
}

impl Renderer<'_> {
    /// Emits the call of `g` for outer iterations `begin..end`.
    pub(crate) fn gemm_call(
        &self,
        b: &mut FunctionBuilder,
        g: &GemmCall,
        begin: Value,
        end: Value,
    ) {
        let kernel = self.kernel;
        let (Some((_, n, per_step)), Some(symbol)) = (kernel.gemm_shape(), gemm_symbol(kernel))
        else {
            return;
        };
        let size = if kernel.buffer(g.out).ty == ScalarType::F64 {
            8
        } else {
            4
        };
        let first = b.ins().imul_imm_s(begin, per_step as i64);
        let count = b.ins().isub(end, begin);
        let rows = b.ins().imul_imm_s(count, per_step as i64);
        let pointer = |b: &mut FunctionBuilder, buffer: usize, elements: Value| {
            let bytes = b.ins().imul_imm_s(elements, size);
            b.ins().iadd(self.bases[buffer], bytes)
        };
        let a_rows = b.ins().imul_imm_s(first, g.a_index.row_stride as i64);
        let a_at = b.ins().iadd_imm_s(a_rows, g.a_index.offset as i64);
        let a = pointer(b, g.a.index(), a_at);
        let b_at = b.ins().iconst(types::I64, g.b_index.offset as i64);
        let bm = pointer(b, g.b.index(), b_at);
        let c_at = b.ins().imul_imm_s(first, n as i64);
        let c = pointer(b, g.out.index(), c_at);
        let constant = |b: &mut FunctionBuilder, v: usize| b.ins().iconst(types::I64, v as i64);
        let args = [
            rows,
            constant(b, n),
            constant(b, g.k),
            a,
            constant(b, g.a_index.row_stride),
            constant(b, g.a_index.col_stride),
            bm,
            constant(b, g.b_index.row_stride),
            constant(b, g.b_index.col_stride),
            c,
        ];
        let f = self.imports[&symbol];
        b.ins().call(f, &args);
    }
}
