//! Error texts that say enough: a dtype mismatch in `linear` names the dtypes, and reading a
//! traced value names the method that read it (`item`, `to_vec`), not an internal "read".

use tessera_tensor::op::Op;
use tessera_tensor::{DType, Tensor, TensorError};

#[test]
fn a_linear_dtype_mismatch_names_the_dtypes() {
    let x = Tensor::zeros(&[2, 3], DType::F32).unwrap();
    let w = Tensor::zeros(&[4, 3], DType::F64).unwrap();
    let e = Op::Linear { bias: false }.apply1(&[&x, &w]).unwrap_err();
    assert!(matches!(e, TensorError::DTypeMismatch { .. }), "{e}");
    let text = e.to_string();
    assert!(text.starts_with("linear"), "{text}");
    assert!(text.contains("f32") && text.contains("f64"), "{text}");
}

#[test]
fn reading_a_traced_value_names_the_method() {
    let traced = Tensor::new_meta(&[1], DType::F32);
    let e = traced.item::<f32>().unwrap_err();
    assert_eq!(e, TensorError::NoData { op: "item".into() });
    let e = traced.to_vec::<f32>().unwrap_err();
    assert_eq!(
        e,
        TensorError::NoData {
            op: "to_vec".into()
        }
    );
    let e = Tensor::new_meta(&[2], DType::I64).to_vec_f64().unwrap_err();
    assert_eq!(
        e,
        TensorError::NoData {
            op: "to_vec_f64".into()
        }
    );
}
