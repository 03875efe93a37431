//! A kernel: typed buffer parameters, a loop nest over the output index space, a scalar
//! expression DAG evaluated once per point of the nest, the stores of its results, and the
//! schedule a backend follows. [`KernelBuilder`] makes one; [`Kernel::verify`] checks one.

use crate::{BufferId, Expr, GemmCall, KernelError, LoopId, Result, ScalarType, Value, ValueId};

/// A storage position as an affine function of the loop indices:
/// `offset + sum(strides[l] * i_l)`. A stride of 0 broadcasts along its loop; views (narrow,
/// permute, expand, reshape) are folded into the offset and strides. Strides are never
/// negative, as no view of the op table reverses a dimension.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IndexExpr {
    pub offset: usize,
    /// One stride per loop of the kernel's nest.
    pub strides: Vec<usize>,
}

impl IndexExpr {
    /// The index at loop indices `point`.
    pub fn at(&self, point: &[usize]) -> usize {
        self.offset
            + self
                .strides
                .iter()
                .zip(point)
                .map(|(s, i)| s * i)
                .sum::<usize>()
    }

    /// One past the largest index reached over the nest `domain` (0 when it is empty).
    pub fn extent(&self, domain: &[usize]) -> usize {
        if domain.contains(&0) {
            return 0;
        }
        self.offset
            + self
                .strides
                .iter()
                .zip(domain)
                .map(|(s, n)| s * (n - 1))
                .sum::<usize>()
            + 1
    }
}

/// Whether a kernel reads or writes a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BufferRole {
    Input,
    Output,
    /// Written by the kernel's external call, read by its loads; allocated by the runner.
    Scratch,
}

/// A buffer parameter: its role, element type and length in elements.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BufferParam {
    pub role: BufferRole,
    pub ty: ScalarType,
    pub len: usize,
}

/// `buffer[index] = value`, once per point of the nest.
#[derive(Debug, Clone, PartialEq)]
pub struct Store {
    pub buffer: BufferId,
    pub index: IndexExpr,
    pub value: ValueId,
}

/// How a backend runs the nest. It never changes what a kernel computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Schedule {
    /// Elements per vector along the innermost loop (1: scalar code).
    pub vector_width: usize,
    /// Vectors per iteration of the innermost loop's main body.
    pub unroll: usize,
    /// The loop whose iterations may be split across threads (the outermost one, chosen by
    /// [`crate::schedule`] for kernels with enough work; never a GEMM kernel's).
    pub parallel: Option<LoopId>,
}

impl Schedule {
    /// Scalar code, one element per iteration, on one thread.
    pub const SCALAR: Schedule = Schedule {
        vector_width: 1,
        unroll: 1,
        parallel: None,
    };
}

/// One generated kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    pub name: String,
    pub buffers: Vec<BufferParam>,
    /// Output loop extents, outermost first; the nest visits points in row-major order.
    pub domain: Vec<usize>,
    /// Reduction loop extents, inside the output loops: for each output point, the kernel
    /// sweeps them once per accumulation stage ([`crate::Stages`]). Empty for elementwise
    /// kernels.
    pub reduce: Vec<usize>,
    /// The DAG in topological order; `ValueId(i)` is `values[i]`.
    pub values: Vec<Value>,
    pub stores: Vec<Store>,
    pub schedule: Schedule,
    /// A GEMM computed block by block before the nest reads it (see [`crate::gemm`]).
    pub gemm: Option<GemmCall>,
    /// A convolution computed block of images by block before the nest reads it (see
    /// [`crate::conv`]).
    pub conv: Option<crate::ConvCall>,
}

