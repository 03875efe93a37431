//! JIT compilation of a program's kernels: one `JITModule` per program (cranelift frees JIT
//! memory per module only), the ISA from `cranelift_native` (AVX encodings, FMA), the math
//! functions registered as symbols, and the cranelift verifier run on every function so a
//! rendering bug is a typed error, never a panic or bad code.

use crate::render::{kernel_signature, math_signature, math_symbols, render};
use crate::{CpuError, Result};
use cranelift_codegen::ir::types;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::FunctionBuilderContext;
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{Linkage, Module, default_libcall_names};
use tessera_kernel::gemm::{GEMM_MICRO_ROWS, tessera_gemm_f32, tessera_gemm_f64};
use tessera_kernel::math::{self, tessera_pow_f32, tessera_pow_f64};
use tessera_kernel::schedule::PARALLEL_MIN_WORK;
use tessera_kernel::{
    BufferPtr, GroupPart, Kernel, KernelError, KernelExecutor, Program, ScalarType, UnaryFn,
};

/// Product elements per GEMM block (4 MiB of f32: the block is still in cache for its epilogue;
/// smaller blocks made each call pack the whole right operand again for few rows, halving the
/// GEMM rate of a transformer's feed-forward layers).
const GEMM_BLOCK_ELEMENTS: usize = 1 << 20;
/// Rows per GEMM block at least, so that each call amortises packing its right operand.
const GEMM_MIN_ROWS: usize = 256;

/// Elements of a convolution kernel's block of output images (1 MiB of f32: half of it per
/// thread's L2 cache on two threads), so that the epilogue reads the block from cache.
const CONV_BLOCK_ELEMENTS: usize = 1 << 18;

/// Elements of the output images one thread convolves and then finishes (256 KiB of f32, half
/// of a core's L2 cache here) when a convolution kernel splits its images across threads.
const CONV_CHUNK_ELEMENTS: usize = 1 << 16;
/// Chunks per thread at least, so that a thread on a busy core hands images to the others.
const CONV_CHUNKS_PER_THREAD: usize = 4;

/// Buffer parameters a kernel call passes without allocating its pointer table.
const STACK_BUFFERS: usize = 32;

/// The entry point of a compiled kernel.
type KernelFn = unsafe extern "C" fn(*const *mut u8, i64, i64);

/// One compiled kernel: its entry point and the CLIF text it was compiled from.
pub struct CompiledKernel {
    pub name: String,
    pub clif: String,
    entry: KernelFn,
}

/// The compiled kernels of one program, in step order, and the module that owns their code.
pub struct JitProgram {
    kernels: Vec<CompiledKernel>,
    /// Kernel index of each program step (`None` for external steps).
    by_step: Vec<Option<usize>>,
    /// Keeps the code alive; freed when the program is dropped.
    _module: JITModule,
}

// SAFETY: the module's code is immutable once finalized, and entry points are plain functions
// of their arguments; nothing in a `JitProgram` is mutated after construction.
unsafe impl Send for JitProgram {}
// SAFETY: as above.
unsafe impl Sync for JitProgram {}

fn symbol_table() -> Vec<(String, *const u8)> {
    let mut table = Vec::new();
    for f in UnaryFn::ALL {
        if let Some(m) = math::unary_fn(f) {
            table.push((math::symbol(m.name, ScalarType::F32), m.f32 as *const u8));
            table.push((math::symbol(m.name, ScalarType::F64), m.f64 as *const u8));
        }
    }
    let pow32: extern "C" fn(f32, f32) -> f32 = tessera_pow_f32;
    let pow64: extern "C" fn(f64, f64) -> f64 = tessera_pow_f64;
    table.push((math::symbol("pow", ScalarType::F32), pow32 as *const u8));
    table.push((math::symbol("pow", ScalarType::F64), pow64 as *const u8));
    table.push(("tessera_gemm_f32".into(), tessera_gemm_f32 as *const u8));
    table.push(("tessera_gemm_f64".into(), tessera_gemm_f64 as *const u8));
    table
}

