//! The trainer end to end on the real simulator, at the `tiny` size:
//! - a resumed run equals the uninterrupted one bit for bit (N env steps, checkpoint, M more);
//! - a short training run writes finite losses, logs and a checkpoint; `arena-bfm agent` loads
//!   it and completes a scored submission on a real `arena serve` over WebSocket and gRPC, and
//!   the submissions appear on the leaderboard;
//! - `arena-bfm export` keeps what the agent needs, scores exactly as the whole checkpoint,
//!   and initialises a new run (`train.init_from`).

use arena_bfm::config::ModelConfig;
use arena_bfm::train::{Motions, RunPaths, Trainer};
use arena_bfm::train_config::TrainConfig;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use tch::{Device, Tensor};

/// Trainers in this process draw their initial weights from torch's global generator (seeded
/// per run): tests that build one hold this lock, or a parallel test would draw from it too.
static TORCH_RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn tiny(steps: u64) -> TrainConfig {
    let mut c = TrainConfig::load(&repo().join("baseline/configs/tiny.toml")).unwrap();
    c.train.num_env_steps = steps;
    c.train.checkpoint_every_steps = 800;
    c.train.eval_every_steps = 800;
    c.train.num_seed_steps = 200;
    c.train.log_every_steps = 400;
    c
}

fn motions(c: &TrainConfig) -> Motions {
    let (_, spec) = arena_bench::spec::find_benchmark(
        &c.train.benchmark,
        &arena_bench::spec::shipped_dir(),
        &arena_bench::metrics::metric_names(),
    )
    .unwrap();
    let clips = arena_runner::episode::benchmark_clips(&spec, Path::new("."), &Default::default()).unwrap();
    Motions { spec, clips }
}

fn train(c: TrainConfig, dir: &Path, resume: bool) -> Trainer {
    let m = motions(&c);
    let mut t = Trainer::new(c, m, RunPaths { dir: dir.to_path_buf() }, Device::Cpu, resume).unwrap();
    t.run(&mut |_, _, _| {}).unwrap();
    t
}

fn weights(dir: &Path) -> HashMap<String, Tensor> {
    let mut all: HashMap<String, Tensor> = Tensor::read_safetensors(dir.join("checkpoint/model/model.safetensors"))
        .unwrap()
        .into_iter()
        .collect();
    for (k, v) in Tensor::read_safetensors(dir.join("checkpoint/optimizers.safetensors")).unwrap() {
        all.insert(format!("opt.{k}"), v);
    }
    all
}

