//! f32 vector operations written once and implemented for AVX-512 (zmm) and AVX2 (ymm), so
//! that a kernel (the direct convolution's tile, the softmax rows) is generic over the width
//! and compiled for each inside a `#[target_feature]` function chosen at run time.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Which vector instructions this CPU has for [`Lanes`] code, detected once: AVX-512 (F and
/// VL, with AVX2 and FMA), AVX2 with FMA, or neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isa {
    Avx512,
    Avx2,
    None,
}

pub(crate) fn isa() -> Isa {
    static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
    *ISA.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let fma = is_x86_feature_detected!("fma") && is_x86_feature_detected!("avx2");
            if fma && is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl") {
                return Isa::Avx512;
            }
            if fma {
                return Isa::Avx2;
            }
        }
        Isa::None
    })
}

/// Whether this CPU runs the AVX-512 tiles (AVX-512 F and VL, AVX2, FMA).
pub(crate) fn has_avx512() -> bool {
    isa() == Isa::Avx512
}

/// Whether this CPU has AVX2 and FMA.
pub(crate) fn has_avx2() -> bool {
    isa() != Isa::None
}

/// f32 vector operations at one width, for code written once for AVX-512 and AVX2 and
/// compiled for each inside a `#[target_feature]` function.
pub(crate) trait Lanes {
    type V: Copy;
    type I: Copy;
    const LANES: usize;
    unsafe fn splat(v: f32) -> Self::V;
    unsafe fn load(p: *const f32) -> Self::V;
    unsafe fn store(p: *mut f32, v: Self::V);
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn sub(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    /// `a * b + c`, rounded once (the caller's function enables FMA).
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// `max(a, b)`, `b` where either is NaN.
    unsafe fn max(a: Self::V, b: Self::V) -> Self::V;
    /// `min(a, b)`, `b` where either is NaN.
    unsafe fn min(a: Self::V, b: Self::V) -> Self::V;
    /// `x` where it is NaN, else `v`.
    unsafe fn nan_of(x: Self::V, v: Self::V) -> Self::V;
    unsafe fn bits(v: Self::V) -> Self::I;
    unsafe fn isplat(v: i32) -> Self::I;
    unsafe fn iadd(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn isub(a: Self::I, b: Self::I) -> Self::I;
    /// `i >> 1`, arithmetic.
    unsafe fn half(i: Self::I) -> Self::I;
    /// `i << 23`: an exponent moved into place.
    unsafe fn exponent(i: Self::I) -> Self::V;
}

/// 16 lanes in a zmm register.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Zmm;

#[cfg(target_arch = "x86_64")]
impl Lanes for Zmm {
    type V = __m512;
    type I = __m512i;
    const LANES: usize = 16;
    #[inline(always)]
    unsafe fn splat(v: f32) -> __m512 {
        unsafe { _mm512_set1_ps(v) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn add(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_sub_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn max(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_max_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn min(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_min_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn nan_of(x: __m512, v: __m512) -> __m512 {
        unsafe { _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x), v, x) }
    }
    #[inline(always)]
    unsafe fn bits(v: __m512) -> __m512i {
        unsafe { _mm512_castps_si512(v) }
    }
    #[inline(always)]
    unsafe fn isplat(v: i32) -> __m512i {
        unsafe { _mm512_set1_epi32(v) }
    }
    #[inline(always)]
    unsafe fn iadd(a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_add_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn isub(a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_sub_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn half(i: __m512i) -> __m512i {
        unsafe { _mm512_srai_epi32::<1>(i) }
    }
    #[inline(always)]
    unsafe fn exponent(i: __m512i) -> __m512 {
        unsafe { _mm512_castsi512_ps(_mm512_slli_epi32::<23>(i)) }
    }
}

/// 8 lanes in a ymm register.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Ymm;

#[cfg(target_arch = "x86_64")]
impl Lanes for Ymm {
    type V = __m256;
    type I = __m256i;
    const LANES: usize = 8;
    #[inline(always)]
    unsafe fn splat(v: f32) -> __m256 {
        unsafe { _mm256_set1_ps(v) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn add(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_sub_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn fma(a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn max(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_max_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn min(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_min_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn nan_of(x: __m256, v: __m256) -> __m256 {
        unsafe { _mm256_blendv_ps(v, x, _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x)) }
    }
    #[inline(always)]
    unsafe fn bits(v: __m256) -> __m256i {
        unsafe { _mm256_castps_si256(v) }
    }
    #[inline(always)]
    unsafe fn isplat(v: i32) -> __m256i {
        unsafe { _mm256_set1_epi32(v) }
    }
    #[inline(always)]
    unsafe fn iadd(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_add_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn isub(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_sub_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn half(i: __m256i) -> __m256i {
        unsafe { _mm256_srai_epi32::<1>(i) }
    }
    #[inline(always)]
    unsafe fn exponent(i: __m256i) -> __m256 {
        unsafe { _mm256_castsi256_ps(_mm256_slli_epi32::<23>(i)) }
    }
}
