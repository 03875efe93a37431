//! The PTX module around a GEMM or convolution body: header, the shared tile array, and the
//! `.entry` with one `.u64` pointer parameter per buffer (`buf0`, `buf1`, ...), as every
//! kernel of this crate, so one launcher runs them all.

use super::shared_layout::TILES_ARRAY;
use crate::PtxTarget;
use crate::emit::Emitter;
use std::fmt::Write;

/// The module text of entry `name` with `buffers` pointer parameters, `shared_bytes` of tiles
/// and the body `e`; `about` lines become leading comments.
pub(crate) fn module_text(
    name: &str,
    target: &PtxTarget,
    about: &[String],
    buffers: usize,
    shared_bytes: usize,
    e: Emitter,
) -> String {
    let mut ptx = String::new();
    crate::ptx_module::header(&mut ptx, about, target);
    let _ = writeln!(
        ptx,
        ".shared .align 16 .b8 {TILES_ARRAY}[{shared_bytes}];\n"
    );
    let params: Vec<String> = (0..buffers).map(|i| format!("buf{i}")).collect();
    crate::ptx_module::entry(&mut ptx, name, &params, &e.finish());
    ptx
}

/// Loads the pointer parameters and converts them to global addresses.
pub(crate) fn global_bases(e: &mut Emitter, buffers: usize) -> Vec<crate::emit::Reg> {
    use crate::emit::RegClass;
    (0..buffers)
        .map(|i| {
            let p = e.reg(RegClass::B64);
            e.ins(format!("ld.param.u64 {p}, [buf{i}]"));
            let g = e.reg(RegClass::B64);
            e.ins(format!("cvta.to.global.u64 {g}, {p}"));
            g
        })
        .collect()
}
