//! `tessera::compile` end to end: models with ops the lowering does not cover yet compile with
//! fallbacks and give the graph interpreter's result (the PyTorch conformance CNN included);
//! an elementwise graph compiles to kernels only, in f16 and bf16 too; new input shapes compile
//! again.

use std::sync::Arc;
use tessera::fx::GraphModule;
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::nn::models::{BasicBlock, SmallCnn};
use tessera::nn::{Call, ModuleExt, load_pt_state_dict};
use tessera::tensor::{DType, Tensor};
use tessera::{Backend, CompileOptions, compile};
use tessera_testkit::{Case, assert_close, conformance_dir};

fn small_cnn_eval(case: &str) -> (Arc<SmallCnn>, GraphModule, Tensor) {
    let model = Arc::new(SmallCnn::new().unwrap());
    let path = conformance_dir().join(case).join("state_dict.pt");
    model
        .load_state_dict(&load_pt_state_dict(path).unwrap(), true, false)
        .unwrap();
    model.train(false);
    let x = Case::load(case).io("input").to_dtype(DType::F32).unwrap();
    let gm = GraphModule::new(
        model.clone(),
        trace(&*model, &x, LeafPolicy::default()).unwrap(),
    );
    (model, gm, x)
}

#[test]
fn conformance_cnn_compiles_with_fallbacks_and_matches_pytorch_and_the_interpreter() {
    let case = Case::load("d_cnn_eval");
    let (_, gm, x) = small_cnn_eval("d_cnn_eval");
    let interpreted = gm.call(x.clone()).unwrap();
    for backend in [Backend::Jit, Backend::Interpreter] {
        let compiled = compile(
            &gm,
            std::slice::from_ref(&x),
            CompileOptions {
                backend,
                ..CompileOptions::default()
            },
        )
        .unwrap();
        let out = compiled.run(std::slice::from_ref(&x)).unwrap().remove(0);
        assert_close(&out, &interpreted, 1e-5, 1e-5, "compiled vs interpreter");
        case.check("output", &out);
        let report = compiled.report();
        assert!(report.kernels > 0, "{report}");
        // conv1, its ReLU and the max pool are one kernel whose call pools; conv2's ReLU is
        // the average pool's prologue, so conv2 has nothing to fuse and runs its eager kernel.
        let kernels = compiled.kernels();
        assert!(kernels.contains("conv2d_max_pool2d_epilogue"), "{kernels}");
        assert!(kernels.contains("then relu then max_pool 2x2"), "{kernels}");
        assert!(
            report
                .fallbacks
                .iter()
                .any(|f| f.op == "conv2d" && f.reason.contains("no elementwise epilogue")),
            "{report}"
        );
    }
}

#[test]
fn compiled_cnn_compiles_again_for_a_strided_input_and_caches_it() {
    let (_, gm, x) = small_cnn_eval("d_cnn_eval");
    let compiled = compile(&gm, std::slice::from_ref(&x), CompileOptions::default()).unwrap();
    assert_eq!(compiled.report().compiles, 1);
    // The same values, strided: the transpose of a packed tensor with H and W swapped.
    let strided = x
        .transpose(2, 3)
        .unwrap()
        .contiguous()
        .unwrap()
        .transpose(2, 3)
        .unwrap();
    assert!(!strided.is_contiguous());
    let out = compiled
        .run(std::slice::from_ref(&strided))
        .unwrap()
        .remove(0);
    assert_close(
        &out,
        &gm.call(x.clone()).unwrap(),
        1e-5,
        1e-5,
        "strided input",
    );
    assert_eq!(compiled.report().compiles, 2);
    compiled.run(std::slice::from_ref(&strided)).unwrap();
    compiled.run(std::slice::from_ref(&x)).unwrap();
    assert_eq!(compiled.report().compiles, 2, "both programs are cached");
}

