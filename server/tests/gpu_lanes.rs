//! The server's lanes on the GPU backend (MJX on JAX's CPU backend here): a submission runs
//! through it, and a worker killed mid-run puts the episodes it was simulating back in the
//! queue as a server fault, while the server and the submission carry on; and `arena sim bench
//! --backend gpu` measures it.

mod common;

use arena_sdk::agents::ReplayAgent;
use arena_sdk::protocol::{EpisodeInfo, EpisodeSpec};
use arena_sdk::{Agent, Batch};
use common::server::{ADMIN, ServerProc};

/// The pids of the GPU workers simulating a server's lanes: those that have mapped a shared
/// file of the server's (its name holds the server's pid). A spare worker of MJX (the
/// implementation `--gpu-device cpu` resolves to here) maps none before a lane takes it, so it
/// is not one of them; a MuJoCo Warp spare would map its warm-up's file, of the same name.
fn workers_of(server_pid: u32) -> Vec<u32> {
    let tag = format!("arena-gpu-{server_pid}-");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != server_pid)
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|maps| maps.contains(&tag)))
        .collect()
}

/// The pids of a server's spare GPU workers: its worker processes that have no shared file
/// mapped yet.
fn spares_of(server_pid: u32) -> Vec<u32> {
    let tag = format!("arena-gpu-{server_pid}-");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // pid (comm) state ppid ...: the comm may hold spaces, not a ')'.
            let parent = stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().nth(1));
            parent == Some(server_pid.to_string().as_str())
        })
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("gpu_worker.py"))
        })
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|maps| !maps.contains(&tag)))
        .collect()
}

