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
