//! The actor-critic of rsl_rl (docs/ppo-tracker.md §9): two ELU MLPs with PyTorch's default
//! `nn.Linear` initialisation, a learned per-action std used directly ("scalar" noise), and an
//! empirical normaliser in front of each network. Tensor names follow rsl_rl's state dict
//! (`actor.0.weight`, `std`, `actor_obs_normalizer._mean`, ...).

use arena_torch::params::{ParamStore, Scope};
use tch::{Device, Kind, Tensor};

/// rsl_rl's normaliser epsilon: y = (x − μ)/(σ + 0.01).
pub const NORMALIZER_EPS: f64 = 1e-2;
/// The floor of the std in the action distribution (rsl_rl has none; a std driven to 0 would
/// make log-probabilities infinite).
pub const MIN_STD: f64 = 1e-6;

/// A linear layer with PyTorch's default init: weight and bias ~ U(±1/√in).
#[derive(Debug)]
struct Linear {
    weight: Tensor,
    bias: Tensor,
}

impl Linear {
    fn new(s: &mut Scope, input: i64, output: i64) -> Self {
        let bound = 1.0 / (input as f64).sqrt();
        let device = s.device();
        let weight = s.param("weight", || {
            Tensor::empty([output, input], (Kind::Float, device)).uniform_(-bound, bound)
        });
        let bias = s.param("bias", || {
            Tensor::empty([output], (Kind::Float, device)).uniform_(-bound, bound)
        });
        Linear { weight, bias }
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.weight, Some(&self.bias))
    }

    fn shallow_clone(&self) -> Self {
        Linear {
            weight: self.weight.shallow_clone(),
            bias: self.bias.shallow_clone(),
        }
    }
}

/// Linear layers with ELU between them, numbered as `nn.Sequential` numbers them (0, 2, 4, ...).
#[derive(Debug)]
pub struct Mlp {
    layers: Vec<Linear>,
}

impl Mlp {
    pub fn new(s: &mut Scope, input: i64, hidden: &[i64], output: i64) -> Self {
        let mut sizes = vec![input];
        sizes.extend_from_slice(hidden);
        sizes.push(output);
        let layers = sizes
            .windows(2)
            .enumerate()
            .map(|(k, w)| Linear::new(&mut s.sub(2 * k), w[0], w[1]))
            .collect();
        Mlp { layers }
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        let mut y = x.shallow_clone();
        let last = self.layers.len() - 1;
        for (k, layer) in self.layers.iter().enumerate() {
            y = layer.forward(&y);
            if k < last {
                y = y.elu();
            }
        }
        y
    }

    /// The same layers, as handles to the same tensors (parameters and their gradients).
    pub fn shallow_clone(&self) -> Self {
        Mlp {
            layers: self.layers.iter().map(Linear::shallow_clone).collect(),
        }
    }

    /// (weight, bias) of each layer, for the ONNX export.
    pub fn layers(&self) -> Vec<(&Tensor, &Tensor)> {
        self.layers.iter().map(|l| (&l.weight, &l.bias)).collect()
    }
}

/// rsl_rl's `EmpiricalNormalization`: running mean and (population) variance merged batch by
/// batch with count weights.
#[derive(Debug)]
pub struct EmpiricalNormalizer {
    pub mean: Tensor,
    pub var: Tensor,
    pub std: Tensor,
    pub count: Tensor,
}

impl EmpiricalNormalizer {
    pub fn new(s: &mut Scope, dim: i64) -> Self {
        let device = s.device();
        let mean = s.buffer("_mean", || Tensor::zeros([1, dim], (Kind::Float, device)));
        let var = s.buffer("_var", || Tensor::ones([1, dim], (Kind::Float, device)));
        let std = s.buffer("_std", || Tensor::ones([1, dim], (Kind::Float, device)));
        let count = s.buffer("count", || Tensor::zeros([], (Kind::Int64, device)));
        EmpiricalNormalizer { mean, var, std, count }
    }

    /// The same normaliser, as handles to the same buffers (an update through either changes
    /// both: every update is in place).
    pub fn shallow_clone(&self) -> Self {
        EmpiricalNormalizer {
            mean: self.mean.shallow_clone(),
            var: self.var.shallow_clone(),
            std: self.std.shallow_clone(),
            count: self.count.shallow_clone(),
        }
    }

