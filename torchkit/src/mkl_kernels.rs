//! MKL's matrix kernels chosen by what the CPU can do, not by who made it.
//!
//! libtorch's CPU build does its float32 matrix products (every `Linear`, forward and
//! backward) in the oneMKL linked into it. oneMKL picks its kernels in two steps: first it asks
//! whether the CPU is Intel's (`mkl_serv_intel_cpu_true`), and only on Intel does it look at the
//! instruction sets the CPU reports. Elsewhere it takes its AVX2 kernels. So on an AMD EPYC with
//! AVX-512 (the 2-core machines these trainers are measured on) a PPO update's SGEMMs ran at
//! about 150 GFLOP/s, where the same kernels' AVX-512 versions run at about 1.7× that (issue 41
//! §3, docs/ppo-tracker.md §12.3).
//!
//! This module defines `mkl_serv_intel_cpu_true` to say yes. The binaries, tests and examples of
//! arena-ppo and arena-bfm link it in and export it (`torchkit/build_torch.rs`), and libtorch calls it
//! through its procedure linkage table, so the executable's definition is the one it gets.
//! oneMKL then chooses by the CPU's reported instruction sets, as it does on Intel. Nothing else
//! changes: the same products, in kernels whose summation order differs, so results move at
//! float32's rounding level. On Intel CPUs the answer was yes already.
//! [`cpu_features_choose`] tells whether the process got this definition.
//!
//! Tested in `ppo/tests/mkl_kernels.rs` (this crate's own test binary links no libtorch at run
//! time).

use std::ffi::c_int;

/// oneMKL's vendor check, answered "Intel" so that its kernels follow the CPU's instruction
/// sets (see the module's docs). Called by libtorch's oneMKL, never by this project's code.
#[unsafe(no_mangle)]
pub extern "C" fn mkl_serv_intel_cpu_true() -> c_int {
    1
}

/// Whether oneMKL's vendor check resolves, in this process, to [`mkl_serv_intel_cpu_true`]
/// above (true where the binary exports it), so that its kernels follow the CPU's instruction
/// sets. False in binaries built without the export, where libtorch keeps its own answer.
pub fn cpu_features_choose() -> bool {
    crate::loaded::symbol_address(c"mkl_serv_intel_cpu_true")
        == mkl_serv_intel_cpu_true as extern "C" fn() -> c_int as usize
}
