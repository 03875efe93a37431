//! Typed `Copy` ids of the kernel IR; each prints as the IR text spells it (`v3`, `buf1`,
//! `%s2`, `i0`).

use std::fmt;

macro_rules! entity {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u32);

        impl $name {
            /// The id's position in the table that owns it.
            pub fn index(self) -> usize {
                self.0 as usize
            }

            /// The id of position `index`.
            pub fn from_index(index: usize) -> Self {
                $name(index as u32)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

entity!(
    /// A value of a kernel's scalar expression DAG.
    ValueId,
    "v"
);
entity!(
    /// A buffer parameter of a kernel.
    BufferId,
    "buf"
);
entity!(
    /// A tensor slot of a program (an input, an attribute, or a step's result).
    SlotId,
    "%s"
);
entity!(
    /// A loop of a kernel's loop nest, outermost first.
    LoopId,
    "i"
);
