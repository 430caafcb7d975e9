//! The merge begun while a submission runs.
//!
//! Every run a session commits is written into a scratch copy of the submission's merged file
//! on a thread of its own, right after its commit, while the lanes and the committer go on.
//! After the submission is COMPLETED, [`super::merge`] adds only what this session did not
//! write (runs committed by other sessions or replicas, runs the writer had no room for,
//! episodes given up on) and stores the file, instead of reading every part back and writing
//! every episode then: the HDF5 writing (the library runs its calls on one thread) of episodes
//! that end through a run is done by their end. The parts stay the durable copy; this file is
//! only ever a shortcut, and [`AheadWritten::misfit`] drops it for the full merge whenever it
//! does not hold exactly the committed runs it claims.
//!
//! It never holds up what the agent waits for: the committer hands it only as many runs as its
//! queue has room for ([`MergeAhead::room`]; thousands of episodes that end together are left
//! to the merge after the completion), and its thread runs at a lower priority than the
//! simulation, scoring and storing.

use crate::objects::Objects;
use arena_data::trajectory_file::{self, PreparedEpisode, TrajectoryFile};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

/// Committed runs queued for the writer at most: bounds the memory (about 0.4 MB per
/// two-second episode, compressed on the committer's threads) and the work done for it in the
/// tail of a run whose episodes end together. Past it, runs are left to the final merge.
const QUEUE: usize = 64;

/// The writer's scheduling priority (`nice`): below the simulation's, scoring's and storing's
/// threads, which the agent waits on; it takes the cores they leave idle.
const WRITER_NICE: i32 = 10;

/// A committed run on its way to the file.
struct Committed {
    idx: i64,
    attempt: i64,
    episode: PreparedEpisode,
}

/// The writer of a session's merge ahead (see the module's doc).
pub struct MergeAhead {
    to_writer: Option<mpsc::SyncSender<Committed>>,
    /// Runs handed over and not yet written.
    queued: Arc<AtomicUsize>,
    writer: Option<std::thread::JoinHandle<anyhow::Result<Written>>>,
    path: PathBuf,
}

impl MergeAhead {
    /// Starts the writer of a scratch file for `submission` (created with the first episode).
    pub fn start(objects: &Objects, submission: &str, benchmark: &str) -> Self {
        let path = objects.scratch_file(".ahead.h5");
        let (to_writer, committed) = mpsc::sync_channel::<Committed>(QUEUE);
        let queued = Arc::new(AtomicUsize::new(0));
        let (file, sub, bench) = (path.clone(), submission.to_string(), benchmark.to_string());
        let written = queued.clone();
        // A `file://` store keeps this very file (a hard link) and syncs it; a remote store
        // uploads it and removes it, so its pages need never reach this disk.
        let early_writeback = objects.is_local();
        let writer = std::thread::Builder::new()
            .name("arena-merge-ahead".into())
            .spawn(move || write_ahead(&file, &sub, &bench, committed, &written, early_writeback));
        match writer {
            Ok(writer) => Self {
                to_writer: Some(to_writer),
                queued,
                writer: Some(writer),
                path,
            },
            Err(e) => {
                tracing::warn!("submission {submission}: no merge ahead ({e}); the final merge writes every episode");
                Self {
                    to_writer: None,
                    queued,
                    writer: None,
                    path,
                }
            }
        }
    }

    /// How many more committed runs the writer takes now: the committer prepares (compresses)
    /// no more than this many for it. 0 once the writer failed.
    pub fn room(&self) -> usize {
        match self.to_writer {
            Some(_) => QUEUE.saturating_sub(self.queued.load(Ordering::Acquire)),
            None => 0,
        }
    }

