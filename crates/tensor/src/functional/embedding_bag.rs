//! `embedding_bag` (sum or mean of bags of embedding rows), composed from the op table's
//! `index_select` and `index_add`, so the gradient of the table accumulates repeated indices.

use crate::{DType, Result, Tensor, TensorError};

/// How [`embedding_bag`] reduces each bag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EmbeddingBagMode {
    Sum,
    /// PyTorch's default.
    #[default]
    Mean,
}

/// The bag of each of `count` indices, from bag starts `offsets` (the last bag runs to the
/// end), checked as PyTorch checks them.
fn bag_of_each(offsets: &[i64], count: usize) -> Result<Vec<i64>> {
    let invalid = |msg: String| Err(TensorError::invalid("embedding_bag", msg));
    if offsets.first().is_some_and(|&o| o != 0) {
        return invalid(format!("offsets[0] has to be 0, got {}", offsets[0]));
    }
    let mut bags = Vec::new();
    bags.try_reserve_exact(count)
        .map_err(|_| TensorError::invalid("embedding_bag", "too many indices"))?;
    for (bag, window) in offsets.iter().enumerate() {
        let end = offsets.get(bag + 1).copied().unwrap_or(count as i64);
        if end < *window || end > count as i64 {
            return invalid(format!(
                "offsets must be non-decreasing and at most the number of indices ({count}), got {offsets:?}"
            ));
        }
        bags.extend(std::iter::repeat_n(bag as i64, (end - window) as usize));
    }
    Ok(bags)
}

/// PyTorch's `F.embedding_bag` for a 1-D `input` of i64 indices cut into bags at `offsets`
/// (bag starts), or a 2-D `input` `[B, L]` of `B` bags of `L` (with `offsets` `None`): the sum
/// or mean of each bag's rows of `weight` `[num_embeddings, dim]`, giving `[B, dim]`. An empty
/// bag gives zeros.
///
/// The bags come from the values of `offsets`: offsets without data (meta tensors, as a leaf
/// call sees them while tracing) give an unrecorded meta result of the output's shape, which
/// is all a leaf call needs; tracing through such a call fails where its result is used.
pub fn embedding_bag(
    input: &Tensor,
    weight: &Tensor,
    offsets: Option<&Tensor>,
    mode: EmbeddingBagMode,
) -> Result<Tensor> {
    let invalid = |msg: String| Err(TensorError::invalid("embedding_bag", msg));
    if input.dtype() != DType::I64 {
        return Err(TensorError::dtype("embedding_bag", input.dtype()));
    }
    let (indices, bags) = match (input.shape().as_slice(), offsets) {
        ([count], Some(offsets)) => {
            if offsets.ndim() != 1 || offsets.dtype() != DType::I64 {
                return invalid(format!(
                    "offsets must be a 1-D i64 tensor, got {:?} of {}",
                    offsets.shape(),
                    offsets.dtype()
                ));
            }
            if offsets.is_meta() {
                if weight.ndim() != 2 {
                    return invalid(format!("expected a 2-D weight, got {:?}", weight.shape()));
                }
                let shape = [offsets.numel(), weight.shape()[1]];
                return Ok(Tensor::new_meta(&shape, weight.dtype()));
            }
            let starts = offsets.to_vec::<i64>()?;
            (input.clone(), bag_of_each(&starts, *count)?)
        }
        (&[rows, columns], None) => {
            let starts: Vec<i64> = (0..rows).map(|r| (r * columns) as i64).collect();
            (
                input.reshape(&[rows * columns])?,
                bag_of_each(&starts, rows * columns)?,
            )
        }
        (shape, _) => {
            return invalid(format!(
                "expected a 1-D input with offsets or a 2-D input without, got input {shape:?}"
            ));
        }
    };
    let bag_count = match offsets {
        Some(o) => o.numel(),
        None => input.shape()[0],
    };
    if weight.ndim() != 2 {
        return invalid(format!("expected a 2-D weight, got {:?}", weight.shape()));
    }
    let rows = weight.index_select(0, &indices)?;
    let bag_index = Tensor::from_vec(bags.clone(), &[bags.len()])?;
    let zeros = Tensor::zeros(&[bag_count, weight.shape()[1]], weight.dtype())?;
    let sums = zeros.index_add(0, &bag_index, &rows)?;
    match mode {
        EmbeddingBagMode::Sum => Ok(sums),
        EmbeddingBagMode::Mean => {
            let mut counts = vec![0f64; bag_count];
            for &b in &bags {
                counts[b as usize] += 1.0;
            }
            let counts: Vec<f64> = counts.into_iter().map(|c| c.max(1.0)).collect();
            let divisor = Tensor::from_vec(counts, &[bag_count, 1])?.to_dtype(weight.dtype())?;
            sums.div(&divisor)
        }
    }
}
