//! cuBLAS for the standalone GEMMs when its library is found: cuBLAS is a toolkit library, not
//! part of the driver, so [`cublas_present`] is checked first (cudarc panics on a missing
//! library) and [`plan_gemm`] falls back to the generated kernel whenever cuBLAS is absent or
//! cannot express the product. The translation of a row-major [`GemmSpec`] into cuBLAS's
//! column-major `gemmStridedBatched` ([`cublas_plan`]) is a pure function, checked on the CPU
//! by executing the plan with column-major semantics; only the call itself needs a GPU.
//!
//! cuBLAS computes `C' = op(A') op(B')` on column-major matrices. A row-major `C = A B` whose
//! rows are contiguous is the column-major `C^T = B^T A^T`, so cuBLAS's A is the spec's B and
//! its B the spec's A, each without transpose when its columns are contiguous and transposed
//! when its rows are.

use super::standalone::{GemmSpec, RenderedGemm, StridedOperand, render_gemm};
use crate::device::{CudaDevice, DeviceBuffer};
use crate::{CudaError, PtxTarget, Result};
use cudarc::cublas::sys::{cublasMath_t, cublasOperation_t};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use tessera_tensor::DType;

/// Whether the driver and libcublas can both be loaded.
pub fn cublas_present() -> bool {
    // SAFETY: only tries to open the shared library.
    crate::driver_present() && unsafe { cudarc::cublas::sys::is_culib_present() }
}

/// One `cublas{S,D}gemmStridedBatched` call (column-major, cuBLAS's naming).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CublasGemm {
    pub transa: bool,
    pub transb: bool,
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub lda: i32,
    pub ldb: i32,
    pub ldc: i32,
    pub stride_a: i64,
    pub stride_b: i64,
    pub stride_c: i64,
    pub batch: i32,
    /// Element offsets into the buffers cuBLAS reads as A (the spec's B), B (the spec's A)
    /// and writes as C.
    pub offsets: [usize; 3],
    pub dtype: DType,
    /// f32 products on tf32 tensor cores (`CUBLAS_TF32_TENSOR_OP_MATH`).
    pub tf32: bool,
}

/// How `op(X)` (`rows x cols`, column-major) reads the row-major operand `s` whose element
/// `(r, c)` is `X(c, r)`'s transpose source: `(transposed, leading dimension)`, or `None`.
/// `X(i, j)` must be `s(j, i)`, i.e. `s.offset + j * s.row_stride + i * s.col_stride`.
fn column_major(s: &StridedOperand, rows: usize, cols: usize) -> Option<(bool, usize)> {
    // Without transpose: X(i, j) = base[i + j * ld], so the column stride must be 1.
    if s.col_stride == 1 || rows == 1 {
        let ld = if cols == 1 { rows.max(1) } else { s.row_stride };
        if ld >= rows.max(1) {
            return Some((false, ld));
        }
    }
    // Transposed: X(i, j) = base[j + i * ld] for a stored cols x rows matrix.
    if s.row_stride == 1 || cols == 1 {
        let ld = if rows == 1 { cols.max(1) } else { s.col_stride };
        if ld >= cols.max(1) {
            return Some((true, ld));
        }
    }
    None
}

/// The cuBLAS call computing `spec`, or `None` when cuBLAS cannot: a bias, an f16/bf16 or
/// empty product, an output whose columns are not contiguous, an operand with no unit
/// stride, or sizes past `i32`.
pub fn cublas_plan(spec: &GemmSpec) -> Option<CublasGemm> {
    let (m, n, k) = (spec.m, spec.n, spec.k);
    if spec.bias.is_some()
        || !matches!(spec.dtype, DType::F32 | DType::F64)
        || [spec.batch, m, n, k].contains(&0)
    {
        return None;
    }
    // C' = C^T is n x m with C'(i, j) = c[j * row_stride + i]: columns must be contiguous.
    if spec.c.col_stride != 1 && n != 1 {
        return None;
    }
    let ldc = if m == 1 { n } else { spec.c.row_stride };
    if ldc < n {
        return None;
    }
    // A' = B^T (n x k): A'(i, j) = b(j, i). B' = A^T (k x m): B'(i, j) = a(j, i).
    let (transa, lda) = column_major(&spec.b, n, k)?;
    let (transb, ldb) = column_major(&spec.a, k, m)?;
    let int = |v: usize| i32::try_from(v).ok();
    let long = |v: usize| i64::try_from(v).ok();
    Some(CublasGemm {
        transa,
        transb,
        m: int(n)?,
        n: int(m)?,
        k: int(k)?,
        lda: int(lda)?,
        ldb: int(ldb)?,
        ldc: int(ldc)?,
        stride_a: long(spec.b.batch_stride)?,
        stride_b: long(spec.a.batch_stride)?,
        stride_c: long(spec.c.batch_stride)?,
        batch: int(spec.batch)?,
        offsets: [spec.b.offset, spec.a.offset, spec.c.offset],
        dtype: spec.dtype,
        tf32: spec.options.allow_tf32 && spec.dtype == DType::F32,
    })
}

