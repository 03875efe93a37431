//! Rendering one [`Kernel`] to a cranelift function, a table from kernel-IR primitive to CLIF
//! instructions. The function's signature is `fn(buffers: *const *mut u8, begin: i64, end:
//! i64)`: the buffer pointers in parameter order, and the range of the outermost loop to run
//! (so a parallel split only changes the caller). Along the innermost loop, a schedule with
//! vector width 4 gives an F32X4 body unrolled `unroll` times and a scalar tail. Kernels with
//! reduction loops are rendered by [`crate::render_reduce`] with the same per-value table.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    AbiParam, Endianness, FuncRef, Function, InstBuilder, MemFlagsData, Signature, Type,
    UserFuncName, Value, types,
};
use cranelift_codegen::isa::{CallConv, TargetFrontendConfig};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use half::{bf16, f16};
use std::collections::HashMap;
use tessera_kernel::{BinaryFn, CompareFn, Expr, IndexExpr, Kernel, ScalarType, UnaryFn, math};

/// The signature of every kernel function.
pub fn kernel_signature(call_conv: CallConv) -> Signature {
    let mut sig = Signature::new(call_conv);
    sig.params.push(AbiParam::new(types::I64));
    sig.params.push(AbiParam::new(types::I64));
    sig.params.push(AbiParam::new(types::I64));
    sig
}

/// The signature of an imported math function of `arity` floats of type `ty`.
pub fn math_signature(call_conv: CallConv, ty: Type, arity: usize) -> Signature {
    let mut sig = Signature::new(call_conv);
    for _ in 0..arity {
        sig.params.push(AbiParam::new(ty));
    }
    sig.returns.push(AbiParam::new(ty));
    sig
}

/// The imported functions a kernel calls, by symbol, as the caller declared them.
pub type Imports = HashMap<String, FuncRef>;

/// The math symbols `kernel` calls, with their arity and type.
pub fn math_symbols(kernel: &Kernel) -> Vec<(String, ScalarType, usize)> {
    let mut out: Vec<(String, ScalarType, usize)> = Vec::new();
    for v in &kernel.values {
        let wanted = match &v.expr {
            // f32 `exp` is inline code, not a call.
            Expr::Unary(UnaryFn::Exp, _) if v.ty == ScalarType::F32 => None,
            Expr::Unary(f, _) => math::unary_fn(*f).map(|m| (math::symbol(m.name, v.ty), v.ty, 1)),
            Expr::Binary(BinaryFn::Pow, _, _) => Some((math::symbol("pow", v.ty), v.ty, 2)),
            _ => None,
        };
        if let Some(w) = wanted.filter(|w| !out.contains(w)) {
            out.push(w);
        }
    }
    out
}

pub(crate) fn clif_type(ty: ScalarType) -> Type {
    match ty {
        ScalarType::F32 => types::F32,
        ScalarType::F64 => types::F64,
        // The bits of a half element (`crate::render_half`).
        ScalarType::F16 | ScalarType::BF16 => types::I16,
        // A bool is the byte 0 or 1, in registers as in memory.
        ScalarType::Bool => types::I8,
        ScalarType::I64 => types::I64,
        // A narrow integer is its own bits (widened to i64 by `narrow_cast`).
        ScalarType::U8 | ScalarType::I8 => types::I8,
        ScalarType::I32 => types::I32,
    }
}

/// The integer type of a float's width, to select floats with bit masks.
fn same_width_int(ty: ScalarType) -> Option<Type> {
    match ty {
        ScalarType::F32 => Some(types::I32),
        ScalarType::F64 => Some(types::I64),
        _ => None,
    }
}

/// `c` as a value of `ty` in its register form ([`clif_type`]), rounded or converted as the
/// interpreter's `Scalar::of`: a half type's bits, a bool's byte, a narrow integer's bits
/// (truncated and saturated as `as`).
fn storage_constant(b: &mut FunctionBuilder, ty: ScalarType, c: f64) -> Value {
    match ty {
        ScalarType::F64 => b.ins().f64const(c),
        ScalarType::F32 => b.ins().f32const(c as f32),
        ScalarType::F16 => b
            .ins()
            .iconst(types::I16, i64::from(f16::from_f32(c as f32).to_bits())),
        ScalarType::BF16 => b
            .ins()
            .iconst(types::I16, i64::from(bf16::from_f32(c as f32).to_bits())),
        ScalarType::Bool => b.ins().iconst(types::I8, i64::from(c != 0.0)),
        ScalarType::U8 => b.ins().iconst(types::I8, i64::from(c as u8)),
        ScalarType::I8 => b.ins().iconst(types::I8, i64::from(c as i8 as u8)),
        ScalarType::I32 => b.ins().iconst(types::I32, i64::from(c as i32 as u32)),
        ScalarType::I64 => b.ins().iconst(types::I64, c as i64),
    }
}

