//! Whether this server can serve: its database answers, and the file system of its data
//! directory has room for what it writes (the SQLite database, the scratch folder, a `file://`
//! store). Both health checks read it: `GET /api/v1/health` and gRPC's `grpc.health.v1`, so a
//! load balancer of either kind sends traffic to another replica while one cannot serve (they
//! said `ok` / SERVING through a full disk, and gRPC's said SERVING through a database outage
//! and a stop).

use crate::state::AppState;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long the check waits for the database.
const DATABASE_WITHIN: Duration = Duration::from_secs(5);

/// How long the check waits for the data directory's file system.
const DISK_WITHIN: Duration = Duration::from_secs(2);

/// How long a look holds: whoever asks within it gets the same answer.
const LOOK_HOLDS: Duration = Duration::from_secs(1);

/// How often the gRPC health status follows the check.
const GRPC_FOLLOWS_EVERY: Duration = Duration::from_secs(2);

/// Why the server cannot serve: the words for everyone, and the details for the admin.
#[derive(Debug, Clone)]
pub struct Unhealthy {
    pub public: &'static str,
    pub detail: String,
}

/// The last look, shared by every caller (`AppState::health_probe`).
pub type Look = Option<(Instant, Result<(), Unhealthy>)>;

/// The server's health, looked at once a second at most.
pub async fn check(state: &AppState) -> Result<(), Unhealthy> {
    let mut look = state.health_probe.lock().await;
    if let Some((at, seen)) = &*look
        && at.elapsed() < LOOK_HOLDS
    {
        return seen.clone();
    }
    let seen = look_now(state).await;
    *look = Some((Instant::now(), seen.clone()));
    seen
}

async fn look_now(state: &AppState) -> Result<(), Unhealthy> {
    state.storage.ping(DATABASE_WITHIN).await.map_err(|why| Unhealthy {
        public: "the database does not answer",
        detail: format!("the database does not answer: {why}"),
    })?;
    // Below `min_free_disk_mb` its writes are about to fail (an episode's trajectory file
    // alone is a few MB).
    let needed = state.config.min_free_disk_mb.saturating_mul(1 << 20);
    if needed == 0 {
        return Ok(());
    }
    let dir = state.config.data_dir.clone();
    let looked = tokio::time::timeout(DISK_WITHIN, tokio::task::spawn_blocking(move || free_bytes(&dir)));
    let Ok(looked) = looked.await else {
        // A hung mount holds the look: not the check's every later caller.
        return Err(Unhealthy {
            public: "the server's disk does not answer",
            detail: format!(
                "the file system of the data directory {} did not answer within {DISK_WITHIN:?}",
                state.config.data_dir.display()
            ),
        });
    };
    match looked {
        Ok(Ok(free)) if free < needed => Err(Unhealthy {
            public: "the server's disk is full",
            detail: format!(
                "the file system of the data directory {} has {} MB free, under min_free_disk_mb ({})",
                state.config.data_dir.display(),
                free >> 20,
                state.config.min_free_disk_mb
            ),
        }),
        // A file system that cannot say is not taken for a full one.
        Ok(Ok(_)) | Ok(Err(_)) | Err(_) => Ok(()),
    }
}

/// The bytes an unprivileged writer may still use on the file system holding `dir`.
pub fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statvfs(3) fills the zeroed struct; `path` is a valid NUL-terminated string.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stats) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(stats.f_bavail as u64 * stats.f_frsize as u64)
}

/// Keeps the gRPC health service's status (the server's, "", and the agent gateway's) on what
/// [`check`] says, NOT_SERVING once the server's sessions are told to stop; ends with the
/// server's state.
pub fn follow_in_grpc<S: tonic::server::NamedService + 'static>(
    state: std::sync::Weak<AppState>,
    reporter: tonic_health::server::HealthReporter,
) {
    use tonic_health::ServingStatus;
    tokio::spawn(async move {
        let mut shown = None;
        loop {
            let Some(state) = state.upgrade() else { return };
            let serving = !state.session_stop.is_told() && check(&state).await.is_ok();
            drop(state);
            if shown != Some(serving) {
                let status = match serving {
                    true => ServingStatus::Serving,
                    false => ServingStatus::NotServing,
                };
                reporter.set_service_status("", status).await;
                reporter.set_service_status(S::NAME, status).await;
                shown = Some(serving);
            }
            tokio::time::sleep(GRPC_FOLLOWS_EVERY).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_free_space_of_a_folder_is_read() {
        let dir = tempfile::tempdir().unwrap();
        assert!(free_bytes(dir.path()).unwrap() > 0);
        assert!(free_bytes(&dir.path().join("missing")).is_err());
    }
}