impl Kernel {
    /// With a GEMM call: the product's rows, its columns, and the rows of one iteration of
    /// the outermost loop (the block a call computes per iteration).
    pub fn gemm_shape(&self) -> Option<(usize, usize, usize)> {
        let (&n, rows) = self.domain.split_last()?;
        let per_step = rows.get(1..).map_or(1, |r| r.iter().product());
        Some((rows.iter().product(), n, per_step))
    }

    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.index()]
    }

    pub fn buffer(&self, id: BufferId) -> &BufferParam {
        &self.buffers[id.index()]
    }

    /// The number of points of the output loops.
    pub fn points(&self) -> usize {
        self.domain.iter().product()
    }

    /// The number of points of the reduction loops (1 when there are none).
    pub fn reduce_points(&self) -> usize {
        self.reduce.iter().product()
    }

    /// Every loop's extent: the output loops, then the reduction loops. Index expressions
    /// have one stride per entry.
    pub fn extents(&self) -> Vec<usize> {
        self.domain.iter().chain(&self.reduce).copied().collect()
    }

    /// One past the largest index `index` reaches while the kernel runs (0 when it is never
    /// used): no point is visited when an output loop is empty, and an access that walks an
    /// empty reduction loop is never made, but one that does not walk it is (once per output
    /// point, outside the sweeps).
    pub fn reach(&self, index: &IndexExpr) -> usize {
        let outer = self.domain.len();
        let never = self.domain.contains(&0)
            || self
                .reduce
                .iter()
                .zip(&index.strides[outer.min(index.strides.len())..])
                .any(|(&n, &s)| n == 0 && s != 0);
        if never {
            return 0;
        }
        index.offset
            + index
                .strides
                .iter()
                .zip(self.extents())
                .map(|(s, n)| s * n.saturating_sub(1))
                .sum::<usize>()
            + 1
    }

    /// Whether `index` moves along a reduction loop.
    pub fn walks_reduction(&self, index: &IndexExpr) -> bool {
        index.strides[self.domain.len()..].iter().any(|&s| s != 0)
    }

    /// Every index expression of the kernel, loads then stores.
    pub fn accesses(&self) -> impl Iterator<Item = (BufferId, &IndexExpr)> {
        self.values
            .iter()
            .filter_map(|v| match &v.expr {
                Expr::Load { buffer, index } => Some((*buffer, index)),
                _ => None,
            })
            .chain(self.stores.iter().map(|s| (s.buffer, &s.index)))
    }

    /// The store a *read-back* `load` reads: a load of an output buffer reads the element
    /// that an earlier sweep's store of a preceding value wrote at the same index (see
    /// [`crate::read_back`]). `None` for any other value.
    pub fn read_back_source(&self, load: ValueId) -> Option<usize> {
        let Expr::Load { buffer, index } = &self.values.get(load.index())?.expr else {
            return None;
        };
        if self.buffers.get(buffer.index())?.role != BufferRole::Output {
            return None;
        }
        self.stores
            .iter()
            .position(|s| s.buffer == *buffer && s.index == *index && s.value < load)
    }

    /// Why the read-back `load` of `buffer` at `index` is not one backends can run, if it is
    /// not: it needs its source store, every store into the buffer at that one index, and an
    /// index that gives every point of the nest its own element.
    fn check_read_back(
        &self,
        load: ValueId,
        buffer: BufferId,
        index: &IndexExpr,
    ) -> Option<String> {
        if self.read_back_source(load).is_none() {
            return Some(format!(
                "{load} reads output {buffer}, which no preceding value is stored into at its index"
            ));
        }
        if self
            .stores
            .iter()
            .any(|s| s.buffer == buffer && s.index != *index)
        {
            return Some(format!(
                "{load} reads back {buffer}, which is also stored at another index"
            ));
        }
        if !crate::read_back::injective(index, &self.extents()) {
            return Some(format!(
                "{load} reads back {buffer} at an index that points of the nest share"
            ));
        }
        None
    }

    /// Checks what backends rely on for memory safety and typing: operands precede their
    /// users and have the types their use needs, index expressions have one stride per loop
    /// and stay inside their buffer, loads read inputs (or read back an output, see
    /// [`Kernel::read_back_source`]) and stores write outputs.
    pub fn verify(&self) -> Result<()> {
        let fail = |message: String| KernelError::Invalid {
            kernel: self.name.clone(),
            message,
        };
        let extents = self.extents();
        let check_index = |b: BufferId, index: &IndexExpr, role: BufferRole| -> Result<()> {
            let param = self
                .buffers
                .get(b.index())
                .ok_or_else(|| fail(format!("{b} is not a parameter")))?;
            let readable = role == BufferRole::Input && param.role == BufferRole::Scratch;
            if param.role != role && !readable {
                return Err(fail(format!(
                    "{b} is accessed as {role:?} but is {:?}",
                    param.role
                )));
            }
            if index.strides.len() != extents.len() {
                return Err(fail(format!(
                    "an index of {b} has {} strides for {} loops",
                    index.strides.len(),
                    extents.len()
                )));
            }
            if self.reach(index) > param.len {
                return Err(fail(format!(
                    "an index of {b} reaches {} past its length {}",
                    self.reach(index),
                    param.len
                )));
            }
            Ok(())
        };
        for (i, v) in self.values.iter().enumerate() {
            let here = ValueId::from_index(i);
            let operand = |id: ValueId, want: Option<ScalarType>| -> Result<ScalarType> {
                if id >= here {
                    return Err(fail(format!("{here} uses {id}, which does not precede it")));
                }
                let ty = self.values[id.index()].ty;
                match want {
                    Some(w) if w != ty => {
                        Err(fail(format!("{here} needs {id} to be {w}, it is {ty}")))
                    }
                    _ => Ok(ty),
                }
            };
            // Arithmetic happens in f32 or f64; a half value is only loaded, converted and
            // stored.
            let float = |ty: ScalarType| -> Result<()> {
                if ty.is_arithmetic() {
                    Ok(())
                } else {
                    Err(fail(format!("{here} is {ty}, f32 or f64 is needed")))
                }
            };
            // Constants, comparisons and add, sub and mul also compute in i64.
            let numeric = |ty: ScalarType| -> Result<()> {
                if ty.is_numeric() {
                    Ok(())
                } else {
                    Err(fail(format!("{here} is {ty}, f32, f64 or i64 is needed")))
                }
            };
            match &v.expr {
                Expr::Load { buffer, index } => {
                    let output = self
                        .buffers
                        .get(buffer.index())
                        .is_some_and(|p| p.role == BufferRole::Output);
                    if output {
                        if let Some(why) = self.check_read_back(here, *buffer, index) {
                            return Err(fail(why));
                        }
                        check_index(*buffer, index, BufferRole::Output)?;
                    } else {
                        check_index(*buffer, index, BufferRole::Input)?;
                    }
                    let ty = self.buffers[buffer.index()].ty;
                    if ty != v.ty {
                        return Err(fail(format!("{here} loads {ty} as {}", v.ty)));
                    }
                }
                Expr::LoadIf {
                    buffer,
                    index,
                    bounds,
                    ..
                } => {
                    numeric(v.ty)?;
                    self.verify_guarded(here, *buffer, index, bounds)
                        .map_err(fail)?;
                }
                Expr::Gather {
                    buffer,
                    index,
                    by,
                    stride,
                    len,
                    status,
                } => self
                    .verify_gather(here, *buffer, index, *by, *stride, *len, *status)
                    .map_err(fail)?,
                Expr::LoopIndex(l) => {
                    if v.ty != ScalarType::I64 || l.index() >= self.domain.len() {
                        return Err(fail(format!(
                            "{here} is the index of {l}, an i64 of an output loop"
                        )));
                    }
                }
                Expr::Const(_) => numeric(v.ty)?,
                Expr::Unary(_, a) => {
                    float(v.ty)?;
                    operand(*a, Some(v.ty))?;
                }
                Expr::Binary(f, a, b) => {
                    if v.ty == ScalarType::I64 && !f.is_integer() {
                        return Err(fail(format!("{here}: {} is not defined on i64", f.name())));
                    }
                    numeric(v.ty)?;
                    operand(*a, Some(v.ty))?;
                    operand(*b, Some(v.ty))?;
                }
                Expr::Compare(_, a, b) => {
                    if v.ty != ScalarType::Bool {
                        return Err(fail(format!("{here}: a comparison gives bool")));
                    }
                    let ta = operand(*a, None)?;
                    numeric(ta)?;
                    operand(*b, Some(ta))?;
                }
                Expr::Select { cond, a, b } => {
                    if v.ty.is_half() || v.ty.is_narrow_int() {
                        return Err(fail(format!("{here} selects {}, a storage type", v.ty)));
                    }
                    operand(*cond, Some(ScalarType::Bool))?;
                    operand(*a, Some(v.ty))?;
                    operand(*b, Some(v.ty))?;
                }
                Expr::Cast(a) => {
                    let from = operand(*a, None)?;
                    let half_pair = from.is_half() || v.ty.is_half();
                    if half_pair
                        && from != v.ty
                        && from != ScalarType::F32
                        && v.ty != ScalarType::F32
                    {
                        return Err(fail(format!(
                            "{here} converts {from} to {}: a half type converts only to and from f32",
                            v.ty
                        )));
                    }
                    let narrow_pair = from.is_narrow_int() || v.ty.is_narrow_int();
                    if narrow_pair
                        && from != v.ty
                        && from != ScalarType::I64
                        && v.ty != ScalarType::I64
                    {
                        return Err(fail(format!(
                            "{here} converts {from} to {}: a narrow integer type converts only to and from i64",
                            v.ty
                        )));
                    }
                }
                Expr::Reduce(f, a) if f.is_arg() => {
                    if v.ty != ScalarType::I64 {
                        return Err(fail(format!("{here}: an arg reduction gives i64")));
                    }
                    numeric(operand(*a, None)?)?;
                    if self.reduce.is_empty() {
                        return Err(fail(format!(
                            "{here} reduces, the kernel has no reduction loops"
                        )));
                    }
                }
                Expr::Reduce(_, a) => {
                    numeric(v.ty)?;
                    operand(*a, Some(v.ty))?;
                    if self.reduce.is_empty() {
                        return Err(fail(format!(
                            "{here} reduces, the kernel has no reduction loops"
                        )));
                    }
                }
            }
        }
        for s in &self.stores {
            check_index(s.buffer, &s.index, BufferRole::Output)?;
            let value = self
                .values
                .get(s.value.index())
                .ok_or_else(|| fail(format!("a store of {} reads no value", s.buffer)))?;
            if value.ty != self.buffers[s.buffer.index()].ty {
                return Err(fail(format!(
                    "{} stores {} into a {} buffer",
                    s.buffer,
                    value.ty,
                    self.buffers[s.buffer.index()].ty
                )));
            }
        }
        if let Some(g) = &self.gemm {
            self.verify_gemm(g).map_err(fail)?;
        }
        if let Some(c) = &self.conv {
            self.verify_conv(c).map_err(fail)?;
        }
        let stages = crate::Stages::of(self);
        for (i, _) in self.values.iter().enumerate() {
            let swept = |store: usize| stages.sweep_stores.iter().flatten().any(|&t| t == store);
            if let Some(source) = self.read_back_source(ValueId::from_index(i))
                && !swept(source)
            {
                return Err(fail(format!(
                    "v{i} reads back a store done after the sweeps, not in one"
                )));
            }
        }
        for s in &self.stores {
            if stages.is_inner(s.value)
                && !self.walks_reduction(&s.index)
                && self.reduce_points() > 1
            {
                return Err(fail(format!(
                    "{} is stored into {} once per reduction point at one index",
                    s.value, s.buffer
                )));
            }
        }
        if self.schedule.vector_width == 0 || self.schedule.unroll == 0 {
            return Err(fail(
                "the schedule has a zero vector width or unroll".into(),
            ));
        }
        Ok(())
    }
}

