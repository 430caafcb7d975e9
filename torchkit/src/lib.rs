//! arena-torch: the libtorch pieces both baselines (arena-bfm, arena-ppo) share, so neither
//! keeps a copy.
//! - [`params`]: named parameter storage (checkpoint names) and orthogonal initialisation;
//! - [`optim`]: Adam with PyTorch's formula and checkpointable moments (exact resume);
//! - [`run_dir`]: a run's folder, with checkpoint replacement that survives a kill;
//! - [`csv_log`]: CSV logs with fixed headers, truncated on resume;
//! - [`tensors`]: safetensors reading with errors in words;
//! - [`seed`]: per-counter seeds, so every random draw of a run is reproducible from a counter;
//! - [`cli`]: argument parsers the trainers' command lines share.
//! - [`python`]: the Python with PyTorch that the oracle tests run.
//! - [`denormals`]: subnormal floats flushed to zero on libtorch's threads, for a scope.
//! - [`mkl_kernels`]: oneMKL's matrix kernels chosen by the CPU's instruction sets.

pub mod cli;
pub mod csv_log;
pub mod denormals;
mod loaded;
pub mod mkl_kernels;
pub mod optim;
pub mod params;
pub mod python;
pub mod run_dir;
pub mod seed;
pub mod tensors;
