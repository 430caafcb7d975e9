//! The GPU backend (MuJoCo MJX in a supervised worker) run on JAX's CPU backend: the same
//! episodes through both backends agree within the documented tolerances, domain
//! randomisation and instability reach the worker, and a worker that dies fails its episodes
//! with the reason and is replaced at the next reset.
//!
//! Needs a Python with python/requirements-gpu.txt (`ARENA_GPU_PYTHON`, set by `make test`);
//! without one the tests print why and pass, unless `ARENA_REQUIRE_GPU_BACKEND=1`.

mod common;

use arena_data::NUM_JOINTS;
use arena_sim::dr::DrLevel;
use arena_sim::env::{EpisodeAssignment, EpisodeStatus, FallRule, TrackingEnv, TrackingEnvConfig};
use arena_sim::handler::{
    EnvHealth, Field, GpuDevice, GpuImpl, GpuOptions, Handler, NQ, NV, keep_spare_workers, spare_worker_pids,
};
use arena_sim::motion::MotionLibrary;
use arena_sim::policy::{Policy, ReplayPolicy};
use arena_sim::robot::NUM_BODIES_EXT;
use arena_sim::{RobotConfig, SimBackend};
use std::path::PathBuf;
use std::sync::Arc;

/// Largest qpos difference allowed after 1 and 10 control steps in double precision (measured:
/// about 1e-15 at both, 1e-9 after 50 steps). The two
/// backends run the same model and PD loop but different contact and constraint code (MJX
/// re-implements collision and the solver in JAX), so they agree closely at first and drift
/// apart as contacts come and go; see docs/gpu-backend.md for the measured table.
const QPOS_TOL_1: f64 = 1e-9;
const QPOS_TOL_10: f64 = 1e-7;

