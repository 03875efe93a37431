//! Tensors as shared handles: views share storage, in-place updates reach every holder,
//! broadcasting and promotion follow PyTorch, dtype conversions, devices and creation.

use crate::common;
use common::iota;
use half::{bf16, f16};
use tessera_tensor::{DType, Device, Generator, Result, Tensor, TensorError};

#[test]
fn views_share_storage_and_see_in_place_writes() -> Result<()> {
    let x = iota(&[2, 3], DType::F32);
    let t = x.t()?;
    let row = x.narrow(0, 1, 1)?;
    let holder = x.clone();
    row.fill_(9.0)?;
    assert_eq!(holder.to_vec::<f32>()?, vec![0.0, 1.0, 2.0, 9.0, 9.0, 9.0]);
    assert_eq!(t.to_vec::<f32>()?, vec![0.0, 9.0, 1.0, 9.0, 2.0, 9.0]);
    assert!(t.shares_storage(&x) && !t.is_contiguous());
    Ok(())
}

#[test]
fn in_place_arithmetic_is_visible_to_every_handle() -> Result<()> {
    let x = iota(&[3], DType::F32);
    let other = x.clone();
    x.add_(&Tensor::ones(&[3], DType::F32)?)?;
    x.mul_scalar_(2.0)?;
    x.clamp_(Some(3.0), None)?;
    assert_eq!(other.to_vec::<f32>()?, vec![3.0, 4.0, 6.0]);
    x.zero_()?;
    assert_eq!(other.to_vec::<f32>()?, vec![0.0; 3]);
    Ok(())
}

#[test]
fn copy_into_a_strided_view_broadcasts_and_casts() -> Result<()> {
    let x = Tensor::zeros(&[2, 3], DType::F64)?;
    x.t()?
        .narrow(0, 2, 1)?
        .copy_(&Tensor::from_vec(vec![5i64], &[1])?)?;
    assert_eq!(x.to_vec::<f64>()?, vec![0.0, 0.0, 5.0, 0.0, 0.0, 5.0]);
    Ok(())
}

#[test]
fn reshape_of_a_transpose_copies_and_view_refuses() -> Result<()> {
    let t = iota(&[2, 3], DType::F32).t()?;
    assert_eq!(
        t.reshape(&[6])?.to_vec::<f32>()?,
        vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
    );
    let err = t.view(&[6]).unwrap_err().to_string();
    assert!(err.contains("view size [6] is not compatible"), "{err}");
    assert_eq!(
        iota(&[2, 3], DType::F32).reshape_infer(&[-1, 2])?.shape(),
        vec![3, 2]
    );
    Ok(())
}

#[test]
fn broadcasting_follows_pytorch_and_mismatches_name_the_op() -> Result<()> {
    let a = iota(&[2, 3], DType::F32);
    let b = Tensor::from_vec(vec![10.0f32, 20.0], &[2, 1])?;
    assert_eq!(
        a.add(&b)?.to_vec::<f32>()?,
        vec![10.0, 11.0, 12.0, 23.0, 24.0, 25.0]
    );
    let err = a.mul(&iota(&[4], DType::F32)).unwrap_err();
    assert!(matches!(err, TensorError::ShapeMismatch { .. }));
    assert!(
        err.to_string()
            .starts_with("mul: shape mismatch between [2, 3] and [4]"),
        "{err}"
    );
    Ok(())
}

#[test]
fn type_promotion_follows_pytorch() -> Result<()> {
    let i = Tensor::from_vec(vec![1i64, 2], &[2])?;
    let f = Tensor::from_vec(vec![0.5f32, 0.5], &[2])?;
    assert_eq!(i.add(&f)?.dtype(), DType::F32);
    assert_eq!(
        i.div(&i)?.dtype(),
        DType::F32,
        "true division of integers gives float"
    );
    assert_eq!(i.mul_scalar(3.0)?.to_vec::<i64>()?, vec![3, 6]);
    assert_eq!(i.mul_scalar(0.5)?.dtype(), DType::F32);
    assert_eq!(i.sum_all()?.dtype(), DType::I64);
    Ok(())
}

