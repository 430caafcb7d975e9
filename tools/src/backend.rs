//! `--backend` and the GPU backend's flags, shared by the commands that simulate
//! (`arena eval`, `arena sim bench`, `arena audit`).

use arena_sim::SimBackend;
use arena_sim::handler::{GpuDevice, GpuImpl, GpuOptions};
use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// MuJoCo on CPU threads.
    Cpu,
    /// MuJoCo MJX or MuJoCo Warp in a supervised Python worker (a GPU, or the library's CPU
    /// device without one).
    Gpu,
}

#[derive(Debug, Clone, Args)]
pub struct BackendArgs {
    /// Physics backend (docs/gpu-backend.md).
    #[arg(long, value_enum, default_value = "cpu")]
    pub backend: BackendKind,
    /// GPU backend: where the physics runs: auto (the GPU if there is one), cpu or gpu.
    #[arg(long, default_value = "auto", value_parser = clap::builder::ValueParser::new(str::parse::<GpuDevice>))]
    pub gpu_device: GpuDevice,
    /// GPU backend: physics implementation: auto (MuJoCo Warp where a CUDA device is present and
    /// --gpu-x64 is not asked for, else MJX), jax (MuJoCo MJX on JAX) or warp (MuJoCo Warp,
    /// float32 only). `arena sim bench` also takes stub: no physics, the host side's cost alone.
    #[arg(long, default_value = "auto", value_parser = clap::builder::ValueParser::new(str::parse::<GpuImpl>))]
    pub gpu_impl: GpuImpl,
    /// GPU backend: a Python with python/requirements-gpu.txt [default: python3].
    #[arg(long, env = "ARENA_GPU_PYTHON")]
    pub gpu_python: Option<PathBuf>,
    /// GPU backend: double precision in JAX (slower; for comparisons with the CPU backend; not
    /// with warp).
    #[arg(long)]
    pub gpu_x64: bool,
    /// GPU backend: lets --gpu-impl stub through in a command that scores (no physics,
    /// meaningless scores): for measuring what surrounds the physics at GPU sizes.
    #[arg(long)]
    pub gpu_allow_stub: bool,
}

impl BackendArgs {
    /// The backend of a command that scores: the stub's outputs are no physics.
    pub fn scoring_backend(&self) -> anyhow::Result<SimBackend> {
        if self.backend == BackendKind::Gpu && self.gpu_impl == GpuImpl::Stub && !self.gpu_allow_stub {
            anyhow::bail!(
                "--gpu-impl stub has no physics: it is for `arena sim bench` (or measurements with --gpu-allow-stub)"
            );
        }
        Ok(self.backend())
    }

    pub fn backend(&self) -> SimBackend {
        match self.backend {
            BackendKind::Cpu => SimBackend::Cpu,
            BackendKind::Gpu => {
                let mut options = GpuOptions {
                    device: self.gpu_device,
                    implementation: self.gpu_impl,
                    x64: self.gpu_x64,
                    // What these commands run (evaluations, audits, `sim bench` standing for
                    // them) reads no contact forces; training's rewards do.
                    contact_forces: false,
                    ..GpuOptions::default()
                };
                if let Some(python) = &self.gpu_python {
                    options.python = python.clone();
                }
                SimBackend::Gpu(options)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpu_backend_of_these_commands_computes_no_contact_forces() {
        let args = BackendArgs {
            backend: BackendKind::Gpu,
            gpu_device: GpuDevice::Cpu,
            gpu_impl: GpuImpl::Warp,
            gpu_python: None,
            gpu_x64: false,
            gpu_allow_stub: false,
        };
        let SimBackend::Gpu(options) = args.backend() else {
            panic!("not the GPU backend")
        };
        assert!(!options.contact_forces);
        assert!(GpuOptions::default().contact_forces, "trainers keep the default");
    }
}