fn new_module() -> Result<JITModule> {
    let mut flags = settings::builder();
    for (name, value) in [
        ("opt_level", "speed"),
        ("use_colocated_libcalls", "false"),
        ("is_pic", "false"),
    ] {
        flags
            .set(name, value)
            .map_err(|source| CpuError::Setting { source })?;
    }
    let isa = cranelift_native::builder()
        .map_err(|message| CpuError::Isa {
            message: message.to_string(),
        })?
        .finish(settings::Flags::new(flags))
        .map_err(|e| CpuError::Isa {
            message: e.to_string(),
        })?;
    let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
    for (name, ptr) in symbol_table() {
        builder.symbol(name, ptr);
    }
    Ok(JITModule::new(builder))
}

impl JitProgram {
    /// Compiles every kernel of `program`.
    pub fn compile(program: &Program) -> Result<JitProgram> {
        let mut module = new_module()?;
        let mut fctx = FunctionBuilderContext::new();
        let mut ctx = module.make_context();
        let call_conv = module.isa().default_call_conv();
        let mut ids = Vec::new();
        let mut by_step = Vec::new();
        let mut clifs = Vec::new();
        for step in &program.steps {
            let tessera_kernel::Step::Kernel { kernel, .. } = step else {
                by_step.push(None);
                continue;
            };
            kernel.verify()?;
            let module_error = |source| CpuError::Module {
                kernel: kernel.name.clone(),
                source: Box::new(source),
            };
            let id = module
                .declare_function(&kernel.name, Linkage::Local, &kernel_signature(call_conv))
                .map_err(module_error)?;
            module.clear_context(&mut ctx);
            ctx.func.signature = kernel_signature(call_conv);
            let mut imports = Vec::new();
            for (symbol, ty, arity) in math_symbols(kernel) {
                let t = if ty == ScalarType::F64 {
                    types::F64
                } else {
                    types::F32
                };
                let f = module
                    .declare_function(
                        &symbol,
                        Linkage::Import,
                        &math_signature(call_conv, t, arity),
                    )
                    .map_err(module_error)?;
                imports.push((symbol, f));
            }
            if let Some(symbol) = crate::render_gemm::gemm_symbol(kernel) {
                let f = module
                    .declare_function(
                        &symbol,
                        Linkage::Import,
                        &crate::render_gemm::gemm_signature(call_conv),
                    )
                    .map_err(module_error)?;
                imports.push((symbol, f));
            }
            let config = module.target_config();
            render(kernel, &mut ctx.func, &mut fctx, config, |func| {
                imports
                    .iter()
                    .map(|(s, f)| (s.clone(), module.declare_func_in_func(*f, func)))
                    .collect()
            });
            let clif = ctx.func.display().to_string();
            if let Err(errors) = cranelift_codegen::verify_function(&ctx.func, module.isa()) {
                return Err(CpuError::Verifier {
                    kernel: kernel.name.clone(),
                    errors: errors.to_string(),
                    clif,
                });
            }
            module
                .define_function(id, &mut ctx)
                .map_err(|source| match source {
                    cranelift_module::ModuleError::Compilation(
                        cranelift_codegen::CodegenError::Verifier(errors),
                    ) => CpuError::Verifier {
                        kernel: kernel.name.clone(),
                        errors: errors.to_string(),
                        clif: clif.clone(),
                    },
                    other => module_error(other),
                })?;
            by_step.push(Some(ids.len()));
            ids.push((id, kernel.name.clone()));
            clifs.push(clif);
        }
        module
            .finalize_definitions()
            .map_err(|source| CpuError::Module {
                kernel: "(finalizing)".into(),
                source: Box::new(source),
            })?;
        let kernels = ids
            .into_iter()
            .zip(clifs)
            .map(|((id, name), clif)| {
                let code = module.get_finalized_function(id);
                // SAFETY: the function was declared with `kernel_signature`, which is this
                // type's ABI under the module's default calling convention (the host's C ABI).
                let entry = unsafe { std::mem::transmute::<*const u8, KernelFn>(code) };
                CompiledKernel { name, clif, entry }
            })
            .collect();
        Ok(JitProgram {
            kernels,
            by_step,
            _module: module,
        })
    }

    /// The compiled kernels, in step order.
    pub fn kernels(&self) -> &[CompiledKernel] {
        &self.kernels
    }
}

impl JitProgram {
    /// The compiled code of `kernel`, the kernel of step `step`.
    fn compiled(&self, step: usize, kernel: &Kernel) -> tessera_kernel::Result<&CompiledKernel> {
        self.by_step
            .get(step)
            .copied()
            .flatten()
            .and_then(|k| self.kernels.get(k))
            .filter(|k| k.name == kernel.name)
            .ok_or_else(|| KernelError::Backend {
                kernel: kernel.name.clone(),
                message: format!("step {step} has no compiled kernel"),
            })
    }
}

