//! Module kinds in graphs: a traced `call_module` carries the kind of the module it calls
//! (built-in or user-defined), the leaf policy decides by kind, a printed graph parses back to
//! the same kinds, and saved graphs keep them (also those saved when the field was
//! `module_type`).

use crate::common;

use common::{f32s, small_cnn};
use tessera_fx::trace::{LeafPolicy, trace};
use tessera_fx::{FxError, Graph, NodeKind};
use tessera_nn::layers::{Conv2d, Flatten, Linear, ReLU};
use tessera_nn::{Call, Forward, Module, ModuleCore, ModuleExt, ModuleKind, Parameter, Result};
use tessera_tensor::{DType, Tensor, TensorMeta};

/// `x * scale`: a user module with a parameter.
#[derive(Module)]
struct Scale {
    core: ModuleCore,
    scale: Parameter,
}

impl Forward for Scale {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> Result<Tensor> {
        Ok(x.mul(&self.scale)?)
    }
}

/// `relu(conv(x)) * scale`, flattened into a linear; named `MixedNet` in reprs.
#[derive(Module)]
#[module(name = "MixedNet")]
struct Mixed {
    core: ModuleCore,
    conv: Conv2d,
    relu: ReLU,
    scale: Scale,
    flatten: Flatten,
    fc: Linear,
}

impl Mixed {
    fn new() -> Mixed {
        Mixed {
            core: ModuleCore::default(),
            conv: Conv2d::new(3, 4, 3).unwrap(),
            relu: ReLU::new(),
            scale: Scale {
                core: ModuleCore::default(),
                scale: Parameter::new(Tensor::ones(&[1], DType::F32).unwrap()),
            },
            flatten: Flatten::new(),
            fc: Linear::new(16, 2).unwrap(),
        }
    }
}

impl Forward for Mixed {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> Result<Tensor> {
        let y = self.scale.call(self.relu.call(self.conv.call(x)?)?)?;
        self.fc.call(self.flatten.call(y)?)
    }
}

fn input() -> TensorMeta {
    f32s(&[1, 3, 4, 4])
}

/// Each `call_module` node's target and kind, in graph order.
fn module_kinds(graph: &Graph) -> Vec<(String, ModuleKind)> {
    graph
        .nodes()
        .filter_map(|id| match &graph.node(&id).ok()?.kind {
            NodeKind::CallModule { target, kind, .. } => Some((target.clone(), kind.clone())),
            _ => None,
        })
        .collect()
}

fn named(pairs: &[(&str, ModuleKind)]) -> Vec<(String, ModuleKind)> {
    pairs
        .iter()
        .map(|(t, k)| (t.to_string(), k.clone()))
        .collect()
}

#[test]
fn traced_builtin_layers_carry_their_kinds() -> tessera_fx::Result<()> {
    let cnn = small_cnn();
    let traced = trace(&cnn, f32s(&[1, 3, 32, 32]), LeafPolicy::default())?;
    use ModuleKind::*;
    assert_eq!(
        module_kinds(&traced.graph),
        named(&[
            ("conv1", Conv2d),
            ("bn1", BatchNorm2d),
            ("relu1", ReLU),
            ("pool1", MaxPool2d),
            ("conv2", Conv2d),
            ("bn2", BatchNorm2d),
            ("relu2", ReLU),
            ("gap", AdaptiveAvgPool2d),
            ("flatten", Flatten),
            ("fc", Linear),
        ])
    );
    Ok(())
}

#[test]
fn a_user_module_made_a_leaf_carries_the_kind_its_derive_gives() -> tessera_fx::Result<()> {
    let model = Mixed::new();
    let traced = trace(&model, input(), LeafPolicy::default().leaf_type::<Scale>())?;
    let kinds = module_kinds(&traced.graph);
    assert_eq!(kinds[2], ("scale".into(), ModuleKind::of::<Scale>()));
    assert_eq!(kinds[2].1, model.scale.kind());
    assert!(matches!(&kinds[2].1, ModuleKind::Other(o) if o.name() == "Scale"));
    assert!(
        traced
            .graph
            .to_string()
            .contains("call_module[scale: Scale()]")
    );
    // The root's kind comes from `#[module(name = "MixedNet")]`.
    assert_eq!(model.kind(), ModuleKind::of::<Mixed>());
    assert_eq!(model.kind().name(), "MixedNet");
    Ok(())
}

#[test]
fn the_leaf_policy_decides_by_kind() -> tessera_fx::Result<()> {
    let model = Mixed::new();
    let traced = |policy| trace(&model, input(), policy).map(|t| module_kinds(&t.graph));
    use ModuleKind::*;
    // Built-in layers are leaves and user modules are traced through by default.
    assert_eq!(
        traced(LeafPolicy::default())?,
        named(&[
            ("conv", Conv2d),
            ("relu", ReLU),
            ("flatten", Flatten),
            ("fc", Linear)
        ])
    );
    // A kind traced through, by kind or by type.
    let without_relu = named(&[("conv", Conv2d), ("flatten", Flatten), ("fc", Linear)]);
    assert_eq!(
        traced(LeafPolicy::default().trace_kind(ReLU))?,
        without_relu
    );
    assert_eq!(
        traced(LeafPolicy::default().trace_type::<tessera_nn::layers::ReLU>())?,
        without_relu
    );
    // Leaves chosen by kind only, a user kind among them.
    assert_eq!(
        traced(
            LeafPolicy::none()
                .leaf_kind(Conv2d)
                .leaf_kind(ModuleKind::from_name("Scale"))
        )?,
        named(&[("conv", Conv2d), ("scale", ModuleKind::of::<Scale>())])
    );
    Ok(())
}