#[test]
fn to_dtype_round_trips_through_every_dtype() -> Result<()> {
    let x = Tensor::from_vec(vec![0.0f32, 1.0, 2.0, 3.0], &[4])?;
    for dtype in DType::ALL {
        let back = x.to_dtype(dtype)?.to_dtype(DType::F32)?.to_vec::<f32>()?;
        let expected = if dtype == DType::Bool {
            vec![0.0, 1.0, 1.0, 1.0]
        } else {
            vec![0.0, 1.0, 2.0, 3.0]
        };
        assert_eq!(back, expected, "{dtype}");
    }
    assert_eq!(
        Tensor::from_vec(vec![-1.7f32, 2.9], &[2])?
            .to_dtype(DType::I32)?
            .to_vec::<i32>()?,
        vec![-1, 2],
        "floats truncate"
    );
    Ok(())
}

#[test]
fn half_precision_ops_compute_in_f32_and_keep_their_dtype() -> Result<()> {
    let h = Tensor::from_vec(vec![f16::from_f32(1.5), f16::from_f32(-2.0)], &[2])?;
    let y = h.relu()?.mul_scalar(2.0)?;
    assert_eq!(y.dtype(), DType::F16);
    assert_eq!(
        y.to_vec::<f16>()?,
        vec![f16::from_f32(3.0), f16::from_f32(0.0)]
    );
    let b = Tensor::from_vec(vec![bf16::from_f32(1.0); 4], &[2, 2])?;
    assert_eq!(
        b.matmul(&b)?.to_dtype(DType::F32)?.to_vec::<f32>()?,
        vec![2.0; 4]
    );
    Ok(())
}

#[test]
fn cuda_without_a_driver_is_a_typed_error() {
    let x = Tensor::zeros(&[1], DType::F32).unwrap();
    let err = x.to_device(Device::Cuda(0)).unwrap_err();
    assert!(matches!(
        err,
        TensorError::DeviceUnavailable {
            device: Device::Cuda(0),
            ..
        }
    ));
    assert_eq!(x.to_device(Device::Cpu).unwrap().device(), Device::Cpu);
}

#[test]
fn creation_functions() -> Result<()> {
    assert_eq!(
        Tensor::eye(2, 3, DType::I64)?.to_vec::<i64>()?,
        vec![1, 0, 0, 0, 1, 0]
    );
    assert_eq!(
        Tensor::arange(1.0, 2.0, 0.25, DType::F64)?.to_vec::<f64>()?,
        vec![1.0, 1.25, 1.5, 1.75]
    );
    assert_eq!(
        Tensor::full(&[2], 7.0, DType::I32)?.to_vec::<i32>()?,
        vec![7, 7]
    );
    assert_eq!(
        Tensor::ones_like(&Tensor::zeros(&[2, 2], DType::F16)?)?.dtype(),
        DType::F16
    );
    assert!(Tensor::from_vec(vec![1.0f32; 3], &[2, 2]).is_err());
    let r = Tensor::randint(3, 7, &[1000], DType::I64)?.to_vec::<i64>()?;
    assert!(r.iter().all(|&v| (3..7).contains(&v)) && r.contains(&3) && r.contains(&6));
    let u = Tensor::rand(&[1000], DType::F32)?.to_vec::<f32>()?;
    assert!(u.iter().all(|&v| (0.0..1.0).contains(&v)));
    Ok(())
}

#[test]
fn reductions_compute_pytorch_values() -> Result<()> {
    let x = Tensor::from_vec(vec![1.0f64, 5.0, 3.0, 4.0, 2.0, 6.0], &[2, 3])?;
    assert_eq!(x.sum(&[0], false)?.to_vec::<f64>()?, vec![5.0, 7.0, 9.0]);
    assert_eq!(x.mean(&[1], true)?.shape(), vec![2, 1]);
    let (v, i) = x.max_dim(1, false)?;
    assert_eq!(
        (v.to_vec::<f64>()?, i.to_vec::<i64>()?),
        (vec![5.0, 6.0], vec![1, 2])
    );
    assert_eq!(x.argmax(None, false)?.item::<i64>()?, 5);
    assert_eq!(x.argmin(Some(0), false)?.to_vec::<i64>()?, vec![0, 1, 0]);
    assert!((x.var(&[], true, false)?.item::<f64>()? - 3.5).abs() < 1e-12);
    assert!((x.std(&[], false, false)?.item::<f64>()? - (35.0f64 / 12.0).sqrt()).abs() < 1e-12);
    let lse = x.logsumexp(&[1], false)?.to_vec::<f64>()?;
    assert!((lse[0] - (1f64.exp() + 5f64.exp() + 3f64.exp()).ln()).abs() < 1e-12);
    let big = Tensor::from_vec(vec![1000.0f32, 1000.0], &[2])?;
    assert!(
        (big.logsumexp(&[0], false)?.item::<f32>()? - (1000.0 + 2f32.ln())).abs() < 1e-3,
        "logsumexp is stable"
    );
    Ok(())
}