/// `spares_of`, looked at until it finds one or 20 s have passed: a process just spawned can
/// show no command line for a moment (its exec still setting it up while the server goes on).
fn spares_soon(server_pid: u32) -> Vec<u32> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let spares = spares_of(server_pid);
        if !spares.is_empty() || std::time::Instant::now() >= deadline {
            return spares;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Replay that kills the server's GPU worker when its episodes reach step 10.
struct KillsTheWorker {
    inner: ReplayAgent,
    server_pid: u32,
    killed: bool,
    pids: Vec<u32>,
}

impl Agent for KillsTheWorker {
    fn configure(&mut self, spec: &EpisodeSpec) {
        self.inner.configure(spec);
    }

    fn reset(&mut self, episodes: &[EpisodeInfo]) {
        self.inner.reset(episodes);
    }

    fn act(&mut self, batch: &Batch<'_>, actions: &mut [f32]) {
        if !self.killed && batch.episode_steps.contains(&10) {
            for pid in workers_of(self.server_pid) {
                self.pids.push(pid);
                std::process::Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status()
                    .unwrap();
                self.killed = true;
            }
        }
        self.inner.act(batch, actions);
    }
}

#[test]
fn a_killed_gpu_worker_returns_its_episodes_to_the_queue_not_failed() {
    let Some(python) = common::gpu_python() else { return };
    let dir = common::tmp("gpu-lanes");
    let mut server = ServerProc::start_with_env(
        &dir.join("data"),
        &[
            "--backend",
            "gpu",
            "--gpu-device",
            "cpu",
            "--lanes",
            "1",
            "--max-batch",
            "3",
        ],
        &[("ARENA_GPU_PYTHON", python.as_str())],
    );
    // The server keeps a spare worker (`spare_simulators`, 1 by default) from its start.
    let spares = spares_soon(server.pid());
    assert_eq!(spares.len(), 1, "{spares:?}");
    let token = server.team("alpha");
    let mut agent = KillsTheWorker {
        inner: ReplayAgent::new(),
        server_pid: server.pid(),
        killed: false,
        pids: Vec::new(),
    };
    let id = server.submit(&token, &mut agent, "replay-killer", None);
    assert!(agent.killed, "the agent found the server's worker");
    // The lane took the spare, and another took its place.
    assert_eq!(agent.pids, spares, "the lane did not take the spare");
    let now = spares_soon(server.pid());
    assert!(now.len() == 1 && now != spares, "{now:?}");
    let (_, results) = server.get(&format!("/api/v1/submissions/{id}/results"), Some(ADMIN));
    let episodes = results["episodes"].as_array().unwrap();
    assert_eq!(episodes.len(), 6);
    // The first batch of three was running when the worker died: the server's fault, not the
    // agent's, so those went back to the queue and a new worker ran them again with the rest.
    assert!(episodes.iter().all(|e| e["status"] == "COMPLETED"), "{results}");
    let (status, csv) = common::server::http(
        server.addr,
        "GET",
        &format!("/api/v1/submissions/{id}/episodes.csv"),
        Some(ADMIN),
        None,
    );
    let csv = String::from_utf8_lossy(&csv).into_owned();
    assert_eq!(status, 200, "{csv}");
    // idx,motion,category,start_s,duration_s,seed,dr_level,status,attempts,server_faults,...
    let faults: Vec<&str> = csv.lines().skip(1).map(|l| l.split(',').nth(9).unwrap()).collect();
    assert_eq!(faults.iter().filter(|f| **f == "1").count(), 3, "{csv}");
    assert_eq!(faults.iter().filter(|f| **f == "0").count(), 3, "{csv}");
    // A server stopped by a signal leaves no spare running (it ends them; an idle one would also
    // end at the close of its input).
    server.terminate();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while now
        .iter()
        .any(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the spare {now:?} outlived its server"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn sim_bench_runs_on_the_gpu_backend_without_a_gpu() {
    let Some(python) = common::gpu_python() else { return };
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_arena"))
        .args([
            "sim",
            "bench",
            "--envs",
            "2",
            "--steps",
            "5",
            "--backend",
            "gpu",
            "--gpu-device",
            "cpu",
            "--repeats",
            "2",
            "--json",
        ])
        .env("ARENA_GPU_PYTHON", &python)
        .output()
        .unwrap();
    let text = common::ok(&out);
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert!(v["backend"].as_str().unwrap().starts_with("gpu (mjx on cpu"), "{v}");
    assert!(v["control_steps_per_s"].as_f64().unwrap() > 0.0, "{v}");
    // The worker's own split of the bench's steps (its `stats`, per control step).
    // Its worker's start-up, phase by phase: a worker of its own (the bench keeps no spare).
    let startup = &v["worker_startup"];
    assert_eq!(startup["spare_worker"], serde_json::json!(false), "{v}");
    assert!(startup["spawn_to_ready_s"].as_f64().is_some_and(|s| s > 0.0), "{v}");
    let worker = &v["worker_ms_per_step"];
    assert_eq!(worker["step"].as_f64(), Some(5.0), "{v}");
    for phase in ["inputs_ms", "advance_ms", "launch_ms", "copy_out_wait_ms"] {
        assert!(worker[phase].as_f64().is_some_and(|ms| ms >= 0.0), "{phase}: {v}");
    }
    // What surrounds the physics: the whole step less the worker's physics call and the policy.
    let ms = &v["ms_per_step"];
    let f = |x: &serde_json::Value| x.as_f64().unwrap();
    let host = f(&ms["host_side"]);
    let expected = f(&ms["total"]) - f(&ms["policy"]) - f(&worker["advance_ms"]);
    assert!((host - expected).abs() < 1e-9 && host > 0.0, "{v}");
    assert!(host < f(&ms["total"]), "{v}");
    // Two runs: the split is one of them (the slower), and each gives its host side.
    let hosts: Vec<f64> = v["host_side_ms_per_step_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(f)
        .collect();
    assert_eq!(hosts.len(), 2, "{v}");
    assert!(hosts.contains(&host) && hosts.iter().all(|h| *h > 0.0), "{v}");
}

/// A kept simulator whose worker dies while idle is dropped when a lane looks for one, never
/// handed to it (its episodes would fail for a server-side reason).
#[test]
fn a_kept_worker_that_died_is_dropped_not_taken() {
    use arena_server::orchestrator::warm::{SimulatorShape, WarmSimulators};
    use arena_sim::handler::{GpuDevice, GpuImpl, GpuOptions};
    use arena_sim::{RobotConfig, SimBackend};
    use std::time::{Duration, Instant};
    let Some(python) = common::gpu_python() else { return };
    let backend = SimBackend::Gpu(GpuOptions {
        python: python.into(),
        device: GpuDevice::Cpu,
        implementation: GpuImpl::Stub,
        ..GpuOptions::default()
    });
    let shape = SimulatorShape {
        backend: backend.clone(),
        robot: RobotConfig::default(),
        num_envs: 2,
        threads: 1,
    };
    let simulator = backend.create(RobotConfig::default(), 2, 1).unwrap();
    let pid = simulator.worker_pid().expect("a worker runs");
    let warm = WarmSimulators::new(2);
    assert!(warm.give_back(shape.clone(), simulator));
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // The worker's end reaches the handler through its stderr reader: until then it still
    // counts as started.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match warm.take(&shape) {
            Some(alive) if Instant::now() < deadline => {
                assert!(warm.give_back(shape.clone(), alive));
                std::thread::sleep(Duration::from_millis(20));
            }
            Some(_) => panic!("the dead worker is still handed out"),
            None => break,
        }
    }
    assert!(warm.is_empty(), "the dead simulator was dropped");
}

/// A GPU server offers no benchmark its lanes cannot run: one that sends the IMU groups (the
/// shipped `g1-smoke-robot`) is unavailable with the reason, in the listing, to an agent and
/// to an upload (the GPU walkthrough: listed as available, then every session failed on an
/// opaque `internal` error and a hosted upload was retried every 5 s for good).
#[test]
fn a_gpu_server_offers_no_benchmark_its_lanes_cannot_run() {
    let dir = common::tmp("gpu-imu");
    let Some(python) = common::gpu_python() else { return };
    let server = ServerProc::start_with_env(
        &dir.join("data"),
        &["--backend", "gpu", "--gpu-device", "cpu", "--spare-simulators", "0"],
        &[("ARENA_GPU_PYTHON", python.as_str())],
    );
    let token = server.team("imu");
    let why = "sends the imu observation groups, whose accelerometers this server's GPU backend does not simulate";
    // The start looks at every benchmark behind it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let listed = loop {
        let (_, list) = server.get("/api/v1/benchmarks", None);
        let robot = list["benchmarks"]
            .as_array()
            .and_then(|b| b.iter().find(|b| b["name"] == "g1-smoke-robot").cloned())
            .unwrap_or_default();
        if robot["available"] == false || std::time::Instant::now() > deadline {
            break robot;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(listed["available"], false, "{listed}");
    assert!(
        listed["unavailable"].as_str().unwrap_or_default().contains(why),
        "{listed}"
    );
    let (_, list) = server.get("/api/v1/benchmarks", None);
    let smoke = list["benchmarks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "g1-smoke")
        .cloned();
    assert_ne!(
        smoke.unwrap_or_default()["available"],
        false,
        "g1-smoke runs on the GPU backend"
    );
    // An upload for it is refused before anything is stored.
    let policy =
        std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../ppo/checkpoints/g1-smoke/policy.onnx"))
            .unwrap();
    let (status, body) = server.upload_policy("benchmark=g1-smoke-robot", &token, &policy);
    assert!(status >= 400, "{status} {body}");
    assert!(
        body["error"]["message"].as_str().unwrap_or_default().contains(why),
        "{body}"
    );
    let (_, subs) = server.get("/api/v1/submissions", Some(&token));
    assert_eq!(subs["submissions"].as_array().map(Vec::len), Some(0), "{subs}");
    // An agent is refused with the reason.
    let config = arena_sdk::client::ClientConfig::new(
        server.ws_url(),
        &token,
        arena_sdk::client::Mode::Submission {
            benchmark: "g1-smoke-robot".into(),
            submission_id: None,
        },
    );
    let refused = arena_sdk::client::run_blocking(&config, &mut ReplayAgent::new(), &mut |_| {}).unwrap_err();
    assert!(
        refused.to_string().contains("benchmark_unavailable") && refused.to_string().contains(why),
        "{refused}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A GPU server asked for a device its worker cannot find does not start: it checks its worker
/// (imports and device, JAX's backend included) before it serves, and says why.
#[test]
fn a_gpu_server_without_its_device_does_not_start() {
    let Some(python) = common::gpu_python() else { return };
    if arena_sim::handler::cuda_device_present() {
        eprintln!("skipped: this machine has a CUDA device, so device gpu is there");
        return;
    }
    let dir = common::tmp("gpu-no-device");
    for implementation in ["jax", "warp"] {
        let out = common::arena(&[
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--data-dir",
            dir.to_str().unwrap(),
            "--backend",
            "gpu",
            "--gpu-device",
            "gpu",
            "--gpu-impl",
            implementation,
            "--gpu-python",
            &python,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{implementation}: {err}");
        assert!(
            err.contains(&format!("a GPU worker ({implementation} on device gpu) cannot start"))
                && (err.contains("no JAX gpu device") || err.contains("no CUDA device for Warp"))
                && err.contains("choose --gpu-device auto or cpu")
                && !err.contains("requirements-gpu"),
            "{err}"
        );
    }
    // On its CPU device it starts (`ServerProc` waits for it to listen).
    let server = ServerProc::start_with_env(
        &dir.join("data"),
        &["--backend", "gpu", "--gpu-device", "cpu", "--spare-simulators", "0"],
        &[("ARENA_GPU_PYTHON", python.as_str())],
    );
    drop(server);
    std::fs::remove_dir_all(&dir).ok();
}
