//! Issue 14's layers that `q_layers_misc` does not cover (ZeroPad2d, Unflatten, Dropout2d,
//! CosineSimilarity, MarginRankingLoss, the 2-D EmbeddingBag call): expected values from their
//! definitions in PyTorch's documentation, reprs as PyTorch prints them, and errors.

use tessera_nn::layers::{
    CosineSimilarity, Dropout2d, EmbeddingBag, MarginRankingLoss, Unflatten, ZeroPad2d,
};
use tessera_nn::{Call, ModuleExt};
use tessera_tensor::functional::Reduction;
use tessera_tensor::{DType, Tensor};

fn t(values: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(values.to_vec(), shape).unwrap()
}

#[test]
fn zero_pad2d_pads_left_right_top_bottom_and_crops_when_negative() {
    let x = t(&[1.0, 2.0, 3.0, 4.0], &[1, 2, 2]);
    let pad = ZeroPad2d::with_sides([1, 0, 0, 1]);
    assert_eq!(pad.repr(), "ZeroPad2d((1, 0, 0, 1))");
    let y = pad.call(x.clone()).unwrap();
    assert_eq!(y.shape(), [1, 3, 3]);
    assert_eq!(
        y.to_vec_f64().unwrap(),
        [0.0, 1.0, 2.0, 0.0, 3.0, 4.0, 0.0, 0.0, 0.0]
    );
    let crop = ZeroPad2d::with_sides([-1, 0, 0, 0])
        .call(x.clone())
        .unwrap();
    assert_eq!(crop.to_vec_f64().unwrap(), [2.0, 4.0]);
    assert_eq!(ZeroPad2d::new(2).repr(), "ZeroPad2d((2, 2, 2, 2))");
    assert!(
        ZeroPad2d::new(-2).call(x).is_err(),
        "cropping more than there is"
    );
}

#[test]
fn zero_pad2d_passes_gradients_to_the_kept_elements_only() {
    let x = t(&[1.0, 2.0, 3.0, 4.0], &[1, 2, 2])
        .requires_grad_(true)
        .unwrap();
    let y = ZeroPad2d::with_sides([1, -1, 1, 0])
        .call(x.clone())
        .unwrap();
    y.sum_all().unwrap().backward().unwrap();
    assert_eq!(
        x.grad().unwrap().to_vec_f64().unwrap(),
        [1.0, 0.0, 1.0, 0.0]
    );
}

#[test]
fn unflatten_splits_one_dimension() {
    let layer = Unflatten::new(1, &[2, 5]);
    assert_eq!(layer.repr(), "Unflatten(dim=1, unflattened_size=(2, 5))");
    let y = layer
        .call(Tensor::zeros(&[3, 10, 4], DType::F32).unwrap())
        .unwrap();
    assert_eq!(y.shape(), [3, 2, 5, 4]);
    let last = Unflatten::new(-1, &[2, 2]);
    assert_eq!(
        last.call(Tensor::zeros(&[3, 4], DType::F32).unwrap())
            .unwrap()
            .shape(),
        [3, 2, 2]
    );
    assert!(
        layer
            .call(Tensor::zeros(&[3, 9], DType::F32).unwrap())
            .is_err()
    );
    assert!(
        Unflatten::new(5, &[1])
            .call(Tensor::zeros(&[3], DType::F32).unwrap())
            .is_err()
    );
}

#[test]
fn dropout2d_zeroes_whole_channels_in_training_only() {
    let layer = Dropout2d::new(0.5).unwrap();
    assert_eq!(layer.repr(), "Dropout2d(p=0.5, inplace=False)");
    let x = Tensor::ones(&[4, 8, 3, 3], DType::F32).unwrap();
    let y = layer.call(x.clone()).unwrap();
    let values = y.to_vec_f64().unwrap();
    // Each channel is all 0 or all 1 / (1 - p) = 2.
    for channel in values.chunks(9) {
        assert!(channel.iter().all(|&v| v == channel[0]), "{channel:?}");
        assert!(channel[0] == 0.0 || channel[0] == 2.0);
    }
    layer.eval();
    assert_eq!(
        layer.call(x.clone()).unwrap().to_vec_f64().unwrap(),
        x.to_vec_f64().unwrap()
    );
    assert!(Dropout2d::new(1.5).is_err());
    assert!(layer.call(Tensor::ones(&[4], DType::F32).unwrap()).is_err());
}

#[test]
fn cosine_similarity_layer_compares_along_dim_1_by_default() {
    let layer = CosineSimilarity::default();
    assert_eq!(layer.repr(), "CosineSimilarity()");
    let a = t(&[1.0, 0.0, 1.0, 1.0], &[2, 2]);
    let b = t(&[0.0, 3.0, 2.0, 2.0], &[2, 2]);
    let y = layer.call((a, b)).unwrap().to_vec_f64().unwrap();
    assert!(y[0].abs() < 1e-7 && (y[1] - 1.0).abs() < 1e-6, "{y:?}");
}

#[test]
fn margin_ranking_loss_averages_the_hinge() {
    // mean(max(0, -y * (x1 - x2) + 0.5)) over (1, 0, y = 1) -> 0 and (1, 0, y = -1) -> 1.5.
    let layer = MarginRankingLoss::new(Reduction::Mean, 0.5);
    assert_eq!(layer.repr(), "MarginRankingLoss()");
    let loss = layer
        .call((
            t(&[1.0, 1.0], &[2]),
            t(&[0.0, 0.0], &[2]),
            t(&[1.0, -1.0], &[2]),
        ))
        .unwrap();
    assert_eq!(loss.to_vec_f64().unwrap(), [0.75]);
}

#[test]
fn embedding_bag_takes_a_2d_input_as_bags_of_equal_size() {
    let bag = EmbeddingBag::new(10, 3).unwrap();
    assert_eq!(bag.repr(), "EmbeddingBag(10, 3, mode='mean')");
    let input = Tensor::from_vec(vec![1i64, 2, 3, 4], &[2, 2]).unwrap();
    let y = bag.call(input).unwrap();
    assert_eq!(y.shape(), [2, 3]);
    let w = bag.weight.tensor();
    let expected = w
        .select(0, 1)
        .unwrap()
        .add(&w.select(0, 2).unwrap())
        .unwrap()
        .div_scalar(2.0)
        .unwrap();
    assert_eq!(
        y.select(0, 0).unwrap().to_vec_f64().unwrap(),
        expected.to_vec_f64().unwrap()
    );
}
