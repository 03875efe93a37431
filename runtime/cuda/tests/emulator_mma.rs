//! The emulator's `mma.sync` on hand-written PTX: one warp loads its fragments straight from
//! global memory at the positions the PTX ISA gives each lane, multiplies, and stores the
//! accumulators; the result must be the 16 x 8 product computed here. A warp whose lanes do
//! not all reach the `mma`, and a tf32 operand not rounded by `cvt.rna.tf32.f32`, are errors.

use crate::emulator;

use emulator::{GlobalMemory, LaunchConfig, Module, ParamValue};

/// One `m16n8k8` tf32 `mma` of row-major `a` (16 x 8) and `b` (8 x 8, stored row-major),
/// `d` (16 x 8) row-major. `{round}` is replaced by the rounding of A's elements.
const TF32_MMA: &str = r#"
.version 7.0
.target sm_80
.address_size 64

.visible .entry tf32_mma(
	.param .u64 buf0,
	.param .u64 buf1,
	.param .u64 buf2
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<40>;
	.reg .b64 %rd<40>;
	.reg .f32 %f<20>;

	ld.param.u64 %rd1, [buf0];
	cvta.to.global.u64 %rd2, %rd1;
	ld.param.u64 %rd3, [buf1];
	cvta.to.global.u64 %rd4, %rd3;
	ld.param.u64 %rd5, [buf2];
	cvta.to.global.u64 %rd6, %rd5;
	mov.u32 %r1, %tid.x;
	{diverge}
	shr.u32 %r2, %r1, 2;
	and.b32 %r3, %r1, 3;
	// a0: row g, col t; a1: row g + 8; a2: col t + 4; a3: both.
	mad.lo.u32 %r4, %r2, 8, %r3;
	mul.wide.u32 %rd7, %r4, 4;
	add.s64 %rd8, %rd2, %rd7;
	ld.global.f32 %f1, [%rd8];
	ld.global.f32 %f2, [%rd8+256];
	ld.global.f32 %f3, [%rd8+16];
	ld.global.f32 %f4, [%rd8+272];
	{round}
	// b0: row (k) t, col g; b1: row t + 4.
	mad.lo.u32 %r9, %r3, 8, %r2;
	mul.wide.u32 %rd9, %r9, 4;
	add.s64 %rd10, %rd4, %rd9;
	ld.global.f32 %f5, [%rd10];
	ld.global.f32 %f6, [%rd10+128];
	cvt.rna.tf32.f32 %r10, %f5;
	cvt.rna.tf32.f32 %r11, %f6;
	mov.f32 %f7, 0f00000000;
	mov.f32 %f8, 0f00000000;
	mov.f32 %f9, 0f00000000;
	mov.f32 %f10, 0f00000000;
	mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%f7, %f8, %f9, %f10}, {%r5, %r6, %r7, %r8}, {%r10, %r11}, {%f7, %f8, %f9, %f10};
	// c0, c1: row g, cols 2t, 2t + 1; c2, c3: row g + 8.
	shl.b32 %r12, %r3, 1;
	mad.lo.u32 %r13, %r2, 8, %r12;
	mul.wide.u32 %rd11, %r13, 4;
	add.s64 %rd12, %rd6, %rd11;
	st.global.f32 [%rd12], %f7;
	st.global.f32 [%rd12+4], %f8;
	st.global.f32 [%rd12+256], %f9;
	st.global.f32 [%rd12+260], %f10;
	ret;
}
"#;

const ROUNDED: &str = "cvt.rna.tf32.f32 %r5, %f1;\n\tcvt.rna.tf32.f32 %r6, %f2;\n\tcvt.rna.tf32.f32 %r7, %f3;\n\tcvt.rna.tf32.f32 %r8, %f4;";

fn run(text: &str, a: &[f32], b: &[f32]) -> emulator::Result<Vec<f32>> {
    let module = Module::parse(text).expect("the hand-written PTX parses");
    let mut memory = GlobalMemory::default();
    let params = [
        ParamValue::Ptr(memory.upload_f32("a", a)),
        ParamValue::Ptr(memory.upload_f32("b", b)),
        ParamValue::Ptr(memory.alloc("d", 16 * 8 * 4)),
    ];
    module.launch("tf32_mma", LaunchConfig::new(1, 32), &params, &mut memory)?;
    memory.read_f32("d")
}

fn kernel(round: &str, diverge: &str) -> String {
    TF32_MMA
        .replace("{round}", round)
        .replace("{diverge}", diverge)
}

#[test]
fn tf32_mma_fragments_follow_the_ptx_layout() {
    // Small integers: exact in tf32 and in any summation order.
    let a: Vec<f32> = (0..16 * 8).map(|i| ((i * 5) % 7) as f32 - 3.0).collect();
    let b: Vec<f32> = (0..8 * 8).map(|i| ((i * 3) % 5) as f32 - 2.0).collect();
    let d = run(&kernel(ROUNDED, ""), &a, &b).unwrap();
    for r in 0..16 {
        for c in 0..8 {
            let want: f32 = (0..8).map(|k| a[r * 8 + k] * b[k * 8 + c]).sum();
            assert_eq!(d[r * 8 + c], want, "d[{r}][{c}]");
        }
    }
}

#[test]
fn tf32_mma_rounds_its_inputs_to_ten_mantissa_bits() {
    // 1 + 2^-12 rounds to 1 in tf32; 1 + 3 * 2^-11 rounds (ties away) to 1 + 2^-9.
    let mut a = vec![0.0f32; 16 * 8];
    a[0] = 1.0 + 2f32.powi(-12);
    a[1] = 1.0 + 3.0 * 2f32.powi(-11);
    let mut b = vec![0.0f32; 8 * 8];
    b[0] = 1.0;
    b[8] = 1.0;
    let d = run(&kernel(ROUNDED, ""), &a, &b).unwrap();
    assert_eq!(d[0], 2.0 + 2f32.powi(-9));
}

#[test]
fn an_unrounded_tf32_operand_is_an_error() {
    let raw = "mov.b32 %r5, %f1;\n\tmov.b32 %r6, %f2;\n\tmov.b32 %r7, %f3;\n\tmov.b32 %r8, %f4;";
    let mut a = vec![1.0f32; 16 * 8];
    a[3] = 1.0 + 2f32.powi(-20);
    let err = run(&kernel(raw, ""), &a, &[1.0; 64]).unwrap_err();
    assert!(err.to_string().contains("cvt.rna.tf32.f32"), "{err}");
}

#[test]
fn an_mma_not_reached_by_the_whole_warp_is_an_error() {
    let diverge = "setp.eq.u32 %p1, %r1, 31;\n\t@%p1 ret;";
    let err = run(&kernel(ROUNDED, diverge), &[1.0; 128], &[1.0; 64]).unwrap_err();
    assert!(err.to_string().contains("diverged warp"), "{err}");
}
