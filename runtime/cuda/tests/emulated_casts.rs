//! `to_dtype` between every pair of dtypes on the PTX backend: each cast's kernel (u8, i8 and
//! i32 elements loaded, converted through i64 and stored in their own width; half types through
//! f32) run in the emulator on 2 blocks and checked bit for bit against the kernel-IR
//! interpreter and the eager cast, and assembled by ptxas (sm_80 and sm_90) when installed.

use crate::common;
use crate::emulated;

use emulated::EmulatedPtx;
use tessera_cuda::{PtxTarget, render};
use tessera_fx::Graph;
use tessera_kernel::{Interpreter, NoEnvironment, lower, run_program};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};
use tessera_testkit::{cast_input, exact_bits};

/// The kernels of `x.to_dtype(to)`: emulated PTX, interpreter and eager agree bit for bit.
fn cast_on_the_emulator(x: &Tensor, to: DType, ptxas: Option<&str>) {
    let what = format!("{:?} -> {to:?}", x.dtype());
    let mut g = Graph::new();
    let p = g.placeholder("x", TensorMeta::new(x.shape(), x.dtype()));
    let y = g.call_function(Op::ToDType(to), &[&p]).unwrap();
    g.output(&[&y]).unwrap();
    let inputs = [x.clone()];
    let program = lower(&g, &[x.layout()]).unwrap();
    assert!(program.fallbacks.is_empty(), "{what}: fell back\n{program}");
    let want = run_program(&program, &NoEnvironment, &Interpreter, &inputs).unwrap();
    let got = run_program(&program, &NoEnvironment, &EmulatedPtx::default(), &inputs).unwrap();
    let eager = x.to_dtype(to).unwrap();
    assert_eq!(got[0].dtype(), to, "{what}");
    assert_eq!(
        exact_bits(&got[0]),
        exact_bits(&want[0]),
        "{what}: emulated PTX vs interpreter\n{program}"
    );
    assert_eq!(
        exact_bits(&want[0]),
        exact_bits(&eager),
        "{what}: interpreter vs eager\n{program}"
    );
    if let Some(ptxas) = ptxas {
        for k in program.kernels() {
            let rendered = render(k, &PtxTarget::SM80).unwrap();
            common::assemble(ptxas, &rendered.name, &rendered.ptx, &[80, 90]);
        }
    }
}

#[test]
fn every_dtype_pair_converts_on_the_emulator_as_the_eager_cast() {
    let ptxas = common::ptxas();
    for from in DType::ALL {
        let x = cast_input(from);
        for to in DType::ALL {
            if to != from {
                cast_on_the_emulator(&x, to, ptxas.as_deref());
            }
        }
    }
}

#[test]
fn a_transposed_i8_input_is_read_in_place() {
    let x = Tensor::from_vec((-128..=127i8).collect(), &[16, 16])
        .unwrap()
        .t()
        .unwrap();
    for to in [DType::U8, DType::I32, DType::F32] {
        cast_on_the_emulator(&x, to, None);
    }
}
