//! The Vision Transformer as torchvision builds it (`VisionTransformer`, `vit_b_16`): a patch
//! convolution, a class token put FIRST, learned position embeddings, pre-norm encoder blocks
//! (LayerNorm eps 1e-6, `MultiheadAttention` with packed `in_proj_weight`, an exact-GELU MLP
//! keyed `mlp.0`/`mlp.3`), a final LayerNorm and a linear head on the class token, with
//! torchvision's key layout at any size ([`VitConfig`]).

use super::named::NamedSequential;
use crate::init;
use crate::layers::{
    AttentionInput, Conv2d, Conv2dOptions, Dropout, GELU, LayerNorm, LayerNormOptions, Linear,
    MultiheadAttention, MultiheadAttentionOptions,
};
use crate::{Call, Forward, Layer, Module, ModuleCore, NnError, Parameter, Result};
use tessera_tensor::{DType, Tensor};

/// The sizes of a [`VisionTransformer`] (torchvision's constructor arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VitConfig {
    pub image_size: usize,
    pub patch_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub hidden_dim: usize,
    pub mlp_dim: usize,
    pub num_classes: usize,
}

impl VitConfig {
    /// torchvision's `vit_b_16`: 224x224 images, 16x16 patches, 12 layers of 12 heads, width
    /// 768, MLP 3072 (86.6M parameters with 1000 classes).
    pub fn vit_b_16(num_classes: usize) -> Self {
        VitConfig {
            image_size: 224,
            patch_size: 16,
            num_layers: 12,
            num_heads: 12,
            hidden_dim: 768,
            mlp_dim: 3072,
            num_classes,
        }
    }

    /// The conformance case's size: 32x32 images, 8x8 patches, 2 layers of 2 heads, width 32,
    /// MLP 64.
    pub fn tiny(num_classes: usize) -> Self {
        VitConfig {
            image_size: 32,
            patch_size: 8,
            num_layers: 2,
            num_heads: 2,
            hidden_dim: 32,
            mlp_dim: 64,
            num_classes,
        }
    }

    /// Patches per image plus the class token.
    pub fn seq_length(&self) -> usize {
        (self.image_size / self.patch_size).pow(2) + 1
    }
}

fn layer_norm(width: usize) -> Result<LayerNorm> {
    LayerNorm::with_options(&[width], LayerNormOptions::default().eps(1e-6))
}

/// `x + attention(ln_1(x))`, then `+ mlp(ln_2(x))` (torchvision's `EncoderBlock`).
#[derive(Module)]
pub struct EncoderBlock {
    core: ModuleCore,
    pub ln_1: LayerNorm,
    pub self_attention: MultiheadAttention,
    pub dropout: Dropout,
    pub ln_2: LayerNorm,
    /// torchvision's `MLPBlock`: Linear, GELU, Dropout, Linear, Dropout.
    pub mlp: NamedSequential,
}

impl EncoderBlock {
    pub fn new(num_heads: usize, hidden_dim: usize, mlp_dim: usize) -> Result<Self> {
        let (fc1, fc2) = (
            Linear::new(hidden_dim, mlp_dim)?,
            Linear::new(mlp_dim, hidden_dim)?,
        );
        // torchvision's MLPBlock initialisation: Xavier-uniform weights, N(0, 1e-6) biases.
        for fc in [&fc1, &fc2]
            .into_iter()
            .filter(|_| !init::is_init_skipped())
        {
            init::xavier_uniform_(&fc.weight, 1.0, None)?;
            if let Some(b) = &fc.bias {
                init::normal_(b, 0.0, 1e-6, None)?;
            }
        }
        let mlp: Vec<Box<dyn Layer>> = vec![
            Box::new(fc1),
            Box::new(GELU::new()),
            Box::new(Dropout::new(0.0)?),
            Box::new(fc2),
            Box::new(Dropout::new(0.0)?),
        ];
        Ok(EncoderBlock {
            core: ModuleCore::default(),
            ln_1: layer_norm(hidden_dim)?,
            self_attention: MultiheadAttention::with_options(
                hidden_dim,
                num_heads,
                MultiheadAttentionOptions::default().batch_first(true),
            )?,
            dropout: Dropout::new(0.0)?,
            ln_2: layer_norm(hidden_dim)?,
            mlp: NamedSequential::indexed("MLPBlock", mlp),
        })
    }
}

impl Forward for EncoderBlock {
    type Output = Tensor;

    fn forward(&self, input: Tensor) -> Result<Tensor> {
        let x = self.ln_1.call(input.clone())?;
        let attended = AttentionInput::new(x.clone(), x.clone(), x).need_weights(false);
        let x = self.dropout.call(self.self_attention.call(attended)?.0)?;
        let x = x.add(&input)?;
        let y = self.mlp.call(self.ln_2.call(x.clone())?)?;
        Ok(x.add(&y)?)
    }
}

