//! What every recurrent module (the layers `RNN`, `LSTM`, `GRU` and their cells) declares the
//! same way: the struct of sizes, options and [`RecurrentWeights`](super::RecurrentWeights),
//! the constructors, PyTorch's init and the recurrence it runs.

/// Declares the module `$name` running `$recurrence` (with the options' nonlinearity), with
/// options of type `$options` and three functions of `(input_size, hidden_size, &options)`:
/// `slots` gives its weight slots, `check` refuses invalid arguments (it also takes the type
/// name first), `repr` prints the repr's arguments.
macro_rules! recurrent_module {
    (
        $(#[$doc:meta])* $name:ident, $recurrence:expr, $options:ty,
        slots: $slots:path, check: $check:path, repr: $repr:path $(,)?
    ) => {
        $(#[$doc])*
        #[derive(crate::Module)]
        #[module(extra_repr = "repr_args")]
        pub struct $name {
            core: crate::ModuleCore,
            pub input_size: usize,
            pub hidden_size: usize,
            #[module(skip)]
            pub options: $options,
            pub weights: crate::layers::RecurrentWeights,
        }

        impl $name {
            pub fn new(input_size: usize, hidden_size: usize) -> crate::Result<Self> {
                Self::with_options(input_size, hidden_size, <$options>::default())
            }

            pub fn with_options(
                input_size: usize,
                hidden_size: usize,
                options: $options,
            ) -> crate::Result<Self> {
                let type_name = stringify!($name);
                let recurrence = $recurrence.with_nonlinearity(type_name, options.nonlinearity)?;
                $check(type_name, input_size, hidden_size, &options)?;
                let weights = crate::layers::RecurrentWeights::new(
                    &$slots(input_size, hidden_size, &options),
                    recurrence.gates(),
                    hidden_size,
                    options.bias,
                    options.dtype,
                    options.device,
                )?;
                let module = $name {
                    core: crate::ModuleCore::default(),
                    input_size,
                    hidden_size,
                    options,
                    weights,
                };
                crate::layers::options::initialized(module, $name::reset_parameters)
            }

            /// Re-draws every weight and bias from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)).
            pub fn reset_parameters(&self) -> crate::Result<()> {
                self.weights.reset(self.hidden_size)
            }

            /// The recurrence this module runs.
            fn recurrence(&self) -> crate::Result<crate::layers::recurrent_step::Recurrence> {
                $recurrence.with_nonlinearity(stringify!($name), self.options.nonlinearity)
            }

            fn repr_args(&self) -> String {
                $repr(self.input_size, self.hidden_size, &self.options)
            }
        }
    };
}
pub(crate) use recurrent_module;
