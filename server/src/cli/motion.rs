//! `arena motion generate|inspect`.

use anyhow::Context;
use arena_sim::RobotConfig;
use arena_sim::kinematics::Kinematics;
use arena_sim::motion::{MotionLibrary, MotionReport, inspect};
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum MotionCommand {
    /// Write the built-in generated motions (50 fps G1 CSV, `builtin__<name>.csv`) to a folder.
    Generate {
        /// Output folder (created if missing).
        #[arg(long)]
        out: PathBuf,
    },
    /// Report frames, duration, root height and joint ranges, limit violations and problems.
    Inspect(InspectArgs),
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// A G1 motion CSV file.
    file: PathBuf,
    /// Frame rate of the file (G1 CSV files do not carry it).
    #[arg(long)]
    fps: f64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: MotionCommand) -> anyhow::Result<()> {
    match cmd {
        MotionCommand::Generate { out } => {
            std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
            let clips = MotionLibrary::builtin_clips(&RobotConfig::default())?;
            for clip in &clips {
                let path = out.join(format!("{}__{}.csv", clip.category, clip.name));
                arena_data::write_g1_csv(&path, clip)?;
                println!(
                    "{}  {} frames, {:.2} s",
                    path.display(),
                    clip.num_frames(),
                    clip.duration_s()
                );
            }
            Ok(())
        }
        MotionCommand::Inspect(a) => {
            let clip = arena_data::read_g1_csv(&a.file, a.fps)?;
            let kin = Kinematics::new(&RobotConfig::default())?;
            let report = inspect(&clip, &kin);
            if a.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print_report(&report);
            }
            Ok(())
        }
    }
}

fn print_report(r: &MotionReport) {
    println!("motion      {} (category {})", r.name, r.category);
    println!("frames      {} at {} fps, {:.3} s", r.frames, r.fps, r.duration_s);
    println!("root height {:.3} .. {:.3} m", r.root_height_min, r.root_height_max);
    println!(
        "{:<28} {:>9} {:>9}   {:>9} {:>9}",
        "joint", "min", "max", "lower", "upper"
    );
    for j in &r.joints {
        println!(
            "{:<28} {:>9.4} {:>9.4}   {:>9.4} {:>9.4}",
            j.joint, j.min, j.max, j.lower_limit, j.upper_limit
        );
    }
    if r.limit_violations.is_empty() {
        println!("limit violations: none");
    } else {
        println!("limit violations (warnings):");
        for v in &r.limit_violations {
            println!(
                "  {}: {} frames from frame {}, worst by {:.4} rad",
                v.joint, v.frames, v.first_frame, v.worst_excess_rad
            );
        }
    }
    if r.problems.is_empty() {
        println!("problems: none");
    } else {
        for p in &r.problems {
            println!("problem: {p}");
        }
    }
}
