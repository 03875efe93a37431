//! The `Module` trait (what `#[derive(Module)]` implements) and `ModuleExt`, the PyTorch
//! `nn.Module` API every module gets: iteration, access by path, `apply`, train/eval,
//! dtype/device moves, state dicts, hooks and run-time registration.

use crate::hooks::{
    BackwardPreHook, ForwardHook, ForwardPreHook, FullBackwardHook, HookHandle,
    LoadStateDictPostHook, LoadStateDictPreHook, StateDictHook,
};
use crate::{
    IncompatibleKeys, ModuleCore, ModuleKind, Parameter, Result, StateDict, Value, Visitor, state,
    walk,
};
use std::any::Any;
use std::sync::Arc;
use tessera_tensor::{DType, Device, Tensor};

/// A neural-network module: a struct whose parameters, buffers and children are registered
/// in declaration order. Implemented by `#[derive(Module)]`; the provided methods are the
/// hooks a layer may override.
pub trait Module: Any + Send + Sync {
    /// The module's non-field state (training flag, hooks, run-time registrations).
    fn core(&self) -> &ModuleCore;
    /// Mutable access for run-time registration (`None` through a shared `Arc`).
    fn core_mut(&mut self) -> Option<&mut ModuleCore>;
    /// Visits the fields that are parameters, buffers or children, in declaration order.
    fn visit_fields<'a>(&'a self, visitor: &mut dyn Visitor<'a>);
    /// The class name in reprs and errors (`Linear`).
    fn type_name(&self) -> String;
    fn as_any(&self) -> &dyn Any;
    fn as_module(&self) -> &dyn Module;

    /// This module as a one-tensor-in, one-tensor-out [`Layer`](crate::Layer), if it is one
    /// (the derive detects a `Forward<Tensor, Output = Tensor>` impl); interpreters call leaf
    /// modules through it.
    fn as_layer(&self) -> Option<&dyn crate::Layer> {
        None
    }

    /// The direct child called `name`. The default visits the fields and run-time
    /// registrations; containers with many children override it with a direct lookup, so that
    /// finding a module by path does not cost a scan of every sibling.
    fn child_module(&self, name: &str) -> Option<&dyn Module> {
        crate::walk::find_child(self.as_module(), name)
    }

    /// Text inside the parentheses of the repr (`in_features=2, out_features=3, bias=True`).
    fn extra_repr(&self) -> String {
        String::new()
    }

    /// The whole repr, for containers that print differently from the default tree.
    fn custom_repr(&self) -> Option<String> {
        None
    }

    /// The version recorded in `state_dict` metadata (PyTorch's `_version`; BatchNorm has 2).
    fn version(&self) -> i64 {
        1
    }

    /// Extra state saved under `<prefix>_extra_state` (PyTorch's `get_extra_state`).
    fn get_extra_state(&self) -> Option<Value> {
        None
    }

    /// Restores what [`Module::get_extra_state`] returned.
    fn set_extra_state(&self, _state: &Value) -> Result<()> {
        Err(crate::NnError::Invalid(format!(
            "{} has extra state in the state dict but does not implement set_extra_state",
            self.type_name()
        )))
    }
}

/// The `nn.Module` API, available on every module and on `dyn Module`.
pub trait ModuleExt: Module {
    /// Direct children, in registration order.
    fn children(&self) -> Vec<&dyn Module> {
        walk::named_children(self.as_module())
            .into_iter()
            .map(|(_, m)| m)
            .collect()
    }

    fn named_children(&self) -> Vec<(String, &dyn Module)> {
        walk::named_children(self.as_module())
    }

    /// This module and every descendant, pre-order, each shared module once.
    fn modules(&self) -> Vec<&dyn Module> {
        walk::named_modules(self.as_module(), "", true)
            .into_iter()
            .map(|(_, m)| m)
            .collect()
    }

