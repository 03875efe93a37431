//! Training dropout in graphs: the `dropout` node draws its mask on the host from the global
//! generator when it runs, as the eager op does, and returns it as its second value, which the
//! joint graph's backward reads. So from the same seed a graph (and its joint graph) gives
//! eager's outputs and gradients bit for bit and leaves the generator where eager leaves it.

use std::sync::{Arc, Mutex};
use tessera_fx::GraphModule;
use tessera_fx::trace::{LeafPolicy, trace_with};
use tessera_nn::layers::{Dropout, Dropout2d, Linear, ReLU};
use tessera_nn::{Call, Forward, ModuleExt, Sequential};
use tessera_tensor::{DType, Generator, Tensor, manual_seed, with_global_generator};
use tessera_testkit::f32s;

fn mlp(seed: u64) -> Sequential {
    manual_seed(seed);
    let model = Sequential::new()
        .add(Linear::new(8, 16).unwrap())
        .add(Dropout::new(0.5).unwrap())
        .add(ReLU::new())
        .add(Linear::new(16, 3).unwrap())
        .add(Dropout::new(0.25).unwrap());
    model.train(true);
    model
}

/// The tests seed the process-wide generator: they run one at a time.
static GENERATOR: Mutex<()> = Mutex::new(());

fn next_draw() -> f64 {
    with_global_generator(|g| g.uniform())
}

#[test]
fn a_graph_and_its_joint_graph_draw_eagers_masks_from_the_same_seed() {
    let _serial = GENERATOR.lock().unwrap_or_else(|e| e.into_inner());
    let eager = mlp(1);
    let graphed = Arc::new(mlp(1));
    let traced = trace_with(
        &*graphed,
        &[("x", f32s(&[5, 8]))],
        LeafPolicy::none(),
        |t| Ok(vec![graphed.call(t[0].clone())?.sum_all()?]),
    )
    .unwrap();
    let text = traced.graph.to_string();
    assert_eq!(text.matches("call_function[dropout]").count(), 2, "{text}");
    let gm = GraphModule::new(graphed.clone(), traced);
    let wrt = ["0.weight", "0.bias", "3.weight", "3.bias"];
    let (joint, info) = gm.joint(&wrt).unwrap();
    assert_eq!(info.forward_outputs, 1);

    for step in 0..3u64 {
        let x = Tensor::randn_with(&[5, 8], DType::F32, &mut Generator::new(step)).unwrap();
        let seed = 100 + step;

        manual_seed(seed);
        for (_, p) in eager.named_parameters() {
            p.tensor().set_grad(None);
        }
        let loss = eager.call(x.clone()).unwrap().sum_all().unwrap();
        loss.backward().unwrap();
        let eager_next = next_draw();

        manual_seed(seed);
        let forward_only = gm.call(x.clone()).unwrap();
        let forward_next = next_draw();
        assert_eq!(
            forward_only.to_vec::<f32>().unwrap(),
            loss.to_vec::<f32>().unwrap()
        );
        assert_eq!(
            forward_next, eager_next,
            "the graph draws as many numbers as eager"
        );

        manual_seed(seed);
        let outputs: Vec<Tensor> = joint.forward(vec![x]).unwrap();
        let joint_next = next_draw();
        assert_eq!(
            joint_next, eager_next,
            "the joint graph draws each mask once"
        );
        assert_eq!(
            outputs[0].to_vec::<f32>().unwrap(),
            loss.to_vec::<f32>().unwrap()
        );
        for (name, grad) in wrt.iter().zip(&outputs[1..]) {
            let expected = eager.get_parameter(name).unwrap().tensor().grad().unwrap();
            assert_eq!(
                grad.to_vec::<f32>().unwrap(),
                expected.to_vec::<f32>().unwrap(),
                "gradient of {name} at step {step}"
            );
        }
    }
}

#[test]
fn another_seed_draws_other_masks_in_the_graph() {
    let _serial = GENERATOR.lock().unwrap_or_else(|e| e.into_inner());
    let graphed = Arc::new(mlp(2));
    let traced = trace_with(
        &*graphed,
        &[("x", f32s(&[5, 8]))],
        LeafPolicy::none(),
        |t| Ok(vec![graphed.call(t[0].clone())?]),
    )
    .unwrap();
    let gm = GraphModule::new(graphed.clone(), traced);
    let x = Tensor::ones(&[5, 8], DType::F32).unwrap();
    let run = |seed| {
        manual_seed(seed);
        gm.call(x.clone()).unwrap().to_vec::<f32>().unwrap()
    };
    assert_eq!(run(7), run(7));
    assert_ne!(
        run(7),
        run(8),
        "the mask is drawn at run time, not baked in at trace time"
    );
}

#[test]
fn a_traced_dropout2d_draws_its_channel_mask_each_run_as_eager() {
    let _serial = GENERATOR.lock().unwrap_or_else(|e| e.into_inner());
    let eager = Dropout2d::new(0.5).unwrap();
    eager.train(true);
    let graphed = Arc::new(Dropout2d::new(0.5).unwrap());
    graphed.train(true);
    let traced =
        tessera_fx::trace::trace(&*graphed, f32s(&[3, 4, 2, 2]), LeafPolicy::none()).unwrap();
    assert!(traced.graph.to_string().contains("call_function[dropout]"));
    let gm = GraphModule::new(graphed.clone(), traced);
    let x = Tensor::randn_with(&[3, 4, 2, 2], DType::F32, &mut Generator::new(3)).unwrap();
    let mut outputs = Vec::new();
    for seed in [11, 12] {
        manual_seed(seed);
        let expected = eager.call(x.clone()).unwrap().to_vec::<f32>().unwrap();
        let eager_next = next_draw();
        manual_seed(seed);
        let got = gm.call(x.clone()).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(got, expected, "seed {seed}");
        assert_eq!(next_draw(), eager_next, "seed {seed}");
        outputs.push(got);
    }
    assert_ne!(outputs[0], outputs[1], "the mask is drawn at run time");
}