#[test]
fn resumed_run_equals_the_uninterrupted_run() {
    let _serial = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let root = tempfile::tempdir().unwrap();
    let (straight, split) = (root.path().join("straight"), root.path().join("split"));
    let a = train(tiny(1600), &straight, false);
    let first = train(tiny(800), &split, false);
    assert_eq!(first.status.time, 800);
    drop(first);
    let b = train(tiny(1600), &split, true);
    assert_eq!(a.status.time, b.status.time);
    assert_eq!(a.status.updates, b.status.updates);
    assert!(a.status.updates > 0, "the run must have trained");
    let (wa, wb) = (weights(&straight), weights(&split));
    assert_eq!(wa.len(), wb.len());
    for (name, t) in &wa {
        assert!(
            t.equal(&wb[name]),
            "{name} differs between the straight and the resumed run"
        );
    }
    // The resumed run's logs continue the first part's without repeating rows.
    for log in ["train_log.csv", "eval_log.csv"] {
        let (a, b) = (
            std::fs::read_to_string(straight.join(log)).unwrap(),
            std::fs::read_to_string(split.join(log)).unwrap(),
        );
        let steps = |t: &str| {
            t.lines()
                .skip(1)
                .map(|l| l.split(',').next().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(steps(&a), steps(&b), "{log}");
    }
    // Every evaluation episode has its row, and its status says whether its metrics count.
    let evals = std::fs::read_to_string(straight.join("eval_log.csv")).unwrap();
    let header: Vec<&str> = evals.lines().next().unwrap().split(',').collect();
    let status = header
        .iter()
        .position(|h| *h == "status")
        .expect("eval_log.csv has a status column");
    let rows: Vec<Vec<&str>> = evals.lines().skip(1).map(|l| l.split(',').collect()).collect();
    assert!(!rows.is_empty(), "{evals}");
    for row in &rows {
        assert!(
            ["completed", "fell", "failed", "timeout"].contains(&row[status]),
            "{row:?}"
        );
    }
    // Both logs recorded finite losses.
    let log = std::fs::read_to_string(straight.join("train_log.csv")).unwrap();
    let header: Vec<&str> = log.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "fb_loss").unwrap();
    let last: Vec<&str> = log.lines().last().unwrap().split(',').collect();
    assert!(
        last[col].parse::<f64>().unwrap().is_finite(),
        "{}",
        log.lines().last().unwrap()
    );
}

#[test]
fn bad_configs_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    for (text, needle) in [
        ("preset = \"huge\"", "unknown preset `huge`"),
        ("preset = \"tiny\"\n[train]\nnum_envs = 0", "train.num_envs must be > 0"),
        (
            "preset = \"tiny\"\n[agent]\nbatch_size = 60\nseq_length = 8",
            "multiple of agent.seq_length",
        ),
        ("preset = \"tiny\"\n[train]\nnum_envz = 3", "unknown field `num_envz`"),
        (
            "preset = \"tiny\"\n[agent.aux_reward_coefs]\npenalty_typo = 1.0",
            "penalty_typo: unknown term",
        ),
    ] {
        std::fs::write(&path, text).unwrap();
        let err = TrainConfig::load(&path).unwrap_err();
        assert!(err.contains(needle) && err.contains("c.toml"), "{text:?}: {err}");
    }
    // A partial coefficient table overrides only the terms it names.
    std::fs::write(
        &path,
        "preset = \"tiny\"\n[agent.aux_reward_coefs]\npenalty_torques = -1e-6",
    )
    .unwrap();
    let c = TrainConfig::load(&path).unwrap();
    assert_eq!(c.agent.aux_reward_coefs["penalty_torques"], -1e-6);
    assert_eq!(c.agent.aux_reward_coefs["penalty_ankle_roll"], -4.0);
    let mut c = tiny(100);
    assert!(c.set("train.dr_level=7").unwrap_err().contains("train.dr_level"));
    // Values that would divide by zero or train to NaN are refused before the run starts.
    for (set, needle) in [
        ("agent.z_buffer_size=0", "agent.z_buffer_size must be >= 1"),
        ("agent.fb_target_tau=5", "agent.fb_target_tau must lie in [0, 1]"),
        (
            "agent.actor_pessimism=nan",
            "agent.actor_pessimism must be a finite number",
        ),
        (
            "agent.obs_norm_momentum=-1",
            "agent.obs_norm_momentum must lie in (0, 1]",
        ),
        ("agent.aux_reward_ema=2", "agent.aux_reward_ema must lie in [0, 1)"),
        ("agent.stddev_clip=-1", "agent.stddev_clip must be a finite number >= 0"),
    ] {
        let err = c.set(set).unwrap_err();
        assert!(err.contains(needle), "{set}: {err}");
    }
    c.set("train.seed=9").unwrap();
    assert_eq!(c.train.seed, 9);
    // A model size on a config that names only a preset changes that preset's sizes (it was
    // refused as a `[model]` missing `obs`).
    assert!(c.model.is_none());
    let preset = c.model_config().unwrap();
    c.set("model.z_dim=16").unwrap();
    let sized = c.model_config().unwrap();
    assert_eq!(sized.z_dim, 16);
    assert_eq!(
        ModelConfig {
            z_dim: preset.z_dim,
            ..sized
        },
        preset,
        "every other size is the preset's"
    );
}

