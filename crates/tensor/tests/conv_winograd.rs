//! Winograd convolutions (F(2x2,3x3) and F(4x4,3x3)) equal the eager convolution: in f64 to
//! rounding, in f32 within a bound relative to the largest sum of the products' magnitudes
//! (the largest element of `conv(|x|, |w|)`, the scale of the outputs' rounding errors), over
//! random batches, channel counts, odd spatial sizes, paddings and blocks of images.

use proptest::prelude::*;
use tessera_tensor::op::{
    ConvOp, ConvParams, WinogradTile, conv2d_winograd_images_into, winograd_applies,
    winograd_weight_shape, winograd_weights, winograd_weights_into,
};
use tessera_tensor::{DType, Generator, Op, Tensor};

/// The f32 error bound of F(4x4,3x3), relative to `conv(|x|, |w|)` at the output.
const F4_F32_TOLERANCE: f64 = 1e-5;
/// The f32 error bound of F(2x2,3x3), relative to `conv(|x|, |w|)` at the output.
const F2_F32_TOLERANCE: f64 = 1e-6;
/// The f64 bound of both, relative to `conv(|x|, |w|)`.
const F64_TOLERANCE: f64 = 1e-14;

fn random(shape: &[usize], dtype: DType, seed: u64) -> Tensor {
    let mut g = Generator::new(seed);
    Tensor::randn_with(shape, dtype, &mut g).unwrap()
}

fn eager_conv(x: &Tensor, w: &Tensor, pad: usize) -> Tensor {
    let params = ConvParams::conv2d([1, 1], [pad, pad], [1, 1], 1);
    Op::Conv(ConvOp::Forward {
        params,
        bias: false,
    })
    .apply1(&[x, w])
    .unwrap()
}

/// The Winograd convolution of images `images` of `x` by `w`, as f64 values.
fn winograd<T: tessera_tensor::Float>(
    tile: WinogradTile,
    x: &Tensor,
    w: &Tensor,
    pad: usize,
    images: std::ops::Range<usize>,
    image_len: usize,
) -> Vec<f64> {
    let params = ConvParams::conv2d([1, 1], [pad, pad], [1, 1], 1);
    let (xs, ws) = (x.shape(), w.shape());
    let mut u = vec![T::zero(); winograd_weight_shape(tile, &ws).iter().product()];
    let wv = w.to_vec::<T>().unwrap();
    winograd_weights_into(tile, &ws, &wv, &mut u).unwrap();
    let mut out = vec![T::zero(); images.len() * image_len];
    let xv = x.to_vec::<T>().unwrap();
    conv2d_winograd_images_into(tile, params, &xs, &ws, &xv, &u, images, &mut out).unwrap();
    out.iter().map(|v| v.to_f64().unwrap()).collect()
}

/// The largest `|got - expected|` over `got` (the outputs from element `offset` on), divided
/// by the largest element of `scale`.
fn worst_error(got: &[f64], expected: &Tensor, scale: &Tensor, offset: usize) -> f64 {
    let (e, s) = (expected.to_vec_f64().unwrap(), scale.to_vec_f64().unwrap());
    let scale = s.iter().copied().fold(1e-300, f64::max);
    got.iter()
        .enumerate()
        .map(|(i, g)| (g - e[offset + i]).abs())
        .fold(0.0, f64::max)
        / scale
}

#[derive(Debug, Clone)]
struct Case {
    n: usize,
    c_in: usize,
    c_out: usize,
    h: usize,
    w: usize,
    pad: usize,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        1usize..4,
        1usize..10,
        1usize..10,
        1usize..16,
        1usize..16,
        0usize..3,
        any::<u64>(),
    )
        .prop_filter(
            "the padded input holds the kernel",
            |(_, _, _, h, w, pad, _)| h + 2 * pad >= 3 && w + 2 * pad >= 3,
        )
        .prop_map(|(n, c_in, c_out, h, w, pad, seed)| Case {
            n,
            c_in,
            c_out,
            h,
            w,
            pad,
            seed,
        })
}

/// Checks both tiles on `c` in `dtype` against the f64 eager convolution, for the whole batch
/// and for the images after the first (a block that does not start at image 0).
fn check(c: &Case, dtype: DType) -> Result<(), TestCaseError> {
    check_tiles(c, dtype, &[WinogradTile::F2x2, WinogradTile::F4x4])
}

