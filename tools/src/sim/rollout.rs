//! `arena sim rollout`: one episode from the motion's first frame, one CSV row per control step.

use super::{BuiltinPolicy, Gains};
use crate::same_file;
use anyhow::{Context, bail};
use arena_data::NUM_JOINTS;
use arena_sim::RobotConfig;
use arena_sim::dr::DrLevel;
use arena_sim::env::{EpisodeAssignment, EpisodeStatus, TrackingEnv, TrackingEnvConfig};
use arena_sim::motion::MotionLibrary;
use clap::Args;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, Args)]
pub struct RolloutArgs {
    /// Reference motion: G1 CSV (needs --fps) or NPZ (mjlab / BeyondMimic or holosoma layout).
    #[arg(long)]
    motion: PathBuf,
    /// Frame rate of a CSV motion file (an NPZ carries its own).
    #[arg(long)]
    fps: Option<f64>,
    /// Actions to apply: one row of 29 normalised values per control step.
    #[arg(long, conflicts_with = "policy", required_unless_present = "policy")]
    actions: Option<PathBuf>,
    /// Built-in policy instead of an action file.
    #[arg(long, value_enum)]
    policy: Option<BuiltinPolicy>,
    /// Domain randomisation level 0-3.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=3))]
    dr_level: u8,
    /// Episode seed: every domain-randomisation draw, noise and push comes from it.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// PD gain set.
    #[arg(long, value_enum, default_value_t = Gains::Base)]
    gains: Gains,
    /// Output CSV: a `#` header line, then time and qpos (36) per row.
    #[arg(long)]
    out: PathBuf,
    /// Also write qvel (35 values per row, MuJoCo layout) to this CSV.
    #[arg(long)]
    qvel_out: Option<PathBuf>,
}

/// Reads an action CSV: rows of 29 finite-or-not numbers (non-finite values are passed on so
/// the env reports them as a failed episode).
fn read_actions(path: &Path) -> anyhow::Result<Vec<[f32; NUM_JOINTS]>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let mut row = [0.0f32; NUM_JOINTS];
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() != NUM_JOINTS {
            bail!(
                "{}:{}: expected {NUM_JOINTS} action values, found {}",
                path.display(),
                i + 1,
                fields.len()
            );
        }
        for (j, f) in fields.iter().enumerate() {
            row[j] = f.trim().parse().map_err(|_| {
                anyhow::anyhow!(
                    "{}:{}:{}: expected a number, found {:?}",
                    path.display(),
                    i + 1,
                    j + 1,
                    f.trim()
                )
            })?;
        }
        rows.push(row);
    }
    Ok(rows)
}

/// First line of a rollout's qpos file; readers (`arena metrics`) recognise rollouts by it.
pub const ROLLOUT_HEADER: &str = "# arena rollout: time, qpos (root xyz, quaternion wxyz, 29 joint angles)";
const QVEL_HEADER: &str = "# arena rollout: time, qvel (root linear xyz, root angular xyz, 29 joint velocities)";

/// Writes the rows beside `path` and renames the file into place ([`crate::write_replacing`]).
fn write_rows(path: &Path, header: &str, times: &[f64], values: &[f64], width: usize) -> anyhow::Result<()> {
    crate::write_replacing(path, |to| write_rows_to(to, header, times, values, width))
}

fn write_rows_to(path: &Path, header: &str, times: &[f64], values: &[f64], width: usize) -> anyhow::Result<()> {
    let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    writeln!(out, "{header}")?;
    for (t, row) in times.iter().zip(values.chunks_exact(width)) {
        write!(out, "{t}")?;
        for v in row {
            write!(out, ",{v}")?;
        }
        writeln!(out)?;
    }
    out.flush()?;
    Ok(())
}

pub(super) fn rollout(a: RolloutArgs) -> anyhow::Result<()> {
    let outputs = std::iter::once(&a.out).chain(a.qvel_out.as_ref());
    for out in outputs {
        let inputs = std::iter::once(&a.motion).chain(a.actions.as_ref());
        if let Some(input) = inputs.into_iter().find(|i| same_file(i, out)) {
            bail!(
                "{} is an input of this rollout; write the rollout to another file",
                input.display()
            );
        }
        crate::check_writable(out)?;
    }
    if a.qvel_out.as_ref().is_some_and(|q| q == &a.out || same_file(q, &a.out)) {
        return Err(arena_sdk::cli::UsageError("--out and --qvel-out name the same file".into()).into());
    }
    let robot = RobotConfig::new(a.gains.into());
    let clip = crate::read_motion_file(&a.motion, a.fps)?;
    let library = Arc::new(MotionLibrary::from_clips(std::slice::from_ref(&clip), &robot)?);
    let config = TrackingEnvConfig {
        robot,
        num_envs: 1,
        threads: 1,
        ..Default::default()
    };
    let mut env = TrackingEnv::new(config, library)?;
    let assignment = EpisodeAssignment {
        motion: 0,
        start_time: 0.0,
        seed: a.seed,
        dr_level: DrLevel::try_from(a.dr_level).map_err(anyhow::Error::msg)?,
    };
    env.reset(&[(0, assignment)])?;
    let file_actions = a.actions.as_deref().map(read_actions).transpose()?;
    let mut policy = a.policy.map(BuiltinPolicy::build);
    let mut action = [0.0f32; NUM_JOINTS];
    let mut k = 0;
    while env.infos()[0].status == EpisodeStatus::Running {
        match (&file_actions, &mut policy) {
            (Some(rows), _) => match rows.get(k) {
                Some(r) => action = *r,
                None => break,
            },
            (None, Some(p)) => p.act(&env, &mut action),
            (None, None) => unreachable!("clap requires --actions or --policy"),
        }
        env.step(&action)?;
        k += 1;
    }
    let traj = env.trajectory(0);
    let status = &env.infos()[0].status;
    if let EpisodeStatus::Failed(reason) = status {
        // The partial rows go beside the output; an existing output stays as it was.
        let partial = a.out.with_file_name(format!(
            "{}.partial",
            a.out.file_name().map_or("rollout".into(), |n| n.to_string_lossy())
        ));
        write_rows(
            &partial,
            ROLLOUT_HEADER,
            &traj.rows.times,
            &traj.rows.qpos,
            arena_sim::handler::NQ,
        )?;
        bail!(
            "episode failed after {} control steps: {reason}; {} left unchanged, the rows so far are in {}",
            traj.len().saturating_sub(1),
            a.out.display(),
            partial.display()
        );
    }
    write_rows(
        &a.out,
        ROLLOUT_HEADER,
        &traj.rows.times,
        &traj.rows.qpos,
        arena_sim::handler::NQ,
    )?;
    if let Some(p) = &a.qvel_out {
        write_rows(
            p,
            QVEL_HEADER,
            &traj.rows.times,
            &traj.rows.qvel,
            arena_sim::handler::NV,
        )?;
    }
    // In the words of `arena eval`'s episodes.
    let ended = match status {
        EpisodeStatus::Truncated => "completed (the motion's end)".to_string(),
        EpisodeStatus::Fell => "fell".to_string(),
        EpisodeStatus::Running => format!("stopped: the action file ends after {k} rows, before the motion does"),
        other => other.to_string(),
    };
    eprintln!(
        "{}: {} control steps, {:.2} s of motion, {ended} -> {}",
        clip.name,
        traj.len() - 1,
        traj.rows.times.last().copied().unwrap_or(0.0),
        a.out.display()
    );
    Ok(())
}