    /// [`ModuleExt::modules`] with qualified names (`""` for this module, `net.l0`...).
    fn named_modules(&self) -> Vec<(String, &dyn Module)> {
        walk::named_modules(self.as_module(), "", true)
    }

    /// Like [`ModuleExt::named_modules`] with a name prefix and duplicate handling chosen.
    fn named_modules_with(
        &self,
        prefix: &str,
        remove_duplicate: bool,
    ) -> Vec<(String, &dyn Module)> {
        walk::named_modules(self.as_module(), prefix, remove_duplicate)
    }

    fn parameters(&self) -> Vec<Parameter> {
        self.named_parameters()
            .into_iter()
            .map(|(_, p)| p)
            .collect()
    }

    /// The parameters' tensors, as PyTorch's `model.parameters()` hands them to an optimizer.
    fn parameter_tensors(&self) -> Vec<Tensor> {
        self.parameters()
            .iter()
            .map(|p| p.tensor().clone())
            .collect()
    }

    /// Parameters with qualified names; each shared parameter once.
    fn named_parameters(&self) -> Vec<(String, Parameter)> {
        walk::named_parameters(self.as_module(), true)
    }

    /// Own parameters only when `recurse` is false.
    fn named_parameters_with(&self, recurse: bool) -> Vec<(String, Parameter)> {
        walk::named_parameters(self.as_module(), recurse)
    }

    fn buffers(&self) -> Vec<Tensor> {
        self.named_buffers().into_iter().map(|(_, b)| b).collect()
    }

