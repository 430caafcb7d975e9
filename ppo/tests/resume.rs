//! Exact resume: N + M iterations straight equal N, a checkpoint, and M more after `--resume`,
//! bit for bit (every tensor of the model and the optimiser, the counters, the log's learning
//! columns). Also: the trainer refuses a resume with other sizes, naming them.

use arena_bench::metrics::metric_names;
use arena_bench::spec;
use arena_ppo::config::PpoTrainConfig;
use arena_ppo::train::Trainer;
use arena_sim::RobotConfig;
use arena_torch::run_dir::RunPaths;
use arena_torch::tensors::read_tensors;
use std::path::Path;

/// libtorch's generator is global: the tests of this file take turns.
static TORCH_RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn tiny() -> PpoTrainConfig {
    let mut c = PpoTrainConfig::default();
    for o in [
        "env.num_envs=6",
        "env.threads=1",
        "env.steps_per_env=8",
        "network.actor_hidden=[16, 8]",
        "network.critic_hidden=[16]",
        "run.checkpoint_every=2",
        "run.log_every=1",
        "run.eval_every=0",
        "ppo.num_mini_batches=2",
        "ppo.num_learning_epochs=2",
        "ppo.schedule=\"adaptive\"",
    ] {
        c.set(o).unwrap();
    }
    c
}

fn trainer(c: PpoTrainConfig, dir: &Path, resume: bool) -> anyhow::Result<Trainer> {
    let (_, spec) = spec::find_benchmark("g1-smoke-robot", &spec::shipped_dir(), &metric_names()).unwrap();
    let clips = arena_runner::episode::benchmark_clips(&spec, Path::new("."), &RobotConfig::default()).unwrap();
    Trainer::new(c, spec, clips, RunPaths { dir: dir.to_path_buf() }, resume)
}

fn run(c: &PpoTrainConfig, dir: &Path, iterations: u64, resume: bool) {
    let mut c = c.clone();
    c.run.max_iterations = iterations;
    let mut t = trainer(c, dir, resume).unwrap();
    t.run(None, &mut |_, _, _| {}).unwrap();
}

/// The log without its timing columns.
fn learning_log(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("train_log.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let keep: Vec<usize> = (0..header.len())
        .filter(|&i| !matches!(header[i], "duration [minutes]" | "FPS") && !header[i].ends_with("_share"))
        .collect();
    lines
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            keep.iter().map(|&i| cells[i]).collect::<Vec<_>>().join(",")
        })
        .collect()
}