#[test]
fn elementwise_module_compiles_to_kernels_only() {
    use tessera::fx::Graph;
    use tessera::tensor::op::{BinaryOp, UnaryOp};
    use tessera::tensor::{Op, TensorMeta};
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new([4, 33], DType::F32));
    let b = g.placeholder("b", TensorMeta::new([33], DType::F32));
    let s = g
        .call_function(Op::Binary(BinaryOp::Add), &[&x, &b])
        .unwrap();
    let y = g
        .call_function(Op::Unary(UnaryOp::Gelu { tanh: false }), &[&s])
        .unwrap();
    g.output(&[&y]).unwrap();
    let gm = GraphModule::from_graph(g);
    let inputs = [
        Tensor::randn(&[4, 33], DType::F32).unwrap(),
        Tensor::randn(&[33], DType::F32).unwrap(),
    ];
    let compiled = compile(&gm, &inputs, CompileOptions::default()).unwrap();
    let report = compiled.report();
    assert!(report.fallbacks.is_empty(), "{report}");
    assert_eq!(report.kernels, 1);
    let expected = inputs[0].add(&inputs[1]).unwrap().gelu().unwrap();
    assert_close(
        &compiled.run(&inputs).unwrap()[0],
        &expected,
        0.0,
        0.0,
        "gelu(x + b)",
    );
    assert!(compiled.kernels().contains("erf"), "{}", compiled.kernels());
}

/// A module converted to f16 or bf16 compiles to kernels (loads widened to f32, each op's
/// result rounded to the half type as eager rounds it) and gives the eager module's result.
#[test]
fn half_precision_norm_and_activation_compile_to_kernels_and_match_eager() {
    use tessera::compile_layer;
    use tessera::nn::Sequential;
    use tessera::nn::layers::{GELU, LayerNorm};
    for dtype in [DType::F16, DType::BF16] {
        let model = Arc::new(
            Sequential::new()
                .add(LayerNorm::new(&[40]).unwrap())
                .add(GELU::new()),
        );
        model.eval();
        model.to_dtype(dtype).unwrap();
        let x = Tensor::randn(&[6, 40], DType::F32)
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        let compiled = compile_layer(model.clone(), &x, CompileOptions::default()).unwrap();
        let report = compiled.report();
        assert!(report.fallbacks.is_empty(), "{report}");
        assert!(report.kernels > 0, "{report}");
        let out = compiled.call(x.clone()).unwrap();
        assert_eq!(out.dtype(), dtype);
        let eps = dtype.epsilon().unwrap();
        assert_close(
            &out,
            &model.call(x).unwrap(),
            4.0 * eps,
            4.0 * eps,
            "half model",
        );
    }
}