impl Kernel {
    /// The GEMM call's buffers have the roles, types and lengths its shape needs.
    fn verify_gemm(&self, g: &GemmCall) -> std::result::Result<(), String> {
        if self.domain.len() < 2 || !self.reduce.is_empty() {
            return Err("a GEMM kernel has 2 or more output loops and no reduction".into());
        }
        let (rows, n, _) = self.gemm_shape().unwrap_or((0, 0, 1));
        let param = |b: BufferId| {
            self.buffers
                .get(b.index())
                .ok_or_else(|| format!("the GEMM's {b} is not a parameter"))
        };
        let (a, b, out) = (param(g.a)?, param(g.b)?, param(g.out)?);
        if a.role != BufferRole::Input || b.role != BufferRole::Input {
            return Err("the GEMM's operands are not inputs".into());
        }
        if out.role != BufferRole::Scratch || out.len < rows * n {
            return Err(format!(
                "the GEMM's {} is not a scratch of {rows}x{n}",
                g.out
            ));
        }
        if a.ty != out.ty || b.ty != out.ty || !out.ty.is_arithmetic() {
            return Err("the GEMM's buffers differ in type".into());
        }
        if g.a_index.reach(rows, g.k) > a.len || g.b_index.reach(g.k, n) > b.len {
            return Err("a GEMM operand reaches past its buffer".into());
        }
        Ok(())
    }
}