impl KernelExecutor for JitProgram {
    /// Runs a launch group in one call: its kernels' outermost loops share one parallel
    /// region (`crate::parallel::run_group_split`) when their work together reaches
    /// [`PARALLEL_MIN_WORK`] on more than one thread, else run one after the other here.
    unsafe fn execute_group(&self, parts: &[GroupPart<'_>]) -> tessera_kernel::Result<()> {
        let mut tables: Vec<Vec<*mut u8>> = Vec::with_capacity(parts.len());
        let mut entries = Vec::with_capacity(parts.len());
        let mut work = 0usize;
        for part in parts {
            let (kernel, compiled) = (part.kernel, self.compiled(part.step, part.kernel)?);
            if kernel.gemm.is_some() || kernel.conv.is_some() || !kernel.reduce.is_empty() {
                return Err(KernelError::Backend {
                    kernel: kernel.name.clone(),
                    message: "only elementwise kernels run in a launch group".into(),
                });
            }
            // A kernel with no output point writes nothing (as in `execute`).
            if kernel.points() == 0 {
                continue;
            }
            tables.push(part.buffers.iter().map(|b| b.ptr).collect());
            entries.push((kernel, compiled.entry));
            work += kernel.points().saturating_mul(kernel.values.len().max(1));
        }
        let pieces: Vec<crate::parallel::GroupPiece> = entries
            .iter()
            .zip(&tables)
            .map(|((kernel, entry), table)| {
                let end = kernel.domain.first().map_or(1, |&n| n as i64);
                let s = kernel.schedule;
                crate::parallel::GroupPiece {
                    entry: *entry,
                    buffers: table.as_ptr(),
                    end,
                    points_per_iteration: (kernel.points() as i64 / end.max(1)).max(1),
                    // A loop that is also the innermost splits at whole vector iterations.
                    align: if kernel.domain.len() == 1 {
                        (s.vector_width * s.unroll).max(1) as i64
                    } else {
                        1
                    },
                }
            })
            .collect();
        if work >= PARALLEL_MIN_WORK && crate::parallel::worth_splitting(2) {
            // SAFETY: every kernel is elementwise, so the iterations of its outermost loop
            // write disjoint outputs; the runner checked each part's buffers against its
            // parameters (valid for any range), and a launch group's kernels write disjoint
            // buffers and read none another writes (`check_launch_groups`).
            unsafe { crate::parallel::run_group_split(&pieces) };
        } else {
            for piece in &pieces {
                // SAFETY: as above, each kernel over its whole range.
                unsafe { (piece.entry)(piece.buffers, 0, piece.end) };
            }
        }
        Ok(())
    }

    unsafe fn execute(
        &self,
        step: usize,
        kernel: &Kernel,
        buffers: &[BufferPtr],
    ) -> tessera_kernel::Result<()> {
        let compiled = self.compiled(step, kernel)?;
        // A kernel with no output point writes nothing (its external call's product would
        // be read by no one); the code may be another batch's (`Kernel::code_difference`).
        if kernel.points() == 0 {
            return Ok(());
        }
        // The pointer table the entry point takes, on the stack for kernels of up to
        // `STACK_BUFFERS` parameters (no allocation per call).
        let mut on_stack = [std::ptr::null_mut::<u8>(); STACK_BUFFERS];
        let on_heap: Vec<*mut u8>;
        let ptrs: &[*mut u8] = if buffers.len() <= STACK_BUFFERS {
            for (p, b) in on_stack.iter_mut().zip(buffers) {
                *p = b.ptr;
            }
            &on_stack[..buffers.len()]
        } else {
            on_heap = buffers.iter().map(|b| b.ptr).collect();
            &on_heap
        };
        let end = if kernel.domain.is_empty() {
            1
        } else {
            kernel.domain[0] as i64
        };
        let parallel = kernel.schedule.parallel.is_some();
        if let Some((_, _, per_step)) = kernel.gemm_shape().filter(|_| kernel.gemm.is_some())
            && parallel
            && crate::parallel::worth_splitting(end)
        {
            // Chunks of whole micro-kernel row blocks, so no share computes a partial block.
            let align = GEMM_MICRO_ROWS.div_ceil(per_step.max(1)).max(1) as i64;
            // SAFETY: each chunk's GEMM call fills the scratch rows of its own iterations, and
            // its epilogue writes only the outputs of those iterations (as any kernel whose
            // outermost loop the scheduler marks parallel); the buffers are valid for any range.
            unsafe {
                crate::parallel::run_gemm_split(compiled.entry, ptrs.as_ptr(), (0, end), align)
            };
            return Ok(());
        }
        if parallel
            && kernel.gemm.is_none()
            && kernel.conv.is_none()
            && crate::parallel::worth_splitting(end)
        {
            // A loop that is also the innermost splits at whole vector iterations.
            let s = kernel.schedule;
            let align = if kernel.domain.len() == 1 && kernel.reduce.is_empty() {
                (s.vector_width * s.unroll).max(1) as i64
            } else {
                1
            };
            // SAFETY: the scheduler marks the outermost loop parallel only where its
            // iterations write disjoint outputs; the buffers are valid for any range (above).
            unsafe { crate::parallel::run_split(compiled.entry, ptrs.as_ptr(), (0, end), align) };
            return Ok(());
        }
        // A convolution kernel over several images runs in chunks of images on the threads,
        // each convolving its images and then running the epilogue on them while they are in
        // its core's cache.
        if let Some(c) = &kernel.conv
            && parallel
            && crate::parallel::worth_splitting(end)
        {
            let images = conv_chunk_images(c.image_len(kernel), end as usize);
            let ptrs = ptrs.as_ptr();
            let step = |begin: i64, stop: i64| -> tessera_kernel::Result<()> {
                // SAFETY: as below, for the images `begin..stop` of the kernel's outermost loop:
                // the call writes only their part of the scratch and the kernel (verified, its
                // outermost loop parallel) only their outputs.
                unsafe {
                    tessera_kernel::run_conv(kernel, buffers, begin as usize, stop as usize)?;
                    (compiled.entry)(ptrs, begin, stop);
                }
                Ok(())
            };
            // SAFETY: each chunk's step writes its own images' outputs only (above).
            return unsafe { crate::parallel::run_conv_chunks(&step, end, images as i64) };
        }
        // A GEMM kernel runs in blocks of its outermost loop, so that the epilogue reads each
        // block of the product right after the call computed it, while it is in cache.
        let block = match (kernel.gemm_shape(), &kernel.conv) {
            (Some((_, n, per_step)), _) if kernel.gemm.is_some() => {
                let rows = (GEMM_BLOCK_ELEMENTS / n.max(1)).max(GEMM_MIN_ROWS);
                rows.div_ceil(per_step.max(1)).max(1) as i64
            }
            // Images per convolution block: the block's output stays in cache for the
            // epilogue, and enough images share out across the threads.
            (_, Some(c)) => {
                let per_image = c.image_len(kernel).max(1);
                let images = (CONV_BLOCK_ELEMENTS / per_image).max(rayon::current_num_threads());
                images.max(1) as i64
            }
            _ => end.max(1),
        };
        let mut begin = 0;
        while begin < end {
            let stop = (begin + block).min(end);
            // SAFETY: the caller guarantees the buffers match the kernel's parameters, and the
            // kernel (verified) only indexes within their lengths for any range of its
            // outermost loop.
            // A convolution kernel's block of images is convolved, then its epilogue shares the
            // images out across the threads when the schedule allows.
            unsafe {
                tessera_kernel::run_conv(kernel, buffers, begin as usize, stop as usize)?;
                if parallel && crate::parallel::worth_splitting(stop - begin) {
                    crate::parallel::run_split(compiled.entry, ptrs.as_ptr(), (begin, stop), 1);
                } else {
                    (compiled.entry)(ptrs.as_ptr(), begin, stop);
                }
            };
            begin = stop;
        }
        Ok(())
    }
}

/// Images per chunk of a convolution kernel of `images` images of `image_len` output elements
/// each: as many as fit [`CONV_CHUNK_ELEMENTS`], but no more than leaves every thread
/// [`CONV_CHUNKS_PER_THREAD`] chunks.
fn conv_chunk_images(image_len: usize, images: usize) -> usize {
    let fit = CONV_CHUNK_ELEMENTS / image_len.max(1);
    let spread = images.div_ceil(rayon::current_num_threads().max(1) * CONV_CHUNKS_PER_THREAD);
    fit.min(spread).max(1)
}