/// The command line on a run it cannot continue as asked: resumed at its end it says so; a
/// resume with other buffer sizes and a start from a checkpoint of other model sizes name the
/// keys.
#[test]
fn the_command_line_names_what_a_resume_or_init_cannot_change() {
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join("run");
    let bfm = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_arena-bfm"))
            .arg("train")
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let tiny = repo().join("baseline/configs/tiny.toml");
    let (tiny, run_s) = (tiny.to_str().unwrap(), run.to_str().unwrap());
    let quick = [
        "--set",
        "train.num_env_steps=200",
        "--set",
        "train.eval_every_steps=1000000",
    ];
    let (ok, text) = bfm(&[&["--config", tiny, "--out", run_s][..], &quick].concat());
    assert!(ok, "{text}");
    let (ok, text) = bfm(&["--resume", "--out", run_s]);
    assert!(
        ok && text.contains("nothing to do") && text.contains("train.num_env_steps=N"),
        "{text}"
    );
    let (ok, text) = bfm(&[
        "--resume",
        "--out",
        run_s,
        "--set",
        "train.num_env_steps=400",
        "--set",
        "train.num_envs=4",
    ]);
    assert!(
        !ok && text.contains("train.num_envs") && text.contains("train.buffer_size"),
        "{text}"
    );
    let other = root.path().join("other");
    let init = run.join("checkpoint");
    let (ok, text) = bfm(&[
        &[
            "--config",
            tiny,
            "--out",
            other.to_str().unwrap(),
            "--init-from",
            init.to_str().unwrap(),
        ][..],
        &["--set", "model.z_dim=8"],
        &quick,
    ]
    .concat());
    assert!(!ok && text.contains("model.z_dim"), "{text}");
}

// --- end to end through a real server ---------------------------------------------------------

const ADMIN: &str = "bfm-test-admin";

struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// The `arena` binary: $ARENA_BIN, else next to `arena-bfm` (built by `cargo test --workspace`).
fn arena_bin() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("ARENA_BIN") {
        return Some(PathBuf::from(p));
    }
    let sibling = Path::new(env!("CARGO_BIN_EXE_arena-bfm")).with_file_name("arena");
    sibling.exists().then_some(sibling)
}

