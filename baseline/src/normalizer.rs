//! The observation normaliser (BFM_ZERO_FACTS §2.5) and the aux-reward scale normaliser (§5.5.4).

use arena_torch::params::Scope;
use tch::{Kind, Tensor};

const BN_EPS: f64 = 1e-5;

/// Running mean and variance of one observation group, as a BatchNorm without affine
/// parameters: training updates the stats (unbiased batch variance), every use normalises with
/// the running stats.
#[derive(Debug)]
pub struct RunningNorm {
    mean: Tensor,
    var: Tensor,
    count: Tensor,
    momentum: f64,
}

impl RunningNorm {
    pub fn new(s: &mut Scope, dim: i64, momentum: f64) -> Self {
        let mut inner = s.sub("_normalizer");
        let device = inner.device();
        let mean = inner.buffer("running_mean", || Tensor::zeros([dim], (Kind::Float, device)));
        let var = inner.buffer("running_var", || Tensor::ones([dim], (Kind::Float, device)));
        let count = inner.buffer("num_batches_tracked", || Tensor::zeros([], (Kind::Int64, device)));
        RunningNorm {
            mean,
            var,
            count,
            momentum,
        }
    }

    /// Folds a batch `[N, dim]` into the running stats.
    pub fn update(&mut self, x: &Tensor) {
        let _guard = tch::no_grad_guard();
        let m = self.momentum;
        let batch_mean = x.mean_dim(Some(&[0i64][..]), false, Kind::Float);
        let batch_var = x.var_dim(Some(&[0i64][..]), true, false);
        self.mean.copy_(&(&batch_mean * m + &self.mean * (1.0 - m)));
        self.var.copy_(&(&batch_var * m + &self.var * (1.0 - m)));
        let _ = self.count.g_add_scalar_(1);
    }

    pub fn normalize(&self, x: &Tensor) -> Tensor {
        (x - &self.mean) / (&self.var + BN_EPS).sqrt()
    }
}

/// One running normaliser per observation group.
#[derive(Debug)]
pub struct ObsNormalizer {
    pub state: RunningNorm,
    pub privileged_state: RunningNorm,
    pub last_action: RunningNorm,
    pub history_actor: RunningNorm,
}

/// EMA estimate of the aux reward's second moment; rewards are divided by its std (no centring).
#[derive(Debug)]
pub struct AuxRewardNormalizer {
    mean: Tensor,
    mean_square: Tensor,
    counter: Tensor,
    tau: f64,
}

impl AuxRewardNormalizer {
    pub fn new(s: &mut Scope, tau: f64) -> Self {
        let device = s.device();
        let mean = s.buffer("mean", || Tensor::zeros([1], (Kind::Float, device)));
        let mean_square = s.buffer("mean_square", || Tensor::zeros([1], (Kind::Float, device)));
        let counter = s.buffer("counter", || Tensor::zeros([], (Kind::Int64, device)));
        AuxRewardNormalizer {
            mean,
            mean_square,
            counter,
            tau,
        }
    }

    /// Updates the EMA with the batch `[N, 1]` and returns it scaled by 1/std.
    pub fn update_and_normalize(&mut self, reward: &Tensor) -> Tensor {
        let _guard = tch::no_grad_guard();
        let tau = self.tau;
        self.mean
            .copy_(&(&self.mean * tau + reward.mean(Kind::Float) * (1.0 - tau)));
        self.mean_square
            .copy_(&(&self.mean_square * tau + reward.square().mean(Kind::Float) * (1.0 - tau)));
        let _ = self.counter.g_add_scalar_(1);
        // 1 − τⁿ on the device: no host round trip for the counter.
        let debias = -Tensor::full([1], tau, (Kind::Double, reward.device()))
            .pow(&self.counter)
            .to_kind(Kind::Float)
            + 1.0;
        let mean = &self.mean / &debias;
        let mean_square = &self.mean_square / &debias;
        let var = (mean_square - mean.square()).clamp_min(1e-8);
        reward / var.sqrt()
    }
}