    /// Hands the committed run `attempt` of episode `idx` to the writer without waiting: a run
    /// it has no room for is left to the final merge, which reads it from its part. A writer
    /// that failed takes nothing more (the final merge then writes every episode).
    pub fn add(&mut self, idx: i64, attempt: i64, episode: PreparedEpisode) {
        let Some(to_writer) = &self.to_writer else {
            return;
        };
        self.queued.fetch_add(1, Ordering::AcqRel);
        match to_writer.try_send(Committed { idx, attempt, episode }) {
            Ok(()) => {}
            Err(mpsc::TrySendError::Full(_)) => {
                self.queued.fetch_sub(1, Ordering::AcqRel);
            }
            Err(mpsc::TrySendError::Disconnected(_)) => {
                self.queued.fetch_sub(1, Ordering::AcqRel);
                self.to_writer = None;
            }
        }
    }

    /// Waits for the writer to write what it was given and close the file: what it wrote, or
    /// None when it failed (logged; the file is removed).
    pub fn finish(mut self) -> Option<AheadWritten> {
        self.to_writer = None;
        let writer = self.writer.take()?;
        let started = std::time::Instant::now();
        match writer.join() {
            Ok(Ok(Written { runs, work })) if !runs.is_empty() => Some(AheadWritten {
                path: std::mem::take(&mut self.path),
                runs,
                drain_s: started.elapsed().as_secs_f64(),
                work,
            }),
            Ok(Ok(_)) => None,
            Ok(Err(e)) => {
                tracing::warn!("the merge ahead stopped: {e:#}; the final merge writes every episode");
                None
            }
            Err(_) => {
                tracing::error!("the merge ahead panicked; the final merge writes every episode");
                None
            }
        }
    }
}

impl Drop for MergeAhead {
    /// A session that ends without finishing it (or whose writer failed) leaves no file.
    fn drop(&mut self) {
        self.to_writer = None;
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
        if !self.path.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// What the writer's thread wrote (episode index → attempt) and what writing it cost.
struct Written {
    runs: BTreeMap<i64, i64>,
    work: WriterWork,
}

/// The writer's own time, for an evaluation's breakdown: when the committer waits for the
/// writer (`ahead_wait_s`), this says whether the writer was busy all along and, by its CPU
/// time against its busy wall time, whether it ran on a core of its own or waited for one
/// (or for the disk).
#[derive(Debug, Default, Clone, Copy)]
pub struct WriterWork {
    /// Wall time spent writing runs and closing the file (not waiting for the next run).
    pub busy_s: f64,
    /// The writer thread's CPU time over the whole session.
    pub cpu_s: f64,
}

/// The calling thread's CPU time so far, in seconds (0 where the clock is unavailable).
fn thread_cpu_s() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes the struct it is given.
    match unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } {
        0 => t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9,
        _ => 0.0,
    }
}

/// The writer's thread: one opening of the file for the whole session.
fn write_ahead(
    path: &Path,
    submission: &str,
    benchmark: &str,
    committed: mpsc::Receiver<Committed>,
    queued: &AtomicUsize,
    early_writeback: bool,
) -> anyhow::Result<Written> {
    lower_priority();
    let mut runs = BTreeMap::new();
    let mut work = WriterWork::default();
    let Ok(first) = committed.recv() else {
        return Ok(Written { runs, work }); // nothing committed in this session
    };
    let cpu_at_start = thread_cpu_s();
    let mut busy_since = std::time::Instant::now();
    let mut file = TrajectoryFile::open_or_create(path, submission, benchmark)?;
    let mut batch = file.open_batch()?;
    let mut writeback = early_writeback.then(|| Writeback::open(path)).flatten();
    let mut written = Ok(());
    let mut next = Some(first);
    while let Some(run) = next {
        if let Err(e) = batch.write(&run.episode) {
            written = Err(e);
            break; // the receiver goes: later runs are refused
        }
        runs.insert(run.idx, run.attempt);
        queued.fetch_sub(1, Ordering::AcqRel);
        if let Some(writeback) = &mut writeback {
            writeback.start_if_grown();
        }
        next = committed.try_recv().ok();
        if next.is_none() {
            // Idle until the committer hands over the next run (or the session ends).
            work.busy_s += busy_since.elapsed().as_secs_f64();
            next = committed.recv().ok();
            busy_since = std::time::Instant::now();
        }
    }
    let closed = batch.close();
    work.busy_s += busy_since.elapsed().as_secs_f64();
    work.cpu_s = thread_cpu_s() - cpu_at_start;
    written?;
    closed?;
    Ok(Written { runs, work })
}

