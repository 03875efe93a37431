//! Smaller copies of layers: a conv or linear keeping some output and input channels, a batch
//! norm keeping some channels, with the kept slices of every weight, bias and running statistic.

use crate::{PassError, Result};
use tessera_nn::init::skip_init;
use tessera_nn::layers::{BatchNorm1d, BatchNorm2d, Conv2d, Linear, LinearOptions};
use tessera_nn::{Module, ModuleExt, NnError, Parameter};
use tessera_tensor::{DType, Tensor};

/// The channels to keep along one dimension (`None`: all of them).
pub type Keep = Option<Vec<usize>>;

pub(super) fn build_error(target: &str, e: impl std::fmt::Display) -> PassError {
    PassError::Unsupported(format!("pruning {target}: {e}"))
}

/// `t` restricted to indices `keep` along `dim`.
pub(super) fn select(t: &Tensor, dim: isize, keep: &Keep) -> std::result::Result<Tensor, NnError> {
    let t = t.detach();
    Ok(match keep {
        None => t,
        Some(k) => {
            let index: Vec<i64> = k.iter().map(|&i| i as i64).collect();
            let index = Tensor::from_vec(index, &[k.len()])?.to_dtype(DType::I64)?;
            t.index_select(dim, &index)?
        }
    })
}

/// The weight `w` (`[out, in, kernel...]`) keeping output channels `out` and input channels
/// `input`, copied a kernel at a time (index_select twice would gather element by element).
pub(super) fn sliced_weight(
    w: &Tensor,
    out: &Keep,
    input: &Keep,
) -> std::result::Result<Tensor, NnError> {
    let w = w.detach();
    let mut shape = w.shape().to_vec();
    if shape.len() < 2 {
        return select(&select(&w, 0, out)?, 1, input);
    }
    let kernel: usize = shape[2..].iter().product();
    let outs: Vec<usize> = out.clone().unwrap_or_else(|| (0..shape[0]).collect());
    let ins: Vec<usize> = input.clone().unwrap_or_else(|| (0..shape[1]).collect());
    let row = shape[1] * kernel;
    (shape[0], shape[1]) = (outs.len(), ins.len());
    fn gather<T: Copy>(
        data: &[T],
        outs: &[usize],
        ins: &[usize],
        row: usize,
        kernel: usize,
    ) -> Vec<T> {
        let mut kept = Vec::with_capacity(outs.len() * ins.len() * kernel);
        for &o in outs {
            for &i in ins {
                let start = o * row + i * kernel;
                kept.extend_from_slice(&data[start..start + kernel]);
            }
        }
        kept
    }
    Ok(match w.dtype() {
        DType::F32 => {
            let data = w.to_vec::<f32>()?;
            Tensor::from_vec(gather(&data, &outs, &ins, row, kernel), &shape)?
        }
        dtype => {
            let data = w.to_vec_f64()?;
            Tensor::from_vec(gather(&data, &outs, &ins, row, kernel), &shape)?.to_dtype(dtype)?
        }
    })
}

fn count(keep: &Keep, all: usize) -> usize {
    keep.as_ref().map_or(all, Vec::len)
}

/// A copy of the conv or linear `module` keeping output channels `out` and input channels
/// `input`, in the same training mode (built without drawing a default initialisation that the
/// slices replace).
pub fn sliced_layer(
    target: &str,
    module: &dyn Module,
    out: &Keep,
    input: &Keep,
) -> Result<Box<dyn Module>> {
    let err = |e: NnError| build_error(target, e);
    let any = module.as_any();
    let built: Box<dyn Module> = if let Some(c) = any.downcast_ref::<Conv2d>() {
        let w = sliced_weight(&c.weight, out, input).map_err(err)?;
        let (o, i) = (count(out, c.out_channels), count(input, c.in_channels));
        let options = c.options.clone().dtype(w.dtype());
        let mut f =
            skip_init(|| Conv2d::with_options(i, o, c.kernel_size, options)).map_err(err)?;
        f.weight = Parameter::new(w);
        if let Some(b) = &c.bias {
            f.bias = Some(Parameter::new(select(b, 0, out).map_err(err)?));
        }
        Box::new(f)
    } else if let Some(l) = any.downcast_ref::<Linear>() {
        let w = sliced_weight(&l.weight, out, input).map_err(err)?;
        let (o, i) = (count(out, l.out_features), count(input, l.in_features));
        let options = LinearOptions::default()
            .bias(l.bias.is_some())
            .dtype(w.dtype());
        let mut f = skip_init(|| Linear::with_options(i, o, options)).map_err(err)?;
        f.weight = Parameter::new(w);
        if let Some(b) = &l.bias {
            f.bias = Some(Parameter::new(select(b, 0, out).map_err(err)?));
        }
        Box::new(f)
    } else {
        return Err(build_error(target, "not a Conv2d or Linear"));
    };
    built.train(module.is_training());
    Ok(built)
}

/// A copy of the batch norm `module` keeping channels `keep`.
pub fn sliced_batch_norm(
    target: &str,
    module: &dyn Module,
    keep: &Keep,
) -> Result<Box<dyn Module>> {
    let err = |e: NnError| build_error(target, e);
    macro_rules! slice_bn {
        ($bn:expr, $ty:ty) => {{
            let bn = $bn;
            let mut f = <$ty>::with_options(count(keep, bn.num_features), bn.options.clone())
                .map_err(err)?;
            let slice_param = |p: &Option<Parameter>| -> std::result::Result<_, NnError> {
                p.as_ref()
                    .map(|p| select(p, 0, keep).map(Parameter::new))
                    .transpose()
            };
            f.weight = slice_param(&bn.weight).map_err(err)?;
            f.bias = slice_param(&bn.bias).map_err(err)?;
            let slice_buffer =
                |b: &Option<Tensor>| b.as_ref().map(|b| select(b, 0, keep)).transpose();
            f.running_mean = slice_buffer(&bn.running_mean).map_err(err)?;
            f.running_var = slice_buffer(&bn.running_var).map_err(err)?;
            f.num_batches_tracked = bn.num_batches_tracked.as_ref().map(|t| t.detach().clone());
            Box::new(f) as Box<dyn Module>
        }};
    }
    let any = module.as_any();
    let built = if let Some(bn) = any.downcast_ref::<BatchNorm2d>() {
        slice_bn!(bn, BatchNorm2d)
    } else if let Some(bn) = any.downcast_ref::<BatchNorm1d>() {
        slice_bn!(bn, BatchNorm1d)
    } else {
        return Err(build_error(target, "not a BatchNorm1d or BatchNorm2d"));
    };
    built.train(module.is_training());
    Ok(built)
}