fn start_server(bin: &Path, data: &Path, benchmarks: &Path) -> Server {
    let mut child = Command::new(bin)
        .args([
            "serve",
            "--data-dir",
            data.to_str().unwrap(),
            "--admin-token",
            ADMIN,
            "--bind",
            "127.0.0.1:0",
            "--benchmarks-dir",
            benchmarks.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("arena serve starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("arena serve exited early").unwrap();
        if let Some(rest) = line.strip_prefix("arena serve: listening on http://") {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Server { child, addr }
}

fn http(addr: SocketAddr, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, serde_json::Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw);
    let status = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(serde_json::Value::Null))
}

#[test]
fn trained_checkpoint_submits_over_both_transports_and_reaches_the_leaderboard() {
    let Some(arena) = arena_bin() else {
        eprintln!("skipped: no `arena` binary next to arena-bfm (run `cargo test --workspace` or set ARENA_BIN)");
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join("run");
    let out = Command::new(env!("CARGO_BIN_EXE_arena-bfm"))
        .args([
            "train",
            "--config",
            repo().join("baseline/configs/tiny.toml").to_str().unwrap(),
            "--out",
            run.to_str().unwrap(),
        ])
        .args([
            "--set",
            "train.num_env_steps=3000",
            "--set",
            "train.eval_every_steps=100000",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "train failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::read_to_string(run.join("train_log.csv")).unwrap();
    assert!(log.lines().count() >= 3, "{log}");
    assert!(!log.contains("NaN") && !log.contains("inf"), "{log}");
    assert!(run.join("checkpoint/model/model.safetensors").exists());

    // The shipped g1-smoke, and a copy that does not send `reference_goal`.
    let benchmarks = root.path().join("benchmarks");
    std::fs::create_dir_all(&benchmarks).unwrap();
    let smoke = std::fs::read_to_string(repo().join("benchmarks/g1-smoke.toml")).unwrap();
    std::fs::write(benchmarks.join("g1-smoke.toml"), &smoke).unwrap();
    let blind = smoke
        .replace("name = \"g1-smoke\"", "name = \"g1-smoke-blind\"")
        .replace("reference_goal_horizon = 8", "reference_goal_horizon = 0");
    assert!(blind.contains("g1-smoke-blind") && blind.contains("reference_goal_horizon = 0"));
    std::fs::write(benchmarks.join("g1-smoke-blind.toml"), blind).unwrap();
    let server = start_server(&arena, &root.path().join("data"), &benchmarks);
    let (status, team) = http(
        server.addr,
        "POST",
        "/api/v1/teams",
        Some(ADMIN),
        "{\"name\": \"baseline\"}",
    );
    assert_eq!(status, 201, "{team}");
    let token = team["token"].as_str().unwrap().to_string();
    for transport in ["ws", "grpc"] {
        let out = Command::new(env!("CARGO_BIN_EXE_arena-bfm"))
            .args(["agent", "--checkpoint", run.join("checkpoint").to_str().unwrap()])
            .args([
                "--server",
                &format!("http://{}", server.addr),
                "--benchmark",
                "g1-smoke",
                "--transport",
                transport,
            ])
            .args(["--name", &format!("bfm-{transport}")])
            .env("ARENA_TOKEN", &token)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "agent over {transport}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("COMPLETED, 6 episodes in this run"),
            "{transport}: {stdout}"
        );
    }
    // A benchmark that does not send the reference rows: refused before any episode is played.
    let out = Command::new(env!("CARGO_BIN_EXE_arena-bfm"))
        .args(["agent", "--checkpoint", run.join("checkpoint").to_str().unwrap()])
        .args([
            "--server",
            &format!("http://{}", server.addr),
            "--benchmark",
            "g1-smoke-blind",
        ])
        .env("ARENA_TOKEN", &token)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "{stdout}");
    assert!(stderr.contains("reference_goal"), "{stderr}");
    assert!(!stdout.contains("episode "), "no episode may be played: {stdout}");

    let (status, board) = http(server.addr, "GET", "/api/v1/leaderboards/g1-smoke", None, "");
    assert_eq!(status, 200, "{board}");
    // The board ranks a team by its best submission: ours, with all six episodes scored.
    let entries = board["entries"].as_array().unwrap();
    let ours = entries
        .iter()
        .find(|e| e["team"] == "baseline")
        .unwrap_or_else(|| panic!("{board}"));
    assert_eq!(ours["scored_episodes"], 6, "{board}");
    assert!(ours["agent_name"].as_str().unwrap().starts_with("bfm-"), "{board}");
    assert!(ours["score"].as_f64().unwrap().is_finite());
    let (status, subs) = http(server.addr, "GET", "/api/v1/submissions", Some(&token), "");
    assert_eq!(status, 200, "{subs}");
    let completed = subs.to_string().matches("COMPLETED").count();
    assert!(completed >= 2, "both submissions completed: {subs}");
}

fn bfm(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_arena-bfm"))
        .args(args)
        .output()
        .unwrap()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `arena-bfm export` of `networks` (comma-separated; the default set when `None`).
fn export_networks(checkpoint: &Path, out: &Path, networks: Option<&str>) -> std::process::Output {
    let mut args = vec![
        "export",
        "--checkpoint",
        checkpoint.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    if let Some(n) = networks {
        args.extend(["--networks", n]);
    }
    bfm(&args)
}

fn eval_emd(checkpoint: &Path) -> f64 {
    let out = bfm(&["eval", "--checkpoint", checkpoint.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The actor's tanh bounds |a| by 1; the report says how hard the agent pushed.
    let mean_abs = report["config"]["action_mean_abs"].as_f64().unwrap();
    let saturated = report["config"]["action_saturated_share"].as_f64().unwrap();
    assert!(mean_abs > 0.0 && mean_abs <= 1.0, "{mean_abs}");
    assert!((0.0..=1.0).contains(&saturated), "{saturated}");
    report["aggregated"]["emd"]["mean"].as_f64().unwrap()
}

#[test]
fn an_agent_export_scores_like_its_checkpoint_and_starts_a_new_run() {
    let root = tempfile::tempdir().unwrap();
    let _serial = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let run = root.path().join("run");
    train(tiny(800), &run, false);
    let checkpoint = run.join("checkpoint");

    let export = root.path().join("export");
    let out = export_networks(&checkpoint, &export, None);
    assert!(out.status.success(), "{}", stderr(&out));
    let size = |dir: &Path| std::fs::metadata(dir.join("model/model.safetensors")).unwrap().len();
    assert!(
        size(&export) * 3 < size(&checkpoint),
        "{} vs {}",
        size(&export),
        size(&checkpoint)
    );
    let tensors: HashMap<String, Tensor> = Tensor::read_safetensors(export.join("model/model.safetensors"))
        .unwrap()
        .into_iter()
        .collect();
    assert!(
        tensors
            .keys()
            .all(|n| n.starts_with("_actor.") || n.starts_with("_backward_map.") || n.starts_with("_obs_normalizer."))
    );
    // The agent reads only the exported networks: the same scores, to the last bit.
    assert_eq!(eval_emd(&checkpoint), eval_emd(&export));
    // Writing over an export, exporting what the export does not hold, and unknown names are
    // refused.
    let refusals = [
        (&checkpoint, &export, None, "already holds a model/"),
        (&export, &root.path().join("a"), Some("critic"), "also needs critic"),
        (
            &checkpoint,
            &root.path().join("b"),
            Some("wings"),
            "unknown network \"wings\"",
        ),
    ];
    for (from, to, networks, message) in refusals {
        let out = export_networks(from, to, networks);
        assert!(
            !out.status.success() && stderr(&out).contains(message),
            "{}",
            stderr(&out)
        );
    }
    // An export without the actor cannot be an agent.
    let forward = root.path().join("forward");
    let out = export_networks(&checkpoint, &forward, Some("forward"));
    assert!(out.status.success(), "{}", stderr(&out));
    let out = bfm(&["eval", "--checkpoint", forward.to_str().unwrap()]);
    let message = stderr(&out);
    assert!(
        !out.status.success() && message.contains("the agent also needs actor, backward, obs_normalizer"),
        "{message}"
    );

    // A new run starts from the export: its actor, B and normaliser are the export's, its
    // other networks the seed's (a different seed than the exported run's, so they differ).
    let mut c = tiny(800);
    c.train.seed = 11;
    c.train.init_from = Some(export.clone());
    let m = motions(&c);
    let second = root.path().join("second");
    let trainer = Trainer::new(c.clone(), m, RunPaths { dir: second.clone() }, Device::Cpu, false).unwrap();
    let store = &trainer.learner.model.store;
    for (name, t) in &tensors {
        assert!(
            store.get(name).unwrap().equal(t),
            "{name} was not initialised from the export"
        );
    }
    let full: HashMap<String, Tensor> = Tensor::read_safetensors(checkpoint.join("model/model.safetensors"))
        .unwrap()
        .into_iter()
        .collect();
    let f = "_forward_map.embed_z.0.mlp.1.weight";
    assert!(!store.get(f).unwrap().equal(&full[f]), "F must start from the seed");
    // B's target copy follows the loaded B.
    let b = "_backward_map.net.3.weight";
    assert!(store.get(&format!("_target{b}")).unwrap().equal(&tensors[b]));
    drop(trainer);
    // An export is not a run to resume.
    std::fs::create_dir_all(second.join("checkpoint")).unwrap();
    for entry in std::fs::read_dir(export.join("model")).unwrap() {
        let entry = entry.unwrap();
        std::fs::create_dir_all(second.join("checkpoint/model")).unwrap();
        std::fs::copy(entry.path(), second.join("checkpoint/model").join(entry.file_name())).unwrap();
    }
    let err = Trainer::new(c.clone(), motions(&c), RunPaths { dir: second }, Device::Cpu, true)
        .err()
        .unwrap();
    assert!(
        format!("{err:#}").contains("an export, not a run's checkpoint"),
        "{err:#}"
    );
    // Sizes that differ from the run's are refused with the reason.
    let mut other = tiny(800);
    other.preset = "small".into();
    other.train.init_from = Some(export);
    let err = Trainer::new(
        other.clone(),
        motions(&other),
        RunPaths {
            dir: root.path().join("third"),
        },
        Device::Cpu,
        false,
    )
    .err()
    .unwrap();
    assert!(format!("{err:#}").contains("model sizes differ"), "{err:#}");
}

#[test]
fn a_time_limit_stops_early_with_a_checkpoint_that_resumes() {
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join("run");
    let status = |run: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(run.join("checkpoint/train_status.json")).unwrap()).unwrap()
    };
    let config = repo().join("baseline/configs/tiny.toml");
    let mut args = vec![
        "train",
        "--config",
        config.to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
    ];
    args.extend([
        "--set",
        "train.num_env_steps=100000000",
        "--set",
        "train.eval_every_steps=100000000",
    ]);
    let out = bfm(&[args.as_slice(), &["--time-limit", "0"]].concat());
    assert!(
        !out.status.success() && stderr(&out).contains("expected a positive number of minutes"),
        "{}",
        stderr(&out)
    );
    let out = bfm(&[args.as_slice(), &["--time-limit", "0.05"]].concat());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout.contains("stopped by --time-limit"), "{stdout}");
    let stopped = status(&run)["time"].as_u64().unwrap();
    assert!(stopped > 0 && stopped < 100_000_000, "{stopped}");
    // The log ends with a row at the stop, so its update counts add up to the checkpoint's.
    let logged = |run: &Path| -> (f64, f64) {
        let text = std::fs::read_to_string(run.join("train_log.csv")).unwrap();
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
        let (t, u) = (col("timestep"), col("updates"));
        let rows: Vec<Vec<f64>> = lines
            .map(|l| l.split(',').map(|v| v.parse().unwrap_or(f64::NAN)).collect())
            .collect();
        (rows.last().unwrap()[t], rows.iter().map(|r| r[u]).sum())
    };
    let (last, updates) = logged(&run);
    assert_eq!(last, stopped as f64);
    assert_eq!(updates, status(&run)["updates"].as_f64().unwrap());
    // A kill between moving the last checkpoint aside and moving the new one in leaves
    // checkpoint.old and a complete checkpoint.tmp: the next start finishes the swap.
    std::fs::rename(run.join("checkpoint"), run.join("checkpoint.tmp")).unwrap();
    std::fs::create_dir(run.join("checkpoint.old")).unwrap();
    // The checkpoint resumes: the run goes on to a step count set now.
    let target = stopped + 64;
    let out = bfm(&[
        "train",
        "--out",
        run.to_str().unwrap(),
        "--resume",
        "--set",
        &format!("train.num_env_steps={target}"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("finished replacing the checkpoint"),
        "{}",
        stderr(&out)
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("stopped by"));
    assert_eq!(status(&run)["time"].as_u64().unwrap(), target);
    assert!(!run.join("checkpoint.old").exists() && !run.join("checkpoint.tmp").exists());
    assert_eq!(logged(&run).1, status(&run)["updates"].as_f64().unwrap());
    // A new run does not append to the logs of a run whose checkpoint is gone.
    std::fs::remove_dir_all(run.join("checkpoint")).unwrap();
    let out = bfm(&[args.as_slice(), &["--time-limit", "0.05"]].concat());
    assert!(
        !out.status.success() && stderr(&out).contains("stopped before its first checkpoint"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn every_shipped_config_loads_and_names_a_known_preset() {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(repo().join("baseline/configs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let c = TrainConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
            c.model_config().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            names.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    names.sort();
    assert_eq!(names, ["gpu-small.toml", "paper.toml", "small.toml", "tiny.toml"]);
}
