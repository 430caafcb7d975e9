//! Cache prefetch hints for the per-env loops around each step, whose memory is cold by then:
//! after it, the GPU worker's freshly written rows, each env's slot, its observation rows
//! (together about 8 kB an env, 30 MB a step at 4096 envs; the hardware's stream prefetch
//! follows few of the dozen streams an env reads and writes); before it, the slot fields each
//! env's command reads. Hints only: they never fault, change no value, and do nothing off
//! x86-64.

#[cfg(target_arch = "x86_64")]
const LINE: usize = 64;

/// Asks for the cache lines of `bytes` bytes from `start`, to be read.
#[inline]
pub(crate) fn for_read(start: *const u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    lines::<{ std::arch::x86_64::_MM_HINT_T0 }>(start, bytes);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, bytes);
}

/// Asks for the cache lines of `bytes` bytes from `start`, to be written.
#[inline]
pub(crate) fn for_write(start: *const u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    lines::<{ std::arch::x86_64::_MM_HINT_ET0 }>(start, bytes);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, bytes);
}

/// One prefetch with `HINT` per cache line the range touches (from the line of its first byte
/// to that of its last: a range that does not start on a line boundary reaches one line more
/// than its length in lines).
#[cfg(target_arch = "x86_64")]
#[inline]
fn lines<const HINT: i32>(start: *const u8, bytes: usize) {
    if bytes == 0 {
        return;
    }
    let skew = start as usize % LINE;
    let first = start.wrapping_sub(skew);
    for offset in (0..skew + bytes).step_by(LINE) {
        // SAFETY: a prefetch is a hint that never faults, whatever the address.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<HINT>(first.wrapping_add(offset).cast());
        }
    }
}