/// `cond ? x : y` for scalars of type `ty`; floats are picked by bit masks, branch-free (x64
/// lowers a float `select` to a jump, which the data mispredicts: a max pooling's comparisons,
/// a where's mask, a padded window's bounds).
fn select_bits(b: &mut FunctionBuilder, cond: Value, x: Value, y: Value, ty: ScalarType) -> Value {
    let Some(int) = same_width_int(ty) else {
        return b.ins().select(cond, x, y);
    };
    let flags = MemFlagsData::new();
    let mask = b.ins().bmask(int, cond);
    let (xi, yi) = (
        b.ins().bitcast(int, flags, x),
        b.ins().bitcast(int, flags, y),
    );
    let picked = b.ins().bitselect(mask, xi, yi);
    b.ins().bitcast(clif_type(ty), flags, picked)
}

fn int_cc(f: CompareFn) -> IntCC {
    match f {
        CompareFn::Eq => IntCC::Equal,
        CompareFn::Ne => IntCC::NotEqual,
        CompareFn::Lt => IntCC::SignedLessThan,
        CompareFn::Le => IntCC::SignedLessThanOrEqual,
        CompareFn::Gt => IntCC::SignedGreaterThan,
        CompareFn::Ge => IntCC::SignedGreaterThanOrEqual,
    }
}

fn float_cc(f: CompareFn) -> FloatCC {
    match f {
        CompareFn::Eq => FloatCC::Equal,
        CompareFn::Ne => FloatCC::NotEqual,
        CompareFn::Lt => FloatCC::LessThan,
        CompareFn::Le => FloatCC::LessThanOrEqual,
        CompareFn::Gt => FloatCC::GreaterThan,
        CompareFn::Ge => FloatCC::GreaterThanOrEqual,
    }
}

/// Emits the body of `kernel` into `func`, whose signature is [`kernel_signature`];
/// `declare_imports` declares the math symbols in the function and returns their references.
pub fn render(
    kernel: &Kernel,
    func: &mut Function,
    fctx: &mut FunctionBuilderContext,
    config: TargetFrontendConfig,
    declare_imports: impl FnOnce(&mut Function) -> Imports,
) {
    func.name = UserFuncName::testcase(&kernel.name);
    let imports = declare_imports(func);
    let mut b = FunctionBuilder::new(func, fctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let params = b.block_params(entry).to_vec();
    let (args, begin, end) = (params[0], params[1], params[2]);
    let flags = MemFlagsData::new().with_notrap();
    let bases: Vec<Value> = (0..kernel.buffers.len())
        .map(|i| b.ins().load(types::I64, flags, args, (i * 8) as i32))
        .collect();
    let mut r = Renderer {
        kernel,
        imports,
        bases,
        flags,
        indices: Vec::new(),
        interior: Vec::new(),
    };
    if let Some(g) = &kernel.gemm {
        r.gemm_call(&mut b, g, begin, end);
    }
    if !kernel.reduce.is_empty() {
        crate::render_reduce::reduction(&mut r, &mut b, begin, end);
    } else if kernel.domain.is_empty() {
        // A nest of no loops runs its body once when the caller asks for iteration 0.
        let go = b.create_block();
        let done = b.create_block();
        let nonempty = b.ins().icmp(IntCC::SignedLessThan, begin, end);
        b.ins().brif(nonempty, go, &[], done, &[]);
        b.switch_to_block(go);
        r.point(&mut b, None, 1, &[]);
        b.ins().jump(done, &[]);
        b.switch_to_block(done);
    } else {
        r.nest(&mut b, 0, begin, end);
    }
    b.ins().return_(&[]);
    b.seal_all_blocks();
    b.finalize(config);
}

pub(crate) struct Renderer<'k> {
    pub(crate) kernel: &'k Kernel,
    pub(crate) imports: Imports,
    pub(crate) bases: Vec<Value>,
    pub(crate) flags: MemFlagsData,
    /// The index value of each enclosing loop.
    pub(crate) indices: Vec<Value>,
    /// While the interior of a row is rendered: per value, a guarded load's row address
    /// ([`Renderer::interior_rows`]), read with no guard; empty elsewhere.
    pub(crate) interior: Vec<Option<Value>>,
}

