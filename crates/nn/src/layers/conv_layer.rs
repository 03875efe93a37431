//! The methods every convolution layer shares, written once by `conv_layer_methods!`: the
//! checked constructors with their weight and bias, `reset_parameters` and the repr arguments.

/// Writes `new`, `with_options`, `config`, `reset_parameters` and `repr_args` for a
/// convolution layer with the fields `core`, `in_channels`, `out_channels`, `kernel_size`,
/// `options`, `weight` and `bias`. `kernel` turns the constructor's kernel argument into the
/// stored kernel size; `config` builds the layer's `ConvConfig` from
/// `(in_channels, out_channels, kernel_size, &options)`, which `with_options` checks before
/// `extra_check` runs on the options; `transposed` picks the weight layout
/// (`[in, out / groups, k...]` rather than `[out, in / groups, k...]`).
macro_rules! conv_layer_methods {
    (
        $layer:ident {
            options: $options:ident,
            kernel: $kernel_argument:ty => $kernel:ty = $into_kernel:path,
            config: $config:path,
            transposed: $transposed:literal
            $(, extra_check: $extra_check:path)? $(,)?
        }
    ) => {
        impl $layer {
            pub fn new(
                in_channels: usize,
                out_channels: usize,
                kernel_size: $kernel_argument,
            ) -> Result<Self> {
                Self::with_options(in_channels, out_channels, kernel_size, $options::default())
            }

            pub fn with_options(
                in_channels: usize,
                out_channels: usize,
                kernel_size: $kernel_argument,
                options: $options,
            ) -> Result<Self> {
                let kernel_size: $kernel = $into_kernel(kernel_size);
                let config = $config(in_channels, out_channels, kernel_size, &options);
                config.check(stringify!($layer))?;
                $($extra_check(&options)?;)?
                let weight_shape = config.weight_shape($transposed);
                let (dtype, device) = (options.dtype, options.device);
                let layer = $layer {
                    core: ModuleCore::default(),
                    in_channels,
                    out_channels,
                    kernel_size,
                    weight: super::options::parameter(&weight_shape, dtype, device)?,
                    bias: super::options::optional_parameter(
                        options.bias,
                        &[out_channels],
                        dtype,
                        device,
                    )?,
                    options,
                };
                super::options::initialized(layer, $layer::reset_parameters)
            }

            fn config(&self) -> super::conv::ConvConfig {
                $config(
                    self.in_channels,
                    self.out_channels,
                    self.kernel_size,
                    &self.options,
                )
            }

            /// PyTorch's default init; the fans come from the weight's shape.
            pub fn reset_parameters(&self) -> Result<()> {
                super::linear::reset_weight_and_bias(&self.weight, self.bias.as_ref())
            }

            fn repr_args(&self) -> String {
                self.config().repr(self.bias.is_some())
            }
        }
    };
}

pub(super) use conv_layer_methods;
