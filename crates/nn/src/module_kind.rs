//! [`ModuleKind`]: what a module is, as tracing, the printed graph, its parser and the passes
//! see it. A kind is the module's class name (the leading identifier of its repr): Tessera's
//! built-in layers have a variant each, so a pass matching `ModuleKind::Conv2d` cannot be
//! misspelt; every other module type (user modules, containers, models) is
//! [`ModuleKind::Other`] with its name.

use crate::Module;
use std::fmt;
use std::sync::Arc;

/// Declares [`ModuleKind`] with one variant per built-in module type, named as the type and
/// its repr, and the tables of those variants.
macro_rules! module_kinds {
    (layers: [$($layer:ident),* $(,)?], quantized: [$($quantized:ident),* $(,)?] $(,)?) => {
        /// The kind of a module: its class name, typed. Built-in layers (`tessera_nn::layers`)
        /// and quantized modules (`tessera_nn::quantized`) have a variant each; any other
        /// name is [`ModuleKind::Other`]. [`ModuleKind::from_name`] is the one way from a name
        /// to a kind, so a kind equals another exactly when their names are equal.
        ///
        /// ```
        /// use tessera_nn::{ModuleExt, ModuleKind, layers::Conv2d};
        ///
        /// let conv = Conv2d::new(3, 16, 3)?;
        /// assert_eq!(conv.kind(), ModuleKind::Conv2d);
        /// assert_eq!(ModuleKind::from_name("Conv2d"), ModuleKind::Conv2d);
        /// assert!(matches!(ModuleKind::from_name("MyBlock"), ModuleKind::Other(_)));
        /// # Ok::<(), tessera_nn::NnError>(())
        /// ```
        ///
        /// A misspelt kind does not compile:
        ///
        /// ```compile_fail
        /// let is_conv = |k: &tessera_nn::ModuleKind| matches!(k, tessera_nn::ModuleKind::Conv2D);
        /// ```
        #[allow(clippy::upper_case_acronyms)]
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ModuleKind {
            $($layer,)*
            $($quantized,)*
            /// A module type outside Tessera's built-ins, by its class name (`MyBlock`,
            /// `Sequential`, `ParametrizedLinear`).
            Other(OtherKind),
        }

        impl ModuleKind {
            /// The kinds of `tessera_nn::layers`, which tracing records as leaves by default.
            pub const LAYERS: &'static [ModuleKind] = &[$(ModuleKind::$layer),*];

            /// The kinds of `tessera_nn::quantized`, which quantization passes insert.
            pub const QUANTIZED: &'static [ModuleKind] = &[$(ModuleKind::$quantized),*];

            /// The class name, as the repr starts (`Conv2d`).
            pub fn name(&self) -> &str {
                match self {
                    $(ModuleKind::$layer => stringify!($layer),)*
                    $(ModuleKind::$quantized => stringify!($quantized),)*
                    ModuleKind::Other(other) => &other.0,
                }
            }

            /// The kind of the class called `name`: a built-in's variant, else
            /// [`ModuleKind::Other`].
            pub fn from_name(name: &str) -> ModuleKind {
                match name {
                    $(stringify!($layer) => ModuleKind::$layer,)*
                    $(stringify!($quantized) => ModuleKind::$quantized,)*
                    _ => ModuleKind::Other(OtherKind(name.into())),
                }
            }
        }
    };
}

module_kinds! {
    layers: [
        Identity,
        Linear,
        NonDynamicallyQuantizableLinear,
        Bilinear,
        Conv1d,
        Conv2d,
        ConvTranspose2d,
        BatchNorm1d,
        BatchNorm2d,
        LayerNorm,
        GroupNorm,
        InstanceNorm1d,
        InstanceNorm2d,
        RMSNorm,
        Dropout,
        Embedding,
        MultiheadAttention,
        TransformerEncoderLayer,
        TransformerDecoderLayer,
        TransformerEncoder,
        TransformerDecoder,
        Transformer,
        RNN,
        LSTM,
        GRU,
        RNNCell,
        LSTMCell,
        GRUCell,
        ReLU,
        LeakyReLU,
        GELU,
        SiLU,
        Sigmoid,
        Tanh,
        Softmax,
        LogSoftmax,
        MaxPool2d,
        AvgPool2d,
        AdaptiveAvgPool2d,
        Flatten,
        MSELoss,
        L1Loss,
        CrossEntropyLoss,
        NLLLoss,
        BCEWithLogitsLoss,
        ReLU6,
        Hardswish,
        Hardsigmoid,
        ELU,
        Softplus,
        Mish,
        PReLU,
        SmoothL1Loss,
        HuberLoss,
        KLDivLoss,
        BCELoss,
        MarginRankingLoss,
        MaxPool1d,
        AvgPool1d,
        AdaptiveMaxPool2d,
        Upsample,
        PixelShuffle,
        Conv3d,
        ConvTranspose1d,
        EmbeddingBag,
        Unflatten,
        ZeroPad2d,
        Dropout2d,
        CosineSimilarity,
    ],
    quantized: [
        QuantizedLinear,
        QuantizedLinearReLU,
        QuantizedConv2d,
        QuantizedConvReLU2d,
        DynamicQuantizedLinear,
        MinMaxObserver,
        FakeQuantize,
        LearnableFakeQuantize,
        QatConv2d,
        QatLinear,
    ],
}

/// The name of a kind that is no built-in. Only [`ModuleKind::from_name`] makes one, so it
/// never spells a built-in's name (`Other("Linear")` cannot exist beside `Linear`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OtherKind(Arc<str>);

impl OtherKind {
    /// The class name (`MyBlock`).
    pub fn name(&self) -> &str {
        &self.0
    }
}

impl ModuleKind {
    /// The kind of module type `M`, from its `#[module(name = "...")]` (or its struct name).
    pub fn of<M: ModuleType>() -> ModuleKind {
        ModuleKind::from_name(M::NAME)
    }
}

impl fmt::Display for ModuleKind {
    /// The class name (`Conv2d`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A module type with a class name fixed at compile time; `#[derive(Module)]` implements it
/// from `#[module(name = "...")]` or the struct's name. An instance's kind
/// ([`ModuleExt::kind`](crate::ModuleExt::kind)) is this one unless its class changes at run
/// time (a parametrized `Linear` is a `ParametrizedLinear`, as in PyTorch).
pub trait ModuleType: Module {
    /// The class name (`Linear`).
    const NAME: &'static str;
}
