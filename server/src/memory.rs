//! How the server's process holds on to memory it freed (glibc's allocator; elsewhere nothing).
//!
//! A load walkthrough (35 agents a round, ten rounds) found no leak, yet the resident size
//! climbed from 87 MB to 527 MB while the live allocations stayed near 190 MB: every lane
//! builds its simulators (about 15.7 MB of `mjData` per env of the G1), glibc's dynamic mmap
//! threshold rises past that size after the first is freed, and from then on each lane's
//! blocks are carved from the per-thread arenas, whose touched pages stay resident once freed.
//! An idle server trims its heap (`malloc_trim`: 527 MB → 110 MB there; in another run 343 MB
//! given back in 88 ms on 2 cores). A fixed mmap threshold (`MALLOC_MMAP_THRESHOLD_`, 145–184 MB over the same rounds) is
//! left to the operator: each lane would then fault its simulators' pages in afresh, and these
//! VMs write first-touched memory at a thirtieth of the rate of reused memory ("Trajectory
//! files" in docs/server.md).

use crate::state::AppState;
use std::sync::Weak;
use std::time::Duration;

/// How often an idle server gives its free heap pages back.
const TRIM_EVERY: Duration = Duration::from_secs(60);

/// Gives free heap pages back to the system; the bytes of resident memory it released (0 where
/// the C library has no `malloc_trim`).
pub fn trim() -> u64 {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let before = resident_bytes();
        // SAFETY: malloc_trim only releases free memory of the allocator's own arenas.
        unsafe { libc::malloc_trim(0) };
        before.saturating_sub(resident_bytes())
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        0
    }
}

/// This process's resident memory (bytes), from /proc; 0 where it cannot be read.
pub fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page_size())
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 { size as u64 } else { 4096 }
}

/// Every [`TRIM_EVERY`], while the server runs no submission session and no hosted run, trims
/// the heap: once when it becomes idle, and again whenever its resident memory has grown by
/// [`REGROWTH`] since (what practice sessions and dataset exports, which an idle server serves,
/// leave behind: they left 250 MB in place for good when only an idle spell's start trimmed).
pub async fn trim_when_idle(state: Weak<AppState>) {
    let mut trimmed_at: Option<u64> = None;
    loop {
        tokio::time::sleep(TRIM_EVERY).await;
        let Some(state) = state.upgrade() else { return };
        let idle = state.attached.is_empty() && state.hosted_runs.lock().expect("hosted runs").is_empty();
        drop(state);
        if !idle {
            trimmed_at = None;
            continue;
        }
        if trimmed_at.is_some_and(|after| resident_bytes() < after.saturating_add(REGROWTH)) {
            continue;
        }
        if let Ok(released) = tokio::task::spawn_blocking(trim).await
            && released > 0
        {
            tracing::debug!(
                "idle: gave {:.1} MB of freed memory back to the system",
                released as f64 / 1e6
            );
        }
        trimmed_at = Some(resident_bytes());
    }
}

/// How much an idle server's resident memory grows before it trims again.
const REGROWTH: u64 = 32 << 20;

#[cfg(test)]
mod tests {
    #[test]
    fn resident_memory_is_read_from_proc() {
        // Within 10 % of what /proc/self/status says (other tests allocate meanwhile).
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let vm_rss_kb: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        let ours = super::resident_bytes() as f64 / 1024.0;
        assert!(
            (ours - vm_rss_kb).abs() < 0.1 * vm_rss_kb,
            "{ours} kB against VmRSS {vm_rss_kb} kB"
        );
    }
}
