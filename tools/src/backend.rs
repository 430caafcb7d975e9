//! `--backend` and the GPU backend's flags, shared by the commands that simulate
//! (`arena eval`, `arena sim bench`, `arena audit`).

use arena_sdk::cli::UsageError;
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
    /// Physics backend: cpu or gpu (docs/gpu-backend.md) [default: cpu]. `ARENA_SIM_BACKEND`
    /// is `arena serve`'s and is not read here.
    #[arg(long, value_enum)]
    pub backend: Option<BackendKind>,
    /// GPU backend: where the physics runs: auto (the GPU if there is one), cpu or gpu
    /// [default: auto].
    #[arg(long, value_parser = clap::builder::ValueParser::new(str::parse::<GpuDevice>))]
    pub gpu_device: Option<GpuDevice>,
    /// GPU backend: physics implementation: auto (MuJoCo Warp where a CUDA device is present,
    /// --gpu-device is not cpu and --gpu-x64 is not asked for, else MJX), jax (MuJoCo MJX on JAX) or warp (MuJoCo Warp,
    /// float32 only). `arena sim bench` also takes stub: no physics, the host side's cost alone
    /// [default: auto].
    #[arg(long, value_parser = clap::builder::ValueParser::new(str::parse::<GpuImpl>))]
    pub gpu_impl: Option<GpuImpl>,
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
        if self.backend == Some(BackendKind::Gpu) && self.gpu_impl == Some(GpuImpl::Stub) && !self.gpu_allow_stub {
            return Err(UsageError(
                "--gpu-impl stub has no physics: it is for `arena sim bench` (or measurements with --gpu-allow-stub)"
                    .into(),
            )
            .into());
        }
        self.backend()
    }

    /// The backend the flags ask for. GPU flags without `--backend gpu` are an error (they were
    /// ignored, and a run meant for the GPU ran on the CPU), and so is `--gpu-x64` with
    /// `--gpu-impl warp` (found here rather than after a worker has started).
    pub fn backend(&self) -> anyhow::Result<SimBackend> {
        let gpu_flags: Vec<&str> = [
            (self.gpu_device.is_some(), "--gpu-device"),
            (self.gpu_impl.is_some(), "--gpu-impl"),
            (self.gpu_x64, "--gpu-x64"),
            (self.gpu_allow_stub, "--gpu-allow-stub"),
        ]
        .into_iter()
        .filter_map(|(given, flag)| given.then_some(flag))
        .collect();
        match self.backend.unwrap_or(BackendKind::Cpu) {
            BackendKind::Cpu if !gpu_flags.is_empty() => Err(UsageError(format!(
                "{} {} for the GPU backend: add --backend gpu{}",
                gpu_flags.join(", "),
                if gpu_flags.len() == 1 { "is" } else { "are" },
                if self.backend.is_none() {
                    " (the default is cpu)"
                } else {
                    ""
                }
            ))
            .into()),
            BackendKind::Cpu => {
                if self.backend.is_none() && std::env::var("ARENA_SIM_BACKEND").is_ok_and(|v| v.trim() == "gpu") {
                    eprintln!(
                        "note: ARENA_SIM_BACKEND=gpu is `arena serve`'s setting; this command runs on the CPU backend unless given --backend gpu"
                    );
                }
                Ok(SimBackend::Cpu)
            }
            BackendKind::Gpu => {
                if self.gpu_x64 && self.gpu_impl == Some(GpuImpl::Warp) {
                    return Err(UsageError(
                        "--gpu-x64 needs --gpu-impl jax: MuJoCo Warp computes in float32 only".into(),
                    )
                    .into());
                }
                let mut options = GpuOptions {
                    device: self.gpu_device.unwrap_or(GpuDevice::Auto),
                    implementation: self.gpu_impl.unwrap_or(GpuImpl::Auto),
                    x64: self.gpu_x64,
                    // What these commands run (evaluations, audits, `sim bench` standing for
                    // them) reads no contact forces; training's rewards do.
                    contact_forces: false,
                    ..GpuOptions::default()
                };
                if let Some(python) = &self.gpu_python {
                    options.python = python.clone();
                }
                Ok(SimBackend::Gpu(options))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(device: Option<GpuDevice>, implementation: Option<GpuImpl>) -> BackendArgs {
        BackendArgs {
            backend: Some(BackendKind::Gpu),
            gpu_device: device,
            gpu_impl: implementation,
            gpu_python: None,
            gpu_x64: false,
            gpu_allow_stub: false,
        }
    }

    #[test]
    fn the_gpu_backend_of_these_commands_computes_no_contact_forces() {
        let Ok(SimBackend::Gpu(options)) = gpu(Some(GpuDevice::Cpu), Some(GpuImpl::Warp)).backend() else {
            panic!("not the GPU backend")
        };
        assert!(!options.contact_forces);
        assert!(GpuOptions::default().contact_forces, "trainers keep the default");
        let Ok(SimBackend::Gpu(options)) = gpu(None, None).backend() else {
            panic!("not the GPU backend")
        };
        assert_eq!(
            (options.device, options.implementation),
            (GpuDevice::Auto, GpuImpl::Auto)
        );
    }

    #[test]
    fn gpu_flags_without_the_gpu_backend_are_refused() {
        let mut args = gpu(Some(GpuDevice::Cpu), Some(GpuImpl::Jax));
        args.backend = None;
        let e = args.backend().unwrap_err().to_string();
        assert!(
            e.contains("--gpu-device, --gpu-impl are for the GPU backend: add --backend gpu (the default is cpu)"),
            "{e}"
        );
        args.backend = Some(BackendKind::Cpu);
        args.gpu_device = None;
        let e = args.backend().unwrap_err().to_string();
        assert!(
            e.contains("--gpu-impl is for the GPU backend: add --backend gpu") && !e.contains("default"),
            "{e}"
        );
        args.gpu_impl = None;
        assert!(matches!(args.backend(), Ok(SimBackend::Cpu)));
    }

    #[test]
    fn x64_with_warp_is_refused_before_a_worker_starts() {
        let mut args = gpu(None, Some(GpuImpl::Warp));
        args.gpu_x64 = true;
        let e = args.backend().unwrap_err().to_string();
        assert!(e.contains("--gpu-x64 needs --gpu-impl jax"), "{e}");
        args.gpu_impl = None;
        assert!(args.backend().is_ok(), "auto with x64 is jax");
    }
}
