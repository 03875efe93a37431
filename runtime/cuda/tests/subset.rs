//! The PTX the renderer emits stays inside the subset the test emulator executes (the contract
//! written in the README's "GPU backend (PTX)" section): every instruction of every kernel
//! the ptxas tests render has an opcode of the subset's list, and only the directives and
//! special registers it allows appear.

use crate::common;

use common::{elementwise_graphs, gemm_graphs, kernels, layout_graphs, reduction_graphs};
use std::collections::BTreeSet;
use tessera_cuda::{
    ConvSpec, GemmOptions, GemmSpec, PtxTarget, StridedOperand, render, render_conv, render_gemm,
    render_with,
};
use tessera_tensor::DType;
use tessera_tensor::op::ConvParams;

/// Every `op.suffix...` of `{a,b}` alternatives, e.g. `expand("add.{s32,u32}")`.
fn expand(pattern: &str) -> Vec<String> {
    let Some(open) = pattern.find('{') else {
        return vec![pattern.to_string()];
    };
    let close = open + pattern[open..].find('}').unwrap();
    pattern[open + 1..close]
        .split(',')
        .flat_map(|alt| {
            expand(&format!(
                "{}{alt}{}",
                &pattern[..open],
                &pattern[close + 1..]
            ))
        })
        .collect()
}

/// The subset's opcodes.
fn subset() -> BTreeSet<String> {
    [
        "mov.{b32,b64,u32,u64,f32,f64,pred}",
        "ld.param.{u32,u64}",
        "cvta.to.global.u64",
        "ld.global.{f32,f64,u32}",
        "ld.global.v4.f32",
        "st.global.v4.f32",
        "st.global.{f32,f64}",
        "{ld,st}.shared.{f32,f64}",
        "{add,sub,mul.lo,mad.lo}.{s32,u32,s64,u64}",
        "mul.wide.{s32,u32}",
        "{div,rem}.{u32,u64}",
        "{min,max}.{u32,s32,u64}",
        "{shl,shr}.{b32,b64,u32,u64,s32}",
        "{and,or,xor,not}.{b32,b64,pred}",
        "setp.{eq,ne,lt,le,gt,ge}.{s32,u32,s64,u64}",
        "{add,sub,mul}.rn.{f32,f64}",
        "{fma.rn,div.rn,neg,abs,min,max,sqrt.rn,rcp.rn,copysign}.{f32,f64}",
        "setp.{eq,ne,lt,le,gt,ge,equ,neu,ltu,leu,gtu,geu,num,nan}.{f32,f64}",
        "selp.{f32,f64,b32,b64,u32,u64}",
        "testp.{finite,infinite,number,notanumber}.{f32,f64}",
        "{ex2,lg2}.approx.ftz.f32",
        "cvt.{rn,rz,rm,rp}.f32.f64",
        "cvt.f64.f32",
        "cvt.{rni,rzi,rmi,rpi}.{f32,f64}.{f32,f64}",
        "cvt.rn.{f32,f64}.{s32,u32,s64,u64}",
        "cvt.rzi.{s32,u32,s64}.{f32,f64}",
        "cvt.{u64,s64}.{u32,s32}",
        "cvt.u32.u64",
        "mul.hi.u64",
        // f16 and bf16 elements (`.b16` registers).
        "{ld,st}.global.b16",
        "{ld,st}.global.v4.b16",
        "mov.b16",
        "cvt.f32.f16",
        "cvt.rn.{f16,bf16}.f32",
        "cvt.u32.u16",
        "{bra,bra.uni,ret}",
        "bar.sync",
        "shfl.sync.{bfly,down}.b32",
        // The GEMM and convolution kernels (`emulator/tensor_core.rs`).
        "ld.shared.{b32,v4.f32,v2.f64}",
        "st.shared.{b32,u16,v4.f32,v2.f64}",
        "{ld,st}.global.u16",
        "cvt.rna.tf32.f32",
        "cvt.rn.{f16x2,bf16x2}.f32",
        "mma.sync.aligned.m16n8k16.row.col.f32.{f16.f16,bf16.bf16}.f32",
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
    ]
    .iter()
    .flat_map(|p| expand(p))
    .collect()
}

/// The opcodes of `ptx`'s instructions, and any line that is neither an instruction, a label,
/// a comment nor an allowed directive.
fn opcodes(ptx: &str) -> (BTreeSet<String>, Vec<String>) {
    let mut ops = BTreeSet::new();
    let mut strange = Vec::new();
    let directives = [
        ".version ",
        ".target ",
        ".address_size 64",
        ".visible .entry ",
        "\t.param .u64 ",
        "\t.reg .",
        ".shared .align 8 .b8 ",
        ".shared .align 16 .b8 ",
    ];
    for line in ptx.lines() {
        let t = line.trim();
        let plain = t.is_empty() || t.starts_with("//") || t == "{" || t == "}" || t == ")";
        let label = t.ends_with(':') && !t.contains(' ');
        if plain || label || directives.iter().any(|d| line.starts_with(d)) {
            continue;
        }
        let Some(body) = t.strip_suffix(';') else {
            strange.push(line.to_string());
            continue;
        };
        let body = match body.strip_prefix('@') {
            Some(guarded) => guarded.split_once(' ').map_or("", |(_, rest)| rest),
            None => body,
        };
        ops.insert(body.split_whitespace().next().unwrap_or("").to_string());
        let operands = body.split(|c: char| ",{}[]+ \t".contains(c));
        if operands
            .filter(|o| o.starts_with('%'))
            .any(|o| !register_or_special(o))
        {
            strange.push(line.to_string());
        }
    }
    (ops, strange)
}