    pub fn normalize(&self, x: &Tensor) -> Tensor {
        (x - &self.mean) / (&self.std + NORMALIZER_EPS)
    }

    /// Merges a batch `[N, dim]`: rate = N/(count+N); μ += rate·δ; σ² += rate·(σ²_x − σ² + δ·(μ_x − μ_new)).
    pub fn update(&mut self, x: &Tensor) {
        let _guard = tch::no_grad_guard();
        let n = x.size()[0];
        let _ = self.count.g_add_scalar_(n);
        let rate = n as f64 / self.count.int64_value(&[]) as f64;
        let var_x = column_variance(x);
        let mean_x = x.mean_dim(Some(&[0i64][..]), true, Kind::Float);
        let delta = &mean_x - &self.mean;
        let _ = self.mean.g_add_(&(&delta * rate));
        let new_var = &self.var + (var_x - &self.var + &delta * (&mean_x - &self.mean)) * rate;
        self.var.copy_(&new_var);
        self.std.copy_(&self.var.sqrt());
    }
}

/// `torch.var(x, dim=0, unbiased=False)` of a `[N, dim]` batch, `[1, dim]`. libtorch computes
/// it with Welford's algorithm in float64, one column at a time across the rows: 0.28 ms for a
/// rollout step's 128 × 286 critic inputs, a quarter of the step's sampling. On the CPU this
/// takes two passes over float64 sums along the rows instead (the mean, then the squared
/// deviations), which the compiler vectorises across the columns: the same float64 accuracy,
/// rounded to float32 the same way (checked against libtorch's in `variance_tests`).
fn column_variance(x: &Tensor) -> Tensor {
    let size = x.size();
    if x.device() != Device::Cpu || x.kind() != Kind::Float || size.len() != 2 {
        return x.var_correction(Some(&[0i64][..]), 0, true);
    }
    let (rows, cols) = (size[0] as usize, size[1] as usize);
    let values = Vec::<f32>::try_from(x.contiguous().view([-1])).expect("a float tensor");
    let mut mean = vec![0f64; cols];
    for row in values.chunks_exact(cols) {
        for (m, &v) in mean.iter_mut().zip(row) {
            *m += v as f64;
        }
    }
    mean.iter_mut().for_each(|m| *m /= rows as f64);
    let mut squares = vec![0f64; cols];
    for row in values.chunks_exact(cols) {
        for ((s, &m), &v) in squares.iter_mut().zip(&mean).zip(row) {
            let d = v as f64 - m;
            *s += d * d;
        }
    }
    let var: Vec<f32> = squares.iter().map(|s| (s / rows as f64) as f32).collect();
    Tensor::from_slice(&var).view([1, cols as i64])
}

/// The sizes a model is built with (kept to build it again on another device).
#[derive(Debug, Clone)]
struct Sizes {
    actor_in: i64,
    critic_in: i64,
    actions: i64,
    actor_hidden: Vec<i64>,
    critic_hidden: Vec<i64>,
    init_std: f64,
}

/// Actor, critic, std and the two normalisers.
#[derive(Debug)]
pub struct ActorCritic {
    pub store: ParamStore,
    sizes: Sizes,
    pub actor: Mlp,
    pub critic: Mlp,
    pub std: Tensor,
    pub actor_norm: EmpiricalNormalizer,
    pub critic_norm: EmpiricalNormalizer,
}

/// The actor's side of a model: its network, normaliser and std, as handles to the model's own
/// tensors (the same storage and the same gradients). A side can move to a thread of its own,
/// so that the actor and the critic, which share no tensor, compute side by side.
#[derive(Debug)]
pub struct ActorSide {
    pub net: Mlp,
    pub norm: EmpiricalNormalizer,
    pub std: Tensor,
}

impl ActorSide {
    /// The action distribution of raw actor inputs.
    pub fn distribution(&self, obs: &Tensor) -> Gaussian {
        let mean = self.net.forward(&self.norm.normalize(obs));
        let std = self.std.clamp_min(MIN_STD).expand_as(&mean);
        Gaussian { mean, std }
    }
}