#[test]
fn a_resumed_run_continues_bit_for_bit() {
    let _turn = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let c = tiny();
    let root = tempfile::tempdir().unwrap();
    let (straight, split) = (root.path().join("straight"), root.path().join("split"));
    run(&c, &straight, 4, false);
    run(&c, &split, 2, false);
    run(&c, &split, 4, true);
    for file in ["model.safetensors", "optimizer.safetensors"] {
        let a = read_tensors(&straight.join("checkpoint").join(file), "missing").unwrap();
        let b = read_tensors(&split.join("checkpoint").join(file), "missing").unwrap();
        assert_eq!(a.len(), b.len(), "{file}");
        for (name, t) in &a {
            assert!(t.equal(&b[name]), "{file}: {name} differs after the resume");
        }
    }
    let status = |d: &Path| std::fs::read_to_string(d.join("checkpoint/train_status.json")).unwrap();
    let strip = |s: String| {
        s.lines()
            .filter(|l| !l.contains("wall_time_s"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(strip(status(&straight)), strip(status(&split)));
    let (a, b) = (learning_log(&straight), learning_log(&split));
    assert_eq!(a.len(), 4);
    assert_eq!(a, b);
    // The model changed: the test compares trained tensors, not two copies of the initial ones.
    let init = tempfile::tempdir().unwrap();
    trainer(c.clone(), init.path(), false)
        .unwrap()
        .save_checkpoint()
        .unwrap();
    let first = read_tensors(&init.path().join("checkpoint/model.safetensors"), "missing").unwrap();
    let last = read_tensors(&straight.join("checkpoint/model.safetensors"), "missing").unwrap();
    assert!(!first["actor.0.weight"].equal(&last["actor.0.weight"]));
}

#[test]
fn a_resume_with_other_sizes_is_refused_naming_them() {
    let _turn = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let c = tiny();
    let root = tempfile::tempdir().unwrap();
    run(&c, root.path(), 2, false);
    let mut other = c.clone();
    other.set("network.actor_hidden=[32, 8]").unwrap();
    let err = trainer(other, root.path(), true).unwrap_err().to_string();
    assert!(err.contains("actor_hidden"), "{err}");
}

/// A checkpoint written off a boundary (the run's `max_iterations` between two) holds envs
/// mid-episode that the checkpoint does not keep: the resumed trainer starts fresh episodes
/// instead of stepping envs that hold none.
#[test]
fn a_run_resumed_from_a_checkpoint_off_a_boundary_continues() {
    let _turn = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let c = tiny();
    let root = tempfile::tempdir().unwrap();
    run(&c, root.path(), 3, false);
    run(&c, root.path(), 4, true);
    let status = std::fs::read_to_string(root.path().join("checkpoint/train_status.json")).unwrap();
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["iteration"], 4);
    assert_eq!(learning_log(root.path()).len(), 4);
}

/// What the checkpoint's state was made with (its learning rate, its start sampler's
/// settings) is refused, named, rather than written into config.json and never used.
#[test]
fn a_resume_refuses_a_learning_rate_or_sampling_the_checkpoint_cannot_take() {
    let _turn = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let c = tiny();
    let root = tempfile::tempdir().unwrap();
    run(&c, root.path(), 2, false);
    for change in ["ppo.learning_rate=1e-4", "sampling.alpha=0.5", "ppo.schedule=\"fixed\""] {
        let mut other = c.clone();
        other.set(change).unwrap();
        let key = change.split('=').next().unwrap().rsplit('.').next().unwrap();
        let err = trainer(other, root.path(), true).unwrap_err().to_string();
        assert!(err.contains(key), "{change}: {err}");
    }
    // What a resume may change still goes through.
    let mut longer = c.clone();
    longer.set("run.max_iterations=3").unwrap();
    trainer(longer, root.path(), true).unwrap();
}

/// The evaluation due at a checkpoint runs after the checkpoint is written: a run stopped in
/// between gets it from its resume, once.
#[test]
fn an_evaluation_due_at_the_checkpoint_resumed_from_is_run_once() {
    let _turn = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = tiny();
    c.set("run.eval_every=2").unwrap();
    let root = tempfile::tempdir().unwrap();
    run(&c, root.path(), 2, false);
    let log = root.path().join("eval_log.csv");
    let rows = |p: &Path| {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .skip(1)
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let first = rows(&log);
    assert_eq!(first.len(), 1);
    // The row says how many episodes its means are over.
    let text = std::fs::read_to_string(&log).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let cell = |name: &str| -> f64 {
        let i = header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no {name} in {header:?}"));
        first[0].split(',').nth(i).unwrap().parse().unwrap()
    };
    assert!(cell("episodes") > 0.0, "{text}");
    assert_eq!(cell("episodes"), cell("scored") + cell("failed_unscored"), "{text}");
    // The stop between the checkpoint and the evaluation: the row is not there.
    let header = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    std::fs::write(&log, header + "\n").unwrap();
    run(&c, root.path(), 2, true);
    let again = rows(&log);
    assert_eq!(again.len(), 1, "{again:?}");
    let timestep = |row: &str| row.split(',').next().unwrap().to_string();
    assert_eq!(timestep(&again[0]), timestep(&first[0]));
    // With the row there, a resume writes it again in its place rather than a second one.
    run(&c, root.path(), 2, true);
    assert_eq!(rows(&log).len(), 1);
}

/// `arena-ppo train` itself: a stop between a save's two renames (`checkpoint.old` and a
/// complete `checkpoint.tmp`, no `checkpoint`) resumes, a run resumed at its end says so, and a
/// new run refuses a folder holding the logs of a run that stopped before its first checkpoint.
#[test]
fn the_command_line_finishes_an_interrupted_save_and_keeps_stale_logs() {
    let root = tempfile::tempdir().unwrap();
    let out = root.path().join("run");
    let train = |extra: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_arena-ppo"));
        cmd.args(["train", "--quiet", "--out"]).arg(&out);
        for o in [
            "env.num_envs=4",
            "env.threads=1",
            "env.steps_per_env=4",
            "network.actor_hidden=[8]",
            "network.critic_hidden=[8]",
            "run.checkpoint_every=1",
            "run.log_every=1",
            "run.eval_every=0",
            "ppo.num_mini_batches=1",
            "ppo.num_learning_epochs=1",
        ] {
            cmd.args(["--set", o]);
        }
        cmd.args(extra).output().unwrap()
    };
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/configs/g1-smoke.toml");
    let done = train(&["--config", config, "--set", "run.max_iterations=1"]);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let (ckpt, old, tmp) = (
        out.join("checkpoint"),
        out.join("checkpoint.old"),
        out.join("checkpoint.tmp"),
    );
    std::fs::create_dir(&tmp).unwrap();
    for entry in std::fs::read_dir(&ckpt).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), tmp.join(entry.file_name())).unwrap();
    }
    std::fs::rename(&ckpt, &old).unwrap();
    let resumed = train(&["--resume", "--set", "run.max_iterations=2"]);
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(ckpt.exists() && !old.exists() && !tmp.exists());
    // Resumed again at its last iteration: it says there is nothing to train, and how to go on.
    let again = train(&["--resume"]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{stderr}");
    assert!(
        stderr.contains("no iteration to train") && stderr.contains("run.max_iterations=N"),
        "{stderr}"
    );
    assert!(stderr.contains("trained to iteration 2"), "{stderr}");

    // A run that stopped before its first checkpoint: its log stays, and a new run is refused.
    std::fs::remove_dir_all(&ckpt).unwrap();
    let refused = train(&["--config", config, "--set", "run.max_iterations=1"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains("train_log.csv") && stderr.contains("before its first checkpoint"),
        "{stderr}"
    );
    // --config and --resume together: the configuration would be ignored, so it is refused.
    let both = train(&["--config", config, "--resume"]);
    assert!(!both.status.success());
    assert!(String::from_utf8_lossy(&both.stderr).contains("--config"));
}

/// A card whose layer widths disagree with its model file is refused before a model of its
/// widths is made (a billion-wide layer would have asked for hundreds of GB).
#[test]
fn a_card_whose_widths_disagree_with_the_model_file_is_refused() {
    let _turn = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let root = tempfile::tempdir().unwrap();
    run(&tiny(), root.path(), 2, false);
    let card_path = root.path().join("checkpoint/policy.json");
    let mut card: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&card_path).unwrap()).unwrap();
    card["actor_hidden"] = serde_json::json!([1_000_000_000i64, 8]);
    std::fs::write(&card_path, card.to_string()).unwrap();
    let err = arena_ppo::train::load_model(&root.path().join("checkpoint"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("actor_hidden") && err.contains("[16, "), "{err}");
}