/// [`check`] with the tiles `tiles`.
fn check_tiles(c: &Case, dtype: DType, tiles: &[WinogradTile]) -> Result<(), TestCaseError> {
    let x = random(&[c.n, c.c_in, c.h, c.w], dtype, c.seed);
    let w = random(&[c.c_out, c.c_in, 3, 3], dtype, c.seed ^ 0x5eed);
    let (x64, w64) = (
        x.to_dtype(DType::F64).unwrap(),
        w.to_dtype(DType::F64).unwrap(),
    );
    let expected = eager_conv(&x64, &w64, c.pad);
    let scale = eager_conv(&x64.abs().unwrap(), &w64.abs().unwrap(), c.pad);
    let out_shape = expected.shape();
    let image_len: usize = out_shape[1..].iter().product();
    for &tile in tiles {
        let tol = match (dtype, tile) {
            (DType::F64, _) => F64_TOLERANCE,
            (_, WinogradTile::F4x4) => F4_F32_TOLERANCE,
            (_, WinogradTile::F2x2) => F2_F32_TOLERANCE,
        };
        for first in [0, c.n - 1] {
            let got = if dtype == DType::F64 {
                winograd::<f64>(tile, &x, &w, c.pad, first..c.n, image_len)
            } else {
                winograd::<f32>(tile, &x, &w, c.pad, first..c.n, image_len)
            };
            let err = worst_error(&got, &expected, &scale, first * image_len);
            if std::env::var_os("WINOGRAD_ERRORS").is_some() {
                eprintln!("ERR {tile} {dtype:?} {err:e} {c:?}");
            }
            prop_assert!(
                err <= tol,
                "{tile} {dtype:?} {c:?} from image {first}: error {err:e} > {tol:e}"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn winograd_equals_the_eager_convolution_in_f64(c in case()) {
        check(&c, DType::F64)?;
    }

    #[test]
    fn winograd_equals_the_eager_convolution_in_f32_within_its_bound(c in case()) {
        check(&c, DType::F32)?;
    }
}

/// ResNet-like channel counts, where the sum over channels is long: the f32 bound holds.
#[test]
fn winograd_f32_error_stays_within_its_bound_over_many_channels() {
    for (ci, co, hw) in [(64, 64, 14), (256, 32, 7), (16, 128, 9)] {
        let c = Case {
            n: 1,
            c_in: ci,
            c_out: co,
            h: hw,
            w: hw,
            pad: 1,
            seed: ci as u64,
        };
        check(&c, DType::F32).unwrap();
    }
}

/// Rows of more tiles than one step of the transforms (eight) and than one chunk of a row
/// (sixteen), in both tiles and both types: whole steps, a chunk's last partial step, and a
/// row split into chunks.
#[test]
fn winograd_rows_wider_than_a_chunk_of_tiles() {
    for (w, pad) in [(70, 1), (37, 0), (66, 2)] {
        let c = Case {
            n: 2,
            c_in: 3,
            c_out: 4,
            h: 9,
            w,
            pad,
            seed: w as u64,
        };
        check(&c, DType::F64).unwrap();
        check(&c, DType::F32).unwrap();
    }
}

/// Tiles the transforms take together in one band of whole tile rows (the transforms' band
/// capacity): an image of rows of up to sixteen tiles is cut into bands of `256 / tiles_x`
/// rows.
const BAND_TILES: usize = 256;

/// Images whose tile rows exactly fill one band and images with one row more (a second band
/// of one row), for every row width up to one past a chunk (1..=17 tiles, the widest a
/// chunk of one row), both tiles, paddings 0 and 1, and odd sizes (a partial last tile
/// column or row): each band's tiles, its last partial step of eight and the next band's
/// first tile land in their own outputs.
#[test]
fn winograd_bands_of_tile_rows_fill_and_overflow() {
    for tile in [WinogradTile::F2x2, WinogradTile::F4x4] {
        let m = tile.output();
        for tiles_x in 1..=17 {
            let band_rows = if tiles_x > 16 {
                1
            } else {
                BAND_TILES / tiles_x
            };
            for (pad, tiles_y) in [0, 1]
                .into_iter()
                .flat_map(|pad| [(pad, band_rows), (pad, band_rows + 1)])
            {
                // Odd widths and heights where the tile counts allow: the last tile is partial.
                let (ow, oh) = (tiles_x * m - tiles_x % 2, tiles_y * m - (tiles_y + 1) % 2);
                let c = Case {
                    n: 2,
                    c_in: 2,
                    c_out: 3,
                    h: oh + 2 - 2 * pad,
                    w: ow + 2 - 2 * pad,
                    pad,
                    seed: (tiles_x * 100 + tiles_y) as u64,
                };
                check_tiles(&c, DType::F64, &[tile]).unwrap();
                check_tiles(&c, DType::F32, &[tile]).unwrap();
            }
        }
    }
}

#[test]
fn winograd_applies_only_to_3x3_stride_1_undilated_ungrouped_convolutions() {
    let same = ConvParams::conv2d([1, 1], [1, 1], [1, 1], 1);
    assert!(winograd_applies(&same, &[8, 4, 3, 3]));
    assert!(!winograd_applies(&same, &[8, 4, 5, 5]));
    let strided = ConvParams::conv2d([2, 1], [1, 1], [1, 1], 1);
    assert!(!winograd_applies(&strided, &[8, 4, 3, 3]));
    let dilated = ConvParams::conv2d([1, 1], [1, 1], [1, 2], 1);
    assert!(!winograd_applies(&dilated, &[8, 4, 3, 3]));
    let grouped = ConvParams::conv2d([1, 1], [1, 1], [1, 1], 2);
    assert!(!winograd_applies(&grouped, &[8, 2, 3, 3]));
    assert!(!winograd_applies(
        &ConvParams::conv1d(1, 1, 1, 1),
        &[8, 4, 3]
    ));
}

/// Output channels in two blocks of the transformed weights (64 and a padded 6), on calls of
/// few tiles (whose products are computed transposed, along the channels: up to 32 columns)
/// and of many (along the tiles): 7x7 images (4 F(4x4) tiles, 16 F(2x2) ones) and 14x14 (16
/// and 49), one image and several.
#[test]
fn winograd_blocks_of_output_channels_on_few_and_many_tiles() {
    for (hw, n) in [(7, 1), (7, 5), (14, 1), (14, 3)] {
        let c = Case {
            n,
            c_in: 33,
            c_out: 70,
            h: hw,
            w: hw,
            pad: 1,
            seed: (hw * 10 + n) as u64,
        };
        check(&c, DType::F64).unwrap();
        check(&c, DType::F32).unwrap();
    }
}

#[test]
fn transformed_weights_are_one_matrix_per_point_in_blocks_of_64_output_channels() {
    let (co, ci) = (70, 3);
    let w = random(&[co, ci, 3, 3], DType::F32, 1);
    let u = winograd_weights(WinogradTile::F4x4, &w).unwrap();
    assert_eq!(u.shape(), [36, 2, ci, 64]);
    let u = winograd_weights(WinogradTile::F2x2, &w.to_dtype(DType::F64).unwrap()).unwrap();
    assert_eq!((u.shape(), u.dtype()), (vec![16, 2, ci, 64], DType::F64));
    // The F(2x2) transform's corner point is the kernel's corner (G's first row is (1, 0, 0)):
    // point 0 holds w[o, c, 0, 0] at row c, column o % 64 of block o / 64, and zeros past
    // the last channel.
    let (wv, uv) = (w.to_vec_f64().unwrap(), u.to_vec_f64().unwrap());
    for o in 0..128 {
        for c in 0..ci {
            let at = ((o / 64) * ci + c) * 64 + o % 64;
            let expected = if o < co { wv[(o * ci + c) * 9] } else { 0.0 };
            assert_eq!(uv[at], expected, "channel {o}, input {c}");
        }
    }
}

#[test]
fn mismatched_buffers_are_errors_naming_the_shapes() {
    let params = ConvParams::conv2d([1, 1], [1, 1], [1, 1], 1);
    let x = vec![0.0f32; 2 * 3 * 5 * 5];
    let tile = WinogradTile::F4x4;
    // Weights of the right size, so that each refusal below is for its own reason.
    let u = vec![0.0f32; winograd_weight_shape(tile, &[4, 3, 3, 3]).iter().product()];
    let mut out = vec![0.0f32; 4 * 5 * 5];
    // Two images' outputs do not fit one image's buffer.
    let e = conv2d_winograd_images_into(
        tile,
        params,
        &[2, 3, 5, 5],
        &[4, 3, 3, 3],
        &x,
        &u,
        0..2,
        &mut out,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("[2, 3, 5, 5]") && e.contains("[4, 3, 3, 3]"),
        "{e}"
    );
    // A stride-2 convolution is refused.
    let strided = ConvParams::conv2d([2, 2], [1, 1], [1, 1], 1);
    assert!(
        conv2d_winograd_images_into(
            tile,
            strided,
            &[2, 3, 5, 5],
            &[4, 3, 3, 3],
            &x,
            &u,
            0..1,
            &mut out
        )
        .is_err()
    );
    // Weights of the wrong size do not transform.
    let mut small = vec![0.0f32; 10];
    assert!(winograd_weights_into(tile, &[4, 3, 3, 3], &vec![0.0f32; 108], &mut small).is_err());
}
