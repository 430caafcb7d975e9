//! `arena demo`: the main job for now — the reference-replay policy on the built-in motions,
//! with a tracking summary per motion.

use crate::cli::sim::BuiltinPolicy;
use arena_data::NUM_JOINTS;
use arena_sim::dr::DrLevel;
use arena_sim::env::{EpisodeAssignment, EpisodeStatus, TrackingEnv, TrackingEnvConfig};
use arena_sim::motion::MotionLibrary;
use arena_sim::robot::NUM_BODIES_EXT;
use arena_sim::{CONTROL_DT, RobotConfig};
use clap::Args;
use std::sync::Arc;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Built-in policy to run.
    #[arg(long, value_enum, default_value_t = BuiltinPolicy::Replay)]
    policy: BuiltinPolicy,
    /// Domain randomisation level 0-3.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=3))]
    dr_level: u8,
    /// Print the per-motion summary as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: DemoArgs) -> anyhow::Result<()> {
    let robot = RobotConfig::default();
    let clips = MotionLibrary::builtin_clips(&robot)?;
    let library = Arc::new(MotionLibrary::from_clips(&clips, &robot)?);
    let n = library.len();
    let config = TrackingEnvConfig {
        robot,
        num_envs: n,
        ..Default::default()
    };
    let mut env = TrackingEnv::new(config, library.clone())?;
    let level = DrLevel::try_from(a.dr_level).map_err(anyhow::Error::msg)?;
    let assignments: Vec<_> = (0..n)
        .map(|e| {
            let a = EpisodeAssignment {
                motion: e,
                start_time: 0.0,
                seed: e as u64,
                dr_level: level,
            };
            (e, a)
        })
        .collect();
    env.reset(&assignments)?;
    let mut policy = a.policy.build();
    let mut actions = vec![0.0f32; n * NUM_JOINTS];
    while env.infos().iter().any(|i| i.status == EpisodeStatus::Running) {
        policy.act(&env, &mut actions);
        env.step(&actions)?;
    }
    let mut rows = Vec::new();
    for e in 0..n {
        let t = env.trajectory(e);
        let motion = &library.motions[e];
        let frames = t.len();
        let (mut joint_err, mut body_err) = (0.0, 0.0);
        for k in 0..frames {
            for j in 0..NUM_JOINTS {
                joint_err += (t.qpos[k * 36 + 7 + j] - t.ref_qpos[k * 36 + 7 + j]).abs();
            }
            for b in 0..NUM_BODIES_EXT {
                let i = k * 3 * NUM_BODIES_EXT + 3 * b;
                let d: f64 = (0..3)
                    .map(|c| (t.body_pos[i + c] - t.ref_body_pos[i + c]).powi(2))
                    .sum();
                body_err += d.sqrt();
            }
        }
        let status = match &env.infos()[e].status {
            EpisodeStatus::Truncated => "completed".to_string(),
            EpisodeStatus::Fell => "fell".to_string(),
            EpisodeStatus::Failed(r) => format!("failed: {r}"),
            other => format!("{other:?}"),
        };
        rows.push(serde_json::json!({
            "motion": motion.name,
            "steps": frames.saturating_sub(1),
            "duration_s": (frames.saturating_sub(1)) as f64 * CONTROL_DT,
            "joint_error_mrad": 1000.0 * joint_err / (frames * NUM_JOINTS) as f64,
            "body_position_error_mm": 1000.0 * body_err / (frames * NUM_BODIES_EXT) as f64,
            "final_root_height_m": t.qpos[(frames - 1) * 36 + 2],
            "status": status,
        }));
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!(
        "MimicArena demo: {:?} policy on {n} built-in motions (DR level {})",
        a.policy, a.dr_level
    );
    println!(
        "{:<15} {:>6} {:>8} {:>16} {:>18} {:>12}  status",
        "motion", "steps", "secs", "joint err mrad", "body pos err mm", "root z end"
    );
    for r in &rows {
        println!(
            "{:<15} {:>6} {:>8.2} {:>16.1} {:>18.1} {:>12.3}  {}",
            r["motion"].as_str().unwrap_or(""),
            r["steps"],
            r["duration_s"].as_f64().unwrap_or(0.0),
            r["joint_error_mrad"].as_f64().unwrap_or(0.0),
            r["body_position_error_mm"].as_f64().unwrap_or(0.0),
            r["final_root_height_m"].as_f64().unwrap_or(0.0),
            r["status"].as_str().unwrap_or("")
        );
    }
    Ok(())
}
