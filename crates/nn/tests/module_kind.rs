//! Module kinds: every built-in layer's kind is its variant, named as its repr starts; user
//! modules get theirs from the derive; a name maps to one kind only.

use tessera_nn::layers::*;
use tessera_nn::parametrizations::weight_norm;
use tessera_nn::quantized::*;
use tessera_nn::{Module, ModuleCore, ModuleExt, ModuleKind, Result, Sequential};

/// Asserts that each type's static kind (from its derive) is the variant of the same name.
macro_rules! assert_static_kinds {
    ($($ty:ident),* $(,)?) => {
        $(assert_eq!(ModuleKind::of::<$ty>(), ModuleKind::$ty, stringify!($ty));)*
    };
}

#[test]
fn builtin_types_have_their_variant_as_kind() {
    assert_static_kinds!(
        Identity,
        Linear,
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
        NonDynamicallyQuantizableLinear,
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
    );
    assert_eq!(ModuleKind::LAYERS.len(), 69);
    assert_eq!(ModuleKind::QUANTIZED.len(), 10);
}

#[test]
fn every_builtin_kind_round_trips_through_its_name() {
    for kind in ModuleKind::LAYERS.iter().chain(ModuleKind::QUANTIZED) {
        assert!(!matches!(kind, ModuleKind::Other(_)), "{kind}");
        assert_eq!(&ModuleKind::from_name(kind.name()), kind);
        assert_eq!(kind.to_string(), kind.name());
    }
}

#[test]
fn instance_kind_is_the_class_name_its_repr_starts_with() -> Result<()> {
    let modules: Vec<Box<dyn Module>> = vec![
        Box::new(Conv2d::new(3, 16, 3)?),
        Box::new(Linear::new(4, 2)?),
        Box::new(BatchNorm2d::new(16)?),
        Box::new(GELU::new()),
        Box::new(Sequential::new()),
    ];
    let kinds: Vec<ModuleKind> = modules.iter().map(|m| m.kind()).collect();
    assert_eq!(
        kinds[..4],
        [
            ModuleKind::Conv2d,
            ModuleKind::Linear,
            ModuleKind::BatchNorm2d,
            ModuleKind::GELU
        ]
    );
    assert_eq!(kinds[4].name(), "Sequential");
    for (m, kind) in modules.iter().zip(&kinds) {
        assert!(m.repr().starts_with(&format!("{kind}(")), "{}", m.repr());
    }
    Ok(())
}

#[derive(Module)]
struct MyBlock {
    core: ModuleCore,
}

#[derive(Module)]
#[module(name = "Residual")]
struct ResidualBlock {
    core: ModuleCore,
}

#[test]
fn user_modules_get_an_other_kind_from_the_derive() {
    let block = MyBlock {
        core: ModuleCore::default(),
    };
    let residual = ResidualBlock {
        core: ModuleCore::default(),
    };
    assert_eq!(block.kind(), ModuleKind::of::<MyBlock>());
    assert_eq!(block.kind(), ModuleKind::from_name("MyBlock"));
    assert!(matches!(block.kind(), ModuleKind::Other(ref o) if o.name() == "MyBlock"));
    assert_eq!(residual.kind(), ModuleKind::of::<ResidualBlock>());
    assert_eq!(residual.kind().name(), "Residual");
    assert_ne!(block.kind(), residual.kind());
}

#[test]
fn a_builtin_name_is_never_an_other_kind() {
    assert_eq!(ModuleKind::from_name("Linear"), ModuleKind::Linear);
    assert!(matches!(
        ModuleKind::from_name("Linear2"),
        ModuleKind::Other(_)
    ));
}

#[test]
fn a_parametrized_linear_is_of_kind_parametrized_linear() -> Result<()> {
    let mut linear = Linear::new(4, 2)?;
    weight_norm(&mut linear, "weight", Some(0))?;
    assert_eq!(linear.kind().name(), "ParametrizedLinear");
    assert_ne!(linear.kind(), ModuleKind::Linear);
    assert_eq!(ModuleKind::of::<Linear>(), ModuleKind::Linear);
    Ok(())
}