/// Builds a kernel value by value, sharing equal values (hash-consing), so a DAG the lowering
/// writes twice (a constant, a load of one element) is computed once.
#[derive(Debug, Clone)]
pub struct KernelBuilder {
    kernel: Kernel,
}

impl KernelBuilder {
    /// A kernel called `name` over the nest `domain`, scalar schedule, no buffers yet.
    pub fn new(name: impl Into<String>, domain: Vec<usize>) -> Self {
        Self::reduction(name, domain, Vec::new())
    }

    /// A kernel called `name` over the output loops `domain` and reduction loops `reduce`.
    pub fn reduction(name: impl Into<String>, domain: Vec<usize>, reduce: Vec<usize>) -> Self {
        KernelBuilder {
            kernel: Kernel {
                name: name.into(),
                buffers: Vec::new(),
                domain,
                reduce,
                values: Vec::new(),
                stores: Vec::new(),
                schedule: Schedule::SCALAR,
                gemm: None,
                conv: None,
            },
        }
    }

    pub fn domain(&self) -> &[usize] {
        &self.kernel.domain
    }

    /// The number of loops (output and reduction) an index expression has strides for.
    pub fn loop_count(&self) -> usize {
        self.kernel.domain.len() + self.kernel.reduce.len()
    }

    pub fn buffer(&mut self, role: BufferRole, ty: ScalarType, len: usize) -> BufferId {
        self.kernel.buffers.push(BufferParam { role, ty, len });
        BufferId::from_index(self.kernel.buffers.len() - 1)
    }

