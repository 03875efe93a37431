//! The models of PyTorch's "Modules" note (<https://pytorch.org/docs/stable/notes/modules.html>)
//! ported under the note's names: `MyLinear` (weight `[in, out]`), `Net`, `BigNet`,
//! `DynamicNet` and `StatefulModule`. They are defined once, here: the `modules_basics` and
//! `modules_training` examples run them, the conformance tests check them against PyTorch's
//! outputs and state dicts, and the tracing tests snapshot their graphs. Each is also a
//! short, complete example of writing a module with `#[derive(Module)]`.

use crate::layers::{LeakyReLU, Linear, ReLU};
use crate::{
    Call, Forward, Layer, Module, ModuleCore, ModuleDict, ModuleList, NnError, Parameter,
    ParameterDict, ParameterList, Result,
};
use tessera_tensor::{DType, Tensor};

/// `input @ weight + bias` with `weight` of shape `[in_features, out_features]`.
#[derive(Module)]
pub struct MyLinear {
    core: ModuleCore,
    pub weight: Parameter,
    pub bias: Parameter,
}

impl MyLinear {
    /// Standard-normal weight and bias, as the note's `torch.randn`.
    pub fn new(in_features: usize, out_features: usize) -> Result<Self> {
        Ok(MyLinear {
            core: ModuleCore::default(),
            weight: Parameter::new(Tensor::randn(&[in_features, out_features], DType::F32)?),
            bias: Parameter::new(Tensor::randn(&[out_features], DType::F32)?),
        })
    }
}

impl Forward for MyLinear {
    type Output = Tensor;

    fn forward(&self, input: Tensor) -> Result<Tensor> {
        Ok(input.matmul(&self.weight)?.add(&self.bias)?)
    }
}

/// `MyLinear(4, 3) -> relu -> MyLinear(3, 1)`.
#[derive(Module)]
pub struct Net {
    core: ModuleCore,
    pub l0: MyLinear,
    pub l1: MyLinear,
}

impl Net {
    /// `MyLinear(4, 3)` and `MyLinear(3, 1)`, standard-normal.
    pub fn new() -> Result<Self> {
        Ok(Net {
            core: ModuleCore::default(),
            l0: MyLinear::new(4, 3)?,
            l1: MyLinear::new(3, 1)?,
        })
    }
}

impl Forward for Net {
    type Output = Tensor;

    fn forward(&self, x: Tensor) -> Result<Tensor> {
        self.l1.call(self.l0.call(x)?.relu()?)
    }
}

/// `MyLinear(5, 4)` then a `Net`.
#[derive(Module)]
pub struct BigNet {
    core: ModuleCore,
    pub l1: MyLinear,
    pub net: Net,
}

impl BigNet {
    /// `MyLinear(5, 4)` and a fresh `Net`.
    pub fn new() -> Result<Self> {
        Ok(BigNet {
            core: ModuleCore::default(),
            l1: MyLinear::new(5, 4)?,
            net: Net::new()?,
        })
    }
}

impl Forward for BigNet {
    type Output = Tensor;

    fn forward(&self, x: Tensor) -> Result<Tensor> {
        self.net.call(self.l1.call(x)?)
    }
}

/// `num_layers` `MyLinear(4, 4)` with a chosen activation between them, then `MyLinear(4, 1)`.
#[derive(Module)]
pub struct DynamicNet {
    core: ModuleCore,
    pub linears: ModuleList<MyLinear>,
    pub activations: ModuleDict<Box<dyn Layer>>,
    pub r#final: MyLinear,
}

impl DynamicNet {
    /// `num_layers` hidden `MyLinear(4, 4)`, the activations `relu` and `lrelu`
    /// (LeakyReLU(0.01)), and `final`.
    pub fn new(num_layers: usize) -> Result<Self> {
        let mut activations: ModuleDict<Box<dyn Layer>> = ModuleDict::new();
        activations.insert("relu", Box::new(ReLU::new()))?;
        activations.insert("lrelu", Box::new(LeakyReLU::new(0.01)))?;
        Ok(DynamicNet {
            core: ModuleCore::default(),
            linears: (0..num_layers)
                .map(|_| MyLinear::new(4, 4))
                .collect::<Result<_>>()?,
            activations,
            r#final: MyLinear::new(4, 1)?,
        })
    }
}

/// `forward(x, act)`: the activation is chosen by name per call.
impl<'a> Forward<(Tensor, &'a str)> for DynamicNet {
    type Output = Tensor;

    fn forward(&self, (mut x, act): (Tensor, &'a str)) -> Result<Tensor> {
        let activation = self
            .activations
            .get(act)
            .ok_or_else(|| NnError::NotFound(format!("no activation named {act}")))?;
        for linear in self.linears.iter() {
            x = activation.call(linear.call(x)?)?;
        }
        self.r#final.call(x)
    }
}

/// Every kind of state the note lists: parameters (one reserved as `None`), persistent and
/// non-persistent buffers (one `None`), a ParameterList, a ParameterDict and a child layer.
#[derive(Module)]
pub struct StatefulModule {
    core: ModuleCore,
    pub param1: Parameter,
    pub param2: Parameter,
    pub param3: Option<Parameter>,
    #[module(buffer)]
    pub buffer1: Tensor,
    #[module(buffer, persistent = false)]
    pub buffer2: Tensor,
    #[module(buffer)]
    pub buffer3: Option<Tensor>,
    pub param_list: ParameterList,
    pub param_dict: ParameterDict,
    pub linear: Linear,
}

impl StatefulModule {
    /// Standard-normal state of the note's shapes; `param3` and `buffer3` are `None`.
    pub fn new() -> Result<Self> {
        let mut param_dict = ParameterDict::new();
        // Built from a plain dict, PyTorch sorts the keys: bar before foo.
        param_dict.insert("bar", Parameter::new(Tensor::randn(&[4], DType::F32)?))?;
        param_dict.insert("foo", Parameter::new(Tensor::randn(&[3], DType::F32)?))?;
        Ok(StatefulModule {
            core: ModuleCore::default(),
            param1: Parameter::new(Tensor::randn(&[2], DType::F32)?),
            param2: Parameter::new(Tensor::randn(&[3], DType::F32)?),
            param3: None,
            buffer1: Tensor::randn(&[4], DType::F32)?,
            buffer2: Tensor::randn(&[5], DType::F32)?,
            buffer3: None,
            param_list: (0..3)
                .map(|_| Ok(Parameter::new(Tensor::randn(&[2], DType::F32)?)))
                .collect::<Result<_>>()?,
            param_dict,
            linear: Linear::new(2, 3)?,
        })
    }
}

/// Not in the note (its module has no `forward`): uses every kind of state once, a
/// parameter, a buffer, a list and a dict entry and the layer, so that a traced graph reads
/// each of them. Takes `[batch, 2]` and returns `[batch, 4]`.
impl Forward for StatefulModule {
    type Output = Tensor;

    fn forward(&self, x: Tensor) -> Result<Tensor> {
        let x = x.mul(&self.param1)?.add(&self.param_list[0])?;
        let x = self.linear.call(x)?.add(&self.param2)?;
        Ok(x.mul(&self.param_dict["foo"])?
            .sum(&[-1], true)?
            .add(&self.buffer1)?)
    }
}
