//! Spare GPU workers: processes started ahead of need, which import their physics library and
//! initialise the device as soon as they start (`--preload`) and, for MuJoCo Warp, warm up (a
//! whole start of one env of the nominal robot on a scratch file, dropped, which loads every
//! kernel), so that a GPU handler starting later takes one and only sends it its init. On a GPU
//! machine the interpreter, the imports and the device are about two of a Warp worker's three
//! seconds of start-up and the kernels' loading most of the rest (docs/gpu-measurements.md); a
//! server keeps spares (`spare_simulators`, docs/server.md) so that a session whose lane has no
//! kept simulator of its shape does not wait for them.
//!
//! Nothing is kept until [`keep_spare_workers`] is called: `arena eval`, `sim bench` and the
//! trainers start their own workers, as before. A handler that takes a spare starts the next
//! one once its own worker is ready. A spare is not yet tied to any shape: the
//! number of envs, the model and the shared file come with its init.

use super::gpu::init_message;
use super::gpu_layout::{Precision, ShmLayout};
use super::gpu_options::{GpuImpl, GpuOptions, cuda_device_present};
use super::gpu_process::{Preload, Worker, create_shared_file, worker_script};
use crate::robot::RobotConfig;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

/// Which spares a handler can take: those of its Python, implementation and device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SpareKey {
    pub(super) python: PathBuf,
    pub(super) preload: Preload,
}

impl SpareKey {
    /// The key of handlers started with `options`, its implementation resolved as
    /// [`super::GpuHandler::new`] resolves it.
    pub(super) fn new(options: &GpuOptions) -> Self {
        let implementation = options
            .implementation
            .resolve(options.device, options.x64, cuda_device_present());
        SpareKey {
            python: options.python.clone(),
            preload: Preload {
                implementation: implementation.wire(),
                device: options.device.wire(),
            },
        }
    }
}

/// A spare worker, and the files of its warm-up.
pub(super) struct Spare {
    pub(super) worker: Worker,
    /// Kept until the worker has answered its real init (it reads the files until its warm-up
    /// is over, which comes first); `None` without a warm-up.
    pub(super) warmup: Option<WarmupFiles>,
}

/// A warm-up's scratch shared file (held, as a handler holds its own) and model, removed when
/// dropped.
pub(super) struct WarmupFiles {
    shm: PathBuf,
    _held: std::fs::File,
    mjcf: PathBuf,
}

impl Drop for WarmupFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.shm);
        let _ = std::fs::remove_file(&self.mjcf);
    }
}

/// How many spares to keep for a key, and how to warm them up.
struct Wanted {
    key: SpareKey,
    count: usize,
    options: GpuOptions,
    robot: RobotConfig,
}

struct Spares {
    wanted: Vec<Wanted>,
    idle: Vec<(SpareKey, Spare)>,
}

static SPARES: Mutex<Spares> = Mutex::new(Spares {
    wanted: Vec::new(),
    idle: Vec::new(),
});

fn spares() -> MutexGuard<'static, Spares> {
    // A panic while the lock was held leaves lists that are still whole.
    SPARES.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// From now on keeps `count` spare workers for GPU handlers started with `options` (0: none;
/// the idle ones end), and starts them now; MuJoCo Warp spares warm up on `robot` (the nominal
/// robot of the lanes to come: another robot's start still finds most kernels loaded).
/// Returns once they are spawned; their imports run in them. Fails only when a worker cannot
/// be spawned at all (no such Python, the worker's files not writable); a spare whose imports
/// fail ends, and the handler that would have taken it starts its own, which reports the
/// failure.
pub fn keep_spare_workers(options: &GpuOptions, robot: &RobotConfig, count: usize) -> Result<(), String> {
    let key = SpareKey::new(options);
    let (started, surplus) = {
        let mut spares = spares();
        spares.wanted.retain(|w| w.key != key);
        if count > 0 {
            spares.wanted.push(Wanted {
                key: key.clone(),
                count,
                options: options.clone(),
                robot: robot.clone(),
            });
        }
        let mut surplus = Vec::new();
        let mut kept = 0;
        let idle = std::mem::take(&mut spares.idle);
        for (k, spare) in idle {
            if k == key && kept >= count {
                surplus.push(spare);
            } else {
                kept += usize::from(k == key);
                spares.idle.push((k, spare));
            }
        }
        (top_up(&mut spares, &key), surplus)
    };
    // Dropped (closed) outside the lock: a close waits for the process.
    drop(surplus);
    started
}

