//! Structure of the networks: the paper preset has the published parameter counts, the real
//! modules have exactly the counted parameters under the checkpoint names, and the building
//! blocks behave as §5.1 says (unit-sphere B, clamped actions with a straight-through gradient,
//! orthogonal init, targets equal to the online networks at start).

use arena_bfm::config::{ModelConfig, PRESETS, ParameterCounts};
use arena_bfm::model::{self, FbCprAuxModel};
use arena_bfm::nn::sample_action;
use arena_bfm::update::pessimistic;
use tch::{Device, Kind, Tensor};

#[test]
fn paper_preset_has_the_published_parameter_counts() {
    let c = ParameterCounts::of(&ModelConfig::paper());
    let near = |x: i64, millions: f64, tol: f64| ((x as f64) / 1e6 - millions).abs() <= tol;
    assert!(near(c.forward, 135.9, 0.05), "F {}", c.forward);
    assert!(near(c.critic, 134.8, 0.05), "critic {}", c.critic);
    assert!(near(c.aux_critic, 134.8, 0.05), "aux critic {}", c.aux_critic);
    assert!(near(c.actor, 31.9, 0.05), "actor {}", c.actor);
    assert!(near(c.backward, 0.20, 0.005), "B {}", c.backward);
    assert!(near(c.discriminator, 2.9, 0.05), "D {}", c.discriminator);
}

#[test]
fn modules_hold_exactly_the_counted_parameters() {
    for preset in ["tiny", "small"] {
        let cfg = ModelConfig::preset(preset).unwrap();
        cfg.validate().unwrap();
        let m = FbCprAuxModel::new(&cfg, 0.01, 0.99, Device::Cpu);
        let c = ParameterCounts::of(&cfg);
        for (prefix, count) in [
            (model::FORWARD, c.forward),
            (model::CRITIC, c.critic),
            (model::AUX_CRITIC, c.aux_critic),
            (model::ACTOR, c.actor),
            (model::BACKWARD, c.backward),
            (model::DISCRIMINATOR, c.discriminator),
            (model::TARGET_FORWARD, c.forward),
            (model::TARGET_CRITIC, c.critic),
        ] {
            assert_eq!(m.store.numel_under(prefix), count, "{preset} {prefix}");
        }
    }
    assert!(PRESETS.iter().all(|p| ModelConfig::preset(p).is_some()));
}

#[test]
fn checkpoint_names_follow_the_released_layout() {
    let m = FbCprAuxModel::new(&ModelConfig::tiny(), 0.01, 0.99, Device::Cpu);
    for name in [
        "_backward_map.net.0.weight",
        "_backward_map.net.1.bias",
        "_backward_map.net.3.weight",
        "_forward_map.embed_z.0.mlp.0.weight",
        "_forward_map.embed_z.2.mlp.1.bias",
        "_forward_map.embed_sa.1.mlp.1.weight",
        "_forward_map.Fs.3.mlp.1.weight",
        "_actor.embed_z.1.mlp.1.weight",
        "_actor.embed_s.0.mlp.0.bias",
        "_actor.policy.2.mlp.1.weight",
        "_discriminator.trunk.0.weight",
        "_discriminator.trunk.1.weight",
        "_discriminator.trunk.3.weight",
        "_discriminator.trunk.5.weight",
        "_discriminator.trunk.7.bias",
        "_critic.Fs.0.mlp.1.weight",
        "_aux_critic.embed_sa.0.mlp.1.weight",
        "_target_forward_map.Fs.0.mlp.1.weight",
        "_obs_normalizer._normalizers.privileged_state._normalizer.running_var",
        "_obs_normalizer._normalizers.history_actor._normalizer.num_batches_tracked",
        "_aux_reward_normalizer.mean_square",
    ] {
        assert!(m.store.get(name).is_some(), "{name} missing");
    }
    // Ensemble weights are [P, in, out]; plain ones [out, in].
    let cfg = ModelConfig::tiny();
    let w = m.store.get("_forward_map.embed_z.0.mlp.1.weight").unwrap();
    assert_eq!(w.size(), vec![2, cfg.obs.critic() + cfg.z_dim, cfg.forward.hidden_dim]);
    let w = m.store.get("_actor.embed_s.0.mlp.1.weight").unwrap();
    assert_eq!(w.size(), vec![cfg.actor.hidden_dim, cfg.obs.actor()]);
}

