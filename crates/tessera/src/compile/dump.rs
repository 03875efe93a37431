//! Writing a compiled program's kernels to files: for each kernel, `NAME.kir` (its kernel IR)
//! and, with the JIT backend, `NAME.clif` (the cranelift function it was compiled from), plus
//! `program.txt` (the program's steps), so generated code can be read and diffed.

use std::io;
use std::path::Path;
use tessera_cpu::JitProgram;
use tessera_kernel::Program;

/// The environment variable naming the folder [`compile`](crate::compile) dumps kernels into.
pub const DUMP_KERNELS_ENV: &str = "TESSERA_DUMP_KERNELS";

/// Writes `program`'s kernels (and `jit`'s CLIF) into `dir`, creating it.
pub(crate) fn dump_program(
    dir: &Path,
    program: &Program,
    jit: Option<&JitProgram>,
) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("program.txt"), program.to_string())?;
    for kernel in program.kernels() {
        std::fs::write(dir.join(format!("{}.kir", kernel.name)), kernel.to_string())?;
    }
    for compiled in jit.map(JitProgram::kernels).unwrap_or_default() {
        std::fs::write(dir.join(format!("{}.clif", compiled.name)), &compiled.clif)?;
    }
    Ok(())
}