#[test]
fn matmul_follows_pytorch_shape_rules_and_errors() -> Result<()> {
    let a = iota(&[2, 3, 4], DType::F32);
    let b = iota(&[4, 2], DType::F32);
    assert_eq!(a.matmul(&b)?.shape(), vec![2, 3, 2]);
    assert_eq!(
        iota(&[4], DType::F32)
            .matmul(&iota(&[4], DType::F32))?
            .item::<f32>()?,
        14.0
    );
    assert_eq!(
        iota(&[3], DType::F32)
            .matmul(&iota(&[2, 3, 4], DType::F32))?
            .shape(),
        vec![2, 4]
    );
    let err = iota(&[2, 3], DType::F32)
        .matmul(&iota(&[4, 2], DType::F32))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("matmul")
            && err.contains("[2, 3]")
            && err.contains("[4, 2]")
            && err.contains("2x3 and 4x2"),
        "{err}"
    );
    Ok(())
}

#[test]
fn large_matmul_matches_a_naive_product() -> Result<()> {
    let mut g = Generator::new(3);
    let a = Tensor::randn_with(&[70, 90], DType::F64, &mut g)?;
    let b = Tensor::randn_with(&[90, 50], DType::F64, &mut g)?;
    let c = a.matmul(&b)?.to_vec::<f64>()?;
    let (av, bv) = (a.to_vec::<f64>()?, b.to_vec::<f64>()?);
    for i in 0..70 {
        for j in 0..50 {
            let expected: f64 = (0..90).map(|k| av[i * 90 + k] * bv[k * 50 + j]).sum();
            assert!((c[i * 50 + j] - expected).abs() < 1e-9);
        }
    }
    Ok(())
}

#[test]
fn large_elementwise_ops_take_the_parallel_path() -> Result<()> {
    let n = 1 << 17;
    let x = Tensor::arange(0.0, n as f64, 1.0, DType::F32)?;
    let y = x.mul_scalar(2.0)?.add(&x)?.relu()?;
    let v = y.to_vec::<f32>()?;
    assert_eq!((v[0], v[n - 1]), (0.0, 3.0 * (n - 1) as f32));
    let strided = x
        .reshape(&[512, 256])?
        .t()?
        .add(&Tensor::ones(&[512], DType::F32)?)?;
    assert_eq!(strided.to_vec::<f32>()?[1], 257.0);
    Ok(())
}

#[test]
fn item_requires_one_element() {
    let err = Tensor::zeros(&[2], DType::F32)
        .unwrap()
        .item::<f32>()
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot be converted to a scalar"), "{err}");
}

#[test]
fn sums_over_leading_dims_match_the_general_reduction() -> Result<()> {
    let mut g = Generator::new(11);
    let x = Tensor::randn_with(&[64, 300, 5], DType::F32, &mut g)?;
    let general = x.permute(&[1, 2, 0])?.sum(&[-1], false)?; // reduces a trailing dim instead
    let leading = x.sum(&[0], false)?;
    let (a, b) = (leading.to_vec::<f32>()?, general.to_vec::<f32>()?);
    assert!(
        a.iter().zip(&b).all(|(p, q)| (p - q).abs() < 1e-4),
        "sum over dim 0"
    );
    let mean = x.mean(&[0, 1], true)?;
    assert_eq!(mean.shape(), vec![1, 1, 5]);
    let expected = x
        .permute(&[2, 0, 1])?
        .reshape(&[5, 64 * 300])?
        .mean(&[1], false)?;
    let (a, b) = (mean.to_vec::<f32>()?, expected.to_vec::<f32>()?);
    assert!(
        a.iter().zip(&b).all(|(p, q)| (p - q).abs() < 1e-6),
        "mean over dims 0 and 1"
    );
    Ok(())
}