/// Position embeddings, the blocks and a final LayerNorm (torchvision's `Encoder`).
#[derive(Module)]
pub struct Encoder {
    core: ModuleCore,
    /// `[1, seq_length, hidden_dim]`, N(0, 0.02^2) at initialisation.
    pub pos_embedding: Parameter,
    pub dropout: Dropout,
    /// `encoder_layer_0`, `encoder_layer_1`, ...
    pub layers: NamedSequential,
    pub ln: LayerNorm,
}

impl Encoder {
    pub fn new(config: &VitConfig) -> Result<Self> {
        let pos = Tensor::zeros(&[1, config.seq_length(), config.hidden_dim], DType::F32)?;
        let pos_embedding = Parameter::new(pos);
        if !init::is_init_skipped() {
            init::normal_(&pos_embedding, 0.0, 0.02, None)?;
        }
        let mut layers = NamedSequential::new("Sequential");
        for i in 0..config.num_layers {
            let block = EncoderBlock::new(config.num_heads, config.hidden_dim, config.mlp_dim)?;
            layers = layers.add(format!("encoder_layer_{i}"), block);
        }
        Ok(Encoder {
            core: ModuleCore::default(),
            pos_embedding,
            dropout: Dropout::new(0.0)?,
            layers,
            ln: layer_norm(config.hidden_dim)?,
        })
    }
}

impl Forward for Encoder {
    type Output = Tensor;

    fn forward(&self, input: Tensor) -> Result<Tensor> {
        let x = self.dropout.call(input.add(&self.pos_embedding)?)?;
        self.ln.call(self.layers.call(x)?)
    }
}

/// torchvision's `VisionTransformer`: `heads.head(encoder(cat(class_token, patches))[:, 0])`.
#[derive(Module)]
pub struct VisionTransformer {
    core: ModuleCore,
    /// `[1, 1, hidden_dim]`, zeros at initialisation.
    pub class_token: Parameter,
    pub conv_proj: Conv2d,
    pub encoder: Encoder,
    /// `head`: the classifier (zeros at initialisation, as torchvision).
    pub heads: NamedSequential,
    #[module(skip)]
    pub config: VitConfig,
}

impl VisionTransformer {
    pub fn new(config: VitConfig) -> Result<Self> {
        let VitConfig {
            image_size,
            patch_size,
            hidden_dim,
            num_heads,
            ..
        } = config;
        if patch_size == 0 || !image_size.is_multiple_of(patch_size) {
            return Err(NnError::Invalid(format!(
                "VisionTransformer: input shape indivisible by patch size ({image_size} by {patch_size})"
            )));
        }
        if num_heads == 0 || !hidden_dim.is_multiple_of(num_heads) {
            return Err(NnError::Invalid(format!(
                "VisionTransformer: hidden_dim ({hidden_dim}) must be divisible by num_heads ({num_heads})"
            )));
        }
        let conv_proj = Conv2d::with_options(
            3,
            hidden_dim,
            patch_size,
            Conv2dOptions::default().stride(patch_size),
        )?;
        let head = Linear::new(hidden_dim, config.num_classes)?;
        if !init::is_init_skipped() {
            let std = (1.0 / (3 * patch_size * patch_size) as f64).sqrt();
            init::trunc_normal_(&conv_proj.weight, 0.0, std, -2.0, 2.0, None)?;
            let biases = [&conv_proj.bias, &head.bias];
            for p in std::iter::once(&head.weight).chain(biases.into_iter().flatten()) {
                init::zeros_(p)?;
            }
        }
        Ok(VisionTransformer {
            core: ModuleCore::default(),
            class_token: Parameter::new(Tensor::zeros(&[1, 1, hidden_dim], DType::F32)?),
            conv_proj,
            encoder: Encoder::new(&config)?,
            heads: NamedSequential::new("Sequential").add("head", head),
            config,
        })
    }

    /// `[N, 3, H, W]` to `[N, patches, hidden_dim]`, patches in row-major order.
    fn process_input(&self, x: Tensor) -> Result<Tensor> {
        let shape = x.shape();
        let size = self.config.image_size;
        if shape.len() != 4 || shape[2] != size || shape[3] != size {
            return Err(NnError::Invalid(format!(
                "VisionTransformer: expected input [N, 3, {size}, {size}], got {shape:?}"
            )));
        }
        let x = self.conv_proj.call(x)?;
        let (n, patches) = (shape[0], self.config.seq_length() - 1);
        Ok(x.reshape(&[n, self.config.hidden_dim, patches])?
            .permute(&[0, 2, 1])?)
    }
}

impl Forward for VisionTransformer {
    type Output = Tensor;

    fn forward(&self, x: Tensor) -> Result<Tensor> {
        let x = self.process_input(x)?;
        let n = x.shape()[0];
        let class = self.class_token.expand(&[n, 1, self.config.hidden_dim])?;
        let x = self.encoder.call(Tensor::cat(&[&class, &x], 1)?)?;
        self.heads.call(x.select(1, 0)?)
    }
}
