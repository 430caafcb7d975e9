//! Adam with PyTorch's update formula (β 0.9/0.999, eps 1e-8, no weight decay), written out so
//! that its moments can be checkpointed and a resumed run continues bit for bit.

use tch::Tensor;

#[derive(Debug)]
pub struct Adam {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    /// Steps taken.
    pub step: i64,
    pub names: Vec<String>,
    params: Vec<Tensor>,
    exp_avg: Vec<Tensor>,
    exp_avg_sq: Vec<Tensor>,
}

impl Adam {
    pub fn new(params: Vec<(String, Tensor)>, lr: f64) -> Self {
        let _guard = tch::no_grad_guard();
        let exp_avg = params.iter().map(|(_, p)| p.zeros_like()).collect();
        let exp_avg_sq = params.iter().map(|(_, p)| p.zeros_like()).collect();
        let (names, params) = params.into_iter().unzip();
        Adam {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            step: 0,
            names,
            params,
            exp_avg,
            exp_avg_sq,
        }
    }

    pub fn params(&self) -> &[Tensor] {
        &self.params
    }

    /// One step with `grads` in the order of `params()`.
    pub fn step(&mut self, grads: &[Tensor]) {
        assert_eq!(grads.len(), self.params.len(), "one gradient per parameter");
        let _guard = tch::no_grad_guard();
        self.step += 1;
        let bias_correction1 = 1.0 - self.beta1.powf(self.step as f64);
        let bias_correction2_sqrt = (1.0 - self.beta2.powf(self.step as f64)).sqrt();
        let step_size = self.lr / bias_correction1;
        for i in 0..self.params.len() {
            let g = &grads[i];
            let _ = self.exp_avg[i].lerp_(g, 1.0 - self.beta1);
            let _ = self.exp_avg_sq[i].g_mul_scalar_(self.beta2);
            let _ = self.exp_avg_sq[i].addcmul_(&(g * (1.0 - self.beta2)), g);
            let denom = self.exp_avg_sq[i].sqrt() / bias_correction2_sqrt + self.eps;
            let _ = self.params[i].addcdiv_(&(&self.exp_avg[i] * -step_size), &denom);
        }
    }

    /// Moment tensors under `<prefix><param>.exp_avg` / `.exp_avg_sq`, for a checkpoint.
    pub fn state_tensors(&self, prefix: &str) -> Vec<(String, Tensor)> {
        let mut out = Vec::with_capacity(2 * self.names.len());
        for (i, name) in self.names.iter().enumerate() {
            out.push((format!("{prefix}{name}.exp_avg"), self.exp_avg[i].shallow_clone()));
            out.push((format!("{prefix}{name}.exp_avg_sq"), self.exp_avg_sq[i].shallow_clone()));
        }
        out
    }

    /// Restores the moments saved by [`Adam::state_tensors`]; names every missing or
    /// mis-shaped tensor.
    pub fn load_state(
        &mut self,
        prefix: &str,
        step: i64,
        lookup: &dyn Fn(&str) -> Option<Tensor>,
    ) -> Result<(), String> {
        let _guard = tch::no_grad_guard();
        for (i, name) in self.names.iter().enumerate() {
            for (which, slot) in [
                ("exp_avg", &mut self.exp_avg[i]),
                ("exp_avg_sq", &mut self.exp_avg_sq[i]),
            ] {
                let key = format!("{prefix}{name}.{which}");
                let t = lookup(&key).ok_or_else(|| format!("optimizer state {key} is missing"))?;
                if t.size() != slot.size() {
                    return Err(format!(
                        "optimizer state {key}: shape {:?}, expected {:?}",
                        t.size(),
                        slot.size()
                    ));
                }
                slot.copy_(&t);
            }
        }
        self.step = step;
        Ok(())
    }
}
