//! `arena sim bench --dump`: what replays of a bench's physics in other simulators need.

use anyhow::Context;
use arena_data::NUM_JOINTS;
use arena_sim::RobotConfig;
use arena_sim::env::{EpisodeAssignment, TrackingEnv};
use arena_sim::policy::{Policy, ReplayPolicy};
use std::path::Path;

/// Runs the benchmark's episodes once with torque logging and writes what MuJoCo's rollout
/// needs to replay the same physics: `model.xml`, `initial_qpos.f64`, `initial_qvel.f64`
/// (N×36, N×35), `torques.f64` (N × steps·4 × 29), `final_qpos.f64` and `meta.json`; and for a
/// replay that runs its own PD loop, `commands.f64` (per env [`Handler::command_log`]'s layout:
/// kp and kd, 29 each, then per control step 29 targets and 29 feed-forward torques).
///
/// [`Handler::command_log`]: arena_sim::handler::Handler::command_log
pub(super) fn dump_replay(
    env: &mut TrackingEnv,
    all: &[(usize, EpisodeAssignment)],
    policy: &mut ReplayPolicy,
    steps: usize,
    dir: &Path,
    robot: &RobotConfig,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let n = env.num_envs();
    // The dump reads the recordings of running envs: every row appended as it is read.
    env.record_behind_physics(false);
    env.set_torque_logging(true)?;
    env.reset(all)?;
    let mut initial_qpos = Vec::new();
    let mut initial_qvel = Vec::new();
    for e in 0..n {
        initial_qpos.extend_from_slice(&env.trajectory(e).rows.qpos[..arena_sim::handler::NQ]);
        initial_qvel.extend_from_slice(&env.trajectory(e).rows.qvel[..arena_sim::handler::NV]);
    }
    let mut actions = vec![0.0f32; n * NUM_JOINTS];
    for _ in 0..steps {
        policy.act(env, &mut actions);
        env.step(&actions)?;
    }
    let mut torques = Vec::new();
    let mut commands = Vec::new();
    let mut final_qpos = Vec::new();
    for e in 0..n {
        let log = env.handler().torque_log(e).context("torque log")?;
        anyhow::ensure!(
            log.len() == steps * arena_sim::DECIMATION * NUM_JOINTS,
            "env {e} stopped early ({:?})",
            env.infos()[e].status
        );
        torques.extend_from_slice(log);
        let log = env.handler().command_log(e).context("command log")?;
        anyhow::ensure!(
            log.len() == (2 + 2 * steps) * NUM_JOINTS,
            "env {e}: {} logged command values, expected {}",
            log.len(),
            (2 + 2 * steps) * NUM_JOINTS
        );
        commands.extend_from_slice(log);
        let t = env.trajectory(e);
        final_qpos.extend_from_slice(&t.rows.qpos[t.rows.qpos.len() - arena_sim::handler::NQ..]);
    }
    let write_f64 = |name: &str, v: &[f64]| -> anyhow::Result<()> {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(dir.join(name), bytes).with_context(|| format!("writing {name}"))
    };
    std::fs::write(dir.join("model.xml"), robot.mjcf())?;
    write_f64("initial_qpos.f64", &initial_qpos)?;
    write_f64("initial_qvel.f64", &initial_qvel)?;
    write_f64("torques.f64", &torques)?;
    write_f64("commands.f64", &commands)?;
    write_f64("final_qpos.f64", &final_qpos)?;
    let meta = serde_json::json!({"envs": n, "steps": steps, "substeps": steps * arena_sim::DECIMATION,
        "nu": NUM_JOINTS, "effort": robot.effort});
    std::fs::write(dir.join("meta.json"), meta.to_string())?;
    Ok(())
}
