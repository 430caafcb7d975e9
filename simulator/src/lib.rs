//! arena-sim: MimicArena's simulator.
//!
//! One responsibility: simulate the Unitree G1 tracking reference motions. Layers (DESIGN.md §2):
//! - [`robot`]: the project's G1 model (MJCF), joint/body orders, gains, action mapping;
//! - [`handler`] (Layer 1): batched physics with PD control, state get/set, SoA accessors, on
//!   MuJoCo (CPU threads) or MuJoCo MJX / MuJoCo Warp (a supervised worker process, GPU);
//! - [`motion`]: the motion library (resampling, FK, velocities, `state_at`);
//! - [`observation`], [`dr`], [`env`] (Layer 2): observation terms, domain randomisation and the
//!   batched [`env::TrackingEnv`] with trajectory recording;
//! - [`recorded`]: observations recomputed from recorded states (dataset exports).

pub mod dr;
pub mod env;
pub mod geometry;
pub mod handler;
pub mod kinematics;
pub mod math;
pub mod motion;
pub mod observation;
pub mod policy;
mod prefetch;
pub mod recorded;
pub mod robot;
pub mod robot_interface;

pub use handler::{
    CONTROL_DT, DECIMATION, Field, GpuHandler, Handler, MujocoHandler, PHYSICS_DT, RobotState, SimBackend,
};
pub use robot::{GainSet, RobotConfig};

/// Errors of the simulator crate.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("robot model: {0}")]
    Model(String),
    #[error("{0}")]
    Config(String),
    /// The GPU backend's worker could not start or answer.
    #[error("GPU backend: {0}")]
    Backend(String),
    #[error("motion {motion}: {message}")]
    Motion { motion: String, message: String },
}