#[test]
fn attention_like_block_compiles_norms_softmax_and_gemm_epilogues_to_kernels() {
    use tessera::fx::Graph;
    use tessera::tensor::op::{NormOp, UnaryOp};
    use tessera::tensor::{Op, TensorMeta};
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new([4, 16], DType::F32));
    let w = g.placeholder("w", TensorMeta::new([8, 16], DType::F32));
    let b = g.placeholder("b", TensorMeta::new([8], DType::F32));
    let layer_norm = Op::Norm(NormOp::LayerNorm {
        normalized_ndim: 1,
        eps: 1e-5,
        weight: false,
        bias: false,
    });
    let norm = g.call_function(layer_norm.clone(), &[&x]).unwrap();
    let y = g.getitem(&norm, 0).unwrap();
    let h = g
        .call_function(Op::Linear { bias: true }, &[&y, &w, &b])
        .unwrap();
    let h = g
        .call_function(Op::Unary(UnaryOp::Gelu { tanh: false }), &[&h])
        .unwrap();
    let p = g
        .call_function(Op::Softmax { dim: 1, log: false }, &[&h])
        .unwrap();
    g.output(&[&p]).unwrap();
    let gm = GraphModule::from_graph(g);
    let inputs = [
        Tensor::randn(&[4, 16], DType::F32).unwrap(),
        Tensor::randn(&[8, 16], DType::F32).unwrap(),
        Tensor::randn(&[8], DType::F32).unwrap(),
    ];
    let y = layer_norm.apply(&[&inputs[0]]).unwrap().remove(0);
    let h = Op::Linear { bias: true }
        .apply1(&[&y, &inputs[1], &inputs[2]])
        .unwrap();
    let expected = h.gelu().unwrap().softmax(1).unwrap();
    for backend in [Backend::Jit, Backend::Interpreter] {
        let options = CompileOptions {
            backend,
            ..CompileOptions::default()
        };
        let compiled = compile(&gm, &inputs, options).unwrap();
        let report = compiled.report();
        assert!(report.fallbacks.is_empty(), "{report}");
        // The norm, the GEMM with its bias and GELU, the softmax.
        assert_eq!(report.kernels, 3, "{}", compiled.kernels());
        let out = compiled.run(&inputs).unwrap().remove(0);
        assert_close(&out, &expected, 1e-5, 1e-6, "compiled vs eager");
        // Each kernel's IR, and its CLIF with the JIT, can be written out for reading.
        let dir =
            std::env::temp_dir().join(format!("tessera_dump_{backend:?}_{}", std::process::id()));
        compiled.dump_kernels(&dir).unwrap();
        let files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let count = |ext: &str| files.iter().filter(|f| f.ends_with(ext)).count();
        assert_eq!(count(".kir"), 3, "{files:?}");
        let clif = if backend == Backend::Jit { 3 } else { 0 };
        assert_eq!(count(".clif"), clif, "{files:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn residual_block_whose_relu_feeds_a_convolution_and_a_later_add_compiles() {
    // The block input's ReLU, the residual add and the final ReLU form one fusion group, but
    // the first convolution reads the ReLU before the add: the lowering must emit the ReLU's
    // kernel before the convolution (this failed with "has no value yet" on ResNet-18).
    tessera::manual_seed(0);
    let stem = Arc::new(
        tessera::nn::Sequential::new()
            .add(tessera::nn::layers::ReLU::new())
            .add(BasicBlock::new(4, 4, 1).unwrap()),
    );
    stem.train(false);
    let x = Tensor::randn(&[2, 4, 6, 6], DType::F32).unwrap();
    let gm = GraphModule::new(
        stem.clone(),
        trace(&*stem, &x, LeafPolicy::default()).unwrap(),
    );
    let expected = gm.call(x.clone()).unwrap();
    for backend in [Backend::Jit, Backend::Interpreter] {
        let options = CompileOptions {
            backend,
            ..CompileOptions::default()
        };
        let compiled = compile(&gm, std::slice::from_ref(&x), options).unwrap();
        let out = compiled.run(std::slice::from_ref(&x)).unwrap().remove(0);
        assert_close(&out, &expected, 1e-5, 1e-5, "compiled residual block");
    }
}

#[test]
fn resnet18_compiles_when_a_prologue_relu_also_feeds_a_convolution() {
    // After batch-norm folding, a ReLU fused in front of a reduction (the global average pool)
    // was also read by a convolution before it: "%relu_15 has no value yet".
    use tessera::nn::models::ResNet18;
    tessera::manual_seed(0);
    let net = Arc::new(ResNet18::new(10).unwrap());
    net.train(false);
    let x = Tensor::randn(&[1, 3, 32, 32], DType::F32).unwrap();
    let gm = GraphModule::new(
        net.clone(),
        trace(&*net, x.meta(), LeafPolicy::default()).unwrap(),
    );
    let expected = gm.call(x.clone()).unwrap();
    let options = CompileOptions {
        backend: Backend::Interpreter,
        ..CompileOptions::default()
    };
    let compiled = compile(&gm, std::slice::from_ref(&x), options).unwrap();
    let out = compiled.run(std::slice::from_ref(&x)).unwrap().remove(0);
    assert_close(&out, &expected, 1e-4, 1e-4, "compiled ResNet-18");
}

#[test]
fn a_sequential_behind_arc_box_dyn_layer_compiles_with_the_default_leaf_policy() {
    use tessera::nn::{Layer, Linear, ReLU, Sequential};
    let seq = Sequential::new()
        .add(Linear::new(6, 5).unwrap())
        .add(ReLU::default())
        .add(Linear::new(5, 3).unwrap());
    let model: Arc<Box<dyn Layer>> = Arc::new(Box::new(seq));
    let x = Tensor::randn(&[4, 6], DType::F32).unwrap();
    let gm = GraphModule::new(
        model.clone(),
        trace(&*model, &x, LeafPolicy::default()).unwrap(),
    );
    let compiled = compile(&gm, std::slice::from_ref(&x), CompileOptions::default()).unwrap();
    let out = compiled.run(std::slice::from_ref(&x)).unwrap().remove(0);
    assert_close(
        &out,
        &model.call(x).unwrap(),
        1e-5,
        1e-5,
        "compiled vs eager",
    );
}
