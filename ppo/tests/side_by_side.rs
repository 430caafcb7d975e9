//! The actor's and the critic's halves computed side by side on two threads (on the CPU: the
//! rollout's sampling on a one-thread libtorch pool, the update on a two-thread pool) give what
//! the same work gives on the calling thread alone: the same actions, values and normaliser
//! statistics from a rollout step, and the same losses and model after a whole update.

use arena_ppo::config::{LrSchedule, PpoConfig};
use arena_ppo::oracle_io::{CaseSizes, OracleCase};
use arena_ppo::ppo::{self, Act, UpdateTrace};
use arena_torch::optim::Adam;
use tch::{Kind, Tensor};

/// Normwise relative error ‖a − b‖ / max(‖b‖, 1e-6).
fn rel(a: &Tensor, b: &Tensor) -> f64 {
    let d = (a.to_kind(Kind::Double) - b.to_kind(Kind::Double))
        .norm()
        .double_value(&[]);
    d / b.to_kind(Kind::Double).norm().double_value(&[]).max(1e-6)
}

fn case() -> OracleCase {
    tch::manual_seed(20261202);
    OracleCase::random(&CaseSizes {
        steps: 6,
        envs: 32,
        obs_dim: 160,
        critic_dim: 286,
        act_dim: 29,
        actor_hidden: vec![64, 32],
        critic_hidden: vec![48, 24],
    })
}

/// What a run computed: a rollout step's outputs, the update's losses, every tensor of the
/// model after.
struct Computed {
    step: Vec<Tensor>,
    losses: Vec<[f64; 4]>,
    after: Vec<(String, Tensor)>,
}

/// One rollout step's sampling and one whole update of a fresh case on `threads` libtorch
/// threads.
fn run(threads: i32) -> Computed {
    tch::set_num_threads(threads);
    let OracleCase {
        mut model,
        rollout,
        last_values,
        permutation,
        ..
    } = case();
    tch::manual_seed(7);
    let obs = Tensor::randn([64, 160], tch::kind::FLOAT_CPU) * 1.5 + 0.2;
    let critic_obs = Tensor::randn([64, 286], tch::kind::FLOAT_CPU) - 0.4;
    let act = Act::sample(&mut model, &obs, &critic_obs);
    let step = vec![
        act.actions,
        act.values,
        act.log_probs,
        act.mu,
        model.actor_norm.mean.copy(),
        model.critic_norm.std.copy(),
        model.critic_norm.count.to_kind(Kind::Double),
    ];
    let config = PpoConfig {
        schedule: LrSchedule::Adaptive,
        learning_rate: 1e-3,
        desired_kl: 0.002,
        ..PpoConfig::default()
    };
    let (returns, advantages) = ppo::compute_returns(&rollout, &last_values, config.gamma, config.lam);
    let mut adam = Adam::new(model.parameters(), config.learning_rate);
    let mut trace = UpdateTrace::default();
    let batch = ppo::UpdateBatch {
        rollout: &rollout,
        returns: &returns,
        advantages: &advantages,
        permutation: &permutation,
    };
    ppo::update(&model, &mut adam, &batch, &config, Some(&mut trace));
    Computed {
        step,
        losses: trace.losses,
        after: model.tensors(),
    }
}

#[test]
fn side_by_side_halves_compute_what_one_thread_computes() {
    // One thread: the sampling side by side, the update on the calling thread. Two: the
    // sampling on the calling thread, the update side by side. Three: neither.
    let one = run(1);
    for other in [2, 3] {
        let Computed { step, losses, after } = run(other);
        for (k, (a, b)) in one.step.iter().zip(&step).enumerate() {
            let e = rel(a, b);
            assert!(e < 1e-6, "rollout output {k}: 1 vs {other} threads differ by {e:.2e}");
        }
        assert_eq!(one.losses.len(), 20);
        let (a, b) = (
            Tensor::from_slice(&one.losses.concat()),
            Tensor::from_slice(&losses.concat()),
        );
        let e = rel(&a, &b);
        assert!(e < 1e-5, "update losses: 1 vs {other} threads differ by {e:.2e}");
        for ((name, a), (_, b)) in one.after.iter().zip(&after) {
            let e = rel(a, b);
            assert!(
                e < 1e-5,
                "{name} after the update: 1 vs {other} threads differ by {e:.2e}"
            );
        }
    }
    tch::set_num_threads(1);
}
