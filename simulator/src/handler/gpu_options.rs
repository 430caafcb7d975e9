//! How the GPU backend is chosen and started: the device, the physics implementation (with
//! `auto`'s choice) and the worker's Python and deadlines.

use std::path::PathBuf;
use std::time::Duration;

/// Where JAX runs the worker's physics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GpuDevice {
    /// JAX's default device: the GPU when there is one, else the CPU.
    #[default]
    Auto,
    /// JAX's CPU backend (tests and CI: the same code, slowly).
    Cpu,
    /// A GPU; starting fails without one.
    Gpu,
}

impl GpuDevice {
    pub(super) fn wire(self) -> &'static str {
        match self {
            GpuDevice::Auto => "auto",
            GpuDevice::Cpu => "cpu",
            GpuDevice::Gpu => "gpu",
        }
    }
}

impl std::fmt::Display for GpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.wire())
    }
}

impl std::fmt::Display for GpuImpl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.wire())
    }
}

impl std::str::FromStr for GpuDevice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(GpuDevice::Auto),
            "cpu" => Ok(GpuDevice::Cpu),
            "gpu" | "cuda" => Ok(GpuDevice::Gpu),
            other => Err(format!("unknown GPU backend device {other:?} (auto, cpu or gpu)")),
        }
    }
}

/// Which GPU MuJoCo steps the physics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GpuImpl {
    /// MuJoCo Warp where a CUDA device is present and the run is float32, else MJX's JAX
    /// implementation ([`GpuImpl::resolve`]).
    #[default]
    Auto,
    /// MJX's own JAX implementation.
    Jax,
    /// MuJoCo Warp, worlds batched by the library (needs `mujoco-warp` and `warp-lang` in the
    /// worker's Python; float32 only).
    Warp,
    /// No physics: the worker's host side and the Rust side alone (`arena sim bench`); joints
    /// jump to their targets, bodies stay at the rest pose. Never for scoring.
    Stub,
}

impl GpuImpl {
    pub(super) fn wire(self) -> &'static str {
        match self {
            GpuImpl::Auto => "auto",
            GpuImpl::Jax => "jax",
            GpuImpl::Warp => "warp",
            GpuImpl::Stub => "stub",
        }
    }

    /// The implementation `Auto` stands for: MuJoCo Warp on a CUDA device (about 4.7× MJX's
    /// JAX path in the arena on an H100, `shared/notes/GPU_FACTS.md`), MJX where double
    /// precision is asked for (Warp computes in float32 only) or where the physics runs on a
    /// CPU device (the tests' and CI's configuration). Other values stand for themselves.
    pub fn resolve(self, device: GpuDevice, x64: bool, cuda_present: bool) -> GpuImpl {
        match self {
            GpuImpl::Auto if !x64 && device != GpuDevice::Cpu && cuda_present => GpuImpl::Warp,
            GpuImpl::Auto => GpuImpl::Jax,
            other => other,
        }
    }
}

/// Whether this machine has an NVIDIA CUDA device (the driver's control node), without loading
/// any GPU library.
pub fn cuda_device_present() -> bool {
    std::path::Path::new("/dev/nvidiactl").exists() || std::path::Path::new("/proc/driver/nvidia/version").exists()
}

impl std::str::FromStr for GpuImpl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(GpuImpl::Auto),
            "jax" => Ok(GpuImpl::Jax),
            "warp" => Ok(GpuImpl::Warp),
            "stub" => Ok(GpuImpl::Stub),
            other => Err(format!(
                "unknown GPU physics implementation {other:?} (auto, jax, warp, or stub for benchmarks)"
            )),
        }
    }
}

/// How to start the GPU worker.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuOptions {
    /// Python interpreter with `jax`, `mujoco` and `mujoco-mjx` (`python/requirements-gpu.txt`).
    pub python: PathBuf,
    pub device: GpuDevice,
    pub implementation: GpuImpl,
    /// Double precision in JAX (slower; for sim-to-sim comparisons).
    pub x64: bool,
    /// Compute per-body contact forces (the trainers' rewards read them; evaluations, which
    /// do not, turn them off: `arena serve`, `arena eval`, `sim bench`, `audit`). Off, the
    /// worker reports them as zero.
    pub contact_forces: bool,
    /// Deadline of start-up (JIT compilation included).
    pub startup_timeout: Duration,
    /// Deadline of one command (sync or step).
    pub step_timeout: Duration,
}

impl Default for GpuOptions {
    fn default() -> Self {
        Self {
            // Empty is unset, as the docs say of `gpu_python`.
            python: std::env::var_os("ARENA_GPU_PYTHON")
                .filter(|v| !v.is_empty())
                .map_or_else(|| PathBuf::from("python3"), PathBuf::from),
            device: GpuDevice::Auto,
            implementation: GpuImpl::Auto,
            x64: false,
            contact_forces: true,
            startup_timeout: Duration::from_secs(900),
            step_timeout: Duration::from_secs(120),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_is_warp_only_on_a_cuda_device_in_float32() {
        use GpuDevice::{Auto, Cpu, Gpu};
        for (device, x64, cuda, expected) in [
            (Auto, false, true, GpuImpl::Warp),
            (Gpu, false, true, GpuImpl::Warp),
            (Auto, true, true, GpuImpl::Jax),
            (Cpu, false, true, GpuImpl::Jax),
            (Auto, false, false, GpuImpl::Jax),
            (Gpu, false, false, GpuImpl::Jax),
        ] {
            assert_eq!(
                GpuImpl::Auto.resolve(device, x64, cuda),
                expected,
                "{device:?} x64={x64} cuda={cuda}"
            );
        }
        for explicit in [GpuImpl::Jax, GpuImpl::Warp, GpuImpl::Stub] {
            assert_eq!(explicit.resolve(Auto, true, true), explicit);
        }
        assert_eq!(GpuImpl::default(), GpuImpl::Auto);
        // What a caller that names no implementation gets (arena-bfm's `sim_backend = "gpu"`):
        // Warp on a CUDA device, as the docs say, not MJX everywhere.
        assert_eq!(GpuOptions::default().implementation, GpuImpl::Auto);
        assert_eq!("stub".parse::<GpuImpl>(), Ok(GpuImpl::Stub));
        assert!("cuda".parse::<GpuImpl>().unwrap_err().contains("auto, jax, warp"));
    }
}
