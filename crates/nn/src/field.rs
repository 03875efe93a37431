//! What `#[derive(Module)]` does with each field: [`ModuleField`] says how a field type
//! registers (parameter, child, or nothing for plain configuration values). A plain `Tensor`
//! deliberately has no impl, so forgetting to mark a tensor as a buffer is a compile error
//! instead of PyTorch's silently invisible attribute.

use crate::{Module, Parameter, Visitor};
use tessera_tensor::Tensor;

/// A field type that `#[derive(Module)]` can register.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not module state that `#[derive(Module)]` can register",
    label = "a plain tensor would be invisible to parameters(), state_dict() and to(): mark it `#[module(buffer)]`, make it a `Parameter`, or mark it `#[module(skip)]`",
    note = "configuration values need `#[module(skip)]` unless they are one of the common plain types (integers, floats, bool, String)"
)]
pub trait ModuleField {
    fn visit_field<'a>(&'a self, name: &str, visitor: &mut dyn Visitor<'a>);
}

impl ModuleField for Parameter {
    fn visit_field<'a>(&'a self, name: &str, visitor: &mut dyn Visitor<'a>) {
        visitor.parameter(name, Some(self));
    }
}

impl ModuleField for Option<Parameter> {
    fn visit_field<'a>(&'a self, name: &str, visitor: &mut dyn Visitor<'a>) {
        visitor.parameter(name, self.as_ref());
    }
}

/// A child module; `Box<M>` and `Arc<M>` (a submodule shared with other owners, yielded
/// once by `named_modules`) are modules too.
impl<M: Module> ModuleField for M {
    fn visit_field<'a>(&'a self, name: &str, visitor: &mut dyn Visitor<'a>) {
        visitor.child(name, self.as_module());
    }
}

impl<M: Module> ModuleField for Option<M> {
    fn visit_field<'a>(&'a self, name: &str, visitor: &mut dyn Visitor<'a>) {
        if let Some(m) = self {
            visitor.child(name, m);
        }
    }
}

macro_rules! plain_fields {
    ($($t:ty),*) => {
        $(impl ModuleField for $t {
            fn visit_field<'a>(&'a self, _name: &str, _visitor: &mut dyn Visitor<'a>) {}
        })*
    };
}

plain_fields!(
    bool,
    u8,
    u16,
    u32,
    u64,
    usize,
    i8,
    i16,
    i32,
    i64,
    isize,
    f32,
    f64,
    String,
    &'static str,
    Option<usize>,
    Option<f64>,
    Option<i64>,
    Vec<usize>,
    Vec<i64>,
    [usize; 1],
    [usize; 2],
    [usize; 3],
    (usize, usize),
    tessera_tensor::DType,
    tessera_tensor::Device
);

/// A field marked `#[module(buffer)]`: a tensor, or `None` for a reserved buffer name.
pub trait BufferField {
    fn visit_buffer<'a>(&'a self, name: &str, persistent: bool, visitor: &mut dyn Visitor<'a>);
}

impl BufferField for Tensor {
    fn visit_buffer<'a>(&'a self, name: &str, persistent: bool, visitor: &mut dyn Visitor<'a>) {
        visitor.buffer(name, Some(self), persistent);
    }
}

impl BufferField for Option<Tensor> {
    fn visit_buffer<'a>(&'a self, name: &str, persistent: bool, visitor: &mut dyn Visitor<'a>) {
        visitor.buffer(name, self.as_ref(), persistent);
    }
}