/// What runs a standalone GEMM.
#[derive(Debug, Clone, PartialEq)]
pub enum GemmImplementation {
    Cublas(CublasGemm),
    Generated(RenderedGemm),
}

/// cuBLAS when `cublas_available` (pass [`cublas_present`]) and it can express `spec`, else
/// the generated kernel.
pub fn plan_gemm(
    spec: &GemmSpec,
    target: &PtxTarget,
    cublas_available: bool,
) -> Result<GemmImplementation> {
    if cublas_available && let Some(plan) = cublas_plan(spec) {
        return Ok(GemmImplementation::Cublas(plan));
    }
    render_gemm(spec, target).map(GemmImplementation::Generated)
}

/// A cuBLAS handle on a device's stream.
#[derive(Debug)]
pub struct CublasHandle {
    blas: CudaBlas,
}

fn blas_error(call: &'static str) -> impl Fn(cudarc::cublas::result::CublasError) -> CudaError {
    move |e| CudaError::Driver {
        call,
        code: format!("{e:?}"),
    }
}

impl CublasHandle {
    /// A handle on `device`'s stream, or [`CudaError::DeviceUnavailable`] without libcublas.
    pub fn new(device: &CudaDevice) -> Result<CublasHandle> {
        if !cublas_present() {
            return Err(CudaError::DeviceUnavailable {
                reason: "libcublas could not be loaded".into(),
            });
        }
        let blas = CudaBlas::new(device.stream().clone()).map_err(blas_error("cublasCreate"))?;
        Ok(CublasHandle { blas })
    }