/// The critic's side of a model (network and normaliser); see [`ActorSide`].
#[derive(Debug)]
pub struct CriticSide {
    pub net: Mlp,
    pub norm: EmpiricalNormalizer,
}

impl CriticSide {
    /// V of raw critic inputs, `[N]`.
    pub fn value(&self, critic_obs: &Tensor) -> Tensor {
        self.net.forward(&self.norm.normalize(critic_obs)).squeeze_dim(-1)
    }
}

/// The Gaussian of a batch of actor inputs.
#[derive(Debug)]
pub struct Gaussian {
    pub mean: Tensor,
    pub std: Tensor,
}

impl Gaussian {
    /// Σ over actions of log N(a; μ, σ), per row `[N]`.
    pub fn log_prob(&self, actions: &Tensor) -> Tensor {
        let z = (actions - &self.mean) / &self.std;
        (z.square() * -0.5 - self.std.log() - 0.5 * (2.0 * std::f64::consts::PI).ln()).sum_dim_intlist(
            Some(&[-1i64][..]),
            false,
            Kind::Float,
        )
    }

    /// Σ over actions of the entropy, per row `[N]`.
    pub fn entropy(&self) -> Tensor {
        (self.std.log() + 0.5 + 0.5 * (2.0 * std::f64::consts::PI).ln())
            .expand_as(&self.mean)
            .sum_dim_intlist(Some(&[-1i64][..]), false, Kind::Float)
    }

    pub fn sample(&self) -> Tensor {
        &self.mean + self.mean.randn_like() * &self.std
    }
}

impl ActorCritic {
    /// A new model on the CPU, initialised from libtorch's CPU generator.
    pub fn new(
        actor_in: i64,
        critic_in: i64,
        actions: i64,
        actor_hidden: &[i64],
        critic_hidden: &[i64],
        init_std: f64,
    ) -> Self {
        let sizes = Sizes {
            actor_in,
            critic_in,
            actions,
            actor_hidden: actor_hidden.to_vec(),
            critic_hidden: critic_hidden.to_vec(),
            init_std,
        };
        Self::build(sizes, Device::Cpu)
    }

    fn build(sizes: Sizes, device: Device) -> Self {
        let mut store = ParamStore::new();
        let mut root = Scope::root(&mut store, "", device, true);
        let actor = Mlp::new(
            &mut root.sub("actor"),
            sizes.actor_in,
            &sizes.actor_hidden,
            sizes.actions,
        );
        let critic = Mlp::new(&mut root.sub("critic"), sizes.critic_in, &sizes.critic_hidden, 1);
        let std = root.param("std", || {
            Tensor::full([sizes.actions], sizes.init_std, (Kind::Float, device))
        });
        let actor_norm = EmpiricalNormalizer::new(&mut root.sub("actor_obs_normalizer"), sizes.actor_in);
        let critic_norm = EmpiricalNormalizer::new(&mut root.sub("critic_obs_normalizer"), sizes.critic_in);
        ActorCritic {
            store,
            sizes,
            actor,
            critic,
            std,
            actor_norm,
            critic_norm,
        }
    }

    /// The same model (every parameter and normaliser buffer) on `device`: a model is made and
    /// initialised on the CPU, so a seed gives the same start on every device.
    pub fn to_device(&self, device: Device) -> Self {
        let moved = Self::build(self.sizes.clone(), device);
        let tensors: std::collections::BTreeMap<String, Tensor> = self.store.all_under("").into_iter().collect();
        moved
            .load(&|k| tensors.get(k).map(Tensor::shallow_clone))
            .expect("the same sizes");
        moved
    }

    /// Where the model's tensors live.
    pub fn device(&self) -> Device {
        self.std.device()
    }

    /// The action distribution of raw actor inputs.
    pub fn distribution(&self, obs: &Tensor) -> Gaussian {
        self.actor_side().distribution(obs)
    }

    /// The actor's side, sharing this model's tensors.
    pub fn actor_side(&self) -> ActorSide {
        ActorSide {
            net: self.actor.shallow_clone(),
            norm: self.actor_norm.shallow_clone(),
            std: self.std.shallow_clone(),
        }
    }

