//! `arena bench list|validate|show`: the benchmark definitions in `benchmarks/*.toml`.

use anyhow::bail;
use arena_bench::metrics::metric_names;
use arena_bench::spec::{self, BenchmarkSpec, FallSpec, MotionSource, Window};
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// List the benchmark files of a folder (default: the shipped `benchmarks/`).
    List(ListArgs),
    /// Check benchmark files; prints every problem with file, key and expected value.
    Validate(ValidateArgs),
    /// Print one benchmark's definition (by name or path).
    Show(ShowArgs),
}

/// Where benchmark files are looked up by name.
#[derive(Debug, Args, Clone)]
pub struct BenchDirArg {
    /// Folder of benchmark files (default: $ARENA_BENCHMARKS_DIR, else the shipped `benchmarks/`).
    #[arg(long, env = "ARENA_BENCHMARKS_DIR")]
    pub benchmarks_dir: Option<PathBuf>,
}

impl BenchDirArg {
    pub fn dir(&self) -> PathBuf {
        self.benchmarks_dir.clone().unwrap_or_else(spec::shipped_dir)
    }
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    dir: BenchDirArg,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Benchmarks to check: files, or names looked up in the benchmarks folder.
    #[arg(required = true, value_name = "FILE_OR_NAME")]
    files: Vec<PathBuf>,
    #[command(flatten)]
    dir: BenchDirArg,
    /// Also load each benchmark's motion clips from this folder (the motions root its paths are
    /// relative to), so a pattern that matches nothing or a missing file is caught now.
    #[arg(long, env = arena_bench::spec::MOTIONS_ROOT_ENV)]
    motions_root: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Benchmark name (the `name` key) or path to a file.
    name: String,
    #[command(flatten)]
    dir: BenchDirArg,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(c: BenchCommand) -> anyhow::Result<()> {
    let known = metric_names();
    match c {
        BenchCommand::List(a) => {
            let dir = a.dir.dir();
            let entries = spec::list_benchmarks(&dir, &known);
            // Two valid files of one name: a server offers neither (`find_benchmark_by_name`).
            let clash = |path: &PathBuf, name: &str| {
                let others: Vec<String> = entries
                    .iter()
                    .filter(|(p, r)| p != path && r.as_ref().is_ok_and(|s| s.name == name))
                    .map(|(p, _)| p.file_name().unwrap_or_default().to_string_lossy().into_owned())
                    .collect();
                (!others.is_empty()).then(|| {
                    format!(
                        "benchmark name {name:?} is also {}'s: a server offers neither of two files of one name",
                        others.join(", ")
                    )
                })
            };
            if a.json {
                let rows: Vec<_> = entries
                    .iter()
                    .map(|(path, r)| match r {
                        Ok(s) => {
                            let mut row = serde_json::json!({"file": path, "name": s.name, "version": s.version,
                                "description": s.description, "motions": motions_summary(s)});
                            if let Some(e) = clash(path, &s.name) {
                                row["error"] = e.into();
                            }
                            row
                        }
                        Err(e) => serde_json::json!({"file": path, "error": e.to_string()}),
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&rows)?);
                return Ok(());
            }
            println!("Benchmarks in {}:", dir.display());
            for (path, r) in &entries {
                match r {
                    Ok(s) => match clash(path, &s.name) {
                        Some(e) => println!(
                            "  {:<20} INVALID ({}): {e}",
                            s.name,
                            path.file_name().unwrap_or_default().to_string_lossy()
                        ),
                        None => println!(
                            "  {:<20} v{:<3} {:<40} {}",
                            s.name,
                            s.version,
                            motions_summary(s),
                            first_line(&s.description)
                        ),
                    },
                    Err(e) => println!(
                        "  {:<20} INVALID: {e}",
                        path.file_name().unwrap_or_default().to_string_lossy()
                    ),
                }
            }
            Ok(())
        }
        BenchCommand::Validate(a) => {
            let mut bad = 0;
            // A server offers neither of two files that give one name: a clash with the folder's
            // other files, or between the files checked together, is an error here too.
            let folder: Vec<(PathBuf, String)> = spec::list_benchmarks(&a.dir.dir(), &known)
                .into_iter()
                .filter_map(|(path, r)| r.ok().map(|s| (path, s.name)))
                .collect();
            let mut checked_names: Vec<(PathBuf, String)> = Vec::new();
            let mut skipped = 0;
            for f in &a.files {
                // `benchmarks/*.toml` takes the folder's crate manifest too, which a folder's
                // listing leaves out (`spec::list_benchmarks`).
                if f.is_file() && f.file_name().is_some_and(|n| n == "Cargo.toml") {
                    println!("{}: skipped: a Cargo manifest, not a benchmark", f.display());
                    skipped += 1;
                    continue;
                }
                // A path that exists is a file to check; anything else is a benchmark name.
                let checked = if f.exists() {
                    BenchmarkSpec::read(f, &known).map(|s| (f.clone(), s))
                } else {
                    spec::find_benchmark(&f.to_string_lossy(), &a.dir.dir(), &known)
                };
                let checked = checked.map_err(anyhow::Error::from).and_then(|(path, s)| {
                    // The folder's files count for a file in the folder (a copy elsewhere may be
                    // meant to replace its namesake); the files checked together always do.
                    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
                    let in_folder = crate::same_file(parent.unwrap_or(Path::new(".")), &a.dir.dir());
                    let clash = folder
                        .iter()
                        .filter(|_| in_folder)
                        .chain(&checked_names)
                        .find(|(other, name)| *name == s.name && !crate::same_file(other, &path));
                    if let Some((other, _)) = clash {
                        bail!(
                            "{}: benchmark name {:?} is also {}'s: a server offers neither of two files of one name",
                            path.display(),
                            s.name,
                            other.display()
                        );
                    }
                    checked_names.push((path.clone(), s.name.clone()));
                    let builtin = matches!(s.motions.source, spec::MotionSource::Builtin(_));
                    let root = match (&a.motions_root, builtin) {
                        (Some(root), _) => root.clone(),
                        (None, true) => PathBuf::new(),
                        (None, false) => {
                            return Ok(format!(
                                "{}: ok ({} v{}; its motion files not checked: give --motions-root)",
                                path.display(),
                                s.name,
                                s.version
                            ));
                        }
                    };
                    let robot = arena_sim::RobotConfig::default();
                    // Exactly what the server loads, with its checks (arena_runner::episode).
                    let (library, episodes) = arena_runner::episode::load_benchmark(&s, &root, &robot)
                        .map_err(|e| anyhow::anyhow!("{}: motions: {e:#}", path.display()))?;
                    let mut out = format!(
                        "{}: ok ({} v{}; {} motions, {} episodes)",
                        path.display(),
                        s.name,
                        s.version,
                        library.motions.len(),
                        episodes.len()
                    );
                    for note in notes(&s, &library) {
                        out.push_str(&format!("\n  note: {note}"));
                    }
                    Ok(out)
                });
                match checked {
                    Ok(line) => println!("{line}"),
                    Err(e) => {
                        bad += 1;
                        eprintln!("{e}");
                    }
                }
            }
            if bad > 0 {
                bail!("{bad} of {} benchmark files invalid", a.files.len() - skipped);
            }
            Ok(())
        }
        BenchCommand::Show(a) => {
            let (path, s) = spec::find_benchmark(&a.name, &a.dir.dir(), &known)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&s)?);
                return Ok(());
            }
            println!("{} v{} ({})", s.name, s.version, path.display());
            println!("  {}", s.description.trim().replace('\n', "\n  "));
            println!(
                "task:         {}",
                serde_json::to_value(s.task)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            );
            println!("motions:      {}", motions_summary(&s));
            let window = match s.episodes.window {
                Window::Whole => "whole clip".to_string(),
                Window::Sliding { length_s, stride_s } => format!("{length_s} s windows every {stride_s} s"),
            };
            println!(
                "episodes:     {window}, {} repeat(s), DR level {}, seed {}",
                s.episodes.repeats, s.episodes.dr_level, s.episodes.seed
            );
            let limit = if s.limits.max_episode_s > 0.0 {
                format!("{} s", s.limits.max_episode_s)
            } else {
                "none".into()
            };
            println!(
                "limits:       {} Hz control, episode limit {limit}, step deadline {} ms",
                s.limits.control_hz, s.limits.step_timeout_ms
            );
            let fall = match s.fall {
                FallSpec::None => "none".to_string(),
                FallSpec::MinRootHeight(h) => format!("root below {h} m"),
                FallSpec::MaxBodyDeviation(d) => format!("a body more than {d} m from its reference"),
            };
            println!("fall rule:    {fall}");
            let o = &s.observations;
            println!(
                "observations: {} (reference horizon {} frames, reference goal horizon {} rows, whole reference revealed: {}, motion names hidden: {})",
                o.groups.join(", "),
                o.reference_horizon,
                o.reference_goal_horizon,
                o.reveal_reference,
                o.hide_motion_names
            );
            println!("metrics:      {}", s.metrics.list.join(", "));
            println!("ranking:      {}", s.ranking.describe());
            Ok(())
        }
    }
}

