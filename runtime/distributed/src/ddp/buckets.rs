//! How gradients are grouped for all-reduce: parameters in reverse registration order (the
//! order backward usually makes their gradients ready), cut into buckets of at most a byte
//! cap and of one dtype, as PyTorch's reducer does.

use tessera_tensor::DType;

/// One bucket: which parameters (indices into the reducer's list) it holds, in order, and
/// where each one's values start in its flat buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    pub params: Vec<usize>,
    pub offsets: Vec<usize>,
    pub numel: usize,
    pub dtype: DType,
}

/// Cuts parameters of `(dtype, numel)` into buckets of at most `cap_bytes`, walking them from
/// the last to the first. A parameter larger than the cap gets a bucket of its own.
pub fn plan_buckets(params: &[(DType, usize)], cap_bytes: usize) -> Vec<Bucket> {
    let mut buckets: Vec<Bucket> = Vec::new();
    for index in (0..params.len()).rev() {
        let (dtype, numel) = params[index];
        let bytes = numel.saturating_mul(dtype.size_in_bytes());
        let fits = buckets.last().is_some_and(|b| {
            b.dtype == dtype
                && b.numel
                    .saturating_mul(dtype.size_in_bytes())
                    .saturating_add(bytes)
                    <= cap_bytes
        });
        match buckets.last_mut() {
            Some(bucket) if fits => {
                bucket.params.push(index);
                bucket.offsets.push(bucket.numel);
                bucket.numel += numel;
            }
            _ => buckets.push(Bucket {
                params: vec![index],
                offsets: vec![0],
                numel,
                dtype,
            }),
        }
    }
    buckets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_take_parameters_last_first_up_to_the_cap() {
        // Four float32 parameters of 10 elements (40 bytes); a cap of 80 bytes holds two.
        let params = vec![(DType::F32, 10); 4];
        let buckets = plan_buckets(&params, 80);
        let members: Vec<Vec<usize>> = buckets.iter().map(|b| b.params.clone()).collect();
        assert_eq!(members, [vec![3, 2], vec![1, 0]]);
        assert_eq!(buckets[0].offsets, [0, 10]);
    }

    #[test]
    fn a_parameter_larger_than_the_cap_gets_its_own_bucket() {
        let params = vec![(DType::F32, 4), (DType::F32, 1000), (DType::F32, 4)];
        let members: Vec<Vec<usize>> = plan_buckets(&params, 64)
            .iter()
            .map(|b| b.params.clone())
            .collect();
        assert_eq!(members, [vec![2], vec![1], vec![0]]);
    }

    #[test]
    fn buckets_never_mix_dtypes() {
        let params = vec![(DType::F64, 2), (DType::F32, 2), (DType::F32, 2)];
        let buckets = plan_buckets(&params, 1 << 20);
        let dtypes: Vec<DType> = buckets.iter().map(|b| b.dtype).collect();
        assert_eq!(dtypes, [DType::F32, DType::F64]);
    }
}