    /// The critic's side, sharing this model's tensors.
    pub fn critic_side(&self) -> CriticSide {
        CriticSide {
            net: self.critic.shallow_clone(),
            norm: self.critic_norm.shallow_clone(),
        }
    }

    /// The deterministic action (the mean), as deployed.
    pub fn act_inference(&self, obs: &Tensor) -> Tensor {
        self.actor.forward(&self.actor_norm.normalize(obs))
    }

    /// V of raw critic inputs, `[N]`.
    pub fn value(&self, critic_obs: &Tensor) -> Tensor {
        self.critic_side().value(critic_obs)
    }

    /// The trainable tensors in name order (the optimiser's order).
    pub fn parameters(&self) -> Vec<(String, Tensor)> {
        self.store.trainable_under("")
    }

    /// Every tensor (parameters and normaliser buffers), on the CPU, for a checkpoint or an
    /// export (the model's own where it lives on the CPU, copies otherwise).
    pub fn tensors(&self) -> Vec<(String, Tensor)> {
        self.store
            .all_under("")
            .into_iter()
            .map(|(name, t)| (name, t.to_device(Device::Cpu)))
            .collect()
    }

    /// Copies saved tensors into this model, naming any missing or mis-shaped one.
    pub fn load(&self, lookup: &dyn Fn(&str) -> Option<Tensor>) -> Result<(), String> {
        let _guard = tch::no_grad_guard();
        for (name, entry) in self.store.iter() {
            let t = lookup(name).ok_or_else(|| format!("tensor {name} is missing"))?;
            if t.size() != entry.tensor.size() {
                return Err(format!(
                    "tensor {name}: shape {:?}, expected {:?}",
                    t.size(),
                    entry.tensor.size()
                ));
            }
            entry.tensor.shallow_clone().copy_(&t);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model moved to a device is the same model: every parameter and normaliser buffer, and
    /// the same outputs (here the CPU, the one device a test machine has; the CUDA route is
    /// the same code with another device).
    #[test]
    fn a_moved_model_keeps_every_tensor() {
        tch::manual_seed(3);
        let mut model = ActorCritic::new(5, 7, 3, &[8, 4], &[6], 0.7);
        model
            .actor_norm
            .update(&Tensor::randn([10, 5], (Kind::Float, Device::Cpu)));
        let moved = model.to_device(Device::Cpu);
        assert_eq!(moved.device(), Device::Cpu);
        let (a, b) = (model.tensors(), moved.tensors());
        assert_eq!(a.len(), b.len());
        for ((na, ta), (nb, tb)) in a.iter().zip(&b) {
            assert_eq!(na, nb);
            assert!(ta.equal(tb), "{na} differs");
        }
        // Distinct storage: training the moved one leaves the original alone.
        let _ = tch::no_grad(|| moved.std.shallow_clone().fill_(0.1));
        assert!(!model.std.equal(&moved.std));
        let obs = Tensor::randn([2, 5], (Kind::Float, Device::Cpu));
        assert!(model.act_inference(&obs).equal(&moved.act_inference(&obs)));
    }

    /// The two-pass float64 variance gives libtorch's values bit for bit: batches of a rollout
    /// step's shapes, with offsets and scales like raw observations', and a constant column.
    #[test]
    fn variance_tests() {
        tch::manual_seed(11);
        for (rows, cols, scale, offset) in [
            (128, 286, 1.0, 0.0),
            (128, 160, 3.0, 1.0),
            (4096, 286, 0.01, 100.0),
            (7, 3, 1e3, -5.0),
            (1, 9, 1.0, 0.5),
        ] {
            let x = Tensor::randn([rows, cols], (Kind::Float, Device::Cpu)) * scale + offset;
            let x = Tensor::cat(&[x, Tensor::full([rows, 1], 0.25, (Kind::Float, Device::Cpu))], 1);
            let expected = x.var_correction(Some(&[0i64][..]), 0, true);
            let got = column_variance(&x);
            assert_eq!(got.size(), expected.size());
            assert!(got.equal(&expected), "{rows} × {cols}: the variances differ");
        }
    }
}