/// A virtual register of the declared classes (`%p3`, `%rd12`) or an allowed special register.
fn register_or_special(operand: &str) -> bool {
    let specials = ["%tid.x", "%ntid.x", "%ctaid.x", "%nctaid.x"];
    let digits = operand.trim_start_matches(|c: char| c == '%' || c.is_ascii_alphabetic());
    let prefix = &operand[..operand.len() - digits.len()];
    specials.contains(&operand)
        || (["%p", "%rs", "%r", "%rd", "%f", "%fd"].contains(&prefix)
            && !digits.is_empty()
            && digits.chars().all(|c| c.is_ascii_digit()))
}

#[test]
fn every_rendered_instruction_is_in_the_emulated_subset() {
    let allowed = subset();
    let mut graphs = layout_graphs();
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        graphs.extend(elementwise_graphs(dtype));
        graphs.extend(reduction_graphs(dtype));
    }
    for dtype in [DType::F32, DType::F64] {
        graphs.extend(gemm_graphs(dtype));
    }
    let mut texts = Vec::new();
    for (what, g) in graphs {
        for k in kernels(&g) {
            texts.push((what.clone(), render(&k, &PtxTarget::SM80).unwrap().ptx));
            if k.gemm.is_some() || k.conv.is_some() {
                let tf32 = GemmOptions { allow_tf32: true };
                texts.push((
                    what.clone(),
                    render_with(&k, &PtxTarget::SM80, tf32).unwrap().ptx,
                ));
            }
        }
    }
    texts.extend(standalone_texts());
    let mut used = BTreeSet::new();
    for (what, ptx) in texts {
        let (ops, strange) = opcodes(&ptx);
        assert!(
            strange.is_empty(),
            "{what}: lines outside the subset: {strange:?}"
        );
        for op in ops {
            assert!(
                allowed.contains(&op),
                "{what}: `{op}` is not in the subset\n{ptx}"
            );
            used.insert(op);
        }
    }
    // The renderer's table reaches the instructions the reductions and math need.
    for op in [
        "shfl.sync.bfly.b32",
        "bar.sync",
        "st.shared.f64",
        "fma.rn.f64",
        "div.u32",
        "mul.hi.u64",
        "cvt.rn.bf16.f32",
        "cvt.f32.f16",
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        "cvt.rn.f16x2.f32",
        "st.shared.u16",
    ] {
        assert!(used.contains(op), "{op} was never emitted: {used:?}");
    }
}

/// The standalone GEMM and convolution in every dtype and path, with a bias.
fn standalone_texts() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (dtype, allow_tf32) in [
        (DType::F16, false),
        (DType::BF16, false),
        (DType::F32, false),
        (DType::F32, true),
        (DType::F64, false),
    ] {
        let options = GemmOptions { allow_tf32 };
        let gemm = GemmSpec {
            name: "gemm".into(),
            dtype,
            batch: 2,
            m: 9,
            n: 5,
            k: 3,
            a: StridedOperand::row_major(9, 3),
            b: StridedOperand::row_major(3, 5),
            c: StridedOperand::row_major(9, 5),
            bias: Some((0, 1)),
            options,
        };
        let conv = ConvSpec {
            name: "conv".into(),
            dtype,
            input_shape: [1, 2, 5, 5],
            weight_shape: [3, 2, 3, 3],
            params: ConvParams::conv2d([1, 1], [1, 1], [1, 1], 1),
            bias: true,
            options,
        };
        let what = format!("standalone {dtype:?} tf32={allow_tf32}");
        out.push((
            what.clone(),
            render_gemm(&gemm, &PtxTarget::SM80).unwrap().ptx,
        ));
        out.push((what, render_conv(&conv, &PtxTarget::SM80).unwrap().ptx));
    }
    out
}

#[test]
fn the_check_sees_guarded_instructions_and_special_registers() {
    let ptx = "\t@%p1 ex2.approx.f32 %f1, %f2;\n\tmov.u32 %r1, %laneid;\n";
    let (ops, strange) = opcodes(ptx);
    assert!(ops.contains("ex2.approx.f32") && !subset().contains("ex2.approx.f32"));
    assert_eq!(strange.len(), 1, "%laneid is not in the subset");
}