    /// Queues `plan` with the spec's `a`, `b` and output `c` (f32 or f64 buffers).
    pub fn gemm(
        &self,
        plan: &CublasGemm,
        a: &DeviceBuffer,
        b: &DeviceBuffer,
        c: &mut DeviceBuffer,
    ) -> Result<()> {
        let op = |t: bool| {
            if t {
                cublasOperation_t::CUBLAS_OP_T
            } else {
                cublasOperation_t::CUBLAS_OP_N
            }
        };
        let mode = if plan.tf32 {
            cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH
        } else {
            cublasMath_t::CUBLAS_DEFAULT_MATH
        };
        // SAFETY: the handle is live; setting its math mode has no other effect.
        unsafe { cudarc::cublas::sys::cublasSetMathMode(*self.blas.handle(), mode) }
            .result()
            .map_err(blas_error("cublasSetMathMode"))?;
        let [oa, ob, oc] = plan.offsets;
        let mismatch = || CudaError::Launch {
            kernel: "cublas gemm".into(),
            message: format!("the buffers are not all {:?}", plan.dtype),
        };
        macro_rules! call {
            ($t:ty, $a:expr, $b:expr, $c:expr) => {{
                let cfg = StridedBatchedConfig {
                    gemm: GemmConfig::<$t> {
                        transa: op(plan.transa),
                        transb: op(plan.transb),
                        m: plan.m,
                        n: plan.n,
                        k: plan.k,
                        alpha: 1.0,
                        lda: plan.lda,
                        ldb: plan.ldb,
                        beta: 0.0,
                        ldc: plan.ldc,
                    },
                    batch_size: plan.batch,
                    stride_a: plan.stride_a,
                    stride_b: plan.stride_b,
                    stride_c: plan.stride_c,
                };
                // cuBLAS's A is the spec's B and its B the spec's A.
                let (ca, cb) = ($b.slice(oa..), $a.slice(ob..));
                let mut cc = $c.slice_mut(oc..);
                // SAFETY: the plan came from `cublas_plan` for buffers holding the spec's
                // operands (the caller's contract, as for a generated kernel's parameters).
                unsafe { self.blas.gemm_strided_batched(cfg, &ca, &cb, &mut cc) }
                    .map_err(blas_error("cublasGemmStridedBatched"))
            }};
        }
        match (a, b, c) {
            (DeviceBuffer::F32(a), DeviceBuffer::F32(b), DeviceBuffer::F32(c)) => {
                call!(f32, a, b, c)
            }
            (DeviceBuffer::F64(a), DeviceBuffer::F64(b), DeviceBuffer::F64(c)) => {
                call!(f64, a, b, c)
            }
            _ => Err(mismatch()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::GemmOptions;

    /// Runs `plan` with cuBLAS's column-major semantics on host buffers.
    fn run_plan(plan: &CublasGemm, a: &[f64], b: &[f64], c: &mut [f64]) {
        let at = |x: &[f64], off: usize, t: bool, ld: i32, i: usize, j: usize| {
            let ld = ld as usize;
            if t {
                x[off + j + i * ld]
            } else {
                x[off + i + j * ld]
            }
        };
        let [oa, ob, oc] = plan.offsets;
        for batch in 0..plan.batch as usize {
            let (oa, ob, oc) = (
                oa + batch * plan.stride_a as usize,
                ob + batch * plan.stride_b as usize,
                oc + batch * plan.stride_c as usize,
            );
            for i in 0..plan.m as usize {
                for j in 0..plan.n as usize {
                    let s: f64 = (0..plan.k as usize)
                        .map(|l| {
                            // cuBLAS's A is the spec's b, its B the spec's a.
                            at(b, oa, plan.transa, plan.lda, i, l)
                                * at(a, ob, plan.transb, plan.ldb, l, j)
                        })
                        .sum();
                    c[oc + i + j * plan.ldc as usize] = s;
                }
            }
        }
    }

    fn spec(
        batch: usize,
        m: usize,
        n: usize,
        k: usize,
        a: StridedOperand,
        b: StridedOperand,
    ) -> GemmSpec {
        GemmSpec {
            name: "g".into(),
            dtype: DType::F32,
            batch,
            m,
            n,
            k,
            a,
            b,
            c: StridedOperand::row_major(m, n),
            bias: None,
            options: GemmOptions::default(),
        }
    }

    fn transposed(rows: usize, cols: usize) -> StridedOperand {
        StridedOperand {
            offset: 0,
            batch_stride: rows * cols,
            row_stride: 1,
            col_stride: rows,
        }
    }

    #[test]
    fn cublas_plans_compute_the_row_major_product() {
        let rm = StridedOperand::row_major;
        let cases = [
            spec(1, 5, 3, 4, rm(5, 4), rm(4, 3)),
            spec(2, 5, 3, 4, transposed(5, 4), rm(4, 3)),
            spec(2, 5, 3, 4, rm(5, 4), transposed(4, 3)),
            spec(
                3,
                5,
                3,
                4,
                transposed(5, 4),
                StridedOperand {
                    batch_stride: 0,
                    ..transposed(4, 3)
                },
            ),
            spec(1, 1, 7, 1, rm(1, 1), rm(1, 7)),
            spec(
                1,
                6,
                1,
                2,
                StridedOperand {
                    offset: 3,
                    ..rm(6, 2)
                },
                rm(2, 1),
            ),
        ];
        for s in cases {
            let plan = cublas_plan(&s).unwrap_or_else(|| panic!("no plan for {s:?}"));
            let a: Vec<f64> = (0..s.a.reach(s.batch, s.m, s.k))
                .map(|i| (i % 7) as f64 - 3.0)
                .collect();
            let b: Vec<f64> = (0..s.b.reach(s.batch, s.k, s.n))
                .map(|i| (i % 5) as f64 - 2.0)
                .collect();
            let mut c = vec![f64::NAN; s.c.reach(s.batch, s.m, s.n)];
            run_plan(&plan, &a, &b, &mut c);
            for bi in 0..s.batch {
                for r in 0..s.m {
                    for col in 0..s.n {
                        let want: f64 = (0..s.k)
                            .map(|l| {
                                a[s.a.offset
                                    + bi * s.a.batch_stride
                                    + r * s.a.row_stride
                                    + l * s.a.col_stride]
                                    * b[s.b.offset
                                        + bi * s.b.batch_stride
                                        + l * s.b.row_stride
                                        + col * s.b.col_stride]
                            })
                            .sum();
                        let got = c[bi * s.m * s.n + r * s.n + col];
                        assert_eq!(got, want, "{s:?} [{bi}, {r}, {col}] with {plan:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn what_cublas_cannot_express_runs_the_generated_kernel() {
        let rm = StridedOperand::row_major;
        let strided = StridedOperand {
            offset: 0,
            batch_stride: 64,
            row_stride: 8,
            col_stride: 2,
        };
        let with_bias = GemmSpec {
            bias: Some((0, 1)),
            ..spec(1, 4, 4, 4, rm(4, 4), rm(4, 4))
        };
        let half = GemmSpec {
            dtype: DType::F16,
            ..spec(1, 4, 4, 4, rm(4, 4), rm(4, 4))
        };
        for s in [
            with_bias,
            half,
            spec(1, 4, 4, 4, strided, rm(4, 4)),
            spec(1, 0, 4, 4, rm(0, 4), rm(4, 4)),
        ] {
            assert_eq!(cublas_plan(&s), None, "{s:?}");
            let chosen = plan_gemm(&s, &PtxTarget::SM80, true).unwrap();
            assert!(matches!(chosen, GemmImplementation::Generated(_)), "{s:?}");
        }
        let plain = spec(1, 4, 4, 4, rm(4, 4), rm(4, 4));
        assert!(matches!(
            plan_gemm(&plain, &PtxTarget::SM80, true).unwrap(),
            GemmImplementation::Cublas(_)
        ));
        assert!(matches!(
            plan_gemm(&plain, &PtxTarget::SM80, false).unwrap(),
            GemmImplementation::Generated(_)
        ));
    }
}
