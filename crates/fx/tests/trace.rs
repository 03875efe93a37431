//! Tracing modules into graphs: built-in layers become call_module nodes, custom modules are
//! traced through to ops with get_attr of their parameters, shapes are on every node, and
//! reading a traced value is an error naming the module path.

use crate::common;

use common::{f32s, small_cnn};
use tessera_fx::trace::{LeafPolicy, trace, trace_with};
use tessera_nn::{Call, Forward, Module, ModuleCore, Result};
use tessera_tensor::{DType, Tensor};

#[test]
fn the_small_cnn_traces_to_one_call_module_per_layer() -> tessera_fx::Result<()> {
    let cnn = small_cnn();
    let traced = trace(&cnn, f32s(&[1, 3, 32, 32]), LeafPolicy::default())?;
    traced.graph.verify()?;
    assert_eq!(
        traced.graph.to_string(),
        "graph(x: f32[1, 3, 32, 32]):
    %conv1 : f32[1, 16, 32, 32] = call_module[conv1: Conv2d(3, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))](%x)
    %bn1 : f32[1, 16, 32, 32] = call_module[bn1: BatchNorm2d(16, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)](%conv1)
    %relu1 : f32[1, 16, 32, 32] = call_module[relu1: ReLU()](%bn1)
    %pool1 : f32[1, 16, 16, 16] = call_module[pool1: MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)](%relu1)
    %conv2 : f32[1, 32, 8, 8] = call_module[conv2: Conv2d(16, 32, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))](%pool1)
    %bn2 : f32[1, 32, 8, 8] = call_module[bn2: BatchNorm2d(32, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)](%conv2)
    %relu2 : f32[1, 32, 8, 8] = call_module[relu2: ReLU()](%bn2)
    %gap : f32[1, 32, 1, 1] = call_module[gap: AdaptiveAvgPool2d(output_size=1)](%relu2)
    %flatten : f32[1, 32] = call_module[flatten: Flatten(start_dim=1, end_dim=-1)](%gap)
    %fc : f32[1, 10] = call_module[fc: Linear(in_features=32, out_features=10, bias=True)](%flatten)
    return %fc
"
    );
    // The module's real parameters are back after tracing and run as before.
    assert!(!cnn.conv1.weight.is_meta());
    assert_eq!(
        cnn.call(Tensor::zeros(&[1, 3, 32, 32], DType::F32).unwrap())
            .unwrap()
            .shape(),
        vec![1, 10]
    );
    Ok(())
}

#[test]
fn with_no_leaves_layers_expand_into_ops_reading_their_parameters() -> tessera_fx::Result<()> {
    let cnn = small_cnn();
    let traced = trace(&cnn, f32s(&[2, 3, 16, 16]), LeafPolicy::none())?;
    traced.graph.verify()?;
    let text = traced.graph.to_string();
    assert!(text.contains("get_attr[conv1.weight]"), "{text}");
    assert!(text.contains("call_function[conv2d]"), "{text}");
    assert!(text.contains("get_attr[bn1.running_mean]"), "{text}");
    assert!(text.contains("return %linear"), "{text}");
    assert!(traced.attributes.contains_key("fc.bias") && !traced.attributes["fc.bias"].is_meta());
    assert_eq!(
        tessera_fx::Graph::parse(&text)?.to_string(),
        text,
        "the traced graph parses back"
    );
    Ok(())
}

use tessera_nn::models::note::{MyLinear, Net};

fn my_linear(i: usize, o: usize) -> MyLinear {
    MyLinear::new(i, o).unwrap()
}

