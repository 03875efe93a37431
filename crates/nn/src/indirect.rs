//! `Box<M>` and `Arc<M>` are modules that delegate everything to the module they hold, so
//! heterogeneous containers (`ModuleList<Box<dyn Layer>>`) and shared submodules work; the
//! module's identity (for de-duplication and hooks) is the inner module's.

use crate::{Forward, Module, ModuleCore, Result, Value, Visitor};
use std::any::Any;
use std::sync::Arc;

macro_rules! delegate_module {
    ($ptr:ident, $get_mut:expr) => {
        impl<M: Module + ?Sized> Module for $ptr<M> {
            fn core(&self) -> &ModuleCore {
                (**self).core()
            }
            fn core_mut(&mut self) -> Option<&mut ModuleCore> {
                let get_mut: fn(&mut $ptr<M>) -> Option<&mut M> = $get_mut;
                get_mut(self).and_then(|m| m.core_mut())
            }
            fn visit_fields<'a>(&'a self, visitor: &mut dyn Visitor<'a>) {
                (**self).visit_fields(visitor)
            }
            fn type_name(&self) -> String {
                (**self).type_name()
            }
            fn as_any(&self) -> &dyn Any {
                (**self).as_any()
            }
            fn as_module(&self) -> &dyn Module {
                (**self).as_module()
            }
            fn extra_repr(&self) -> String {
                (**self).extra_repr()
            }
            fn child_module(&self, name: &str) -> Option<&dyn Module> {
                (**self).child_module(name)
            }
            fn as_layer(&self) -> Option<&dyn crate::Layer> {
                (**self).as_layer()
            }
            fn custom_repr(&self) -> Option<String> {
                (**self).custom_repr()
            }
            fn version(&self) -> i64 {
                (**self).version()
            }
            fn get_extra_state(&self) -> Option<Value> {
                (**self).get_extra_state()
            }
            fn set_extra_state(&self, state: &Value) -> Result<()> {
                (**self).set_extra_state(state)
            }
        }

        impl<I, M: Forward<I> + ?Sized> Forward<I> for $ptr<M> {
            type Output = M::Output;
            fn forward(&self, input: I) -> Result<M::Output> {
                (**self).forward(input)
            }
        }
    };
}

delegate_module!(Box, |b| Some(&mut **b));
delegate_module!(Arc, Arc::get_mut);
