//! Sub-cases of the multi-module conformance cases (`m_instance_norm`, `n_attention`, ...):
//! their inputs as gradient leaves, per-key tolerances, and the check that runs PyTorch's
//! backward (`loss = sum(output * grad_output)`) and compares outputs and gradients.

use crate::{Case, assert_close};
use tessera_tensor::Tensor;

impl Case {
    /// Io tensor `<id>/<name>`; float tensors come back as fresh leaves that require grad.
    pub fn input(&self, id: &str, name: &str) -> Tensor {
        let t = self.io(&format!("{id}/{name}"));
        if t.dtype().is_float() {
            t.requires_grad_(true).expect("a float leaf")
        } else {
            t
        }
    }

    /// `(rtol, atol)` for io key `key`: `tolerance_per_key`, else the sub-case's, else the
    /// case's.
    pub fn tolerance_of(&self, key: &str) -> (f64, f64) {
        let per_key = &self.json["tolerance_per_key"];
        if let Some(atol) = per_key["atol"][key].as_f64() {
            return (per_key["rtol"].as_f64().unwrap_or(self.rtol), atol);
        }
        let id = key.rsplit_once('/').map_or(key, |(id, _)| id);
        let id = id.strip_suffix("/grad").unwrap_or(id);
        let sub = &self.json["subcases"][id]["tolerance"];
        match (sub["rtol"].as_f64(), sub["atol"].as_f64()) {
            (Some(rtol), Some(atol)) => (rtol, atol),
            _ => (self.rtol, self.atol),
        }
    }

    /// Asserts `actual` matches io tensor `key` within that key's tolerance.
    pub fn check_key(&self, key: &str, actual: &Tensor) {
        let (rtol, atol) = self.tolerance_of(key);
        assert_close(actual, &self.io(key), rtol, atol, key);
    }

    /// Checks sub-case `id`: each named output against `<id>/<name>`, then backpropagates
    /// `sum(output * <id>/grad_output/<name>)` and checks the gradient of every name listed
    /// in the sub-case's `grads` among `inputs` and `params` (keys relative to the module).
    pub fn check_subcase(
        &self,
        id: &str,
        outputs: &[(&str, Tensor)],
        inputs: &[(&str, Tensor)],
        params: &[(String, Tensor)],
    ) {
        let mut loss: Option<Tensor> = None;
        for (name, out) in outputs {
            self.check_key(&format!("{id}/{name}"), out);
            let upstream = self.io(&format!("{id}/grad_output/{name}"));
            let term = out.mul(&upstream).unwrap().sum_all().unwrap();
            loss = Some(match loss {
                Some(l) => l.add(&term).unwrap(),
                None => term,
            });
        }
        let loss = loss.expect("a sub-case has outputs");
        self.check_key(&format!("{id}/loss"), &loss);
        loss.backward().unwrap();
        let grads = self.json["subcases"][id]["grads"]
            .as_array()
            .unwrap_or_else(|| panic!("sub-case {id} lists its grads"));
        for name in grads.iter().map(|g| g.as_str().unwrap()) {
            let tensor = inputs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, t)| t)
                .or_else(|| params.iter().find(|(n, _)| n == name).map(|(_, t)| t))
                .unwrap_or_else(|| panic!("{id}: no input or parameter named {name}"));
            let grad = tensor
                .grad()
                .unwrap_or_else(|| panic!("{id}: no gradient reached {name}"));
            self.check_key(&format!("{id}/grad/{name}"), &grad);
        }
    }
}