/// The process ids of the spares for `options` idle now (started, perhaps still importing).
pub fn spare_worker_pids(options: &GpuOptions) -> Vec<u32> {
    let key = SpareKey::new(options);
    let spares = spares();
    spares
        .idle
        .iter()
        .filter(|(k, _)| *k == key)
        .map(|(_, w)| w.worker.child.id())
        .collect()
}

/// A spare of `key` if one is kept and still running. The taker calls [`replenish`] once its
/// own start is over, so that the next spare's imports do not compete with it.
pub(super) fn take(key: &SpareKey) -> Option<Spare> {
    let (found, dead) = {
        let mut spares = spares();
        let idle = std::mem::take(&mut spares.idle);
        let (alive, dead): (Vec<_>, Vec<_>) = idle.into_iter().partition(|(_, s)| s.worker.is_alive());
        spares.idle = alive;
        let found = spares
            .idle
            .iter()
            .position(|(k, _)| k == key)
            .map(|at| spares.idle.remove(at).1);
        (found, dead)
    };
    for (_, spare) in dead {
        tracing::warn!(
            "a spare GPU worker had stopped before it was needed: {}",
            spare.worker.stderr_tail()
        );
    }
    found
}

/// Starts spares of `key` in place of those taken or dead, as many as are wanted (none unless
/// [`keep_spare_workers`] asked for them).
pub(super) fn replenish(key: &SpareKey) {
    if let Err(e) = top_up(&mut spares(), key) {
        tracing::warn!("could not start a spare GPU worker: {e}");
    }
}

/// Starts spares of `key` until as many are idle as are wanted.
fn top_up(spares: &mut Spares, key: &SpareKey) -> Result<(), String> {
    let Some(wanted) = spares.wanted.iter().find(|w| w.key == *key) else {
        return Ok(());
    };
    let idle = spares.idle.iter().filter(|(k, _)| k == key).count();
    // Each one is kept as soon as it runs: none is dropped (waited for) under the lock.
    let mut started = Vec::new();
    let mut result = Ok(());
    for _ in idle..wanted.count {
        match start(wanted) {
            Ok(spare) => started.push((key.clone(), spare)),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    spares.idle.extend(started);
    result
}

/// Starts one spare of `wanted`, with its warm-up sent when it has one.
fn start(wanted: &Wanted) -> Result<Spare, String> {
    let key = &wanted.key;
    let script = worker_script()?;
    let mut worker = Worker::start(&key.python, &script, key.preload)
        .map_err(|e| format!("starting a spare GPU worker with {}: {e}", key.python.display()))?;
    // MJX compiles for the batch size it is given: a warm-up of one env would not serve the
    // real one. The stub has nothing to load.
    if key.preload.implementation != GpuImpl::Warp.wire() {
        return Ok(Spare { worker, warmup: None });
    }
    // Without its warm-up a spare is still one with its imports done.
    let warmup = warm_up(&mut worker, wanted)
        .inspect_err(|e| tracing::warn!("a spare GPU worker will not warm up: {e}"))
        .ok();
    Ok(Spare { worker, warmup })
}

/// Sends `worker` a warm-up init: one env of `wanted`'s robot on a scratch file of its own.
fn warm_up(worker: &mut Worker, wanted: &Wanted) -> Result<WarmupFiles, String> {
    let precision = if wanted.options.x64 {
        Precision::F64
    } else {
        Precision::F32
    };
    let (shm, held) = create_shared_file(ShmLayout::new(1, precision).bytes() as u64)?;
    let files = WarmupFiles {
        mjcf: shm.with_extension("xml"),
        shm,
        _held: held,
    };
    std::fs::write(&files.mjcf, wanted.robot.mjcf()).map_err(|e| format!("writing its model: {e}"))?;
    let mut options = wanted.options.clone();
    options.implementation = GpuImpl::Warp;
    let mut init = init_message(&wanted.robot, 1, &options, &files.shm, &files.mjcf);
    init["warmup"] = serde_json::Value::Bool(true);
    worker.send(&init.to_string())?;
    Ok(files)
}
