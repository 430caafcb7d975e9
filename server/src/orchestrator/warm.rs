//! Simulators kept started between sessions: a lane that ends gives its simulator back, and the
//! next lane of the same shape takes it over instead of starting one. For the GPU backend that
//! is a running worker with its kernels loaded and graphs captured (seconds on a GPU machine,
//! minutes for MJX's first compilation); for the CPU backend, the per-env MuJoCo data and the
//! thread pool. A simulator taken over runs episodes exactly as a fresh one does (each reset
//! sets its env's physical parameters and state).

use crate::catalog::LoadedBenchmark;
use crate::config::ServerConfig;
use crate::state::AppState;
use arena_sim::handler::Handler;
use arena_sim::{RobotConfig, SimBackend};
use std::sync::{Arc, Mutex};

/// What a lane's simulator must match to be taken over.
#[derive(Debug, Clone, PartialEq)]
pub struct SimulatorShape {
    pub backend: SimBackend,
    pub robot: RobotConfig,
    pub num_envs: usize,
    pub threads: usize,
}

/// The idle simulators, at most `capacity` of them.
pub struct WarmSimulators {
    capacity: usize,
    idle: Mutex<Vec<(SimulatorShape, Box<dyn Handler>)>>,
}

impl std::fmt::Debug for WarmSimulators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmSimulators")
            .field("capacity", &self.capacity)
            .field("idle", &self.len())
            .finish()
    }
}

impl WarmSimulators {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// An idle simulator of `shape`, if one is kept that can still step (one whose GPU worker
    /// died while idle is dropped instead).
    pub fn take(&self, shape: &SimulatorShape) -> Option<Box<dyn Handler>> {
        let (found, dead) = {
            let mut idle = self.idle.lock().expect("warm simulators lock");
            let mut dead = Vec::new();
            let mut k = 0;
            while k < idle.len() {
                if idle[k].1.is_reusable() {
                    k += 1;
                } else {
                    dead.push(idle.swap_remove(k).1);
                }
            }
            let found = idle.iter().position(|(s, _)| s == shape).map(|k| idle.swap_remove(k).1);
            (found, dead)
        };
        if !dead.is_empty() {
            tracing::warn!("{} kept simulator(s) stopped while idle; dropped", dead.len());
        }
        drop(dead);
        found
    }

    /// Keeps `handler` for a later lane, unless it cannot step any more or the pool is full;
    /// returns whether it was kept. A simulator not kept is dropped after the lock is released
    /// (a GPU worker's close waits for the process).
    pub fn give_back(&self, shape: SimulatorShape, handler: Box<dyn Handler>) -> bool {
        if !handler.is_reusable() {
            return false;
        }
        let refused = {
            let mut idle = self.idle.lock().expect("warm simulators lock");
            if idle.len() < self.capacity {
                idle.push((shape, handler));
                None
            } else {
                Some(handler)
            }
        };
        refused.is_none()
    }