impl Renderer<'_> {
    /// A counted loop `for i in start..end step step`, its body emitted by `body`; returns
    /// the index value where it stopped.
    pub(crate) fn counted(
        &mut self,
        b: &mut FunctionBuilder,
        start: Value,
        end: Value,
        step: i64,
        body: &mut dyn FnMut(&mut Self, &mut FunctionBuilder, Value),
    ) -> Value {
        let header = b.create_block();
        let inner = b.create_block();
        let exit = b.create_block();
        let i = b.append_block_param(header, types::I64);
        let args = [start.into()];
        b.ins().jump(header, &args);
        b.switch_to_block(header);
        // Runs while `i + step <= end`, so a vector body never reads past the end.
        let last = b.ins().iadd_imm_s(i, step);
        let more = b.ins().icmp(IntCC::SignedLessThanOrEqual, last, end);
        b.ins().brif(more, inner, &[], exit, &[]);
        b.switch_to_block(inner);
        body(self, b, i);
        let next = b.ins().iadd_imm_s(i, step);
        let back = [next.into()];
        b.ins().jump(header, &back);
        b.switch_to_block(exit);
        i
    }

    /// Loop `level` and everything inside it, over `start..end`.
    fn nest(&mut self, b: &mut FunctionBuilder, level: usize, start: Value, end: Value) {
        let last = self.kernel.domain.len() - 1;
        if level < last {
            let extent = self.kernel.domain[level + 1] as i64;
            self.counted(b, start, end, 1, &mut |r, b, i| {
                r.indices.push(i);
                let zero = b.ins().iconst(types::I64, 0);
                let n = b.ins().iconst(types::I64, extent);
                r.nest(b, level + 1, zero, n);
                r.indices.pop();
            });
            return;
        }
        let s = self.kernel.schedule;
        // The hoisted values (`hoisted_values`: an update's f64 learning rate and what is
        // derived from it) are computed once, before the loop, when it runs at all (a hoisted
        // load must not read a buffer the loop never reads).
        let hoisted = tessera_kernel::hoisted_values(self.kernel);
        let mut outer: Vec<Option<Value>> = vec![None; hoisted.len()];
        let done = hoisted.iter().any(|&h| h).then(|| {
            let go = b.create_block();
            let done = b.create_block();
            let nonempty = b.ins().icmp(IntCC::SignedLessThan, start, end);
            b.ins().brif(nonempty, go, &[], done, &[]);
            b.switch_to_block(go);
            for (i, _) in hoisted.iter().enumerate().filter(|(_, h)| **h) {
                let id = tessera_kernel::ValueId::from_index(i);
                outer[i] = Some(self.eval(b, id, &outer, &[], None, 1));
            }
            done
        });
        let bounds = self.kernel.row_bounds();
        if bounds.is_empty() {
            let unrolled: &[usize] = if s.vector_width == 4 {
                &[s.unroll]
            } else {
                &[]
            };
            self.span(b, start, end, &outer, unrolled, false);
        } else {
            self.split_row(b, &bounds, start, end, &outer);
        }
        if let Some(done) = done {
            b.ins().jump(done, &[]);
            b.switch_to_block(done);
        }
    }

    /// The innermost loop over `start..end`: for each entry of `unrolled`, steps of that many
    /// F32X4 vectors while they fit; then, when `overlap` and the span holds a vector, one
    /// vector ending at `end` (recomputing points the steps computed); otherwise one point at
    /// a time.
    pub(crate) fn span(
        &mut self,
        b: &mut FunctionBuilder,
        start: Value,
        end: Value,
        outer: &[Option<Value>],
        unrolled: &[usize],
        overlap: bool,
    ) {
        let mut at = start;
        for &unroll in unrolled {
            at = self.counted(b, at, end, (4 * unroll) as i64, &mut |r, b, i| {
                for u in 0..unroll {
                    let j = b.ins().iadd_imm_s(i, (u * 4) as i64);
                    r.point(b, Some(j), 4, outer);
                }
            });
        }
        if overlap {
            at = self.last_vector(b, start, at, end, outer);
        }
        self.counted(b, at, end, 1, &mut |r, b, j| r.point(b, Some(j), 1, outer));
    }

    /// The byte address of `index` in buffer `buffer` at innermost index `j`.
    fn address(
        &self,
        b: &mut FunctionBuilder,
        buffer: usize,
        index: &IndexExpr,
        j: Option<Value>,
        size: i64,
    ) -> Value {
        let elements = self.elements(b, index, j);
        let bytes = b.ins().imul_imm_s(elements, size);
        b.ins().iadd(self.bases[buffer], bytes)
    }

    /// The value of `index` (an i64 element position) at innermost index `j`.
    pub(crate) fn elements(
        &self,
        b: &mut FunctionBuilder,
        index: &IndexExpr,
        j: Option<Value>,
    ) -> Value {
        let mut at: Option<Value> = None;
        let loops = self.indices.iter().copied().chain(j);
        for (stride, i) in index.strides.iter().zip(loops) {
            let term = match *stride {
                0 => continue,
                1 => i,
                s => b.ins().imul_imm_s(i, s as i64),
            };
            at = Some(match at {
                None => term,
                Some(sum) => b.ins().iadd(sum, term),
            });
        }
        match (at, index.offset) {
            (None, offset) => b.ins().iconst(types::I64, offset as i64),
            (Some(sum), 0) => sum,
            (Some(sum), offset) => b.ins().iadd_imm_s(sum, offset as i64),
        }
    }

    /// A guarded load of one element at innermost index `j`: the element read at the guarded
    /// position, or at the buffer's start when a bound fails, and `fill` chosen then, without a
    /// branch.
    #[allow(clippy::too_many_arguments)]
    fn guarded_load(
        &self,
        b: &mut FunctionBuilder,
        buffer: usize,
        index: &IndexExpr,
        bounds: &[tessera_kernel::Bound],
        fill: f64,
        ty: ScalarType,
        j: Option<Value>,
    ) -> Value {
        let (at, inside) = self.guard(b, index, bounds, j);
        let zero = b.ins().iconst(types::I64, 0);
        let safe = b.ins().select(inside, at, zero);
        let bytes = b.ins().imul_imm_s(safe, ty.bytes() as i64);
        let addr = b.ins().iadd(self.bases[buffer], bytes);
        let x = b.ins().load(clif_type(ty), self.flags, addr, 0);
        let fill = storage_constant(b, ty, fill);
        select_bits(b, inside, x, fill, ty)
    }

    /// A gather at innermost index `j` by the i64 `by`: the element at `index + by * stride`
    /// when `by` lies in `0..len` (one unsigned compare), 0 otherwise, read without a branch at
    /// the index's own position then (inside the buffer whenever the dim is not empty); a
    /// branch taken only on a fault records it in the status buffer.
    #[allow(clippy::too_many_arguments)]
    fn gather(
        &self,
        b: &mut FunctionBuilder,
        buffer: usize,
        index: &IndexExpr,
        by: Value,
        (stride, len): (usize, usize),
        status: usize,
        ty: ScalarType,
        j: Option<Value>,
    ) -> Value {
        let inside = b.ins().icmp_imm_u(IntCC::UnsignedLessThan, by, len as i64);
        let zero = storage_constant(b, ty, 0.0);
        let x = if len == 0 {
            zero
        } else {
            let at = self.elements(b, index, j);
            let none = b.ins().iconst(types::I64, 0);
            let safe = b.ins().select(inside, by, none);
            let step = b.ins().imul_imm_s(safe, stride as i64);
            let at = b.ins().iadd(at, step);
            let bytes = b.ins().imul_imm_s(at, ty.bytes() as i64);
            let addr = b.ins().iadd(self.bases[buffer], bytes);
            let x = b.ins().load(clif_type(ty), self.flags, addr, 0);
            select_bits(b, inside, x, zero, ty)
        };
        let (fault, done) = (b.create_block(), b.create_block());
        b.ins().brif(inside, done, &[], fault, &[]);
        b.switch_to_block(fault);
        let base = self.bases[status];
        let one = b.ins().iconst(types::I64, 1);
        let size = b.ins().iconst(types::I64, len as i64);
        let slot = |k: usize| (k * 8) as i32;
        b.ins().store(
            self.flags,
            one,
            base,
            slot(tessera_kernel::gather::STATUS_FLAG),
        );
        b.ins().store(
            self.flags,
            by,
            base,
            slot(tessera_kernel::gather::STATUS_INDEX),
        );
        b.ins().store(
            self.flags,
            size,
            base,
            slot(tessera_kernel::gather::STATUS_SIZE),
        );
        b.ins().jump(done, &[]);
        b.switch_to_block(done);
        x
    }

    /// Four lanes of an f32 guarded load from innermost index `j`. Coordinates never decrease
    /// along the loop, so when the first and the last lane are inside every lane is: the lanes
    /// are then gathered as a strided load's (the common case, a window inside the input);
    /// otherwise each lane is a guarded load of its own.
    fn guarded_vector(
        &self,
        b: &mut FunctionBuilder,
        buffer: usize,
        index: &IndexExpr,
        bounds: &[tessera_kernel::Bound],
        fill: f64,
        j: Value,
    ) -> Value {
        let (first, first_inside) = self.guard(b, index, bounds, Some(j));
        let last_j = b.ins().iadd_imm_s(j, 3);
        let (_, last_inside) = self.guard(b, index, bounds, Some(last_j));
        let all_inside = b.ins().band(first_inside, last_inside);
        let (inside, border, join) = (b.create_block(), b.create_block(), b.create_block());
        let result = b.append_block_param(join, types::F32X4);
        b.ins().brif(all_inside, inside, &[], border, &[]);
        b.switch_to_block(inside);
        // The element step between lanes: the innermost strides of the index and the bounds.
        let last = index.strides.len().saturating_sub(1);
        let step = index.strides.get(last).copied().unwrap_or(0)
            + bounds
                .iter()
                .map(|bd| bd.coord.strides.get(last).copied().unwrap_or(0) * bd.stride)
                .sum::<usize>();
        let bytes = b.ins().imul_imm_s(first, 4);
        let addr = b.ins().iadd(self.bases[buffer], bytes);
        let lanes = self.strided_f32x4(b, addr, step);
        b.ins().jump(join, &[lanes.into()]);
        b.switch_to_block(border);
        let x = self.guarded_load(b, buffer, index, bounds, fill, ScalarType::F32, Some(j));
        let mut lanes = b.ins().splat(types::F32X4, x);
        for lane in 1..4u8 {
            let at = b.ins().iadd_imm_s(j, i64::from(lane));
            let x = self.guarded_load(b, buffer, index, bounds, fill, ScalarType::F32, Some(at));
            lanes = b.ins().insertlane(lanes, x, lane);
        }
        b.ins().jump(join, &[lanes.into()]);
        b.switch_to_block(join);
        result
    }

    /// Four f32 lanes `step` elements apart from byte address `addr`, every lane's element
    /// inside its buffer. A step of 2 (a stride-2 window: pooling, strided convolutions) is
    /// two vector loads, of elements 0-3 and 3-6, and one `shufps` taking elements 0, 2, 4
    /// and 6 (never reading past the last lane's element); another step gathers one load per
    /// lane (the schedule keeps the lanes' byte offsets within an immediate).
    pub(crate) fn strided_f32x4(&self, b: &mut FunctionBuilder, addr: Value, step: usize) -> Value {
        if step == 2 {
            let low = b.ins().load(types::F32X4, self.flags, addr, 0);
            let high = b.ins().load(types::F32X4, self.flags, addr, 12);
            let bytes = MemFlagsData::new().with_endianness(Endianness::Little);
            let low = b.ins().bitcast(types::I8X16, bytes, low);
            let high = b.ins().bitcast(types::I8X16, bytes, high);
            // Lanes 0 and 2 of `low` (elements 0, 2), lanes 1 and 3 of `high` (4, 6).
            let mask: Vec<u8> = [0u8, 2, 5, 7]
                .iter()
                .flat_map(|&lane| (0..4).map(move |byte| lane * 4 + byte))
                .collect();
            let mask = b.func.dfg.immediates.push(mask.into());
            let even = b.ins().shuffle(low, high, mask);
            return b.ins().bitcast(types::F32X4, bytes, even);
        }
        let step = (step * 4) as i32;
        let first = b.ins().load(types::F32, self.flags, addr, 0);
        let mut lanes = b.ins().splat(types::F32X4, first);
        for lane in 1..4u8 {
            let x = b
                .ins()
                .load(types::F32, self.flags, addr, step * i32::from(lane));
            lanes = b.ins().insertlane(lanes, x, lane);
        }
        lanes
    }

    /// A guarded load's element position at innermost index `j` (meaningful where it is
    /// inside) and whether every bound holds there (one unsigned compare per bound finds a
    /// coordinate negative or past its dim).
    fn guard(
        &self,
        b: &mut FunctionBuilder,
        index: &IndexExpr,
        bounds: &[tessera_kernel::Bound],
        j: Option<Value>,
    ) -> (Value, Value) {
        let mut at = self.elements(b, index, j);
        let mut inside: Option<Value> = None;
        for bound in bounds {
            let coord = self.elements(b, &bound.coord, j);
            let c = b.ins().iadd_imm_s(coord, -(bound.pad as i64));
            let ok = b
                .ins()
                .icmp_imm_u(IntCC::UnsignedLessThan, c, bound.len as i64);
            inside = Some(match inside {
                None => ok,
                Some(all) => b.ins().band(all, ok),
            });
            let step = match bound.stride {
                1 => c,
                s => b.ins().imul_imm_s(c, s as i64),
            };
            at = b.ins().iadd(at, step);
        }
        let inside = inside.unwrap_or_else(|| b.ins().iconst(types::I8, 1));
        (at, inside)
    }

    fn call(&self, b: &mut FunctionBuilder, symbol: &str, args: &[Value]) -> Value {
        let f = self.imports[symbol];
        let call = b.ins().call(f, args);
        b.inst_results(call)[0]
    }

    /// A scalar function applied to each lane of `lanes` (4 for f32 vectors).
    fn per_lane(
        &self,
        b: &mut FunctionBuilder,
        symbol: &str,
        args: &[Value],
        lanes: usize,
    ) -> Value {
        if lanes == 1 {
            return self.call(b, symbol, args);
        }
        let mut out: Option<Value> = None;
        for lane in 0..lanes as u8 {
            let scalars: Vec<Value> = args.iter().map(|a| b.ins().extractlane(*a, lane)).collect();
            let y = self.call(b, symbol, &scalars);
            out = Some(match out {
                None => b.ins().splat(types::F32X4, y),
                Some(v) => b.ins().insertlane(v, y, lane),
            });
        }
        out.unwrap_or_else(|| b.ins().f32const(0.0))
    }

    /// Evaluates the DAG at one point (`lanes` consecutive points of the innermost loop when
    /// 4) and stores the results; the values in `outer` were computed before the loop.
    pub(crate) fn point(
        &mut self,
        b: &mut FunctionBuilder,
        j: Option<Value>,
        lanes: usize,
        outer: &[Option<Value>],
    ) {
        let kernel = self.kernel;
        let mut vals: Vec<Option<Value>> = vec![None; kernel.values.len()];
        for i in 0..kernel.values.len() {
            if outer.get(i).is_some_and(Option::is_some) {
                continue;
            }
            let id = tessera_kernel::ValueId::from_index(i);
            vals[i] = Some(self.eval(b, id, &vals, outer, j, lanes));
        }
        for s in &kernel.stores {
            self.store(b, s, &vals, outer, j, lanes);
        }
    }

    /// Four consecutive f32s of `buffer` from `index` at the loop indices pushed (all of them).
    pub(crate) fn load_vector(
        &self,
        b: &mut FunctionBuilder,
        buffer: usize,
        index: &IndexExpr,
    ) -> Value {
        let addr = self.address(b, buffer, index, None, 4);
        b.ins().load(types::F32X4, self.flags, addr, 0)
    }

    /// Stores the F32X4 `value` at `s`'s index at the loop indices pushed, four consecutive f32s.
    pub(crate) fn store_vector(
        &self,
        b: &mut FunctionBuilder,
        s: &tessera_kernel::Store,
        value: Value,
    ) {
        let addr = self.address(b, s.buffer.index(), &s.index, None, 4);
        b.ins().store(self.flags, value, addr, 0);
    }

    /// Stores `s`'s value (from `vals`, or a splat of `outer`) at `j`.
    pub(crate) fn store(
        &self,
        b: &mut FunctionBuilder,
        s: &tessera_kernel::Store,
        vals: &[Option<Value>],
        outer: &[Option<Value>],
        j: Option<Value>,
        lanes: usize,
    ) {
        let size = self.kernel.value(s.value).ty.bytes() as i64;
        let x = self.operand(b, s.value, vals, outer, lanes);
        let addr = self.address(b, s.buffer.index(), &s.index, j, size);
        b.ins().store(self.flags, x, addr, 0);
    }

    /// The value `id`: from `vals` (computed at this point, `lanes` wide), or from `outer`
    /// (a scalar computed outside the innermost loop), splatted when `lanes` is 4.
    pub(crate) fn operand(
        &self,
        b: &mut FunctionBuilder,
        id: tessera_kernel::ValueId,
        vals: &[Option<Value>],
        outer: &[Option<Value>],
        lanes: usize,
    ) -> Value {
        if let Some(v) = vals.get(id.index()).copied().flatten() {
            return v;
        }
        let scalar = outer
            .get(id.index())
            .copied()
            .flatten()
            .unwrap_or_else(|| b.ins().f32const(0.0));
        if lanes == 1 {
            return scalar;
        }
        if self.kernel.value(id).ty == ScalarType::Bool {
            let mask = b.ins().bmask(types::I32, scalar);
            b.ins().splat(types::I32X4, mask)
        } else {
            b.ins().splat(types::F32X4, scalar)
        }
    }

    /// Emits value `id` at `j` (`lanes` points), its operands from `vals` or `outer`.
    pub(crate) fn eval(
        &self,
        b: &mut FunctionBuilder,
        id: tessera_kernel::ValueId,
        vals: &[Option<Value>],
        outer: &[Option<Value>],
        j: Option<Value>,
        lanes: usize,
    ) -> Value {
        let kernel = self.kernel;
        let vector = lanes > 1;
        let v = kernel.value(id);
        let ty_of = |ty: ScalarType| -> Type {
            match (vector, ty) {
                (true, ScalarType::Bool) => types::I32X4,
                (true, _) => types::F32X4,
                (false, t) => clif_type(t),
            }
        };
        let get = |b: &mut FunctionBuilder, a: &tessera_kernel::ValueId| {
            self.operand(b, *a, vals, outer, lanes)
        };
        let x = match &v.expr {
            Expr::Load { buffer, index } => {
                let size = v.ty.bytes() as i64;
                let addr = self.address(b, buffer.index(), index, j, size);
                let inner_stride = index.strides.last().copied().unwrap_or(0);
                if vector && inner_stride == 1 {
                    b.ins().load(types::F32X4, self.flags, addr, 0)
                } else if vector && inner_stride > 1 {
                    self.strided_f32x4(b, addr, inner_stride)
                } else {
                    let s = b.ins().load(clif_type(v.ty), self.flags, addr, 0);
                    if vector {
                        b.ins().splat(types::F32X4, s)
                    } else {
                        s
                    }
                }
            }
            Expr::LoadIf {
                buffer,
                index,
                bounds,
                fill,
            } => {
                let load = |b: &mut FunctionBuilder, j: Option<Value>| {
                    self.guarded_load(b, buffer.index(), index, bounds, *fill, v.ty, j)
                };
                let row = self.interior.get(id.index()).copied().flatten();
                match (row, j) {
                    (Some(row), Some(j)) => {
                        self.interior_load(b, index, bounds, v.ty, row, j, lanes)
                    }
                    _ => match j.filter(|_| vector) {
                        Some(j) => self.guarded_vector(b, buffer.index(), index, bounds, *fill, j),
                        None if vector => {
                            let s = load(b, None);
                            b.ins().splat(types::F32X4, s)
                        }
                        None => load(b, j),
                    },
                }
            }
            // Kernels with gathers and loop indices are scalar (the schedule keeps every kernel
            // with an i64 value or buffer unvectorised).
            Expr::Gather {
                buffer,
                index,
                by,
                stride,
                len,
                status,
            } => {
                let by = get(b, by);
                self.gather(
                    b,
                    buffer.index(),
                    index,
                    by,
                    (*stride, *len),
                    status.index(),
                    v.ty,
                    j,
                )
            }
            Expr::LoopIndex(l) => {
                let at = self
                    .indices
                    .iter()
                    .copied()
                    .chain(j)
                    .nth(l.index())
                    .unwrap_or_else(|| b.ins().iconst(types::I64, 0));
                if vector {
                    // Read only as f32 (the schedule's lane indices): the lanes' indices, exact
                    // f32s, consecutive along the innermost loop.
                    let inner = l.index() + 1 == kernel.domain.len();
                    self.lane_indices(b, at, inner)
                } else {
                    at
                }
            }
            Expr::Const(c) => {
                let s = match v.ty {
                    ScalarType::F64 => b.ins().f64const(*c),
                    // As the interpreter: truncated, saturating (`as`).
                    ScalarType::I64 => b.ins().iconst(types::I64, *c as i64),
                    _ => b.ins().f32const(*c as f32),
                };
                if vector {
                    b.ins().splat(types::F32X4, s)
                } else {
                    s
                }
            }
            Expr::Unary(f, a) => {
                let a = get(b, a);
                match f {
                    UnaryFn::Neg => b.ins().fneg(a),
                    UnaryFn::Abs => b.ins().fabs(a),
                    UnaryFn::Sqrt => b.ins().sqrt(a),
                    UnaryFn::Exp if v.ty == ScalarType::F32 => {
                        crate::render_exp::exp_f32(b, a, lanes)
                    }
                    other => {
                        let name = math::unary_fn(*other).map_or("", |m| m.name);
                        self.per_lane(b, &math::symbol(name, v.ty), &[a], lanes)
                    }
                }
            }
            Expr::Binary(f, x, y) if v.ty == ScalarType::I64 => {
                // Wrapping, as the interpreter (`verify` admits add, sub and mul of i64).
                let (x, y) = (get(b, x), get(b, y));
                match f {
                    BinaryFn::Sub => b.ins().isub(x, y),
                    BinaryFn::Mul => b.ins().imul(x, y),
                    _ => b.ins().iadd(x, y),
                }
            }
            Expr::Binary(f, x, y) => {
                let (x, y) = (get(b, x), get(b, y));
                match f {
                    BinaryFn::Add => b.ins().fadd(x, y),
                    BinaryFn::Sub => b.ins().fsub(x, y),
                    BinaryFn::Mul => b.ins().fmul(x, y),
                    BinaryFn::Div => b.ins().fdiv(x, y),
                    BinaryFn::Pow => self.per_lane(b, &math::symbol("pow", v.ty), &[x, y], lanes),
                }
            }
            Expr::Compare(f, x, y) => {
                let integer = kernel.value(*x).ty == ScalarType::I64;
                let (x, y) = (get(b, x), get(b, y));
                if integer {
                    b.ins().icmp(int_cc(*f), x, y)
                } else {
                    b.ins().fcmp(float_cc(*f), x, y)
                }
            }
            Expr::Select { cond, a, b: other } => {
                let (c, x, y) = (get(b, cond), get(b, a), get(b, other));
                if vector {
                    let mask = b.ins().bitcast(types::F32X4, MemFlagsData::new(), c);
                    b.ins().bitselect(mask, x, y)
                } else {
                    select_bits(b, c, x, y, v.ty)
                }
            }
            // A vector loop index already holds its lanes as f32s.
            Expr::Cast(a) if vector && kernel.value(*a).ty == ScalarType::I64 => get(b, a),
            Expr::Cast(a) => {
                let from = kernel.value(*a).ty;
                let x = get(b, a);
                self.cast(b, x, from, v.ty, vector)
            }
            // A finished accumulation is set by the reduction renderer before it is read.
            Expr::Reduce(..) => get(b, &id),
        };
        debug_assert_eq!(b.func.dfg.value_type(x), ty_of(v.ty));
        x
    }

    /// Four lanes of loop index `at` as f32s: `at, at + 1, at + 2, at + 3` along the innermost
    /// loop (`inner`), `at` in every lane along another.
    fn lane_indices(&self, b: &mut FunctionBuilder, at: Value, inner: bool) -> Value {
        let first = b.ins().fcvt_from_sint(types::F32, at);
        let mut lanes = b.ins().splat(types::F32X4, first);
        if inner {
            let zero = b.ins().f32const(0.0);
            let mut steps = b.ins().splat(types::F32X4, zero);
            for lane in 1..4u8 {
                let step = b.ins().f32const(f32::from(lane));
                steps = b.ins().insertlane(steps, step, lane);
            }
            lanes = b.ins().fadd(lanes, steps);
        }
        lanes
    }

    fn cast(
        &self,
        b: &mut FunctionBuilder,
        x: Value,
        from: ScalarType,
        to: ScalarType,
        vector: bool,
    ) -> Value {
        match (from, to) {
            (f, t) if f == t => x,
            (f, t) if f.is_half() || t.is_half() => crate::render_half::half_cast(b, x, f, t),
            (f, t) if f.is_narrow_int() || t.is_narrow_int() => narrow_cast(b, x, f, t),
            (ScalarType::F32, ScalarType::F64) => b.ins().fpromote(types::F64, x),
            (ScalarType::F64, ScalarType::F32) => b.ins().fdemote(types::F32, x),
            // i64 values are scalar (the schedule keeps kernels with them unvectorised).
            (ScalarType::Bool, ScalarType::I64) => b.ins().uextend(types::I64, x),
            (ScalarType::I64, ScalarType::Bool) => b.ins().icmp_imm_s(IntCC::NotEqual, x, 0),
            // Through f64, as the eager cast.
            (ScalarType::I64, ScalarType::F64) => b.ins().fcvt_from_sint(types::F64, x),
            (ScalarType::I64, _) => {
                let wide = b.ins().fcvt_from_sint(types::F64, x);
                b.ins().fdemote(types::F32, wide)
            }
            // Truncating, saturating, NaN giving 0: Rust's `as`.
            (_, ScalarType::I64) => b.ins().fcvt_to_sint_sat(types::I64, x),
            (ScalarType::Bool, t) => {
                let (one, zero) = match t {
                    ScalarType::F64 => (b.ins().f64const(1.0), b.ins().f64const(0.0)),
                    _ => (b.ins().f32const(1.0), b.ins().f32const(0.0)),
                };
                if vector {
                    let (one, zero) = (
                        b.ins().splat(types::F32X4, one),
                        b.ins().splat(types::F32X4, zero),
                    );
                    let mask = b.ins().bitcast(types::F32X4, MemFlagsData::new(), x);
                    b.ins().bitselect(mask, one, zero)
                } else {
                    b.ins().select(x, one, zero)
                }
            }
            (f, _) => {
                let zero = match f {
                    ScalarType::F64 => b.ins().f64const(0.0),
                    _ => b.ins().f32const(0.0),
                };
                let zero = if vector {
                    b.ins().splat(types::F32X4, zero)
                } else {
                    zero
                };
                b.ins().fcmp(FloatCC::NotEqual, x, zero)
            }
        }
    }
}

/// A narrow integer widened to i64 (`verify` pairs them with i64 only): sign-extended, a byte
/// of u8 zero-extended; or an i64 narrowed, saturating to the narrow type's range.
fn narrow_cast(b: &mut FunctionBuilder, x: Value, from: ScalarType, to: ScalarType) -> Value {
    if let Some((lo, hi)) = to.int_range() {
        let (lo, hi) = (
            b.ins().iconst(types::I64, lo),
            b.ins().iconst(types::I64, hi),
        );
        let below = b.ins().icmp(IntCC::SignedLessThan, x, lo);
        let x = b.ins().select(below, lo, x);
        let above = b.ins().icmp(IntCC::SignedGreaterThan, x, hi);
        let x = b.ins().select(above, hi, x);
        return b.ins().ireduce(clif_type(to), x);
    }
    if from == ScalarType::U8 {
        b.ins().uextend(types::I64, x)
    } else {
        b.ins().sextend(types::I64, x)
    }
}
