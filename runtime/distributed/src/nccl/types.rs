//! Tessera's dtypes and reductions as NCCL's `ncclDataType_t` and `ncclRedOp_t`.

use crate::{DistributedError, ReduceOp, Result};
use cudarc::nccl::sys::{ncclDataType_t, ncclRedOp_t};
use tessera_tensor::DType;

/// The NCCL element type of `dtype` for a reduction (`op` names the collective in errors).
/// Bool and bfloat16 have none NCCL reduces in every version Tessera loads.
pub(crate) fn reduce_type(dtype: DType, op: &'static str) -> Result<ncclDataType_t> {
    Ok(match dtype {
        DType::F32 => ncclDataType_t::ncclFloat32,
        DType::F64 => ncclDataType_t::ncclFloat64,
        DType::F16 => ncclDataType_t::ncclFloat16,
        DType::I8 => ncclDataType_t::ncclInt8,
        DType::U8 => ncclDataType_t::ncclUint8,
        DType::I32 => ncclDataType_t::ncclInt32,
        DType::I64 => ncclDataType_t::ncclInt64,
        DType::Bool | DType::BF16 => return Err(DistributedError::UnsupportedDType { op, dtype }),
    })
}

/// Collectives that only move data (broadcast, all-gather) carry any dtype as its bytes:
/// the element count in `ncclUint8` units.
pub(crate) fn byte_count(numel: usize, dtype: DType) -> usize {
    numel * dtype.size_in_bytes()
}

/// The NCCL reduction of `op` (`ncclAvg` divides by the world size on the device, NCCL 2.10
/// and later).
pub(crate) fn reduce_op(op: ReduceOp) -> ncclRedOp_t {
    match op {
        ReduceOp::Sum => ncclRedOp_t::ncclSum,
        ReduceOp::Average => ncclRedOp_t::ncclAvg,
        ReduceOp::Max => ncclRedOp_t::ncclMax,
        ReduceOp::Min => ncclRedOp_t::ncclMin,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtypes_map_to_their_nccl_types() {
        assert_eq!(reduce_type(DType::F32, "t").unwrap() as u32, 7);
        assert_eq!(reduce_type(DType::F64, "t").unwrap() as u32, 8);
        assert_eq!(reduce_type(DType::F16, "t").unwrap() as u32, 6);
        assert_eq!(reduce_type(DType::I64, "t").unwrap() as u32, 4);
        assert_eq!(reduce_type(DType::I32, "t").unwrap() as u32, 2);
        assert_eq!(reduce_type(DType::U8, "t").unwrap() as u32, 1);
        let err = reduce_type(DType::Bool, "all_reduce").unwrap_err();
        assert!(err.to_string().contains("all_reduce"), "{err}");
        assert_eq!(byte_count(3, DType::F64), 24);
    }

    #[test]
    fn reductions_map_to_nccl_ops() {
        assert_eq!(reduce_op(ReduceOp::Sum) as u32, 0);
        assert_eq!(reduce_op(ReduceOp::Max) as u32, 2);
        assert_eq!(reduce_op(ReduceOp::Min) as u32, 3);
        assert_eq!(reduce_op(ReduceOp::Average) as u32, 4);
    }
}
