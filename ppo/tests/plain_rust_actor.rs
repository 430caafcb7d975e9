//! The SDK's plain-Rust tracker (what `arena-ppo eval` / `agent` and `arena demo` run) computes
//! the libtorch actor's actions: from the live model and from a saved checkpoint, within 1e-5.

use arena_ppo::config::PpoTrainConfig;
use arena_ppo::mdp::ACTOR_DIM;
use arena_ppo::train::{new_model, tracker_policy};
use arena_sdk::tracker::{TrackerCard, TrackerPolicy};
use arena_torch::tensors::write_tensors;
use tch::Tensor;

/// Every joint's default position and action scale in the test cards.
const DEFAULT: f64 = 0.1;
const SCALE: f64 = 0.4;

/// A card for `config`'s networks with the given target ranges (none: no clamp).
fn card(config: &PpoTrainConfig, joint_target_range: Vec<[f64; 2]>) -> TrackerCard {
    TrackerCard {
        benchmark: "g1-smoke-robot".into(),
        gain_preset: "armature".into(),
        joint_names: arena_sim::robot::JOINT_NAMES.iter().map(|s| s.to_string()).collect(),
        joint_stiffness: vec![40.0; 29],
        joint_damping: vec![2.0; 29],
        default_joint_pos: vec![DEFAULT; 29],
        action_scale: vec![SCALE; 29],
        observation_names: arena_sdk::tracker::OBSERVATION_NAMES
            .iter()
            .map(|s| s.to_string())
            .collect(),
        anchor_body_name: "torso_link".into(),
        actor_hidden: config.network.actor_hidden.clone(),
        critic_hidden: config.network.critic_hidden.clone(),
        joint_target_range,
    }
}

/// A fresh actor whose normaliser has seen inputs around 1 ± 3, as the tests feed it.
fn model(config: &PpoTrainConfig, seed: u64) -> arena_ppo::policy::ActorCritic {
    let mut model = new_model(config, seed);
    model
        .actor_norm
        .update(&(Tensor::randn([256, ACTOR_DIM as i64], tch::kind::FLOAT_CPU) * 3.0 + 1.0));
    model
}

#[test]
fn plain_rust_actions_equal_libtorch_actions() {
    let config = PpoTrainConfig::default();
    let model = model(&config, 5);
    let card = card(&config, Vec::new());
    let live = tracker_policy(&model, card.clone()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_tensors(&dir.path().join("model.safetensors"), &model.tensors()).unwrap();
    std::fs::write(dir.path().join("policy.json"), serde_json::to_string(&card).unwrap()).unwrap();
    let loaded = TrackerPolicy::load(dir.path()).unwrap();
    let obs = Tensor::randn([32, ACTOR_DIM as i64], tch::kind::FLOAT_CPU) * 3.0 + 1.0;
    let expected = {
        let _g = tch::no_grad_guard();
        Vec::<Vec<f32>>::try_from(model.act_inference(&obs)).unwrap()
    };
    let rows = Vec::<Vec<f32>>::try_from(&obs).unwrap();
    let mut worst = 0.0f32;
    for (row, want) in rows.iter().zip(&expected) {
        for policy in [&live, &loaded] {
            let got = policy.act(row);
            for (g, w) in got.iter().zip(want) {
                worst = worst.max((g - w).abs());
            }
        }
    }
    eprintln!("largest difference over 32 inputs: {worst:.2e}");
    assert!(worst < 1e-5, "{worst}");
    // A card that does not match its tensors is refused, naming the problem.
    let mut wrong = card;
    wrong.actor_hidden = vec![256, 128];
    std::fs::write(dir.path().join("policy.json"), serde_json::to_string(&wrong).unwrap()).unwrap();
    let err = TrackerPolicy::load(dir.path()).unwrap_err();
    assert!(err.contains("the actor ends with"), "{err}");
}

/// The exported ONNX clamps its actions where training clamps the targets
/// (`joint_target_range`): run by the hosted engine, every action lies within the bounds, an
/// action inside them is the libtorch actor's, and the card's targets are clamped likewise.
#[test]
fn the_export_clamps_actions_where_training_clamps_targets() {
    let config = PpoTrainConfig::default();
    let model = model(&config, 9);
    // Narrow ranges (±0.2 of the action) so that a random actor hits them.
    let card = card(&config, vec![[DEFAULT - 0.08, DEFAULT + 0.08]; 29]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.onnx");
    arena_ppo::onnx::export(&model, &card, &path).unwrap();
    let engine = arena_onnx::Engine::load(&path).unwrap();
    let rows = 64;
    let obs = Tensor::randn([rows, ACTOR_DIM as i64], tch::kind::FLOAT_CPU) * 3.0 + 1.0;
    let raw = {
        let _g = tch::no_grad_guard();
        Vec::<f32>::try_from(model.act_inference(&obs).view([-1])).unwrap()
    };
    let flat = Vec::<f32>::try_from(obs.view([-1])).unwrap();
    let got = engine.run(&flat, &vec![0.0; rows as usize], rows as usize).unwrap();
    let (lower, upper) = arena_ppo::onnx::action_bounds(&card).unwrap();
    let (mut clamped, mut free) = (0, 0);
    for (k, (g, r)) in got.iter().zip(&raw).enumerate() {
        let j = k % 29;
        assert!(
            (lower[j]..=upper[j]).contains(g),
            "action {k}: {g} outside [{}, {}]",
            lower[j],
            upper[j]
        );
        if (lower[j]..=upper[j]).contains(r) {
            free += 1;
            assert!((g - r).abs() < 1e-5, "action {k}: {g} against libtorch's {r}");
        } else {
            clamped += 1;
            assert_eq!(*g, r.clamp(lower[j], upper[j]), "action {k}");
        }
        let target = card.target(j, *r);
        assert!((DEFAULT - 0.08..=DEFAULT + 0.08).contains(&target), "target {target}");
    }
    assert!(
        clamped > 0 && free > 0,
        "{clamped} clamped, {free} free: the test needs both"
    );
}