/// The description's first line, cut to fit a listing row.
fn first_line(s: &str) -> String {
    let line = s.lines().next().unwrap_or("");
    match line.char_indices().nth(60) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_string(),
    }
}

fn motions_summary(s: &BenchmarkSpec) -> String {
    match &s.motions.source {
        MotionSource::Builtin(names) => format!("{} built-in motions", names.len()),
        MotionSource::Files(files) => format!("{} files", files.len()),
        MotionSource::Dir { dir, pattern } => {
            format!("{}/{}", dir.display(), pattern.as_deref().unwrap_or("*.{csv,npz}"))
        }
        MotionSource::Manifest(m) => format!("manifest {} ({})", m.display(), s.motions.split.as_str()),
    }
}

/// What `validate` says beside "ok" about a benchmark that loads: settings that run, but
/// likely not as meant.
fn notes(s: &BenchmarkSpec, library: &arena_sim::motion::MotionLibrary) -> Vec<String> {
    let mut notes = Vec::new();
    if !s.observations.carries_reference() {
        notes.push(
            "no observation carries the reference (no reference_horizon, reference_goal_horizon, reveal_reference \
             or motion_* group): an agent cannot know which motion to track"
                .to_string(),
        );
    }
    if s.episodes.repeats > 1 && s.episodes.dr_level == 0 {
        notes.push(format!(
            "repeats = {} at dr_level 0: nothing is randomised, so a deterministic agent's repeats are identical \
             episodes",
            s.episodes.repeats
        ));
    }
    if let Window::Sliding { length_s, .. } = s.episodes.window {
        let longest = library.motions.iter().map(|m| m.length_s).fold(0.0, f64::max);
        if longest + 1e-9 < length_s {
            notes.push(format!(
                "the {length_s} s windows are longer than every clip (the longest lasts {longest:.2} s): each clip \
                 runs whole, as one shorter episode"
            ));
        }
    }
    notes
}
