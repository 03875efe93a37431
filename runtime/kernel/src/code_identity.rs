//! When compiled code for one kernel can run another: backends take the outermost loop's
//! range as an argument of every kernel function (the CPU backend's `fn(buffers, begin,
//! end)`), and the runner, not the code, reads buffer lengths, the parallel split and a
//! convolution's image count from the kernel it runs. Two kernels that differ in nothing else
//! share their code, so a program lowered for a new leading (batch) extent reuses the code
//! compiled for another: the dynamic batch of [`crate::Program`]s.

use crate::{Kernel, Program, Step};

impl Kernel {
    /// The kernel with what its code does not depend on cleared: the outermost loop's extent,
    /// buffer lengths, the parallel choice and the convolution's image count.
    pub fn code_identity(&self) -> Kernel {
        let mut k = self.clone();
        if let Some(outermost) = k.domain.first_mut() {
            *outermost = 0;
        }
        for b in &mut k.buffers {
            b.len = 0;
        }
        k.schedule.parallel = None;
        if let Some(c) = &mut k.conv {
            c.input_shape[0] = 0;
        }
        k
    }

    /// Why code compiled for `self` cannot run `other` (`None` when it can). A kernel with no
    /// output point runs nothing, so any code of the same name runs it (the runner skips it).
    pub fn code_difference(&self, other: &Kernel) -> Option<String> {
        if self.name != other.name {
            return Some(format!("kernel {} became {}", self.name, other.name));
        }
        if other.points() == 0 {
            return None;
        }
        let (a, b) = (self.code_identity(), other.code_identity());
        if a == b {
            return None;
        }
        let name = &self.name;
        let what = if a.domain != b.domain {
            format!(
                "its inner loop extents {:?} became {:?}",
                &self.domain[1.min(self.domain.len())..],
                &other.domain[1.min(other.domain.len())..]
            )
        } else if a.reduce != b.reduce {
            format!(
                "its reduction extents {:?} became {:?}",
                self.reduce, other.reduce
            )
        } else if a.values != b.values || a.stores != b.stores {
            "an index offset or stride changed".into()
        } else if a.gemm != b.gemm {
            "its GEMM call's strides or sizes changed".into()
        } else if a.schedule != b.schedule {
            format!(
                "its schedule {:?} became {:?}",
                self.schedule, other.schedule
            )
        } else {
            "its buffers or convolution changed".into()
        };
        Some(format!("kernel {name}: {what}"))
    }
}

impl Program {
    /// Why code compiled for `self`'s kernels cannot run `other`'s (`None` when it can): the
    /// same steps, kernels at the same places, each [`Kernel::code_difference`]-free.
    pub fn code_difference(&self, other: &Program) -> Option<String> {
        if self.steps.len() != other.steps.len() {
            return Some(format!(
                "the program has {} steps, not {}",
                other.steps.len(),
                self.steps.len()
            ));
        }
        if self.launch_groups != other.launch_groups {
            return Some(format!(
                "the program launches the steps {:?} together, not {:?}",
                other.launch_groups, self.launch_groups
            ));
        }
        self.steps
            .iter()
            .zip(&other.steps)
            .enumerate()
            .find_map(|(i, pair)| match pair {
                (Step::Kernel { kernel: a, .. }, Step::Kernel { kernel: b, .. }) => {
                    a.code_difference(b)
                }
                (Step::External { .. }, Step::External { .. }) => None,
                _ => Some(format!("step {i} is a kernel in one program only")),
            })
    }
}
