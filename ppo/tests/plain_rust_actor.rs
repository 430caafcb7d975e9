//! The SDK's plain-Rust tracker (what `arena-ppo eval` / `agent` and `arena demo` run) computes
//! the libtorch actor's actions: from the live model and from a saved checkpoint, within 1e-5.

use arena_ppo::config::PpoTrainConfig;
use arena_ppo::mdp::ACTOR_DIM;
use arena_ppo::train::{new_model, tracker_policy};
use arena_sdk::tracker::{TrackerCard, TrackerPolicy};
use arena_torch::tensors::write_tensors;
use tch::Tensor;

#[test]
fn plain_rust_actions_equal_libtorch_actions() {
    let config = PpoTrainConfig::default();
    let mut model = new_model(&config, 5);
    model
        .actor_norm
        .update(&(Tensor::randn([256, ACTOR_DIM as i64], tch::kind::FLOAT_CPU) * 3.0 + 1.0));
    let card = TrackerCard {
        benchmark: "g1-smoke-robot".into(),
        gain_preset: "armature".into(),
        joint_names: arena_sim::robot::JOINT_NAMES.iter().map(|s| s.to_string()).collect(),
        joint_stiffness: vec![40.0; 29],
        joint_damping: vec![2.0; 29],
        default_joint_pos: vec![0.1; 29],
        action_scale: vec![0.4; 29],
        observation_names: arena_sdk::tracker::OBSERVATION_NAMES
            .iter()
            .map(|s| s.to_string())
            .collect(),
        anchor_body_name: "torso_link".into(),
        actor_hidden: config.network.actor_hidden.clone(),
        critic_hidden: config.network.critic_hidden.clone(),
    };
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
