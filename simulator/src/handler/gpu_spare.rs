//! Spare GPU workers: processes started ahead of need, which import their physics library and
//! initialise the device as soon as they start (`--preload`), so that a GPU handler starting
//! later takes one and only sends it its init. On a GPU machine the interpreter, the imports
//! and the device are about two of a Warp worker's three seconds of start-up
//! (docs/gpu-measurements.md); a server keeps spares (`spare_simulators`, docs/server.md) so
//! that a session whose lane has no kept simulator of its shape does not wait for them.
//!
//! Nothing is kept until [`keep_spare_workers`] is called: `arena eval`, `sim bench` and the
//! trainers start their own workers, as before. A handler that takes a spare starts the next
//! one at once, in the background of its own start. A spare is not yet tied to any shape: the
//! number of envs, the model and the shared file come with its init.

use super::gpu_options::{GpuOptions, cuda_device_present};
use super::gpu_process::{Preload, Worker, worker_script};
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

struct Spares {
    /// How many spares to keep idle, per key.
    wanted: Vec<(SpareKey, usize)>,
    idle: Vec<(SpareKey, Worker)>,
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
/// the idle ones end), and starts them now. Returns once they are spawned; their imports run
/// in them. Fails only when a worker cannot be spawned at all (no such Python, the worker's
/// files not writable); a spare whose imports fail ends, and the handler that would have taken
/// it starts its own, which reports the failure.
pub fn keep_spare_workers(options: &GpuOptions, count: usize) -> Result<(), String> {
    let key = SpareKey::new(options);
    let surplus = {
        let mut spares = spares();
        spares.wanted.retain(|(k, _)| *k != key);
        if count > 0 {
            spares.wanted.push((key.clone(), count));
        }
        let mut surplus = Vec::new();
        let mut kept = 0;
        let idle = std::mem::take(&mut spares.idle);
        for (k, worker) in idle {
            if k == key && kept >= count {
                surplus.push(worker);
            } else {
                kept += usize::from(k == key);
                spares.idle.push((k, worker));
            }
        }
        top_up(&mut spares, &key).map(|()| surplus)
    };
    // Dropped (closed) outside the lock: a close waits for the process.
    drop(surplus?);
    Ok(())
}

/// The process ids of the spares for `options` idle now (started, perhaps still importing).
pub fn spare_worker_pids(options: &GpuOptions) -> Vec<u32> {
    let key = SpareKey::new(options);
    let spares = spares();
    spares
        .idle
        .iter()
        .filter(|(k, _)| *k == key)
        .map(|(_, w)| w.child.id())
        .collect()
}

/// A spare of `key` if one is kept and still running; the next spare is started in its place.
pub(super) fn take(key: &SpareKey) -> Option<Worker> {
    let (found, dead) = {
        let mut spares = spares();
        let idle = std::mem::take(&mut spares.idle);
        let (alive, dead): (Vec<_>, Vec<_>) = idle.into_iter().partition(|(_, w)| w.is_alive());
        spares.idle = alive;
        let found = spares
            .idle
            .iter()
            .position(|(k, _)| k == key)
            .map(|at| spares.idle.remove(at).1);
        if let Err(e) = top_up(&mut spares, key) {
            tracing::warn!("could not start a spare GPU worker: {e}");
        }
        (found, dead)
    };
    for (_, worker) in dead {
        tracing::warn!(
            "a spare GPU worker had stopped before it was needed: {}",
            worker.stderr_tail()
        );
    }
    found
}

/// Starts spares of `key` until as many are idle as are wanted.
fn top_up(spares: &mut Spares, key: &SpareKey) -> Result<(), String> {
    let wanted = spares.wanted.iter().find(|(k, _)| k == key).map_or(0, |(_, n)| *n);
    let idle = spares.idle.iter().filter(|(k, _)| k == key).count();
    if idle >= wanted {
        return Ok(());
    }
    let script = worker_script()?;
    for _ in idle..wanted {
        let worker = Worker::start(&key.python, &script, key.preload)
            .map_err(|e| format!("starting a spare GPU worker with {}: {e}", key.python.display()))?;
        spares.idle.push((key.clone(), worker));
    }
    Ok(())
}