#[test]
fn custom_modules_are_traced_through_and_leaves_can_be_chosen_by_path() -> tessera_fx::Result<()> {
    let net = Net::new().unwrap();
    let traced = trace(&net, f32s(&[8, 4]), LeafPolicy::default())?;
    assert_eq!(
        traced.graph.to_string(),
        "graph(x: f32[8, 4]):
    %l0_weight : f32[4, 3] = get_attr[l0.weight]
    %matmul : f32[8, 3] = call_function[matmul](%x, %l0_weight)
    %l0_bias : f32[3] = get_attr[l0.bias]
    %add : f32[8, 3] = call_function[add](%matmul, %l0_bias)
    %relu : f32[8, 3] = call_function[relu](%add)
    %l1_weight : f32[3, 1] = get_attr[l1.weight]
    %matmul_1 : f32[8, 1] = call_function[matmul](%relu, %l1_weight)
    %l1_bias : f32[1] = get_attr[l1.bias]
    %add_1 : f32[8, 1] = call_function[add](%matmul_1, %l1_bias)
    return %add_1
"
    );
    let by_path = trace(&net, f32s(&[8, 4]), LeafPolicy::default().leaf_path("l1"))?;
    assert!(
        by_path
            .graph
            .to_string()
            .contains("call_module[l1: MyLinear()](%relu)"),
        "{}",
        by_path.graph
    );
    Ok(())
}

#[test]
fn several_inputs_and_outputs_and_fixed_non_tensor_arguments() -> tessera_fx::Result<()> {
    let net = Net::new().unwrap();
    let inputs = [("a", f32s(&[2, 4])), ("b", f32s(&[2, 4]))];
    let traced = trace_with(&net, &inputs, LeafPolicy::default(), |t| {
        let sum = t[0].add(&t[1])?;
        Ok(vec![net.call(sum.clone())?, sum])
    })?;
    let text = traced.graph.to_string();
    assert!(
        text.starts_with("graph(a: f32[2, 4], b: f32[2, 4]):"),
        "{text}"
    );
    assert!(text.ends_with("return (%add_2, %add)\n"), "{text}");
    Ok(())
}

#[derive(Module)]
struct Branchy {
    core: ModuleCore,
    inner: MyLinear,
}

impl Forward for Branchy {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> Result<Tensor> {
        self.inner.call(x)
    }
}

impl Forward for MyLinearWithBranch {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> Result<Tensor> {
        // Data-dependent control flow: not traceable.
        if x.sum_all()?.item::<f32>()? > 0.0 {
            Ok(x)
        } else {
            Ok(x.neg()?)
        }
    }
}

#[derive(Module)]
struct MyLinearWithBranch {
    core: ModuleCore,
}

#[derive(Module)]
struct Outer {
    core: ModuleCore,
    branchy: MyLinearWithBranch,
}

impl Forward for Outer {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> Result<Tensor> {
        self.branchy.call(x)
    }
}

#[test]
fn reading_a_traced_value_is_a_trace_error_naming_the_module_and_op() {
    let outer = Outer {
        core: ModuleCore::default(),
        branchy: MyLinearWithBranch {
            core: ModuleCore::default(),
        },
    };
    let err = trace(&outer, f32s(&[3]), LeafPolicy::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("branchy (MyLinearWithBranch)") && err.contains("meta device"),
        "{err}"
    );
    let shape_err = trace(
        &Branchy {
            core: ModuleCore::default(),
            inner: my_linear(4, 3),
        },
        f32s(&[2, 5]),
        LeafPolicy::default(),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        shape_err.contains("inner (MyLinear)")
            && shape_err.contains("[2, 5]")
            && shape_err.contains("[4, 3]"),
        "{shape_err}"
    );
}

#[test]
fn an_example_tensor_stands_for_its_shape_and_dtype() -> tessera_fx::Result<()> {
    let cnn = small_cnn();
    let example = Tensor::zeros(&[2, 3, 8, 8], DType::F32).unwrap();
    let traced = trace(&cnn, &example, LeafPolicy::default())?;
    assert!(
        traced
            .graph
            .to_string()
            .starts_with("graph(x: f32[2, 3, 8, 8]):")
    );
    Ok(())
}
