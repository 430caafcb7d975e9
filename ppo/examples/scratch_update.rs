use arena_ppo::config::PpoConfig;
use arena_ppo::policy::ActorCritic;
use arena_ppo::ppo::{self, Rollout, UpdateBatch};
use arena_torch::optim::Adam;
use std::time::Instant;
use tch::{Device, Kind, Tensor};
fn main() {
    let m = ActorCritic::new(160, 286, 29, &[256, 128, 64], &[256, 128, 64], 1.0);
    let mut adam = Adam::new(m.parameters(), 3e-4);
    let r = |s: &[i64]| Tensor::randn(s, (Kind::Float, Device::Cpu));
    let (t, n) = (24, 128);
    let rollout = Rollout {
        obs: r(&[t, n, 160]),
        critic_obs: r(&[t, n, 286]),
        actions: r(&[t, n, 29]),
        rewards: r(&[t, n]),
        dones: Tensor::zeros([t, n], (Kind::Float, Device::Cpu)),
        values: r(&[t, n]),
        log_probs: r(&[t, n]) - 30.0,
        mu: r(&[t, n, 29]),
        sigma: r(&[t, n, 29]).abs() + 0.5,
    };
    let (ret, adv) = (r(&[t, n]), r(&[t, n]));
    let perm = Tensor::randperm(t * n, (Kind::Int64, Device::Cpu));
    let c = PpoConfig::default();
    let b = UpdateBatch {
        rollout: &rollout,
        returns: &ret,
        advantages: &adv,
        permutation: &perm,
    };
    ppo::update(&m, &mut adam, &b, &c, None);
    let s = Instant::now();
    for _ in 0..10 {
        ppo::update(&m, &mut adam, &b, &c, None);
    }
    println!(
        "ms per update {:.1} ({} threads)",
        s.elapsed().as_secs_f64() / 10.0 * 1e3,
        tch::get_num_threads()
    );
}