fn gpu_python() -> Option<PathBuf> {
    let required = std::env::var("ARENA_REQUIRE_GPU_BACKEND").is_ok_and(|v| v == "1");
    let python = std::env::var_os("ARENA_GPU_PYTHON").map(PathBuf::from);
    let usable = python.as_ref().is_some_and(|p| {
        std::process::Command::new(p)
            .args(["-c", "import jax, mujoco.mjx, warp, mujoco_warp"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if usable {
        return python;
    }
    let why = "skipping: ARENA_GPU_PYTHON does not name a Python with python/requirements-gpu.txt (make deps-gpu)";
    assert!(!required, "ARENA_REQUIRE_GPU_BACKEND=1 but {why}");
    eprintln!("{why}");
    None
}

fn library() -> Arc<MotionLibrary> {
    let robot = RobotConfig::default();
    Arc::new(MotionLibrary::from_clips(&MotionLibrary::builtin_clips(&robot).unwrap(), &robot).unwrap())
}

fn env(lib: &Arc<MotionLibrary>, n: usize, backend: SimBackend) -> TrackingEnv {
    let config = TrackingEnvConfig {
        num_envs: n,
        threads: 1,
        backend,
        ..Default::default()
    };
    TrackingEnv::new(config, lib.clone()).unwrap()
}

fn gpu(python: PathBuf) -> SimBackend {
    SimBackend::Gpu(GpuOptions {
        python,
        device: GpuDevice::Cpu,
        x64: true,
        ..GpuOptions::default()
    })
}

/// The GPU backend with `implementation` on its library's CPU device.
fn on_cpu_device(python: PathBuf, implementation: GpuImpl) -> SimBackend {
    SimBackend::Gpu(GpuOptions {
        python,
        device: GpuDevice::Cpu,
        implementation,
        ..GpuOptions::default()
    })
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

/// Two episodes: the nominal robot, and one with DR level 3 (masses, friction, CoM, gains, joint
/// offsets, pushes), which must reach the worker as it reaches MuJoCo.
const ASSIGNMENTS: [(usize, EpisodeAssignment); 2] = [
    (
        0,
        EpisodeAssignment {
            motion: 0,
            start_time: 0.5,
            seed: 1,
            dr_level: DrLevel::L0,
        },
    ),
    (
        1,
        EpisodeAssignment {
            motion: 2,
            start_time: 0.2,
            seed: 7,
            dr_level: DrLevel::L3,
        },
    ),
];

/// Per control step: (step, max |Δqpos| nominal, max |Δbody pos| nominal, max |Δqpos| DR).
type Divergence = Vec<(usize, f64, f64, f64)>;

/// The same replay episodes through the CPU backend and `gpu` for `steps` control steps; both
/// must keep running. Returns both envs and the per-step divergence, printed at 1, 10 and 50.
/// Both episodes' max |Δqpos| below `tol_1` after 1 step and `tol_10` after 10.
fn assert_within(worst: &Divergence, tol_1: f64, tol_10: f64) {
    for (step, tol) in [(1, tol_1), (10, tol_10)] {
        let (_, nominal, _, randomised) = worst[step - 1];
        assert!(
            nominal < tol && randomised < tol,
            "after {step} steps: {:?}",
            worst[step - 1]
        );
    }
}

/// The reset observations must agree within `reset_tol`.
fn track_side_by_side(
    lib: &Arc<MotionLibrary>,
    gpu: SimBackend,
    steps: usize,
    reset_tol: f32,
) -> (TrackingEnv, TrackingEnv, Divergence) {
    let mut cpu = env(lib, 2, SimBackend::Cpu);
    let mut gpu = env(lib, 2, gpu);
    cpu.reset(&ASSIGNMENTS).unwrap();
    gpu.reset(&ASSIGNMENTS).unwrap();
    let (a, b) = (&cpu.observations().state, &gpu.observations().state);
    assert_eq!(a.len(), b.len());
    let reset = a
        .iter()
        .zip(b.iter())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(reset <= reset_tol, "reset observations differ by {reset:e}");
    let mut policy = ReplayPolicy;
    let mut actions = vec![0.0f32; 2 * NUM_JOINTS];
    let mut worst = Vec::new();
    for step in 1..=steps {
        policy.act(&cpu, &mut actions);
        cpu.step(&actions).unwrap();
        gpu.step(&actions).unwrap();
        for e in 0..2 {
            assert_eq!(
                cpu.infos()[e].status,
                EpisodeStatus::Running,
                "cpu env {e} at step {step}"
            );
            assert_eq!(
                gpu.infos()[e].status,
                EpisodeStatus::Running,
                "gpu env {e} at step {step}"
            );
        }
        let (a, b) = (cpu.trajectory(0), gpu.trajectory(0));
        let qpos = max_diff(&a.rows.qpos[step * NQ..], &b.rows.qpos[step * NQ..]);
        let w = 3 * NUM_BODIES_EXT;
        let body = max_diff(&a.rows.body_pos[step * w..], &b.rows.body_pos[step * w..]);
        let (c, d) = (cpu.trajectory(1), gpu.trajectory(1));
        let qpos_dr = max_diff(&c.rows.qpos[step * NQ..], &d.rows.qpos[step * NQ..]);
        worst.push((step, qpos, body, qpos_dr));
    }
    for (step, qpos, body, qpos_dr) in &worst {
        if [1, 10, 50].contains(step) {
            eprintln!("step {step}: max |Δqpos| {qpos:.3e}, max |Δbody pos| {body:.3e} m; DR level 3: {qpos_dr:.3e}");
        }
    }
    (cpu, gpu, worst)
}

#[test]
fn gpu_backend_tracks_mujoco_and_survives_a_worker_crash() {
    let Some(python) = gpu_python() else { return };
    let lib = library();
    let (mut cpu, mut gpu, worst) = track_side_by_side(&lib, gpu(python), 50, 0.0);
    assert!(
        gpu.handler().describe().starts_with("gpu (mjx on cpu"),
        "{}",
        gpu.handler().describe()
    );
    assert_within(&worst, QPOS_TOL_1, QPOS_TOL_10);
    let assignments = ASSIGNMENTS;
    let mut policy = ReplayPolicy;
    let mut actions = vec![0.0f32; 2 * NUM_JOINTS];

    // The worker dies: the running episodes fail with the reason, nothing panics.
    let engine = gpu.handler().describe();
    let pid = gpu.handler().worker_pid().expect("a worker runs");
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    gpu.step(&actions).unwrap();
    for e in 0..2 {
        let EpisodeStatus::Failed(reason) = &gpu.infos()[e].status else {
            panic!("env {e} after the worker died: {:?}", gpu.infos()[e].status);
        };
        assert!(reason.contains("GPU simulator worker failed"), "{reason}");
        // The failed step made no row, so it keeps no action either.
        let t = gpu.trajectory(e);
        assert_eq!(t.rows.actions.len(), t.len() * NUM_JOINTS, "env {e}");
    }
    assert_eq!(gpu.handler().worker_pid(), None);
    // Their results name the engine that ran them, not a stopped one.
    assert_eq!(gpu.handler().describe(), engine);
    // The next reset starts a new worker and the episode runs again, as on the CPU.
    gpu.reset(&assignments[..1]).unwrap();
    cpu.reset(&assignments[..1]).unwrap();
    assert_ne!(gpu.handler().worker_pid(), Some(pid));
    policy.act(&cpu, &mut actions);
    cpu.step(&actions).unwrap();
    gpu.step(&actions).unwrap();
    assert_eq!(gpu.infos()[0].status, EpisodeStatus::Running);
    let q = max_diff(&cpu.trajectory(0).rows.qpos[NQ..], &gpu.trajectory(0).rows.qpos[NQ..]);
    assert!(q < QPOS_TOL_1, "after the restart: {q:.3e}");
}

/// MuJoCo Warp (float32, worlds batched by the library, its own contact and solver kernels) on
/// Warp's CPU device against the CPU backend (float64). Measured through `TrackingEnv`: max
/// |Δqpos| 7.5e-4 after 1 step, 4.2e-4 after 10, 9e-5 after 50 (nominal; up to 9e-4 and 6e-3
/// with DR level 3). That is float32's share, not Warp's: MJX's JAX path in float32 gives the
/// same figures to two digits on this test, because a reset to a reference state starts with
/// the feet in stiff contact, which amplifies rounding in the first substeps. The tolerances
/// leave about 5x room over the measured figures.
const WARP_QPOS_TOL_1: f64 = 5e-3;
const WARP_QPOS_TOL_10: f64 = 5e-3;

#[test]
fn warp_backend_tracks_mujoco_in_float32() {
    let Some(python) = gpu_python() else { return };
    let lib = library();
    let backend = on_cpu_device(python.clone(), GpuImpl::Warp);
    let (_cpu, gpu, worst) = track_side_by_side(&lib, backend, 50, 1e-4);
    let describe = gpu.handler().describe();
    assert!(
        describe.starts_with("gpu (mujoco_warp on cpu (mujoco-warp 3.17.0"),
        "{describe}"
    );
    assert_within(&worst, WARP_QPOS_TOL_1, WARP_QPOS_TOL_10);

    // Double precision is refused with the reason when the env is made.
    let x64 = SimBackend::Gpu(GpuOptions {
        python,
        device: GpuDevice::Cpu,
        implementation: GpuImpl::Warp,
        x64: true,
        ..GpuOptions::default()
    });
    let config = TrackingEnvConfig {
        num_envs: 1,
        backend: x64,
        ..Default::default()
    };
    let err = TrackingEnv::new(config, lib).unwrap_err().to_string();
    assert!(err.contains("float32 only"), "{err}");
}

#[test]
fn a_python_that_cannot_start_the_worker_is_a_clear_error() {
    let lib = library();
    let backend = SimBackend::Gpu(GpuOptions {
        python: PathBuf::from("/nonexistent/python3"),
        ..GpuOptions::default()
    });
    let config = TrackingEnvConfig {
        num_envs: 1,
        backend,
        ..Default::default()
    };
    let err = TrackingEnv::new(config, lib).unwrap_err().to_string();
    assert!(
        err.contains("could not start the GPU worker with /nonexistent/python3"),
        "{err}"
    );
    assert!(err.contains("ARENA_GPU_PYTHON"), "{err}");

    // A Python that starts but cannot run the worker (here: no site-packages, so no numpy):
    // the worker's own reason, and the interpreter to change.
    let dir = std::env::temp_dir().join(format!("arena-bare-python-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bare = dir.join("python-without-packages");
    std::fs::write(&bare, "#!/bin/sh\nexec python3 -S \"$@\"\n").unwrap();
    std::process::Command::new("chmod")
        .args(["+x", bare.to_str().unwrap()])
        .status()
        .unwrap();
    let config = TrackingEnvConfig {
        num_envs: 1,
        backend: SimBackend::Gpu(GpuOptions {
            python: bare.clone(),
            ..GpuOptions::default()
        }),
        ..Default::default()
    };
    let err = TrackingEnv::new(config, library()).unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(err.contains("the GPU worker did not start"), "{err}");
    assert!(err.contains("No module named 'numpy'"), "{err}");
    assert!(err.contains(&format!("worker Python: {}", bare.display())), "{err}");
    assert!(err.contains("ARENA_GPU_PYTHON"), "{err}");
}

/// Per-env mechanics of MuJoCo Warp, which steps every world at once: a world whose substep
/// blows up fails with MuJoCo's instability reason and keeps its last good state, an idle world
/// does not move, the others run on; a reset makes the failed world usable again. The CPU
/// backend is held to the same expectations in the same test, as the reference.
#[test]
fn warp_worlds_fail_idle_and_reset_one_by_one() {
    let Some(python) = gpu_python() else { return };
    let warp = on_cpu_device(python, GpuImpl::Warp);
    let mut reasons = Vec::new();
    for backend in [SimBackend::Cpu, warp] {
        let mut h = backend.create(RobotConfig::default(), 3, 1).unwrap();
        let name = h.describe();
        let mut qpos = [0.0; NQ];
        qpos[2] = 0.8;
        qpos[3] = 1.0;
        let mut wild = [0.0; NV];
        // An absurd joint velocity (below MuJoCo's bound on a state it is given, 1e10) makes
        // the first substep blow up.
        wild[10] = 1e9;
        h.set_qpos_qvel(0, &qpos, &[0.0; NV]).unwrap();
        h.set_qpos_qvel(1, &qpos, &wild).unwrap();
        h.set_qpos_qvel(2, &qpos, &[0.0; NV]).unwrap();
        h.mark_idle(2);
        h.sync().unwrap();
        let read = |h: &dyn Handler, env: usize| {
            let mut q = vec![0.0; NQ];
            h.read_env_into(env, Field::Qpos, &mut q);
            q
        };
        let idle_before = read(h.as_ref(), 2);
        let failed_before = read(h.as_ref(), 1);
        let targets = vec![0.0; 3 * NUM_JOINTS];
        h.step(&targets).unwrap();
        assert_eq!(*h.health(0), EnvHealth::Ok, "{name}");
        match h.health(1) {
            EnvHealth::Failed(reason) => {
                assert!(reason.contains("MuJoCo instability"), "{name}: {reason}");
                reasons.push(reason.clone());
            }
            other => panic!("{name}: expected a failure, got {other:?}"),
        }
        assert_eq!(read(h.as_ref(), 2), idle_before, "{name}: the idle env moved");
        assert_ne!(read(h.as_ref(), 0), idle_before, "{name}: the running env did not move");
        if name.starts_with("gpu") {
            // The failed world keeps the state before its bad substep (the CPU backend stops
            // at the bad state itself, which MuJoCo has already reset).
            assert_eq!(read(h.as_ref(), 1), failed_before, "{name}: the failed env moved");
        }
        h.step(&targets).unwrap();
        assert_eq!(read(h.as_ref(), 2), idle_before, "{name}: the idle env moved");
        h.set_qpos_qvel(1, &qpos, &[0.0; NV]).unwrap();
        h.step(&targets).unwrap();
        assert_eq!(*h.health(1), EnvHealth::Ok, "{name}");
        assert_eq!(*h.health(0), EnvHealth::Ok, "{name}");
    }
    // The same time of the failing state on both backends (the CPU's MuJoCo resets a diverged
    // state's clock to 0 before it is read; which check fires first differs: MuJoCo checks the
    // accelerations inside a step, the worker's kernel the state after it).
    let time = |r: &str| r.rsplit(" at ").next().unwrap().to_string();
    assert_eq!(time(&reasons[0]), time(&reasons[1]), "{reasons:?}");
    assert_eq!(time(&reasons[0]), "t = 0.005 s", "{reasons:?}");
}

/// A worker that dies and cannot be started again fails every env of the next batched start
/// with the reason, after a single attempt to start it: the server's lanes start their
/// episodes this way, and retrying them one by one would start the worker once per episode.
#[test]
fn a_worker_that_cannot_restart_fails_a_batched_start_once() {
    let Some(python) = gpu_python() else { return };
    let dir = std::env::temp_dir().join(format!("arena-restart-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let starts = dir.join("starts");
    let wrapper = dir.join("python-once");
    // An interpreter that runs the worker once, then refuses.
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho started >> '{starts}'\n[ \"$(wc -l < '{starts}')\" -le 1 ] || {{ echo 'this interpreter starts once' >&2; exit 3; }}\nexec '{python}' \"$@\"\n",
            starts = starts.display(),
            python = python.display()
        ),
    )
    .unwrap();
    std::process::Command::new("chmod")
        .args(["+x", wrapper.to_str().unwrap()])
        .status()
        .unwrap();
    let count = || std::fs::read_to_string(&starts).map_or(0, |s| s.lines().count());

    let lib = library();
    let mut e = env(&lib, 2, gpu(wrapper.clone()));
    e.reset(&ASSIGNMENTS).unwrap();
    e.step(&[0.0; 2 * NUM_JOINTS]).unwrap();
    assert_eq!(count(), 1);
    let pid = e.handler().worker_pid().expect("a worker runs");
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    e.step(&[0.0; 2 * NUM_JOINTS]).unwrap();

    let failed = e.reset_isolating_failures(&ASSIGNMENTS);
    assert_eq!(failed.iter().map(|f| f.0).collect::<Vec<_>>(), [0, 1]);
    for (env, why) in &failed {
        let why = why.to_string();
        assert!(
            why.starts_with("GPU backend: the GPU worker did not start"),
            "env {env}: {why}"
        );
    }
    assert_eq!(count(), 2, "one attempt to start the worker again, not one per env");
    // The failed starts are taken back: the next command does not try again (a start may take
    // minutes) for envs that have already failed.
    let _ = e.step(&[0.0; 2 * NUM_JOINTS]);
    assert_eq!(
        count(),
        2,
        "a later step started the worker again for the failed resets"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A started worker can be handed to a new env; one that died while idle cannot, and the new
/// env says why instead of failing its first episodes.
#[test]
fn a_worker_that_died_idle_is_not_handed_over() {
    let Some(python) = gpu_python() else { return };
    let backend = on_cpu_device(python, GpuImpl::Stub);
    let lib = library();
    let config = TrackingEnvConfig {
        num_envs: 2,
        threads: 1,
        backend: backend.clone(),
        ..Default::default()
    };
    let first = TrackingEnv::new(config.clone(), lib.clone()).unwrap();
    let handler = first.into_handler();
    assert!(handler.is_reusable());
    let env = TrackingEnv::with_handler(config.clone(), lib.clone(), handler).unwrap();
    let handler = env.into_handler();
    let pid = handler.worker_pid().expect("a worker runs");
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while handler.is_reusable() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!handler.is_reusable(), "a dead worker is not reusable");
    let Err(e) = TrackingEnv::with_handler(config, lib, handler) else {
        panic!("a dead worker was handed over");
    };
    assert!(e.to_string().contains("cannot step any more"), "{e}");
}

/// A server's spare worker (`keep_spare_workers`): a handler takes it, its start-up says the
/// imports and a warm-up were done before (`preload_s`, `warmup_s`, not counted in the start-up
/// the handler waited for), another spare is started in its place, and its envs step exactly as
/// handler starts itself. A spare that died while idle, or whose warm-up failed, is passed over
/// for a worker of the handler's own; keeping none ends the idle ones.
#[test]
fn a_spare_worker_is_taken_replaced_and_steps_as_a_fresh_one() {
    let Some(python) = gpu_python() else { return };
    // Spares are the process's: a Python path of this test's own keeps the other tests of
    // this binary (which start workers at the same time) from taking them.
    let dir = std::env::temp_dir().join(format!("arena-spare-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let wrapper = dir.join("python");
    std::fs::write(&wrapper, format!("#!/bin/sh\nexec '{}' \"$@\"\n", python.display())).unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let options = GpuOptions {
        python: wrapper,
        device: GpuDevice::Cpu,
        implementation: GpuImpl::Warp,
        ..GpuOptions::default()
    };
    let lib = library();
    // Observations of a DR level 3 episode and a nominal one over 10 replayed steps, and where
    // the worker's start-up went.
    let run = || {
        let mut env = env(&lib, 2, SimBackend::Gpu(options.clone()));
        env.reset(&ASSIGNMENTS).unwrap();
        let startup = env.handler().worker_startup().expect("a worker runs").clone();
        let mut policy = ReplayPolicy;
        let mut actions = vec![0.0f32; 2 * NUM_JOINTS];
        let mut seen = env.observations().state.clone();
        for _ in 0..10 {
            policy.act(&env, &mut actions);
            env.step(&actions).unwrap();
            seen.extend_from_slice(&env.observations().state);
            seen.extend_from_slice(&env.observations().privileged_state);
        }
        (seen, startup)
    };
    keep_spare_workers(&options, &RobotConfig::default(), 1).unwrap();
    let first = spare_worker_pids(&options);
    assert_eq!(first.len(), 1);
    let (from_spare, startup) = run();
    eprintln!("start-up from a spare: {startup:?}");
    assert_eq!(startup["spare_worker"], serde_json::json!(true), "{startup:?}");
    assert!(startup["preload_s"].as_f64().unwrap() > 0.0, "{startup:?}");
    // A MuJoCo Warp spare warms up (one env started and dropped) before its real init.
    assert!(startup["warmup_s"].as_f64().unwrap() > 0.0, "{startup:?}");
    assert!(startup.contains_key("waiting_s"), "{startup:?}");
    let replaced = spare_worker_pids(&options);
    assert_eq!(replaced.len(), 1, "the spare taken was not replaced");
    assert_ne!(replaced, first);

    // A spare that died while idle is passed over: the handler starts its own.
    let killed = std::process::Command::new("kill")
        .args(["-9", &replaced[0].to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (after_death, startup) = run();
    assert_eq!(startup["spare_worker"], serde_json::json!(false), "{startup:?}");
    assert_eq!(after_death, from_spare);

    // A spare whose warm-up fails ends (here the worker refuses its gains): the lane that takes
    // it, or finds it gone, starts a worker of its own and steps as before.
    let refused = RobotConfig {
        kp: [-1.0; NUM_JOINTS],
        ..RobotConfig::default()
    };
    keep_spare_workers(&options, &refused, 0).unwrap();
    keep_spare_workers(&options, &refused, 1).unwrap();
    let (after_failed_warmup, startup) = run();
    assert_eq!(startup["spare_worker"], serde_json::json!(false), "{startup:?}");
    assert_eq!(after_failed_warmup, from_spare);
    // Spares that keep failing stop being kept: after three lost one after another (each lane
    // above and here found its spare dead or lost it in its init) none is started any more.
    for _ in 0..2 {
        let (_, startup) = run();
        assert_eq!(startup["spare_worker"], serde_json::json!(false), "{startup:?}");
    }
    assert!(
        spare_worker_pids(&options).is_empty(),
        "spares are still kept after three were lost in a row"
    );

    keep_spare_workers(&options, &RobotConfig::default(), 0).unwrap();
    assert!(spare_worker_pids(&options).is_empty());
    let (fresh, startup) = run();
    assert_eq!(startup["spare_worker"], serde_json::json!(false), "{startup:?}");
    assert!(startup.contains_key("interpreter_start_s"), "{startup:?}");
    assert!(
        spare_worker_pids(&options).is_empty(),
        "a spare was started while none is kept"
    );
    assert_eq!(fresh, from_spare, "a spare's envs step otherwise than a fresh worker's");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The stubbed physics (`--gpu-impl stub`, the host-side benchmark) writes exactly the layout
/// of a real worker: at start-up both publish the model's rest state, and every field a
/// consumer reads has the same values there (MuJoCo Warp computes in float32); after a step the
/// stub's joints sit on their targets (in float32, the type both hand over) and every field is
/// still finite.
#[test]
fn stubbed_physics_keeps_the_real_workers_layout() {
    let Some(python) = gpu_python() else { return };
    let make = |implementation| {
        on_cpu_device(python.clone(), implementation)
            .create(RobotConfig::default(), 2, 1)
            .unwrap()
    };
    let (stub, warp) = (make(GpuImpl::Stub), make(GpuImpl::Warp));
    assert!(stub.describe().contains("stub"), "{}", stub.describe());
    let fields = [
        Field::Qpos,
        Field::Qvel,
        Field::DofPos,
        Field::DofVel,
        Field::DofTorque,
        Field::RootPos,
        Field::RootRot,
        Field::RootVel,
        Field::RootAngVel,
        Field::BodyPos,
        Field::BodyRot,
        Field::BodyVel,
        Field::BodyAngVel,
    ];
    let read = |h: &dyn Handler, field: Field| {
        let mut v = vec![f64::NAN; field.width()];
        h.read_env_into(1, field, &mut v);
        v
    };
    for field in fields {
        let (s, w) = (read(stub.as_ref(), field), read(warp.as_ref(), field));
        let worst = max_diff(&s, &w);
        eprintln!("{field:?}: stub vs warp at rest, largest difference {worst:.2e}");
        assert!(worst < 1e-5, "{field:?}: stub {s:?} vs warp {w:?}");
    }
    let mut stub = stub;
    let qpos = read(stub.as_ref(), Field::Qpos);
    stub.set_qpos_qvel(0, &qpos, &[0.0; NV]).unwrap();
    stub.set_qpos_qvel(1, &qpos, &[0.0; NV]).unwrap();
    stub.sync().unwrap();
    let targets: Vec<f64> = (0..2 * NUM_JOINTS).map(|k| 0.01 * (k % NUM_JOINTS) as f64).collect();
    stub.step(&targets).unwrap();
    // In float32, as MuJoCo Warp's outputs are.
    let in_f32: Vec<f64> = targets[NUM_JOINTS..].iter().map(|t| f64::from(*t as f32)).collect();
    assert_eq!(read(stub.as_ref(), Field::DofPos), in_f32);
    for field in fields.into_iter().chain([Field::BodyContactForce, Field::DofPosTarget]) {
        let v = read(stub.as_ref(), field);
        assert!(v.iter().all(|x| x.is_finite()), "{field:?}: {v:?}");
    }
}

/// One body's values (`read_env_body_into`, which the worker's handler reads in place) are
/// those of the whole row at that body's place, for every body field and body, the virtual
/// head included, after steps that leave every body moving.
#[test]
fn one_body_reads_equal_the_whole_rows() {
    let Some(python) = gpu_python() else { return };
    let lib = library();
    // Contact forces on, so that their reads compare the feet's forces, not zeros.
    let warp = SimBackend::Gpu(GpuOptions {
        python,
        device: GpuDevice::Cpu,
        implementation: GpuImpl::Warp,
        contact_forces: true,
        ..GpuOptions::default()
    });
    for backend in [SimBackend::Cpu, warp] {
        let mut e = env(&lib, 2, backend);
        let starts: Vec<_> = (0..2)
            .map(|i| {
                let a = EpisodeAssignment {
                    motion: 2 + i,
                    start_time: 0.3,
                    seed: i as u64,
                    dr_level: DrLevel::L0,
                };
                (i, a)
            })
            .collect();
        e.reset(&starts).unwrap();
        let mut actions = vec![0.0f32; 2 * NUM_JOINTS];
        for _ in 0..3 {
            ReplayPolicy.act(&e, &mut actions);
            e.step(&actions).unwrap();
        }
        let h = e.handler();
        for (field, w) in [
            (Field::BodyPos, 3),
            (Field::BodyRot, 4),
            (Field::BodyVel, 3),
            (Field::BodyAngVel, 3),
            (Field::BodyContactForce, 3),
        ] {
            let mut row = vec![f64::NAN; field.width()];
            h.read_env_into(1, field, &mut row);
            assert!(row.iter().any(|&v| v != 0.0), "{} {field:?}: all zero", h.describe());
            for b in 0..NUM_BODIES_EXT {
                let mut one = vec![f64::NAN; w];
                h.read_env_body_into(1, field, b, &mut one);
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&one),
                    bits(&row[w * b..w * (b + 1)]),
                    "{} {field:?} body {b}",
                    h.describe()
                );
            }
        }
    }
}

/// Without contact forces (the evaluations' setting) the worker copies its outputs to shared
/// memory short of the contact forces, which end the block: every other output is the same to
/// the bit as with them, and the contact forces read as zeros.
#[test]
fn warp_without_contact_forces_copies_every_other_output() {
    let Some(python) = gpu_python() else { return };
    let make = |contact_forces| {
        SimBackend::Gpu(GpuOptions {
            python: python.clone(),
            device: GpuDevice::Cpu,
            implementation: GpuImpl::Warp,
            contact_forces,
            ..GpuOptions::default()
        })
        .create(RobotConfig::default(), 2, 1)
        .unwrap()
    };
    let (mut with, mut without) = (make(true), make(false));
    let read = |h: &dyn Handler, field: Field| {
        let mut v = vec![f64::NAN; field.width()];
        h.read_env_into(1, field, &mut v);
        v
    };
    let qpos = read(with.as_ref(), Field::Qpos);
    for h in [&mut with, &mut without] {
        for env in 0..2 {
            h.set_qpos_qvel(env, &qpos, &[0.0; NV]).unwrap();
        }
        h.sync().unwrap();
    }
    let targets: Vec<f64> = RobotConfig::default().default_pose.repeat(2);
    let mut touched = false;
    for _ in 0..10 {
        with.step(&targets).unwrap();
        without.step(&targets).unwrap();
        for field in [
            Field::Qpos,
            Field::Qvel,
            Field::DofTorque,
            Field::BodyPos,
            Field::BodyRot,
            Field::BodyVel,
            Field::BodyAngVel,
        ] {
            let (a, b) = (read(with.as_ref(), field), read(without.as_ref(), field));
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{field:?}: {a:?} with contact forces, {b:?} without"
            );
        }
        let force = read(with.as_ref(), Field::BodyContactForce);
        touched |= force.iter().any(|f| *f != 0.0);
        assert!(
            read(without.as_ref(), Field::BodyContactForce)
                .iter()
                .all(|f| *f == 0.0)
        );
    }
    assert!(
        touched,
        "the robot never touched the floor: no contact force to leave out"
    );
    assert_ne!(read(with.as_ref(), Field::Qpos), qpos, "the envs were stepped");
}

/// The worker's `stats`: the commands it ran since start-up and where their time went.
#[test]
fn the_worker_reports_its_timings() {
    let Some(python) = gpu_python() else { return };
    let mut h = on_cpu_device(python, GpuImpl::Stub)
        .create(RobotConfig::default(), 3, 1)
        .unwrap();
    let mut qpos = vec![0.0; NQ];
    h.read_env_into(0, Field::Qpos, &mut qpos);
    for env in 0..3 {
        h.set_qpos_qvel(env, &qpos, &[0.0; NV]).unwrap();
    }
    h.sync().unwrap();
    let first = h.worker_timings().unwrap().expect("the GPU backend has a worker");
    let count = |m: &serde_json::Map<String, serde_json::Value>, k: &str| m[k].as_f64().unwrap();
    let targets = vec![0.1; 3 * NUM_JOINTS];
    for _ in 0..4 {
        h.step(&targets).unwrap();
    }
    let later = h.worker_timings().unwrap().unwrap();
    assert_eq!(count(&later, "step") - count(&first, "step"), 4.0, "{later:?}");
    assert_eq!(count(&later, "sync"), count(&first, "sync"), "{later:?}");
    for phase in ["inputs_s", "params_s", "resets_s", "advance_s", "ints_s", "copy_out_s"] {
        let (a, b) = (count(&first, phase), count(&later, phase));
        assert!(b >= a && b.is_finite(), "{phase}: {a} then {b}");
    }
    assert!(count(&later, "advance_s") > count(&first, "advance_s"), "{later:?}");
}

/// A command input that is not finite fails its env alone, found by the physics where it uses
/// the inputs (on the device: the host does not look at them), with which input it was: a push
/// (idle envs' too: a push is added to every env), a PD target or a feed-forward torque of an
/// env told to advance; an idle env's targets are not read. The other envs step on exactly as
/// they would have, and a failed env stays where it was until its reset. On the stub, MuJoCo
/// Warp and MJX (each on its CPU device).
#[test]
fn a_non_finite_input_fails_its_env_alone() {
    let Some(python) = gpu_python() else { return };
    let n = 5;
    let read = |h: &dyn Handler, env: usize, field: Field| {
        let mut v = vec![0.0; field.width()];
        h.read_env_into(env, field, &mut v);
        v
    };
    let reason = |h: &dyn Handler, env: usize| match h.health(env) {
        EnvHealth::Failed(why) => why.clone(),
        other => panic!("env {env} should have failed, is {other:?}"),
    };
    for implementation in [GpuImpl::Stub, GpuImpl::Warp, GpuImpl::Jax] {
        // The same commands to two handlers, NaNs to one of them only.
        let make = || {
            let mut h = on_cpu_device(python.clone(), implementation)
                .create(RobotConfig::default(), n, 1)
                .unwrap();
            let qpos = read(h.as_ref(), 0, Field::Qpos);
            for env in 0..n {
                h.set_qpos_qvel(env, &qpos, &[0.0; NV]).unwrap();
            }
            h.sync().unwrap();
            h
        };
        let (mut clean, mut dirty) = (make(), make());
        let rest = read(clean.as_ref(), 0, Field::Qpos)[7..].to_vec();
        let mut targets: Vec<f64> = (0..n).flat_map(|_| rest.iter().map(|q| q + 0.05)).collect();
        for h in [&mut clean, &mut dirty] {
            h.step(&targets).unwrap();
            h.mark_failed(2, "stopped by the test".into());
        }
        let before: Vec<Vec<f64>> = (0..n).map(|env| read(dirty.as_ref(), env, Field::Qpos)).collect();
        // Env 1: a NaN target; env 2 (not running): a NaN target, not read; env 3: a NaN push;
        // env 4: an infinite feed-forward torque.
        let mut ff = vec![0.0; n * NUM_JOINTS];
        clean.set_feedforward_rows(&ff, &[true; 5]).unwrap();
        ff[4 * NUM_JOINTS + 7] = f64::INFINITY;
        dirty.set_feedforward_rows(&ff, &[true; 5]).unwrap();
        dirty.push_root(3, [f64::NAN, 0.0, 0.0], [0.0; 3]).unwrap();
        let mut nan_targets = targets.clone();
        nan_targets[NUM_JOINTS + 5] = f64::NAN;
        nan_targets[2 * NUM_JOINTS + 3] = f64::NAN;
        clean.step(&targets).unwrap();
        dirty.step(&nan_targets).unwrap();
        let what = format!("{implementation:?}");
        assert_eq!(*dirty.health(0), EnvHealth::Ok, "{what}");
        assert_eq!(reason(dirty.as_ref(), 2), "stopped by the test", "{what}");
        let expected = [
            (1, "the physics was given a non-finite PD target at t = 0.020 s"),
            (3, "the physics was given a non-finite push at t = 0.020 s"),
            (
                4,
                "the physics was given a non-finite feed-forward torque at t = 0.020 s",
            ),
        ];
        for (env, why) in expected {
            assert_eq!(reason(dirty.as_ref(), env), why, "{what}");
        }
        // Env 0 stepped as without the others' NaNs, bit for bit; the failed envs did not move.
        targets.iter_mut().for_each(|t| *t -= 0.02);
        for h in [&mut clean, &mut dirty] {
            h.step(&targets).unwrap();
        }
        for field in [Field::Qpos, Field::Qvel, Field::BodyPos] {
            assert_eq!(
                read(dirty.as_ref(), 0, field),
                read(clean.as_ref(), 0, field),
                "{what} {field:?}"
            );
        }
        assert_ne!(read(dirty.as_ref(), 0, Field::Qpos), before[0], "{what}: env 0 stepped");
        for env in [1, 3, 4] {
            assert_eq!(
                read(dirty.as_ref(), env, Field::Qpos),
                before[env],
                "{what}: env {env} moved"
            );
        }
        // A reset clears the failure: the env runs again.
        let qpos = read(clean.as_ref(), 0, Field::Qpos);
        dirty.set_qpos_qvel(1, &qpos, &[0.0; NV]).unwrap();
        dirty.step(&targets).unwrap();
        assert_eq!(*dirty.health(1), EnvHealth::Ok, "{what}: env 1 after its reset");
    }
}

/// A command's inputs reach MuJoCo Warp's worlds as they reach MuJoCo (they cross as one packed
/// block that the step's first kernel unpacks): a push on one env only, then a step with
/// targets that differ per env and per joint, one env idle.
#[test]
fn warp_gets_each_envs_push_and_targets() {
    let Some(python) = gpu_python() else { return };
    let n = 3;
    let mut cpu = SimBackend::Cpu.create(RobotConfig::default(), n, 1).unwrap();
    let mut warp = on_cpu_device(python, GpuImpl::Warp)
        .create(RobotConfig::default(), n, 1)
        .unwrap();
    let mut qpos = vec![0.0; NQ];
    cpu.read_env_into(0, Field::Qpos, &mut qpos);
    qpos[2] += 0.05;
    for h in [&mut cpu, &mut warp] {
        for env in 0..n {
            h.set_qpos_qvel(env, &qpos, &[0.0; NV]).unwrap();
        }
        h.push_root(1, [0.3, -0.2, 0.1], [0.0, 0.4, -0.5]).unwrap();
        h.sync().unwrap();
    }
    let read = |h: &dyn Handler, field: Field, env: usize| {
        let mut v = vec![0.0; field.width()];
        h.read_env_into(env, field, &mut v);
        v
    };
    for env in 0..n {
        let (c, w) = (
            read(cpu.as_ref(), Field::Qvel, env),
            read(warp.as_ref(), Field::Qvel, env),
        );
        assert!(
            max_diff(&c, &w) < 1e-6,
            "env {env} after the push: cpu {c:?} warp {w:?}"
        );
    }
    assert!(
        read(warp.as_ref(), Field::Qvel, 1)[..6].iter().any(|v| v.abs() > 0.1),
        "env 1 was pushed"
    );
    assert!(
        read(warp.as_ref(), Field::Qvel, 0)[..6].iter().all(|v| *v == 0.0),
        "env 0 was not"
    );

    let targets: Vec<f64> = (0..n * NUM_JOINTS)
        .map(|k| qpos[7 + k % NUM_JOINTS] + 0.02 * (k as f64).sin())
        .collect();
    let counters_before = warp.worker_timings().unwrap().expect("a worker");
    for h in [&mut cpu, &mut warp] {
        h.mark_idle(2);
        h.step(&targets).unwrap();
    }
    // The worker's physics counters: every world computes every substep (an idle one is put
    // back after), and the solver's iterations and the contacts are whole counts.
    let counters = warp.worker_timings().unwrap().unwrap();
    let delta = |k: &str| counters[k].as_f64().unwrap() - counters_before[k].as_f64().unwrap();
    assert_eq!(
        delta("world_substeps"),
        (n * arena_sim::DECIMATION) as f64,
        "{counters:?}"
    );
    assert_eq!(delta("substeps"), arena_sim::DECIMATION as f64, "{counters:?}");
    assert!(
        delta("solver_iterations_max") * n as f64 >= delta("solver_iterations"),
        "the slowest world's iterations bound the mean: {counters:?}"
    );
    for k in ["solver_iterations", "solver_iterations_max", "contacts"] {
        assert!(delta(k) >= 0.0 && delta(k).fract() == 0.0, "{k}: {counters:?}");
    }
    // Float32 against float64 after one step: about 1e-7 (measured); a target of another env
    // or joint would be off by 1e-3 and more.
    for env in 0..n {
        let (c, w) = (
            read(cpu.as_ref(), Field::Qpos, env),
            read(warp.as_ref(), Field::Qpos, env),
        );
        assert!(
            max_diff(&c, &w) < 1e-5,
            "env {env} after the step: cpu {c:?} warp {w:?}"
        );
    }
    let (moved, idle) = (read(warp.as_ref(), Field::Qpos, 0), read(warp.as_ref(), Field::Qpos, 2));
    assert!(max_diff(&moved, &qpos) > 1e-4, "env 0 was stepped");
    assert!(
        max_diff(&idle, &qpos) < 1e-6,
        "idle env 2 stayed where it was: {idle:?}"
    );
}

/// The joint-position mode's torque law on the GPU backend: feed-forward torques add to the PD
/// torque as on the CPU backend, per env, and a reset clears them. MJX in double precision is
/// held to the CPU backend's rounding; MuJoCo Warp (float32) to float32's.
#[test]
fn feedforward_torques_follow_the_cpu_backend() {
    let Some(python) = gpu_python() else { return };
    let warp = on_cpu_device(python.clone(), GpuImpl::Warp);
    let mut qpos = [0.0; NQ];
    qpos[2] = 0.8;
    qpos[3] = 1.0;
    let ff: Vec<f64> = (0..NUM_JOINTS).map(|j| 3.0 * ((j % 5) as f64 - 2.0)).collect();
    // The same targets for both envs.
    let targets: Vec<f64> = (0..2 * NUM_JOINTS)
        .map(|k| 0.02 * (k % NUM_JOINTS % 7) as f64)
        .collect();
    let run = |backend: SimBackend| {
        let mut h = backend.create(RobotConfig::default(), 2, 1).unwrap();
        assert!(h.supports_feedforward(), "{}", h.describe());
        for env in 0..2 {
            h.set_qpos_qvel(env, &qpos, &[0.0; NV]).unwrap();
        }
        h.sync().unwrap();
        // Env 0 gets feed-forward torques, env 1 none.
        h.set_feedforward(0, &ff).unwrap();
        let mut torques = Vec::new();
        for _ in 0..3 {
            h.step(&targets).unwrap();
            for env in 0..2 {
                let mut t = vec![0.0; NUM_JOINTS];
                h.read_env_into(env, Field::DofTorque, &mut t);
                torques.push(t);
            }
        }
        let mut q = vec![0.0; NQ];
        h.read_env_into(0, Field::Qpos, &mut q);
        // A reset clears them: env 0 then steps like env 1.
        for env in 0..2 {
            h.set_qpos_qvel(env, &qpos, &[0.0; NV]).unwrap();
        }
        h.step(&targets).unwrap();
        let (mut t0, mut t1) = (vec![0.0; NUM_JOINTS], vec![0.0; NUM_JOINTS]);
        h.read_env_into(0, Field::DofTorque, &mut t0);
        h.read_env_into(1, Field::DofTorque, &mut t1);
        assert_eq!(t0, t1, "{}: feed-forward torques survived a reset", h.describe());
        (torques, q, h.describe())
    };
    let (cpu, cpu_q, _) = run(SimBackend::Cpu);
    // The feed-forward torques reached the physics: env 0's torques differ from env 1's.
    assert!(max_diff(&cpu[0], &cpu[1]) > 1.0, "{:?} vs {:?}", cpu[0], cpu[1]);
    let python_x64 = gpu(python);
    // Measured: MJX 2e-13 N m and 2e-15 in qpos; Warp 4e-5 N m and 1e-7.
    for (backend, torque_tol, qpos_tol) in [(python_x64, 1e-9, QPOS_TOL_1), (warp, 1e-3, 1e-5)] {
        let (torques, q, name) = run(backend);
        let worst = cpu
            .iter()
            .zip(&torques)
            .map(|(a, b)| max_diff(a, b))
            .fold(0.0, f64::max);
        let worst_q = max_diff(&cpu_q, &q);
        eprintln!("{name}: largest torque difference {worst:.2e} N m, qpos {worst_q:.2e} after 3 steps");
        assert!(worst < torque_tol, "{name}: torques differ by {worst}");
        assert!(worst_q < qpos_tol, "{name}: qpos differs by {worst_q}");
    }
}

/// A DR reset of many envs at once (spread over the worker's threads, one scratch model each)
/// gives each env the constants a reset of that env alone gives it: after a few steps every
/// env's state is the same to the bit (MuJoCo Warp on its CPU device). Half the envs reset at
/// DR level 0, whose constants the worker copies instead of deriving them; one at a time they
/// come after a level-3 reset of the same env, so stale constants would show.
#[test]
fn a_batched_dr_reset_matches_resets_one_env_at_a_time() {
    let Some(python) = gpu_python() else { return };
    let lib = library();
    let backend = on_cpu_device(python, GpuImpl::Warp);
    let n = 8;
    let assignments: Vec<(usize, EpisodeAssignment)> = (0..n)
        .map(|e| {
            let a = EpisodeAssignment {
                motion: e % lib.len(),
                start_time: 0.1 * e as f64,
                seed: 100 + e as u64,
                dr_level: if e % 2 == 0 { DrLevel::L3 } else { DrLevel::L0 },
            };
            (e, a)
        })
        .collect();
    let (mut together, mut alone) = (env(&lib, n, backend.clone()), env(&lib, n, backend));
    together.reset(&assignments).unwrap();
    let randomised: Vec<(usize, EpisodeAssignment)> = assignments
        .iter()
        .map(|&(e, a)| {
            let seed = 900 + e as u64;
            (
                e,
                EpisodeAssignment {
                    seed,
                    dr_level: DrLevel::L3,
                    ..a
                },
            )
        })
        .collect();
    alone.reset(&randomised).unwrap();
    for one in &assignments {
        alone.reset(std::slice::from_ref(one)).unwrap();
    }
    let mut policy = ReplayPolicy;
    let mut actions = vec![0.0f32; n * NUM_JOINTS];
    for _ in 0..5 {
        policy.act(&together, &mut actions);
        together.step(&actions).unwrap();
        alone.step(&actions).unwrap();
    }
    for e in 0..n {
        let read = |env: &TrackingEnv| {
            let mut q = [0.0; NQ];
            env.handler().read_env_into(e, Field::Qpos, &mut q);
            q
        };
        assert_eq!(together.infos()[e].status, EpisodeStatus::Running, "env {e}");
        assert_eq!(read(&together), read(&alone), "env {e}");
    }
}

/// A push is applied once: a second push of the same env adds only its own velocity change,
/// as on the CPU backend, whether a sync or a step carries it, and on every implementation
/// (the worker used to resend an env's earlier push with its next one).
#[test]
fn each_push_reaches_the_worker_once() {
    let Some(python) = gpu_python() else { return };
    let n = 2;
    let root_vel = |h: &dyn Handler, env: usize| {
        let mut v = vec![0.0; NV];
        h.read_env_into(env, Field::Qvel, &mut v);
        [v[0], v[1], v[2]]
    };
    let mut cpu = SimBackend::Cpu.create(RobotConfig::default(), n, 1).unwrap();
    let mut qpos = vec![0.0; NQ];
    cpu.read_env_into(0, Field::Qpos, &mut qpos);
    let rest: Vec<f64> = (0..n).flat_map(|_| qpos[7..].to_vec()).collect();
    for implementation in [GpuImpl::Stub, GpuImpl::Warp] {
        let mut gpu = on_cpu_device(python.clone(), implementation)
            .create(RobotConfig::default(), n, 1)
            .unwrap();
        for h in [&mut cpu, &mut gpu] {
            for env in 0..n {
                h.set_qpos_qvel(env, &qpos, &[0.0; NV]).unwrap();
            }
            h.sync().unwrap();
            h.push_root(1, [0.3, 0.0, 0.0], [0.0; 3]).unwrap();
            h.sync().unwrap();
            h.push_root(1, [0.0, 0.2, 0.0], [0.0; 3]).unwrap();
            h.sync().unwrap();
            h.sync().unwrap();
        }
        let (c, g) = (root_vel(cpu.as_ref(), 1), root_vel(gpu.as_ref(), 1));
        assert!((c[0] - 0.3).abs() < 1e-9 && (c[1] - 0.2).abs() < 1e-9, "cpu: {c:?}");
        assert!(
            (g[0] - 0.3).abs() < 1e-6 && (g[1] - 0.2).abs() < 1e-6 && g[2].abs() < 1e-6,
            "{implementation:?} applied a push again: {g:?} (cpu {c:?})"
        );
        assert_eq!(root_vel(gpu.as_ref(), 0), [0.0; 3], "env 0 was never pushed");
        if implementation == GpuImpl::Stub {
            // Carried by a step (the stub has no dynamics, so the root keeps its velocity).
            gpu.push_root(1, [0.0, 0.0, 0.1], [0.0; 3]).unwrap();
            gpu.step(&rest).unwrap();
            gpu.step(&rest).unwrap();
            let g = root_vel(gpu.as_ref(), 1);
            assert!(
                (g[0] - 0.3).abs() < 1e-6 && (g[1] - 0.2).abs() < 1e-6 && (g[2] - 0.1).abs() < 1e-6,
                "a push carried by a step: {g:?}"
            );
        }
    }
}

/// On the GPU backend the recorded rows are appended while the worker steps
/// ([`Handler::step_begin`] sends the step, [`Handler::step_finish`] takes its answer): the
/// same rows as recording in the refresh, bit for bit, with MuJoCo Warp on its CPU device and
/// with the stub, for episodes that fall, fail, stop, restart and run on.
#[test]
fn recording_behind_the_workers_step_records_the_same_rows() {
    let Some(python) = gpu_python() else { return };
    let lib = library();
    for implementation in [GpuImpl::Warp, GpuImpl::Stub] {
        let config = TrackingEnvConfig {
            num_envs: 6,
            threads: 2,
            fall_rule: Some(FallRule::MinRootHeight(0.5)),
            backend: on_cpu_device(python.clone(), implementation),
            ..Default::default()
        };
        let mut inline = TrackingEnv::new(config.clone(), lib.clone()).unwrap();
        let a = common::recordings_of_a_mixed_run(&mut inline, 40);
        // The same simulator again, so the worker starts once per implementation.
        let mut behind = TrackingEnv::with_handler(config, lib.clone(), inline.into_handler()).unwrap();
        behind.record_behind_physics(true);
        let b = common::recordings_of_a_mixed_run(&mut behind, 40);
        assert_eq!(a.len(), b.len(), "{implementation:?}");
        for ((e, s, t), (f, u, r)) in a.iter().zip(&b) {
            assert_eq!((e, s), (f, u), "{implementation:?}");
            assert!(!t.is_empty(), "{implementation:?}: env {e} ({s:?}) recorded no row");
            assert!(
                common::same_recording(t, r),
                "{implementation:?}: env {e} ({s:?}): the recordings differ"
            );
        }
        assert!(behind.timings().record_s > 0.0);
    }
}

/// A stand-in worker (a shell script as the interpreter): it answers the init line with
/// `ready`, then every command with `ok`, and `stats` with `stats_answer` after a pause.
fn fake_worker(name: &str, ready: &str, stats_answer: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("arena-fake-worker-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("python");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nread init\necho '{ready}'\nwhile read cmd; do\n  case \"$cmd\" in\n    \
             stats) sleep 2; echo '{stats_answer}' ;;\n    close) echo ok; exit 0 ;;\n    *) echo ok ;;\n  \
             esac\ndone\n"
        ),
    )
    .unwrap();
    std::process::Command::new("chmod")
        .args(["+x", script.to_str().unwrap()])
        .status()
        .unwrap();
    (script, dir)
}

fn fake_backend(python: PathBuf) -> SimBackend {
    SimBackend::Gpu(GpuOptions {
        python,
        device: GpuDevice::Cpu,
        implementation: GpuImpl::Stub,
        step_timeout: std::time::Duration::from_secs(1),
        ..GpuOptions::default()
    })
}

/// A `stats` answered late: its answer would have been read as the next command's, so the
/// worker goes, and the envs it ran fail with the reason (they kept running on a worker whose
/// answers no longer matched its commands).
#[test]
fn a_late_stats_answer_drops_the_worker() {
    let ready = r#"{"ready": true, "backend": "fake", "device": "cpu"}"#;
    let (python, dir) = fake_worker("late-stats", ready, "stats {}");
    let mut h = fake_backend(python).create(RobotConfig::default(), 1, 1).unwrap();
    let mut qpos = [0.0; NQ];
    qpos[2] = 0.8;
    qpos[3] = 1.0;
    h.set_qpos_qvel(0, &qpos, &[0.0; NV]).unwrap();
    h.sync().unwrap();
    assert_eq!(*h.health(0), EnvHealth::Ok);
    let err = h.worker_timings().unwrap_err().to_string();
    assert!(err.contains("stats"), "{err}");
    match h.health(0) {
        EnvHealth::Failed(reason) => assert!(reason.contains("stats"), "{reason}"),
        other => panic!("the env runs on after its worker's answers fell behind: {other:?}"),
    }
    assert_eq!(h.worker_pid(), None, "the worker was kept");
    drop(h);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An answer to the init line that is JSON but no ready line (a wrapper's `{}`) is refused.
#[test]
fn an_answer_that_is_not_the_ready_line_is_refused() {
    let (python, dir) = fake_worker("not-ready", "{}", "stats {}");
    let Err(err) = fake_backend(python).create(RobotConfig::default(), 1, 1) else {
        panic!("a worker that never said it was ready was taken");
    };
    assert!(err.to_string().contains("instead of its ready line"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
