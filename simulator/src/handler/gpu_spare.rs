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
use super::gpu_process::{
    Preload, Worker, WorkerCheck, WorkerCheckError, check_worker, create_shared_file, worker_script,
};
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

/// Spares of one key lost one after another before none are kept for it any more: spares that
/// all fail the same way (a device out of memory, a warm-up the worker refuses) would otherwise
/// make every lane wait for one to fail before it starts its own worker.
const LOST_IN_A_ROW: usize = 3;

/// How many spares to keep for a key, and how to warm them up.
#[derive(Clone)]
struct Wanted {
    key: SpareKey,
    count: usize,
    /// Spares of the key lost one after another (dead when looked for, or ended before they
    /// answered their init), up to [`LOST_IN_A_ROW`].
    lost_in_a_row: usize,
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
    let surplus = {
        let mut spares = spares();
        spares.wanted.retain(|w| w.key != key);
        if count > 0 {
            spares.wanted.push(Wanted {
                key: key.clone(),
                count,
                lost_in_a_row: 0,
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
        surplus
    };
    end_all(surplus);
    top_up(&key)
}

/// Whether a worker for handlers started with `options` can start here (its Python, its
/// imports, its device), asked by a server before it serves; the error names the Python and
/// what to do. Up to two minutes (a first JAX import on a cold machine takes seconds).
pub fn check_gpu_worker(options: &GpuOptions) -> Result<WorkerCheck, String> {
    let key = SpareKey::new(options);
    check_worker(&key.python, key.preload, std::time::Duration::from_secs(120)).map_err(|e| {
        let (why, what_to_do) = match e {
            // The worker's own hint says the same in the worker's words.
            WorkerCheckError::Device(why) => (
                why.strip_suffix("; use device cpu or auto")
                    .map(str::to_owned)
                    .unwrap_or(why),
                "choose --gpu-device auto or cpu (`gpu_device`), or run on a machine with the device",
            ),
            WorkerCheckError::Python(why) => (
                why,
                "give --gpu-python (ARENA_GPU_PYTHON, `gpu_python`) a Python with python/requirements-gpu.txt \
                 installed (`make deps-gpu`), or choose another --gpu-impl",
            ),
        };
        format!(
            "a GPU worker ({} on device {}) cannot start with {}: {why}; {what_to_do}",
            key.preload.implementation,
            key.preload.device,
            key.python.display()
        )
    })
}

/// Ends `spares` at once (a close waits up to a second for its process, and one still
/// importing reads no `close`): side by side, and never under the lock.
fn end_all(spares: Vec<Spare>) {
    std::thread::scope(|s| {
        for spare in spares {
            s.spawn(move || drop(spare));
        }
    });
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
    let (found, dead, no_longer_kept) = {
        let mut spares = spares();
        let idle = std::mem::take(&mut spares.idle);
        let (alive, dead): (Vec<_>, Vec<_>) = idle.into_iter().partition(|(_, s)| s.worker.is_alive());
        spares.idle = alive;
        let mut no_longer_kept = Vec::new();
        for _ in dead.iter().filter(|(k, _)| k == key) {
            no_longer_kept.extend(count_lost(&mut spares, key));
        }
        let found = spares
            .idle
            .iter()
            .position(|(k, _)| k == key)
            .map(|at| spares.idle.remove(at).1);
        (found, dead, no_longer_kept)
    };
    for (_, spare) in &dead {
        tracing::warn!(
            "a spare GPU worker had stopped before it was needed: {}",
            spare.worker.stderr_tail()
        );
    }
    end_all(dead.into_iter().map(|(_, spare)| spare).chain(no_longer_kept).collect());
    found
}

/// What became of a spare of `key` that a handler took: lost (it ended before it answered its
/// init) or serving. After [`LOST_IN_A_ROW`] lost ones in a row no more are kept for the key.
pub(super) fn taken_spare(key: &SpareKey, lost: bool) {
    let ended = {
        let mut spares = spares();
        match lost {
            true => count_lost(&mut spares, key),
            false => {
                if let Some(w) = spares.wanted.iter_mut().find(|w| w.key == *key) {
                    w.lost_in_a_row = 0;
                }
                Vec::new()
            }
        }
    };
    end_all(ended);
}

/// Counts a lost spare of `key`; at [`LOST_IN_A_ROW`] stops keeping spares for it and returns
/// its idle ones, to be ended outside the lock.
fn count_lost(spares: &mut Spares, key: &SpareKey) -> Vec<Spare> {
    let Some(w) = spares.wanted.iter_mut().find(|w| w.key == *key) else {
        return Vec::new();
    };
    w.lost_in_a_row += 1;
    if w.lost_in_a_row < LOST_IN_A_ROW {
        return Vec::new();
    }
    tracing::warn!(
        "{LOST_IN_A_ROW} spare GPU workers ({} on {}) were lost one after another: no more are kept, and each lane starts its own worker (the lanes' errors say why a worker fails)",
        key.preload.implementation,
        key.preload.device
    );
    spares.wanted.retain(|w| w.key != *key);
    let idle = std::mem::take(&mut spares.idle);
    let (ended, kept): (Vec<_>, Vec<_>) = idle.into_iter().partition(|(k, _)| k == key);
    spares.idle = kept;
    ended.into_iter().map(|(_, spare)| spare).collect()
}

/// Starts spares of `key` in place of those taken or dead, as many as are wanted (none unless
/// [`keep_spare_workers`] asked for them).
pub(super) fn replenish(key: &SpareKey) {
    if let Err(e) = top_up(key) {
        tracing::warn!("could not start a spare GPU worker: {e}");
    }
}

/// Starts spares of `key` until as many are idle as are wanted. They are started outside the
/// lock (spawning, the worker's files, the warm-up's model), so that a lane taking a spare
/// meanwhile does not wait; those that two calls at once started beyond the count, or that
/// are no longer wanted by the time they run, end.
fn top_up(key: &SpareKey) -> Result<(), String> {
    let (wanted, missing) = {
        let spares = spares();
        let Some(wanted) = spares.wanted.iter().find(|w| w.key == *key) else {
            return Ok(());
        };
        let idle = spares.idle.iter().filter(|(k, _)| k == key).count();
        (wanted.clone(), wanted.count.saturating_sub(idle))
    };
    let mut started = Vec::new();
    let mut result = Ok(());
    for _ in 0..missing {
        match start(&wanted) {
            Ok(spare) => started.push(spare),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    let surplus = {
        let mut spares = spares();
        let count = spares.wanted.iter().find(|w| w.key == *key).map_or(0, |w| w.count);
        let idle = spares.idle.iter().filter(|(k, _)| k == key).count();
        let surplus = started.split_off(count.saturating_sub(idle).min(started.len()));
        spares
            .idle
            .extend(started.into_iter().map(|spare| (key.clone(), spare)));
        surplus
    };
    end_all(surplus);
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
