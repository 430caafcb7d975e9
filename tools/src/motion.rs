//! `arena motion generate|inspect`.

use anyhow::{Context, bail};
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
    /// Write a benchmark's motions as mjlab NPZ (50 fps; fps, joint_pos, joint_vel, body_pos_w,
    /// body_quat_w w-first, body_lin_vel_w, body_ang_vel_w, plus joint_names and body_names;
    /// joints and bodies in the MuJoCo model's order, as mjlab's; bodies from the arena's forward
    /// kinematics, velocities as mjlab's csv_to_npz.py makes them: central differences), one
    /// `<category>__<name>.npz` per clip, so that a policy can be trained in
    /// mjlab on exactly a benchmark's clips. BeyondMimic's Isaac Lab loader indexes the arrays in
    /// Isaac Lab's joint order and ignores the names: reorder them for it.
    Export(ExportArgs),
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Benchmark name (see `arena bench list`) or path to a benchmark file.
    #[arg(long)]
    benchmark: String,
    /// Folder that the benchmark's motion paths are relative to.
    #[arg(long, env = arena_bench::spec::MOTIONS_ROOT_ENV, default_value = ".")]
    motions_root: PathBuf,
    #[command(flatten)]
    dir: crate::bench::BenchDirArg,
    /// Output folder (created if missing).
    #[arg(long)]
    out: PathBuf,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// A G1 motion file: CSV (needs --fps) or NPZ (mjlab / BeyondMimic layout, which carries its
    /// frame rate), as benchmarks accept them.
    file: PathBuf,
    /// Frame rate of a CSV file (G1 CSV files do not carry it; an NPZ's own is used).
    #[arg(long)]
    fps: Option<f64>,
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
        MotionCommand::Export(a) => export(a),
        MotionCommand::Inspect(a) => {
            let clip = crate::read_motion_file(&a.file, a.fps)?;
            let mut kin = Kinematics::new(&RobotConfig::default())?;
            let mut report = inspect(&clip, &kin);
            // What a benchmark's loading checks beyond the report (two frames at least, the
            // longest clip, an NPZ's bodies against the forward kinematics of its joints, which
            // finds joints in another order, and a reference a robot could track): the same
            // refusal here, as a problem.
            let limits = *kin.joint_limits();
            let refused = match arena_sim::motion::Motion::from_clip(&clip, &mut kin) {
                Err(e) => Some(e.to_string()),
                Ok(motion) => motion
                    .reference_problem(&limits)
                    .map(|why| format!("motion {}: {why}", motion.name)),
            };
            if let Some(e) = &refused {
                report.problems.push(format!("a benchmark refuses it: {e}"));
            }
            if a.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print_report(&report);
            }
            // A script checking clips before it builds a benchmark learns it from the status.
            if refused.is_some() {
                bail!("{}: a benchmark would refuse this motion (above)", a.file.display());
            }
            Ok(())
        }
    }
}

fn export(a: ExportArgs) -> anyhow::Result<()> {
    let known = arena_bench::metrics::metric_names();
    let (path, spec) = arena_bench::spec::find_benchmark(&a.benchmark, &a.dir.dir(), &known)?;
    let robot = RobotConfig::default();
    let clips = arena_runner::episode::benchmark_clips(&spec, &a.motions_root, &robot)
        .with_context(|| format!("loading the motions of {} ({})", spec.name, path.display()))?;
    if spec.motions.hidden {
        eprintln!(
            "note: benchmark {} keeps its motions hidden from teams; do not hand these files out",
            spec.name
        );
    }
    let library = MotionLibrary::from_clips(&clips, &robot)?;
    // One file per clip: two clips of one name and category (`walk.csv` and `walk.npz` in one
    // folder, or in two folders) would write one file over the other.
    let names: Vec<String> = (library.motions.iter())
        .map(|m| format!("{}__{}.npz", m.category, m.name))
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    if let Some(twice) = names.iter().find(|n| !seen.insert(n.as_str())) {
        bail!(
            "two of {}'s clips would both be written as {twice}: give them distinct names (or categories)",
            spec.name
        );
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let mut kin = arena_sim::kinematics::Kinematics::new(&robot)?;
    for (motion, name) in library.motions.iter().zip(&names) {
        let file = a.out.join(name);
        let npz = motion.to_npz(&mut kin);
        arena_data::write_npz_motion(&file, &npz)?;
        println!(
            "{}  {} frames at 50 fps, {:.2} s",
            file.display(),
            npz.frames,
            motion.length_s
        );
    }
    println!(
        "{} motions of {} written to {}",
        library.len(),
        spec.name,
        a.out.display()
    );
    Ok(())
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
