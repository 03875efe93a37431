//! A compiled program: tensor slots, the steps that fill them (generated kernels, and external
//! calls of eager ops the lowering does not cover yet), the program's outputs, and the report
//! of every node that fell back and why.

use crate::{Kernel, SlotId};
use std::fmt;
use tessera_tensor::op::ViewOp;
use tessera_tensor::{Layout, Op, TensorMeta};

/// Where a slot's tensor comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum SlotSource {
    /// Program input `index`, in placeholder order.
    Input(usize),
    /// A parameter, buffer or constant read by name when the program runs.
    Attribute(String),
    /// Written by a step.
    Step,
    /// Computed from slot `from` (an input or attribute) before the steps run, once per
    /// value of `from` ([`crate::derived`]): a convolution's transformed weights.
    Derived {
        from: SlotId,
        derivation: crate::Derivation,
    },
}

/// One tensor of a program, and the layout kernels that read it were compiled for.
#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    /// The graph node it stands for.
    pub name: String,
    pub meta: TensorMeta,
    pub source: SlotSource,
    /// The layout kernels index it with: an input's example layout, packed for the rest.
    pub layout: Layout,
}

/// What an external step runs.
#[derive(Debug, Clone, PartialEq)]
pub enum ExternalCall {
    /// An op of the op table, through its eager kernel.
    Op(Op),
    /// A leaf module the graph still calls (one that could not be inlined).
    Module(String),
}

/// A value as seen by steps: a slot, through a chain of views applied to it.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotView {
    pub slot: SlotId,
    pub views: Vec<ViewOp>,
}

/// One step of a program. A kernel step is large and an external one small; programs have few
/// steps, matched on every run, so the kernel is kept inline rather than boxed.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A generated kernel; its input buffers are `inputs` (slots read in their compiled
    /// layout), its output buffers `outputs` (fresh packed tensors). `nodes` are the graph
    /// nodes it computes, in graph order (the reshape it packs, for a copy kernel).
    Kernel {
        kernel: Kernel,
        inputs: Vec<SlotId>,
        outputs: Vec<SlotId>,
        nodes: Vec<String>,
    },
    /// An eager call for the graph node `node`.
    External {
        node: String,
        call: ExternalCall,
        inputs: Vec<SlotView>,
        outputs: Vec<SlotId>,
    },
}

/// A node that runs its eager kernel instead of generated code, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fallback {
    pub node: String,
    pub op: String,
    pub reason: String,
}

/// The result of lowering a graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    pub slots: Vec<Slot>,
    pub steps: Vec<Step>,
    pub outputs: Vec<SlotView>,
    pub fallbacks: Vec<Fallback>,
    /// The algorithm each convolution call runs, and why ([`crate::conv_choice`]).
    pub convolutions: Vec<crate::ConvChoice>,
    /// Runs of consecutive kernel steps a backend launches as one, in step order
    /// ([`crate::launch_group`]; a run checks them with [`crate::check_launch_groups`]).
    pub launch_groups: Vec<std::ops::Range<usize>>,
}

impl Program {
    pub fn slot(&self, id: SlotId) -> &Slot {
        &self.slots[id.index()]
    }

    /// The generated kernels, in step order.
    pub fn kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.steps.iter().filter_map(|s| match s {
            Step::Kernel { kernel, .. } => Some(kernel),
            Step::External { .. } => None,
        })
    }

    /// The number of inputs the program takes.
    pub fn input_count(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s.source, SlotSource::Input(_)))
            .count()
    }
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{} ({}): {}", self.node, self.op, self.reason)
    }
}

fn views_text(v: &SlotView) -> String {
    let mut text = v.slot.to_string();
    for view in &v.views {
        text = format!("{}({text})", Op::View(view.clone()).name());
    }
    text
}

/// The program's steps, one line each, then its kernels in full.
impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.slots.iter().enumerate() {
            let source = match &s.source {
                SlotSource::Input(n) => format!("input {n}"),
                SlotSource::Attribute(a) => format!("attribute {a}"),
                SlotSource::Step => "step".into(),
                SlotSource::Derived { from, derivation } => format!("{derivation} of {from}"),
            };
            writeln!(
                f,
                "{} = %{}: {:?}{:?} ({source})",
                SlotId::from_index(i),
                s.name,
                s.meta.dtype,
                s.meta.shape
            )?;
        }
        for step in &self.steps {
            match step {
                Step::Kernel {
                    kernel,
                    inputs,
                    outputs,
                    ..
                } => writeln!(
                    f,
                    "{} = {}({})",
                    join(outputs.iter()),
                    kernel.name,
                    join(inputs.iter())
                )?,
                Step::External {
                    node,
                    call,
                    inputs,
                    outputs,
                } => {
                    let what = match call {
                        ExternalCall::Op(op) => op.name(),
                        ExternalCall::Module(target) => format!("module {target}"),
                    };
                    let args: Vec<String> = inputs.iter().map(views_text).collect();
                    writeln!(
                        f,
                        "{} = external %{node} {what}({})",
                        join(outputs.iter()),
                        args.join(", ")
                    )?
                }
            }
        }
        let outs: Vec<String> = self.outputs.iter().map(views_text).collect();
        writeln!(f, "return {}", outs.join(", "))?;
        for c in &self.convolutions {
            writeln!(f, "; convolution {c}")?;
        }
        for g in &self.launch_groups {
            let names: Vec<&str> = self.steps[g.clone()]
                .iter()
                .filter_map(|s| match s {
                    Step::Kernel { kernel, .. } => Some(kernel.name.as_str()),
                    Step::External { .. } => None,
                })
                .collect();
            writeln!(
                f,
                "; one launch for steps {}..{}: {}",
                g.start,
                g.end,
                names.join(", ")
            )?;
        }
        for k in self.kernels() {
            write!(f, "\n{k}")?;
        }
        Ok(())
    }
}

fn join(ids: impl Iterator<Item = impl fmt::Display>) -> String {
    ids.map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
}