    /// Idle simulators kept now.
    pub fn len(&self) -> usize {
        self.idle.lock().expect("warm simulators lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The shapes of the lanes of a fresh submission of `benchmark` on a server of `config`, as
/// the gateway sizes them (every episode to run, the benchmark's own gains, no smaller batch
/// asked for by the agent).
pub fn fresh_submission_shapes(
    config: &ServerConfig,
    benchmark: &LoadedBenchmark,
) -> Result<Vec<SimulatorShape>, String> {
    let (lanes, batch) = super::lanes_and_batch(config.lanes, config.max_batch as usize, benchmark.episodes.len());
    let backend = config.backend()?;
    let env = arena_runner::episode::env_config(&benchmark.spec, None, batch, config.sim_threads as usize);
    let shape = SimulatorShape {
        backend,
        robot: env.robot,
        num_envs: batch,
        threads: env.threads,
    };
    Ok(vec![shape; lanes])
}

/// On the GPU backend, starts the `spare_simulators` worker processes and keeps that many from
/// now on (`arena_sim::handler::keep_spare_workers`); a failure to start them is logged, and
/// lanes start their own workers as without spares.
pub fn keep_spares(config: &ServerConfig) {
    let Ok(SimBackend::Gpu(options)) = config.backend() else {
        return;
    };
    let count = config.spare_simulators as usize;
    if count == 0 {
        return;
    }
    match arena_sim::handler::keep_spare_workers(&options, &RobotConfig::default(), count) {
        Ok(()) => tracing::info!("{count} spare GPU worker(s) started, kept for lanes to take"),
        Err(e) => tracing::warn!("spare GPU workers: {e}; a lane that finds none starts its own"),
    }
}

/// Ends the spare GPU workers `keep_spares` kept (at the server's stop).
pub fn end_spares(config: &ServerConfig) {
    if let Ok(SimBackend::Gpu(options)) = config.backend()
        && config.spare_simulators > 0
        && let Err(e) = arena_sim::handler::keep_spare_workers(&options, &RobotConfig::default(), 0)
    {
        tracing::warn!("spare GPU workers: {e}");
    }
}

/// Starts the simulators of the benchmarks `prewarm` names on a thread of their own and keeps
/// them for the first sessions' lanes; each start and each failure is logged. A session that
/// begins before its simulators are ready starts its own, as without `prewarm`.
pub fn prewarm(state: &Arc<AppState>) {
    if state.config.prewarm.is_empty() {
        return;
    }
    let state = state.clone();
    let spawned = std::thread::Builder::new().name("prewarm".into()).spawn(move || {
        for name in &state.config.prewarm {
            let shapes = state
                .catalog
                .load(name)
                .map_err(|e| e.to_string())
                .and_then(|b| fresh_submission_shapes(&state.config, &b));
            let shapes = match shapes {
                Ok(shapes) => shapes,
                Err(e) => {
                    tracing::warn!("prewarm: benchmark {name}: {e}; its first session starts its own simulators");
                    continue;
                }
            };
            for (lane, shape) in shapes.into_iter().enumerate() {
                let started = std::time::Instant::now();
                match shape.backend.create(shape.robot.clone(), shape.num_envs, shape.threads) {
                    Ok(simulator) => {
                        let what = format!("{} envs on {}", shape.num_envs, simulator.describe());
                        if state.warm_simulators.give_back(shape, simulator) {
                            tracing::info!(
                                "prewarm: benchmark {name}, lane {lane}: simulator started ({what}) in {:.1} s and kept",
                                started.elapsed().as_secs_f64()
                            );
                        } else {
                            tracing::warn!("prewarm: benchmark {name}, lane {lane}: no room left among the kept simulators");
                        }
                    }
                    Err(e) => tracing::warn!("prewarm: benchmark {name}, lane {lane}: the simulator did not start: {e}"),
                }
            }
        }
    });
    if let Err(e) = spawned {
        tracing::warn!("prewarm: could not start its thread: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(num_envs: usize) -> SimulatorShape {
        SimulatorShape {
            backend: SimBackend::Cpu,
            robot: RobotConfig::default(),
            num_envs,
            threads: 1,
        }
    }

    fn simulator(num_envs: usize) -> Box<dyn Handler> {
        SimBackend::Cpu.create(RobotConfig::default(), num_envs, 1).unwrap()
    }

    #[test]
    fn a_simulator_is_taken_by_its_shape_only_and_the_pool_has_a_bound() {
        let warm = WarmSimulators::new(2);
        assert!(warm.take(&shape(2)).is_none());
        assert!(warm.give_back(shape(2), simulator(2)));
        assert!(warm.give_back(shape(3), simulator(3)));
        assert!(!warm.give_back(shape(4), simulator(4)), "full");
        assert_eq!(warm.len(), 2);
        let mut other_threads = shape(2);
        other_threads.threads = 2;
        assert!(warm.take(&other_threads).is_none());
        assert!(warm.take(&shape(4)).is_none());
        let taken = warm.take(&shape(2)).expect("kept");
        assert_eq!(taken.num_envs(), 2);
        assert!(warm.take(&shape(2)).is_none(), "taken once");
        assert_eq!(warm.len(), 1);
        let none = WarmSimulators::new(0);
        assert!(!none.give_back(shape(2), taken));
        assert!(none.is_empty());
    }
}
