//! The check the emulated-PTX op tests share: one op lowered (every kernel assembled by ptxas
//! when it is installed), run in the PTX emulator, by the kernel-IR interpreter and eagerly,
//! the three agreeing bit for bit on every output.

use crate::common;
use crate::emulated::EmulatedPtx;
use tessera_kernel::{Interpreter, NoEnvironment, run_program};
use tessera_tensor::{Op, Tensor};

pub use tessera_testkit::exact_bits as bits;

/// `op` on `inputs`: emulated PTX, the interpreter and eager execution agree bit for bit on
/// each of its `outputs`, dtypes included.
pub fn agrees(op: Op, inputs: &[Tensor], outputs: usize) {
    let program = common::lowered(op.clone(), inputs, outputs);
    let want = run_program(&program, &NoEnvironment, &Interpreter, inputs).unwrap();
    let got = run_program(&program, &NoEnvironment, &EmulatedPtx::default(), inputs).unwrap();
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let eager = op.apply(&refs).unwrap();
    assert_eq!(eager.len(), outputs);
    for i in 0..outputs {
        assert_eq!(got[i].dtype(), eager[i].dtype(), "output {i}\n{program}");
        assert_eq!(
            bits(&got[i]),
            bits(&want[i]),
            "output {i}: emulated PTX vs interpreter\n{program}"
        );
        assert_eq!(
            bits(&want[i]),
            bits(&eager[i]),
            "output {i}: interpreter vs eager\n{program}"
        );
    }
}