#[test]
fn init_is_orthogonal_and_targets_start_equal() {
    tch::manual_seed(1);
    let m = FbCprAuxModel::new(&ModelConfig::tiny(), 0.01, 0.99, Device::Cpu);
    // Plain [out, in] with out < in: orthonormal rows.
    let w = m.store.get("_discriminator.trunk.3.weight").unwrap();
    let gram = w.matmul(&w.tr());
    let eye = Tensor::eye(gram.size()[0], (Kind::Float, Device::Cpu));
    assert!((gram - &eye).abs().max().double_value(&[]) < 1e-4);
    // Ensemble member [in, out], gain √2.
    let w = m.store.get("_critic.Fs.0.mlp.1.weight").unwrap().get(1);
    let gram = w.tr().matmul(&w) / 2.0;
    assert!((gram - &eye.eye_like()).abs().max().double_value(&[]) < 1e-4);
    for (online, target) in model::TARGET_PAIRS {
        for (name, t) in m.store.all_under(online) {
            let other = m.store.get(&format!("{target}{}", &name[online.len()..])).unwrap();
            assert!(t.equal(other), "{name}");
        }
    }
    assert!(
        m.store.all_under(model::TARGET_FORWARD).iter().all(|(n, _)| !m
            .store
            .trainable_under("")
            .iter()
            .any(|(t, _)| t == n))
    );
}

trait EyeLike {
    fn eye_like(&self) -> Tensor;
}
impl EyeLike for Tensor {
    fn eye_like(&self) -> Tensor {
        Tensor::eye(self.size()[0], (Kind::Float, Device::Cpu))
    }
}

#[test]
fn backward_map_is_on_the_sphere_and_actions_are_clamped_straight_through() {
    let cfg = ModelConfig::tiny();
    let m = FbCprAuxModel::new(&cfg, 0.01, 0.99, Device::Cpu);
    let goal = Tensor::randn([5, cfg.obs.goal()], (Kind::Float, Device::Cpu));
    let b = m.backward_map.forward(&goal);
    let norms = b.norm_scalaropt_dim(2.0, [-1], false);
    let expected = (cfg.z_dim as f64).sqrt();
    assert!((norms - expected).abs().max().double_value(&[]) < 1e-4);

    let mean = Tensor::from_slice(&[0.9f32, -0.95, 0.0]).set_requires_grad(true);
    let eps = Tensor::from_slice(&[0.3f32, -0.3, 0.1]);
    let a = sample_action(&mean, &eps);
    let v: Vec<f32> = Vec::try_from(&a.detach()).unwrap();
    assert_eq!(v, vec![1.0 - 1e-6, -1.0 + 1e-6, 0.1]);
    let g = Tensor::run_backward(&[a.sum(Kind::Float)], &[&mean], false, false);
    let g: Vec<f32> = Vec::try_from(&g[0]).unwrap();
    assert_eq!(g, vec![1.0, 1.0, 1.0], "the clamp passes the gradient through");
}

#[test]
fn pessimism_with_two_members_is_the_minimum_at_one_half() {
    let x = Tensor::from_slice(&[1.0f32, 4.0, -2.0, 3.0, 0.5, -1.0]).view([2, 3]);
    let p: Vec<f32> = Vec::try_from(&pessimistic(&x, 0.5)).unwrap();
    assert_eq!(p, vec![1.0, 0.5, -2.0]);
    let mean: Vec<f32> = Vec::try_from(&pessimistic(&x, 0.0)).unwrap();
    assert_eq!(mean, vec![2.0, 2.25, -1.5]);
}
