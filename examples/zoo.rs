//! The models of `tessera::nn::models` that examples take by name (`--model resnet50`), built
//! with random weights, and [`model_choice!`], which declares an example's `--model` values:
//! its own models, then these.

use tessera::nn::models::{Gpt, GptConfig, MobileNetV2, ResNet, Vgg, VisionTransformer, VitConfig};
use tessera::nn::{Layer, ModuleExt, init};
use tessera::{Generator, Tensor};

type Error = Box<dyn std::error::Error>;

/// torchvision's models and the GPT, by their `--model` names.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Zoo {
    Resnet18,
    Resnet34,
    Resnet50,
    #[value(name = "mobilenet_v2")]
    MobilenetV2,
    #[value(name = "vgg11_bn")]
    Vgg11Bn,
    /// 8x8 patches, 2 layers of width 32.
    Vit,
    /// Vocabulary 50, context 12.
    Gpt,
}

/// What an example does with a model, whatever its type.
pub trait UseModel {
    fn with<M: Layer + 'static>(self, model: M) -> Result<(), Error>;
}

impl Zoo {
    /// Builds the model for `classes` classes (the GPT predicts its 50 tokens) and images of
    /// `side` x `side` (the ViT's image size), and hands it to `user`. torchvision starts the
    /// ViT's head at zero; it is drawn at random here, so its outputs are not all zero.
    pub fn build(self, classes: usize, side: usize, user: impl UseModel) -> Result<(), Error> {
        match self {
            Zoo::Resnet18 => user.with(ResNet::resnet18(classes)?),
            Zoo::Resnet34 => user.with(ResNet::resnet34(classes)?),
            Zoo::Resnet50 => user.with(ResNet::resnet50(classes)?),
            Zoo::MobilenetV2 => user.with(MobileNetV2::new(classes, 1.0)?),
            Zoo::Vgg11Bn => user.with(Vgg::vgg11_bn(classes)?),
            Zoo::Vit => {
                let config = VitConfig {
                    image_size: side,
                    ..VitConfig::tiny(classes)
                };
                let vit = VisionTransformer::new(config)?;
                init::normal_(
                    vit.get_parameter("heads.head.weight")?.tensor(),
                    0.0,
                    0.1,
                    None,
                )?;
                user.with(vit)
            }
            Zoo::Gpt => user.with(Gpt::new(GptConfig::tiny())?),
        }
    }
}

/// `[batch, min(len, 12)]` random token ids for the GPT.
pub fn token_ids(batch: usize, len: usize, g: &mut Generator) -> Result<Tensor, Error> {
    let config = GptConfig::tiny();
    let len = len.min(config.block_size);
    let ids: Vec<i64> = (0..batch * len)
        .map(|_| (g.uniform() * config.vocab_size as f64) as i64)
        .collect();
    Ok(Tensor::from_vec(ids, &[batch, len])?)
}

/// Declares `$name`, an example's `--model` values: its own models (`Variant => "name"`), then
/// every [`Zoo`] model as `$name::Zoo(..)`.
macro_rules! model_choice {
    ($(#[$doc:meta])* $name:ident { $($own:ident => $value:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name {
            $($own,)*
            Zoo(zoo::Zoo),
        }

        impl clap::ValueEnum for $name {
            fn value_variants<'a>() -> &'a [Self] {
                static ALL: std::sync::OnceLock<Vec<$name>> = std::sync::OnceLock::new();
                ALL.get_or_init(|| {
                    let zoo = <zoo::Zoo as clap::ValueEnum>::value_variants();
                    let mut all = vec![$($name::$own),*];
                    all.extend(zoo.iter().map(|z| $name::Zoo(*z)));
                    all
                })
            }

            fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
                match self {
                    $($name::$own => Some(clap::builder::PossibleValue::new($value)),)*
                    $name::Zoo(z) => clap::ValueEnum::to_possible_value(z),
                }
            }
        }
    };
}
pub(crate) use model_choice;
