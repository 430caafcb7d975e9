//! Subnormal floats flushed to zero in libtorch's CPU work, for a scope: PyTorch's
//! `torch.set_flush_denormal(True)`, applied to every thread libtorch computes on.
//!
//! Why: an x86 core takes a slow path for each subnormal operand or result (below 1.18e-38 in
//! float32). A training input can be mathematically zero but carry rounding noise, such as the
//! PPO critic's orientation of the anchor body relative to itself (values around 1e-32). Then
//! the products in the first layer's weight gradient land below float32's normal range, and
//! the backward pass of a PPO update took 1.7× as long (issue 41 §3, docs/ppo-tracker.md).
//! Flushing changes only values that small: they become zero, as on most GPUs by default.
//!
//! Flushing is set per thread (the MXCSR register's FTZ and DAZ bits). libtorch computes on the
//! calling thread and on its OpenMP pool (libgomp, which its CPU build and MKL use), so the
//! guard sets the bits on the calling thread and on each thread of that pool. It finds libgomp's
//! `GOMP_parallel` (the call a compiled `#pragma omp parallel` makes) in the loaded process and
//! runs one tiny parallel region with it. Dropping the guard restores every thread's bits as it
//! found them. The simulator's threads (rayon) are never touched: the physics stays IEEE.
//!
//! On machines without these bits (not x86-64), or where libtorch was built without libgomp,
//! the guard changes nothing and [`FlushDenormals::threads`] says so.
//!
//! Tested in `ppo/tests/flush_denormals.rs` (this crate's own test binary has no libtorch
//! run-time path).

/// While alive, libtorch's CPU threads flush subnormals to zero; see the module's docs.
#[derive(Debug)]
pub struct FlushDenormals {
    /// The calling thread's MXCSR before (restored on drop); `None` where nothing was set.
    saved: Option<u32>,
    /// Threads of libtorch's OpenMP pool that were set (0: only the calling thread).
    pool_threads: u32,
}

/// MXCSR's flush-to-zero (results) and denormals-are-zero (operands) bits.
#[cfg(target_arch = "x86_64")]
const FTZ_DAZ: u32 = 0x8000 | 0x0040;

impl FlushDenormals {
    /// Flushes on the calling thread and on the `pool_threads` threads of libtorch's OpenMP
    /// pool (pass `tch::get_num_threads()`); the pool's threads are those it will use.
    pub fn new(pool_threads: usize) -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            let saved = mxcsr::get();
            mxcsr::set(saved | FTZ_DAZ);
            let pool_threads = u32::try_from(pool_threads.max(1)).unwrap_or(u32::MAX);
            let set = gomp::on_each_thread(pool_threads, gomp::Bits::Set);
            FlushDenormals {
                saved: Some(saved),
                pool_threads: if set { pool_threads } else { 0 },
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = pool_threads;
            FlushDenormals {
                saved: None,
                pool_threads: 0,
            }
        }
    }

    /// Whether the calling thread flushes, and on how many threads of libtorch's pool.
    pub fn threads(&self) -> (bool, u32) {
        (self.saved.is_some(), self.pool_threads)
    }
}

impl Drop for FlushDenormals {
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        if let Some(saved) = self.saved {
            if self.pool_threads > 0 {
                gomp::on_each_thread(self.pool_threads, gomp::Bits::Restore(saved & FTZ_DAZ));
            }
            mxcsr::set(saved);
        }
    }
}

/// Whether the calling thread flushes subnormals now (both bits set).
pub fn flushing_here() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        mxcsr::get() & FTZ_DAZ == FTZ_DAZ
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod mxcsr {
    pub fn get() -> u32 {
        let mut value = 0u32;
        // SAFETY: stmxcsr stores the 32-bit register into the local it is given.
        unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut value, options(nostack, preserves_flags)) };
        value
    }

    pub fn set(value: u32) {
        // SAFETY: ldmxcsr loads a value read from the register with only the FTZ and DAZ bits
        // changed (both valid on every x86-64 with SSE2), so no reserved bit is set.
        unsafe { std::arch::asm!("ldmxcsr [{}]", in(reg) &value, options(nostack, preserves_flags)) };
    }
}

#[cfg(target_arch = "x86_64")]
mod gomp {
    use super::{FTZ_DAZ, mxcsr};
    use std::ffi::{c_uint, c_void};

    /// What each pool thread does with its FTZ and DAZ bits.
    #[derive(Clone, Copy)]
    pub enum Bits {
        Set,
        /// Back to these (the bits the calling thread had before).
        Restore(u32),
    }

    type ParallelFn = unsafe extern "C" fn(extern "C" fn(*mut c_void), *mut c_void, c_uint, c_uint);

    extern "C" fn apply(data: *mut c_void) {
        // SAFETY: `data` points at the caller's `Bits`, alive until GOMP_parallel returns.
        let bits = unsafe { *(data as *const Bits) };
        let value = mxcsr::get();
        mxcsr::set(match bits {
            Bits::Set => value | FTZ_DAZ,
            Bits::Restore(old) => (value & !FTZ_DAZ) | old,
        });
    }

    /// Runs `apply` on each of `threads` threads of libgomp's pool (the calling thread
    /// included, as OpenMP's master). False where libgomp is not loaded.
    pub fn on_each_thread(threads: u32, bits: Bits) -> bool {
        // The symbol's address, looked up once (0: absent).
        static SYMBOL: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let symbol = *SYMBOL.get_or_init(|| crate::loaded::symbol_address(c"GOMP_parallel"));
        if symbol == 0 {
            return false;
        }
        let symbol = symbol as *mut c_void;
        // SAFETY: GOMP_parallel has this signature in every libgomp (GCC's OpenMP ABI:
        // fn, data, num_threads, flags); `apply` only touches its own thread's MXCSR.
        let parallel: ParallelFn = unsafe { std::mem::transmute::<*mut c_void, ParallelFn>(symbol) };
        let mut bits = bits;
        // SAFETY: see above; `bits` outlives the call, which returns when every thread is done.
        unsafe { parallel(apply, (&mut bits as *mut Bits).cast(), threads, 0) };
        true
    }
}
