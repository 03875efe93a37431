//! The text buffer a kernel body is written into: typed virtual registers (numbered per class,
//! declared once at the top of the body), instruction lines, and unique labels.

use std::fmt::{self, Write};

/// A PTX register class, with the prefix its registers are spelled with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RegClass {
    Pred,
    B32,
    B64,
    F32,
    F64,
    /// The bits of an f16 or bf16 element (PTX's `.b16` registers).
    B16,
}

impl RegClass {
    const ALL: [RegClass; 6] = [
        RegClass::Pred,
        RegClass::B16,
        RegClass::B32,
        RegClass::B64,
        RegClass::F32,
        RegClass::F64,
    ];

    fn prefix(self) -> &'static str {
        match self {
            RegClass::Pred => "%p",
            RegClass::B32 => "%r",
            RegClass::B64 => "%rd",
            RegClass::F32 => "%f",
            RegClass::F64 => "%fd",
            RegClass::B16 => "%rs",
        }
    }

    fn declared_type(self) -> &'static str {
        match self {
            RegClass::Pred => ".pred",
            RegClass::B32 => ".b32",
            RegClass::B64 => ".b64",
            RegClass::F32 => ".f32",
            RegClass::F64 => ".f64",
            RegClass::B16 => ".b16",
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

/// A virtual register; prints as PTX spells it (`%fd3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reg {
    pub class: RegClass,
    pub number: u32,
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.class.prefix(), self.number)
    }
}

/// A kernel body being written.
#[derive(Debug, Default)]
pub struct Emitter {
    body: String,
    counts: [u32; 6],
    labels: u32,
}

impl Emitter {
    /// A fresh register of `class`.
    pub fn reg(&mut self, class: RegClass) -> Reg {
        let count = &mut self.counts[class.slot()];
        *count += 1;
        Reg {
            class,
            number: *count,
        }
    }

    /// One instruction (the `;` is added).
    pub fn ins(&mut self, text: impl fmt::Display) {
        let _ = writeln!(self.body, "\t{text};");
    }

    /// A comment line.
    pub fn comment(&mut self, text: impl fmt::Display) {
        let _ = writeln!(self.body, "\t// {text}");
    }

    /// A new label name, unique in the kernel, that says what it marks.
    pub fn new_label(&mut self, what: &str) -> String {
        self.labels += 1;
        format!("L_{what}_{}", self.labels)
    }

    /// Places `label` here.
    pub fn label(&mut self, label: &str) {
        let _ = writeln!(self.body, "{label}:");
    }

    /// The register declarations, then the body.
    pub fn finish(self) -> String {
        let mut out = String::new();
        for class in RegClass::ALL {
            let n = self.counts[class.slot()];
            if n > 0 {
                let _ = writeln!(
                    out,
                    "\t.reg {} {}<{}>;",
                    class.declared_type(),
                    class.prefix(),
                    n + 1
                );
            }
        }
        out.push('\n');
        out.push_str(&self.body);
        out
    }
}

/// A float immediate in PTX's exact hex spelling (`0f3F800000`, `0d3FF0000000000000`).
pub fn f32_imm(v: f32) -> String {
    format!("0f{:08X}", v.to_bits())
}

/// See [`f32_imm`].
pub fn f64_imm(v: f64) -> String {
    format!("0d{:016X}", v.to_bits())
}