    /// Buffers (persistent or not) with qualified names.
    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        walk::named_buffers(self.as_module(), true)
    }

    fn named_buffers_with(&self, recurse: bool) -> Vec<(String, Tensor)> {
        walk::named_buffers(self.as_module(), recurse)
    }

    /// The descendant at a dotted path; the error names the missing segment.
    fn get_submodule(&self, path: &str) -> Result<&dyn Module> {
        walk::get_submodule(self.as_module(), path)
    }

    fn get_parameter(&self, path: &str) -> Result<Parameter> {
        walk::get_parameter(self.as_module(), path)
    }

    fn get_buffer(&self, path: &str) -> Result<Tensor> {
        walk::get_buffer(self.as_module(), path)
    }

    /// Calls `f` on every descendant (children first) and then on this module, as PyTorch's
    /// `apply`; downcast with `m.as_any().downcast_ref::<Linear>()`.
    fn apply(&self, f: &mut dyn FnMut(&dyn Module)) {
        walk::apply(self.as_module(), f);
    }

    fn is_training(&self) -> bool {
        self.core().is_training()
    }

    /// Sets training mode on this module and every descendant.
    fn train(&self, mode: bool) {
        for m in self.modules() {
            m.core().set_training(mode);
        }
    }

    /// `train(false)`.
    fn eval(&self) {
        self.train(false);
    }

    /// Sets `requires_grad` on every parameter.
    fn requires_grad_(&self, requires_grad: bool) -> Result<()> {
        for p in self.parameters() {
            p.requires_grad_(requires_grad)?;
        }
        Ok(())
    }

    /// Clears every parameter's gradient (`set_to_none`, PyTorch's default) or zeroes it.
    fn zero_grad(&self, set_to_none: bool) -> Result<()> {
        state::zero_grad(self.as_module(), set_to_none)
    }

    /// Converts floating-point parameters and buffers to `dtype`; handles stay valid.
    fn to_dtype(&self, dtype: DType) -> Result<()> {
        state::to_dtype(self.as_module(), dtype)
    }

    /// Moves parameters and buffers to `device` (CUDA is a typed error without a driver).
    fn to_device(&self, device: Device) -> Result<()> {
        state::to_device(self.as_module(), device)
    }

    fn cpu(&self) -> Result<()> {
        self.to_device(Device::Cpu)
    }

    fn cuda(&self) -> Result<()> {
        self.to_device(Device::Cuda(0))
    }

    fn double(&self) -> Result<()> {
        self.to_dtype(DType::F64)
    }

    fn float(&self) -> Result<()> {
        self.to_dtype(DType::F32)
    }

    fn half(&self) -> Result<()> {
        self.to_dtype(DType::F16)
    }

    fn bfloat16(&self) -> Result<()> {
        self.to_dtype(DType::BF16)
    }

    /// Parameters and persistent buffers by qualified name, in PyTorch's order (own
    /// parameters, own buffers, extra state, then each child).
    fn state_dict(&self) -> Result<StateDict> {
        state::state_dict(self.as_module())
    }

    /// Copies `state_dict` into the parameters and buffers (or, with `assign`, makes them
    /// the given tensors). Shape mismatches are always errors, all reported at once; missing
    /// and unexpected keys are errors when `strict`, else returned.
    fn load_state_dict(
        &self,
        state_dict: &StateDict,
        strict: bool,
        assign: bool,
    ) -> Result<IncompatibleKeys> {
        state::load_state_dict(self.as_module(), state_dict, strict, assign)
    }

    /// Registers a parameter at run time (`None` reserves the name).
    fn register_parameter(&mut self, name: &str, param: Option<Parameter>) -> Result<()>
    where
        Self: Sized,
    {
        let taken = walk::field_names(self.as_module());
        shared_error(self.core_mut())?
            .register_parameter(name, param, |n| taken.iter().any(|t| t == n))
    }

    /// Registers a buffer at run time; non-persistent buffers stay out of the state dict.
    fn register_buffer(
        &mut self,
        name: &str,
        buffer: Option<Tensor>,
        persistent: bool,
    ) -> Result<()>
    where
        Self: Sized,
    {
        let taken = walk::field_names(self.as_module());
        shared_error(self.core_mut())?
            .register_buffer(name, buffer, persistent, |n| taken.iter().any(|t| t == n))
    }

    /// Registers a child at run time (PyTorch's `add_module`).
    fn add_module(&mut self, name: &str, module: impl Module) -> Result<()>
    where
        Self: Sized,
    {
        self.register_module(name, Box::new(module))
    }

    /// [`ModuleExt::add_module`] for a boxed module.
    fn register_module(&mut self, name: &str, module: Box<dyn Module>) -> Result<()>
    where
        Self: Sized,
    {
        let taken = walk::field_names(self.as_module());
        shared_error(self.core_mut())?.add_module(name, module, |n| taken.iter().any(|t| t == n))
    }

    /// How many hooks of each kind this module has (PyTorch users read
    /// `module._forward_pre_hooks`, `_forward_hooks`, ...); a removed hook no longer counts.
    ///
    /// ```
    /// use tessera_nn::{ModuleExt, layers::Linear};
    ///
    /// let layer = Linear::new(2, 2)?;
    /// let handle = layer.register_forward_pre_hook(|_, _| Ok(None));
    /// assert_eq!(layer.hook_counts().forward_pre, 1);
    /// handle.remove();
    /// assert_eq!(layer.hook_counts().total(), 0);
    /// # Ok::<(), tessera_nn::NnError>(())
    /// ```
    fn hook_counts(&self) -> crate::hooks::HookCounts {
        self.core().hooks.lock().counts()
    }

    /// The ids of this module's hooks of each kind, in the order they run (the keys of
    /// PyTorch's `module._forward_pre_hooks`, `_forward_hooks`, ...); a handle's `id()` is
    /// its hook's entry.
    ///
    /// ```
    /// use tessera_nn::{ModuleExt, layers::Linear};
    ///
    /// let layer = Linear::new(2, 2)?;
    /// let first = layer.register_forward_hook(|_, _, _| Ok(None));
    /// let second = layer.register_forward_hook(|_, _, _| Ok(None));
    /// assert_eq!(layer.hook_ids().forward, [first.id(), second.id()]);
    /// first.remove();
    /// assert_eq!(layer.hook_ids().forward, [second.id()]);
    /// # Ok::<(), tessera_nn::NnError>(())
    /// ```
    fn hook_ids(&self) -> crate::hooks::HookIds {
        self.core().hooks.lock().ids()
    }

    fn register_forward_pre_hook(
        &self,
        hook: impl Fn(&dyn Module, &[Tensor]) -> Result<Option<Vec<Tensor>>> + Send + Sync + 'static,
    ) -> HookHandle {
        let hook: ForwardPreHook = Arc::new(hook);
        self.core()
            .hooks
            .add(|t, id| t.forward_pre.push((id, hook)))
    }

    fn register_forward_hook(
        &self,
        hook: impl Fn(&dyn Module, &[Tensor], &[Tensor]) -> Result<Option<Vec<Tensor>>>
        + Send
        + Sync
        + 'static,
    ) -> HookHandle {
        let hook: ForwardHook = Arc::new(hook);
        self.core().hooks.add(|t, id| t.forward.push((id, hook)))
    }

    fn register_full_backward_hook(
        &self,
        hook: impl Fn(&[Option<Tensor>], &[Option<Tensor>]) -> Result<Option<Vec<Option<Tensor>>>>
        + Send
        + Sync
        + 'static,
    ) -> HookHandle {
        let hook: FullBackwardHook = Arc::new(hook);
        self.core()
            .hooks
            .add(|t, id| t.full_backward.push((id, hook)))
    }

    fn register_full_backward_pre_hook(
        &self,
        hook: impl Fn(&[Option<Tensor>]) -> Result<Option<Vec<Option<Tensor>>>> + Send + Sync + 'static,
    ) -> HookHandle {
        let hook: BackwardPreHook = Arc::new(hook);
        self.core()
            .hooks
            .add(|t, id| t.backward_pre.push((id, hook)))
    }

    fn register_state_dict_post_hook(
        &self,
        hook: impl Fn(&dyn Module, &mut StateDict, &str) -> Result<()> + Send + Sync + 'static,
    ) -> HookHandle {
        let hook: StateDictHook = Arc::new(hook);
        self.core().hooks.add(|t, id| t.state_dict.push((id, hook)))
    }

    fn register_load_state_dict_pre_hook(
        &self,
        hook: impl Fn(&mut StateDict, &str) -> Result<()> + Send + Sync + 'static,
    ) -> HookHandle {
        let hook: LoadStateDictPreHook = Arc::new(hook);
        self.core().hooks.add(|t, id| t.load_pre.push((id, hook)))
    }

    fn register_load_state_dict_post_hook(
        &self,
        hook: impl Fn(&dyn Module, &IncompatibleKeys) -> Result<()> + Send + Sync + 'static,
    ) -> HookHandle {
        let hook: LoadStateDictPostHook = Arc::new(hook);
        self.core().hooks.add(|t, id| t.load_post.push((id, hook)))
    }

    /// What this module is for tracing and passes: its class name as its repr starts, typed
    /// (`ModuleKind::Conv2d`; `ModuleKind::Other` for user modules, by their
    /// `#[module(name = "...")]` or struct name). A parametrized `Linear` prints and counts as a
    /// `ParametrizedLinear`, not as a `Linear`.
    fn kind(&self) -> ModuleKind {
        ModuleKind::from_name(&crate::parametrize::class_name(self.as_module()))
    }

    /// PyTorch's printed tree: `Net(\n  (l0): MyLinear()\n)`.
    fn repr(&self) -> String {
        crate::repr::repr(self.as_module())
    }
}

impl<M: Module + ?Sized> ModuleExt for M {}

fn shared_error(core: Option<&mut ModuleCore>) -> Result<&mut ModuleCore> {
    core.ok_or_else(|| {
        crate::NnError::Invalid("cannot register into a module shared through an Arc".into())
    })
}

impl std::fmt::Debug for dyn Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::repr::repr(self))
    }
}