    pub fn ty(&self, v: ValueId) -> ScalarType {
        self.kernel.value(v).ty
    }

    /// The expression of value `v`.
    pub fn expr(&self, v: ValueId) -> &Expr {
        &self.kernel.value(v).expr
    }

    /// The value `expr` of type `ty`, an existing equal one if there is one.
    pub fn push(&mut self, ty: ScalarType, expr: Expr) -> ValueId {
        let value = Value { ty, expr };
        if let Some(i) = self.kernel.values.iter().position(|v| *v == value) {
            return ValueId::from_index(i);
        }
        self.kernel.values.push(value);
        ValueId::from_index(self.kernel.values.len() - 1)
    }

    /// Makes the kernel start with `call` (see [`crate::gemm`]).
    pub fn gemm(&mut self, call: GemmCall) {
        self.kernel.gemm = Some(call);
    }

    /// Makes the kernel start with the convolution `call` (see [`crate::conv`]).
    pub fn conv(&mut self, call: crate::ConvCall) {
        self.kernel.conv = Some(call);
    }

    pub fn store(&mut self, buffer: BufferId, index: IndexExpr, value: ValueId) {
        self.kernel.stores.push(Store {
            buffer,
            index,
            value,
        });
    }

    /// The kernel, without the values no store needs (renumbered in order).
    pub fn finish(self) -> Kernel {
        let mut kernel = self.kernel;
        kernel.drop_dead_values();
        kernel
    }
}

impl Kernel {
    /// Drops the values no store needs, renumbering the others in order.
    pub fn drop_dead_values(&mut self) {
        let kernel = self;
        let mut live = vec![false; kernel.values.len()];
        for s in &kernel.stores {
            live[s.value.index()] = true;
        }
        for i in (0..kernel.values.len()).rev() {
            if !live[i] {
                continue;
            }
            for operand in operands(&kernel.values[i].expr) {
                live[operand.index()] = true;
            }
        }
        let mut renumber = vec![ValueId(0); kernel.values.len()];
        let mut values = Vec::new();
        for (i, mut v) in std::mem::take(&mut kernel.values).into_iter().enumerate() {
            if !live[i] {
                continue;
            }
            for operand in operands_mut(&mut v.expr) {
                *operand = renumber[operand.index()];
            }
            renumber[i] = ValueId::from_index(values.len());
            values.push(v);
        }
        for s in &mut kernel.stores {
            s.value = renumber[s.value.index()];
        }
        kernel.values = values;
    }
}

/// The operands of an expression.
pub fn operands(expr: &Expr) -> Vec<ValueId> {
    match expr {
        Expr::Load { .. } | Expr::LoadIf { .. } | Expr::LoopIndex(_) | Expr::Const(_) => vec![],
        Expr::Gather { by, .. } => vec![*by],
        Expr::Unary(_, a) | Expr::Cast(a) | Expr::Reduce(_, a) => vec![*a],
        Expr::Binary(_, a, b) | Expr::Compare(_, a, b) => vec![*a, *b],
        Expr::Select { cond, a, b } => vec![*cond, *a, *b],
    }
}

pub(crate) fn operands_mut(expr: &mut Expr) -> Vec<&mut ValueId> {
    match expr {
        Expr::Load { .. } | Expr::LoadIf { .. } | Expr::LoopIndex(_) | Expr::Const(_) => vec![],
        Expr::Gather { by, .. } => vec![by],
        Expr::Unary(_, a) | Expr::Cast(a) | Expr::Reduce(_, a) => vec![a],
        Expr::Binary(_, a, b) | Expr::Compare(_, a, b) => vec![a, b],
        Expr::Select { cond, a, b } => vec![cond, a, b],
    }
}
