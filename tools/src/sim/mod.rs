//! `arena sim export-model|rollout|bench`: the commands and the stand-in policies; `rollout.rs`
//! one episode to CSV, `bench.rs` throughput of N envs, `dump.rs` what replays of a bench's
//! physics need.

mod bench;
mod dump;
mod rollout;

pub use bench::BenchArgs;
pub use rollout::{ROLLOUT_HEADER, RolloutArgs};

use anyhow::{Context, bail};
use arena_sim::policy::{Policy, ReplayPolicy, ZeroPolicy};
use arena_sim::{GainSet, RobotConfig};
use clap::{Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Write the exact MJCF the simulator compiles.
    ExportModel {
        /// Robot (only `g1`, the Unitree G1 29 DOF, for now).
        #[arg(long, default_value = "g1")]
        robot: String,
        /// PD gain set (selects the joints' actuator force ranges).
        #[arg(long, value_enum, default_value_t = Gains::Base)]
        gains: Gains,
        /// Output MJCF file.
        #[arg(long)]
        out: PathBuf,
    },
    /// Roll out one episode from the motion's first frame and write one row per control step:
    /// time, then qpos (36 values, quaternion wxyz as MuJoCo). Row 0 is the reset state.
    Rollout(RolloutArgs),
    /// Measure control steps/s and physics steps/s of N envs tracking the built-in motions (or
    /// holding the default pose, `--policy zero`).
    Bench(BenchArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Gains {
    /// The released policy's gains (g1_29dof.yaml).
    Base,
    /// Waist kp 300 / kd 5, hip pitch/roll effort 139 (g1_29dof_hard_waist.yaml).
    HardWaist,
}

impl From<Gains> for GainSet {
    fn from(g: Gains) -> GainSet {
        match g {
            Gains::Base => GainSet::Base,
            Gains::HardWaist => GainSet::HardWaist,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum BuiltinPolicy {
    /// Open-loop floor: PD target = reference joint positions one step ahead.
    Replay,
    /// All-zero actions (PD target = default pose).
    Zero,
}

impl BuiltinPolicy {
    pub fn build(self) -> Box<dyn Policy> {
        match self {
            BuiltinPolicy::Replay => Box::new(ReplayPolicy),
            BuiltinPolicy::Zero => Box::new(ZeroPolicy),
        }
    }

    /// The same policy as an SDK agent (observations in, actions out).
    pub fn agent(self) -> Box<dyn arena_sdk::Agent> {
        match self {
            BuiltinPolicy::Replay => Box::new(arena_sdk::agents::ReplayAgent::new()),
            BuiltinPolicy::Zero => Box::new(arena_sdk::agents::ZeroAgent::default()),
        }
    }
}

pub fn run(cmd: SimCommand) -> anyhow::Result<()> {
    match cmd {
        SimCommand::ExportModel { robot, gains, out } => {
            if robot != "g1" {
                bail!("unknown robot {robot:?}: the only robot is `g1` (Unitree G1, 29 DOF)");
            }
            let xml = RobotConfig::new(gains.into()).mjcf();
            std::fs::write(&out, xml).with_context(|| format!("writing {}", out.display()))?;
            Ok(())
        }
        SimCommand::Rollout(a) => rollout::rollout(a),
        SimCommand::Bench(a) => bench::bench(a),
    }
}