/// Lowers the calling thread's priority to [`WRITER_NICE`] (Linux: a thread's own `nice`);
/// left as it is where the system refuses.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: plain system calls on the calling thread's own id.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, WRITER_NICE);
    }
}

/// Bytes the file grows by between two starts of its writeback.
const WRITEBACK_STEP: u64 = 16 << 20;

/// The disk's writing of the file's pages, started while the writer goes on: the store syncs the
/// merged file before it keeps it ([`Objects::put_file`]), and with every page still dirty that
/// sync wrote the whole file at the end, after the last episode (0.15–0.28 s for 1024 two-second
/// episodes on these 2-core machines, the cores idle meanwhile). `SYNC_FILE_RANGE_WRITE` only
/// queues the pages not yet being written and does not wait for them.
struct Writeback {
    file: std::fs::File,
    started_at: u64,
}

impl Writeback {
    /// None where the file cannot be opened again (the writeback is then left to the kernel).
    fn open(path: &Path) -> Option<Self> {
        let file = std::fs::OpenOptions::new().write(true).open(path).ok()?;
        Some(Self { file, started_at: 0 })
    }

    fn start_if_grown(&mut self) {
        let Ok(len) = self.file.metadata().map(|m| m.len()) else {
            return;
        };
        if len < self.started_at + WRITEBACK_STEP {
            return;
        }
        self.started_at = len;
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: a plain system call on a descriptor this struct owns.
            unsafe { libc::sync_file_range(self.file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
        }
    }
}

/// A merge ahead's closed file and the runs in it (episode index → attempt). The file is
/// removed when this is dropped.
#[derive(Debug)]
pub struct AheadWritten {
    path: PathBuf,
    runs: BTreeMap<i64, i64>,
    /// How long [`MergeAhead::finish`] waited for the writer to write what was queued.
    drain_s: f64,
    work: WriterWork,
}

impl AheadWritten {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether it wrote episode `idx`.
    pub fn holds(&self, idx: i64) -> bool {
        self.runs.contains_key(&idx)
    }

    pub fn len(&self) -> usize {
        self.runs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    pub fn drain_s(&self) -> f64 {
        self.drain_s
    }

    pub fn work(&self) -> WriterWork {
        self.work
    }

    /// None when every run it holds is the committed run of a final episode among `rows`
    /// (the attempt the row counts) and its file still holds every one; else why not. (The
    /// file is gone if a replica starting meanwhile took it for abandoned scratch.)
    pub fn misfit(&self, rows: &[crate::storage::EpisodeRow]) -> Option<String> {
        let by_idx: BTreeMap<i64, &crate::storage::EpisodeRow> = rows.iter().map(|r| (r.idx, r)).collect();
        let counted = self.runs.iter().find_map(|(idx, attempt)| match by_idx.get(idx) {
            Some(row) if row.status.is_final() && row.committed_by.is_some() && row.attempts == *attempt => None,
            Some(row) => Some(format!(
                "it holds run {attempt} of episode {idx}, whose row counts run {} ({})",
                row.attempts,
                row.status.as_str()
            )),
            None => Some(format!("it holds episode {idx}, which the submission does not have")),
        });
        counted.or_else(|| match trajectory_file::episode_names(&self.path) {
            Err(e) => Some(format!("its file cannot be read: {e}")),
            Ok(names) => self
                .runs
                .keys()
                .map(|idx| trajectory_file::episode_group_name(*idx as u32))
                .find(|name| names.binary_search(name).is_err())
                .map(|name| format!("its file {} has no {name}", self.path.display())),
        })
    }
}

impl Drop for AheadWritten {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
