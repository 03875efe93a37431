//! When each value of a kernel is computed. A value is *inner* when it varies along the
//! reduction loops (it loads with a reduction stride, or uses an inner value) and *outer*
//! otherwise; its *pass* is the number of accumulations it waits for. For each point of the
//! output loops a kernel computes its outer values of pass 0, then runs one *sweep* over the
//! reduction loops per pass, accumulating the reductions whose operand has that pass and doing
//! the stores that walk the reduction loops; after sweep `k` the outer values of pass `k + 1`
//! (the reductions just finished among them) are computed, and after the last sweep the outer
//! stores are done. Softmax is three sweeps: the maximum, the sum of exponentials, the stores.
//! The interpreter and every backend follow this one schedule.

use crate::{Expr, Kernel, ValueId, operands};

/// The stages of one kernel's values and stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stages {
    inner: Vec<bool>,
    pass: Vec<usize>,
    /// Sweeps over the reduction loops per output point.
    pub sweeps: usize,
    /// Per sweep: the inner values it evaluates (those its reductions and stores need), in
    /// order.
    pub sweep_values: Vec<Vec<ValueId>>,
    /// Per sweep: the reductions accumulated in it.
    pub sweep_reduces: Vec<Vec<ValueId>>,
    /// Per sweep: the stores (positions in `Kernel::stores`) done at each of its points.
    pub sweep_stores: Vec<Vec<usize>>,
    /// `outer_values[p]`: the outer values of pass `p`, in order, computed before the first
    /// sweep (`p == 0`) or after sweep `p - 1`.
    pub outer_values: Vec<Vec<ValueId>>,
    /// The stores done once per output point, after the sweeps.
    pub outer_stores: Vec<usize>,
}

impl Stages {
    /// The stages of `kernel` (its values in topological order, as `verify` checks).
    pub fn of(kernel: &Kernel) -> Stages {
        let n = kernel.values.len();
        let mut inner = vec![false; n];
        let mut pass = vec![0usize; n];
        for (i, v) in kernel.values.iter().enumerate() {
            let ops: Vec<ValueId> = operands(&v.expr)
                .into_iter()
                .filter(|o| o.index() < i)
                .collect();
            match &v.expr {
                Expr::Load { index, .. } => {
                    inner[i] = index.strides.len() == kernel.extents().len()
                        && kernel.walks_reduction(index);
                    // A read-back waits for the sweep that stores what it reads.
                    if let Some(source) = kernel.read_back_source(ValueId::from_index(i)) {
                        pass[i] = pass[kernel.stores[source].value.index()] + 1;
                    }
                }
                Expr::LoadIf { index, bounds, .. } => {
                    let loops = kernel.extents().len();
                    inner[i] = std::iter::once(index)
                        .chain(bounds.iter().map(|b| &b.coord))
                        .any(|ix| ix.strides.len() == loops && kernel.walks_reduction(ix));
                }
                Expr::Gather { index, .. } => {
                    inner[i] = (index.strides.len() == kernel.extents().len()
                        && kernel.walks_reduction(index))
                        || ops.iter().any(|o| inner[o.index()]);
                    pass[i] = ops.iter().map(|o| pass[o.index()]).max().unwrap_or(0);
                }
                Expr::Reduce(_, a) if a.index() < i => pass[i] = pass[a.index()] + 1,
                _ => {
                    inner[i] = ops.iter().any(|o| inner[o.index()]);
                    pass[i] = ops.iter().map(|o| pass[o.index()]).max().unwrap_or(0);
                }
            }
        }
        let is_inner_store = |s: &crate::Store| {
            inner.get(s.value.index()).copied().unwrap_or(false)
                || (s.index.strides.len() == kernel.extents().len()
                    && kernel.walks_reduction(&s.index))
        };
        let value_pass = |v: ValueId| pass.get(v.index()).copied().unwrap_or(0);
        let mut sweeps = 0;
        for (i, v) in kernel.values.iter().enumerate() {
            if let Expr::Reduce(_, a) = v.expr
                && a.index() < i
            {
                sweeps = sweeps.max(pass[a.index()] + 1);
            }
        }
        for s in kernel.stores.iter().filter(|s| is_inner_store(s)) {
            sweeps = sweeps.max(value_pass(s.value) + 1);
        }
        let mut sweep_reduces = vec![Vec::new(); sweeps];
        let mut sweep_stores = vec![Vec::new(); sweeps];
        let mut outer_values = vec![Vec::new(); sweeps + 1];
        let mut outer_stores = Vec::new();
        for (i, v) in kernel.values.iter().enumerate() {
            let id = ValueId::from_index(i);
            if let Expr::Reduce(_, a) = v.expr
                && a.index() < i
            {
                sweep_reduces[value_pass(a)].push(id);
            }
            if !inner[i] {
                outer_values[pass[i]].push(id);
            }
        }
        for (i, s) in kernel.stores.iter().enumerate() {
            if is_inner_store(s) {
                sweep_stores[value_pass(s.value)].push(i);
            } else {
                outer_stores.push(i);
            }
        }
        let sweep_values = (0..sweeps)
            .map(|k| {
                let mut needed = vec![false; n];
                let mut roots: Vec<ValueId> = sweep_reduces[k]
                    .iter()
                    .flat_map(|r| operands(&kernel.values[r.index()].expr))
                    .collect();
                roots.extend(sweep_stores[k].iter().map(|&s| kernel.stores[s].value));
                for r in roots {
                    if r.index() < n && inner[r.index()] {
                        needed[r.index()] = true;
                    }
                }
                for i in (0..n).rev() {
                    if needed[i] {
                        for o in operands(&kernel.values[i].expr) {
                            if o.index() < i && inner[o.index()] {
                                needed[o.index()] = true;
                            }
                        }
                    }
                }
                (0..n)
                    .filter(|&i| needed[i])
                    .map(ValueId::from_index)
                    .collect()
            })
            .collect();
        Stages {
            inner,
            pass,
            sweeps,
            sweep_values,
            sweep_reduces,
            sweep_stores,
            outer_values,
            outer_stores,
        }
    }

    /// Whether `v` varies along the reduction loops.
    pub fn is_inner(&self, v: ValueId) -> bool {
        self.inner.get(v.index()).copied().unwrap_or(false)
    }

    /// The number of accumulations `v` waits for.
    pub fn pass(&self, v: ValueId) -> usize {
        self.pass.get(v.index()).copied().unwrap_or(0)
    }
}