#[test]
fn a_printed_graph_parses_back_to_the_traced_kinds() -> tessera_fx::Result<()> {
    let model = Mixed::new();
    let traced = trace(&model, input(), LeafPolicy::default().leaf_type::<Scale>())?;
    let parsed = Graph::parse(&traced.graph.to_string())?;
    assert_eq!(module_kinds(&parsed), module_kinds(&traced.graph));
    assert_eq!(module_kinds(&parsed).len(), 5);
    Ok(())
}

#[test]
fn saved_graphs_keep_kinds_and_old_ones_spelling_module_type_load() -> tessera_fx::Result<()> {
    let model = Mixed::new();
    let graph = trace(&model, input(), LeafPolicy::default().leaf_type::<Scale>())?.graph;
    let json = serde_json::to_string(&graph).unwrap();
    assert!(json.contains(r#""kind":"Conv2d""#), "{json}");
    assert!(json.contains(r#""kind":"Scale""#), "{json}");
    let back: Graph = serde_json::from_str(&json).unwrap();
    assert_eq!(back, graph);
    // A graph.json written before kinds were typed.
    let old = r#"{"nodes": [
        {"name": "x", "kind": {"Placeholder": {"target": "x"}}, "meta": [{"shape": [1, 3, 4, 4], "dtype": "F32"}]},
        {"name": "conv", "kind": {"CallModule": {"target": "conv", "module_type": "Conv2d",
            "module_repr": "Conv2d(3, 4, kernel_size=(3, 3), stride=(1, 1))"}},
            "meta": [{"shape": [1, 4, 2, 2], "dtype": "F32"}], "operands": ["x"]},
        {"name": "scale", "kind": {"CallModule": {"target": "scale", "module_type": "Scale",
            "module_repr": "Scale()"}},
            "meta": [{"shape": [1, 4, 2, 2], "dtype": "F32"}], "operands": ["conv"]},
        {"name": "output", "kind": "Output", "meta": [], "operands": ["scale"]}
    ]}"#;
    let old: Graph = serde_json::from_str(old).unwrap();
    old.verify()?;
    assert_eq!(
        module_kinds(&old),
        named(&[
            ("conv", ModuleKind::Conv2d),
            ("scale", ModuleKind::of::<Scale>())
        ])
    );
    Ok(())
}

#[test]
fn a_repr_naming_another_kind_is_refused() {
    let mut g = Graph::new();
    let x = g.placeholder("x", input());
    for (kind, repr) in [
        (ModuleKind::Linear, "Conv2d(3, 4, kernel_size=(3, 3))"),
        (ModuleKind::Conv2d, "Conv2dTwin(3, 4)"),
        (ModuleKind::from_name("Scale"), "Linear(3, 4)"),
    ] {
        let err = g.call_module("m", kind.clone(), repr, &[&x], vec![input()]);
        assert!(
            matches!(&err, Err(FxError::ModuleKindMismatch { kind: k, .. }) if *k == kind),
            "{repr}: {err:?}"
        );
    }
}

#[test]
fn verify_reports_a_kind_its_repr_does_not_print() -> tessera_fx::Result<()> {
    let model = Mixed::new();
    let graph = trace(&model, input(), LeafPolicy::default())?.graph;
    let json = serde_json::to_string(&graph)
        .unwrap()
        .replace(r#""kind":"Linear""#, r#""kind":"Conv2d""#);
    let edited: Graph = serde_json::from_str(&json).unwrap();
    let err = edited.verify().unwrap_err().to_string();
    assert!(
        err.contains("call_module of kind Conv2d prints as \"Linear(")
            && err.contains("which parses back as Linear"),
        "{err}"
    );
    Ok(())
}

/// A transformer encoder layer followed by a linear head.
#[derive(Module)]
struct EncoderAndHead {
    core: ModuleCore,
    encoder: tessera_nn::layers::TransformerEncoderLayer,
    head: Linear,
}

impl Forward for EncoderAndHead {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> Result<Tensor> {
        self.head.call(self.encoder.call(x)?)
    }
}

#[test]
fn a_transformer_encoder_layer_is_a_typed_leaf_that_prints_parses_and_interprets()
-> tessera_fx::Result<()> {
    use tessera_nn::layers::{TransformerEncoderLayer, TransformerOptions};
    let options = TransformerOptions::default()
        .dim_feedforward(16)
        .batch_first(true);
    let model = EncoderAndHead {
        core: ModuleCore::default(),
        encoder: TransformerEncoderLayer::with_options(8, 2, options).unwrap(),
        head: Linear::new(8, 3).unwrap(),
    };
    model.eval();
    let traced = trace(&model, f32s(&[2, 5, 8]), LeafPolicy::default())?;
    assert_eq!(
        module_kinds(&traced.graph),
        named(&[
            ("encoder", ModuleKind::TransformerEncoderLayer),
            ("head", ModuleKind::Linear)
        ])
    );
    let printed = traced.graph.to_string();
    assert!(
        printed.contains(
            "call_module[encoder: TransformerEncoderLayer((self_attn): MultiheadAttention("
        ),
        "{printed}"
    );
    assert_eq!(Graph::parse(&printed)?.to_string(), printed);
    let x = Tensor::randn(&[2, 5, 8], DType::F32).unwrap();
    let interpreted = traced
        .interpret(&model, std::slice::from_ref(&x))?
        .remove(0);
    assert_eq!(
        interpreted.to_vec::<f32>().unwrap(),
        model.call(x).unwrap().to_vec::<f32>().unwrap()
    );
    Ok(())
}
