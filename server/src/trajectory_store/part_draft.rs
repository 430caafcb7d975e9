//! Parts written while their episodes run.
//!
//! 1024 two-second episodes that end together left 421 MB of parts to write after their last
//! step: about 1.2–1.5 s of the evaluation on 2 cores, the disk busy and the cores nearly idle
//! (docs/gpu-measurements.md, "Where the served tail goes"). Here a lane hands each running episode's
//! rows, [`BLOCK_ROWS`] or more at a time, to a writer thread that appends them to the episode's
//! part under the store's staging name, past the page cache, while the physics runs
//! ([`Drafts::spill`]). When the episode ends the committer writes the rows left and the
//! episode's fields, syncs the file and gives it its name ([`PartDraft::finish`]), as it does a
//! part written whole; the file is the block layout of [`arena_data::episode_part`], so either
//! way the part reads back the same.
//!
//! A draft holds no open file between writes (each block opens, writes and closes it): 4096
//! running episodes would otherwise hold 4096 descriptors, which the server counts on for its
//! connections.
//!
//! A draft is only a head start. Where one cannot be begun (a remote store, a filesystem that
//! refuses `O_DIRECT`), where a write fails, or where the finished record does not continue the
//! rows written, the part is written whole at the end as before; a draft dropped unfinished
//! (its episode given back, its lane ended) removes its file. A killed server's drafts carry the
//! store's staging names, which listings skip and a starting server sweeps.

use super::part_file::{self, DIRECT_ALIGN, DirectBuffer};
use crate::objects::{self, Objects};
use anyhow::Context;
use arena_data::episode_part::{self, MAGIC};
use arena_data::trajectory::{OPTIONAL_DATASETS, TrajectoryRows};
use arena_data::trajectory_file::EpisodeRecord;
use rayon::prelude::*;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, mpsc};

/// Rows a running episode holds before they are handed over: 16 rows of about 4.1 kB, one
/// write of 68 kB.
pub const BLOCK_ROWS: usize = 16;

/// Blocks handed over and not yet written, at most (memory: about 17 MB of 16-row blocks). A
/// lane that finds none free keeps its rows for a later step, or for the end.
const IN_FLIGHT: usize = 256;

/// A block's buffer is kept for the next one up to this size.
const KEPT_BLOCK_BYTES: usize = 1 << 20;

/// The part file a draft writes (under its staging name), shared with the writer thread.
struct DraftFile {
    path: PathBuf,
    progress: Mutex<Progress>,
    written: Condvar,
}

#[derive(Default)]
struct Progress {
    /// Blocks handed to the writer and not yet written.
    pending: usize,
    /// The first write that failed.
    failed: Option<String>,
    /// The draft was dropped unfinished: its file is removed, and a first block still on its
    /// way creates none.
    abandoned: bool,
}

impl DraftFile {
    /// The file, opened for writing past the page cache (`create`: a new one).
    #[cfg(target_os = "linux")]
    fn open(path: &std::path::Path, create: bool) -> std::io::Result<std::fs::File> {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(create)
            .custom_flags(libc::O_DIRECT)
            .open(path)
    }

    #[cfg(not(target_os = "linux"))]
    fn open(_path: &std::path::Path, _create: bool) -> std::io::Result<std::fs::File> {
        Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
    }

    /// Waits for the blocks handed over; the first write that failed, if one did.
    fn wait_written(&self) -> Result<(), String> {
        let mut progress = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        while progress.pending > 0 {
            progress = self.written.wait(progress).unwrap_or_else(|e| e.into_inner());
        }
        progress.failed.clone().map_or(Ok(()), Err)
    }
}

/// One block on its way to the disk.
struct Job {
    file: Arc<DraftFile>,
    at: u64,
    block: DirectBuffer,
}

/// The writer thread and the blocks' buffers.
struct Writer {
    jobs: Mutex<mpsc::Sender<Job>>,
    buffers: Mutex<Buffers>,
}

#[derive(Default)]
struct Buffers {
    free: Vec<DirectBuffer>,
    /// Buffers handed out and not back.
    out: usize,
}

impl Writer {
    /// Up to `n` empty buffers, as many as [`IN_FLIGHT`] leaves.
    fn take(&self, n: usize) -> Vec<DirectBuffer> {
        let mut buffers = self.buffers.lock().unwrap_or_else(|e| e.into_inner());
        let k = n.min(IN_FLIGHT.saturating_sub(buffers.out));
        buffers.out += k;
        (0..k).map(|_| buffers.free.pop().unwrap_or_default()).collect()
    }

    fn give_back(&self, mut block: DirectBuffer) {
        let mut buffers = self.buffers.lock().unwrap_or_else(|e| e.into_inner());
        buffers.out = buffers.out.saturating_sub(1);
        if block.capacity() <= KEPT_BLOCK_BYTES {
            block.clear();
            buffers.free.push(block);
        }
    }
}

/// The server's one writer of drafts, started when first needed; `None` where its thread could
/// not be started (then every part is written whole).
fn writer() -> Option<&'static Writer> {
    static WRITER: std::sync::OnceLock<Option<Writer>> = std::sync::OnceLock::new();
    WRITER
        .get_or_init(|| {
            let (jobs, incoming) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("arena-part-drafts".into())
                .spawn(move || {
                    for job in incoming {
                        write_block(job);
                    }
                })
                .inspect_err(|e| tracing::warn!("no thread for writing parts while episodes run ({e})"))
                .ok()?;
            Some(Writer {
                jobs: Mutex::new(jobs),
                buffers: Mutex::default(),
            })
        })
        .as_ref()
}

/// The writer thread's work: one block at its offset. The first block creates the file, here
/// rather than on the lane: 1024 files created by a lane's threads at once kept them spinning on
/// the folder's lock (2 cores: 0.6–0.8 s of a 1024-episode run in the lane's hand-over).
fn write_block(job: Job) {
    use std::os::unix::fs::FileExt;
    let Job { file, at, mut block } = job;
    let opened = match at {
        // Under the lock, so that a draft dropped meanwhile either removes the file created
        // or finds none created.
        0 => {
            let progress = file.progress.lock().unwrap_or_else(|e| e.into_inner());
            match progress.abandoned {
                true => Err(std::io::Error::other("the draft was dropped")),
                false => DraftFile::open(&file.path, true),
            }
        }
        _ => DraftFile::open(&file.path, false),
    };
    let written = opened.and_then(|f| f.write_all_at(block.padded(), at));
    if let Some(writer) = writer() {
        writer.give_back(block);
    }
    let mut progress = file.progress.lock().unwrap_or_else(|e| e.into_inner());
    progress.pending -= 1;
    if let Err(e) = written
        && progress.failed.is_none()
    {
        progress.failed = Some(format!("writing rows at byte {at}: {e}"));
    }
    drop(progress);
    file.written.notify_all();
}

/// A part begun while its episode runs: the rows handed over so far, in blocks.
pub struct PartDraft {
    shared: Arc<DraftFile>,
    staged: PathBuf,
    target: PathBuf,
    /// Where the next block starts: a multiple of [`DIRECT_ALIGN`].
    next_at: u64,
    /// Rows handed over.
    rows: usize,
    /// Which optional arrays the blocks hold filled (from the first block).
    filled: [bool; OPTIONAL_DATASETS.len()],
    named: bool,
}

impl std::fmt::Debug for PartDraft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartDraft")
            .field("staged", &self.staged)
            .field("rows", &self.rows)
            .finish_non_exhaustive()
    }
}

impl Drop for PartDraft {
    fn drop(&mut self) {
        if !self.named {
            let mut progress = self.shared.progress.lock().unwrap_or_else(|e| e.into_inner());
            progress.abandoned = true;
            let _ = std::fs::remove_file(&self.staged);
        }
    }
}

/// Whether the filesystem of folder `dir` (created if missing) takes files written past the
/// page cache: a file created there with `O_DIRECT`, then removed. Errors other than a refusal
/// of `O_DIRECT` are errors.
fn takes_direct_writes(dir: &std::path::Path) -> anyhow::Result<bool> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let probe = objects::staging_name(&dir.join(format!("direct-probe-{}", std::process::id())));
    let created = DraftFile::open(&probe, true);
    let _ = std::fs::remove_file(&probe);
    match created {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) || e.kind() == std::io::ErrorKind::Unsupported => Ok(false),
        Err(e) => Err(anyhow::Error::from(e).context(format!("creating {}", probe.display()))),
    }
}

impl PartDraft {
    /// A draft of the part `target`, under its staging name; its file is created by its first
    /// block ([`write_block`]) in a folder [`takes_direct_writes`] said yes for.
    fn begin(target: PathBuf) -> PartDraft {
        let staged = objects::staging_name(&target);
        PartDraft {
            shared: Arc::new(DraftFile {
                path: staged.clone(),
                progress: Mutex::default(),
                written: Condvar::new(),
            }),
            staged,
            target,
            next_at: 0,
            rows: 0,
            filled: [false; OPTIONAL_DATASETS.len()],
            named: false,
        }
    }

    /// Serialises the rows of `rows` not handed over yet as the next block, into `block`.
    fn serialise(&mut self, rows: &TrajectoryRows, block: &mut DirectBuffer) -> Result<(), episode_part::PartError> {
        block.clear();
        let mut at = self.next_at;
        if at == 0 {
            std::io::Write::write_all(block, MAGIC)?;
            at = MAGIC.len() as u64;
        }
        let next = episode_part::write_block(rows, self.rows..rows.len(), at, DIRECT_ALIGN as u64, block)?;
        if self.rows == 0 {
            self.filled = rows.optional_arrays().map(|a| !a.is_empty());
        }
        self.next_at = next;
        self.rows = rows.len();
        Ok(())
    }

    /// The file this draft becomes.
    pub fn target(&self) -> &std::path::Path {
        &self.target
    }

    /// Completes the part with `record` (the finished episode, whose first rows are those
    /// handed over): the rows left and the fields, then the file synced and renamed to its
    /// target. An error leaves no file; the caller writes the part whole instead.
    pub fn finish(mut self, record: &EpisodeRecord) -> anyhow::Result<()> {
        use std::os::unix::fs::FileExt;
        self.shared
            .wait_written()
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("writing {} while its episode ran", self.staged.display()))?;
        let rows = record.num_rows();
        anyhow::ensure!(
            rows >= self.rows,
            "episode {} ended with {rows} rows, {} were written while it ran",
            record.episode,
            self.rows
        );
        let filled = record.rows.optional_arrays().map(|a| !a.is_empty());
        anyhow::ensure!(
            self.rows == 0 || filled == self.filled,
            "episode {}'s optional arrays are not those written while it ran",
            record.episode
        );
        episode_part::check(record)?;
        let at = self.next_at;
        part_file::with_buffer(|buffer| -> anyhow::Result<()> {
            let mut start = at;
            if at == 0 {
                std::io::Write::write_all(buffer, MAGIC)?;
                start = MAGIC.len() as u64;
            }
            episode_part::write_block(&record.rows, self.rows..rows, start, 1, buffer)?;
            episode_part::write_end(record, buffer)?;
            let len = buffer.len() as u64;
            let file = DraftFile::open(&self.staged, false)?;
            file.write_all_at(buffer.padded(), at)?;
            file.set_len(at + len)?;
            // The bytes are on the device already (O_DIRECT); this makes the length so.
            file.sync_data()?;
            Ok(())
        })
        .with_context(|| format!("completing {}", self.staged.display()))?;
        std::fs::rename(&self.staged, &self.target)
            .with_context(|| format!("renaming {} to {}", self.staged.display(), self.target.display()))?;
        self.named = true;
        Ok(())
    }
}

/// A running episode's draft, as its lane keeps it.
#[derive(Default)]
pub enum Draft {
    /// Nothing handed over yet.
    #[default]
    NotBegun,
    Writing(PartDraft),
    /// This episode's part is written whole at the end (its draft could not be begun).
    Off,
}

impl Draft {
    /// The draft to finish, if one was begun.
    pub fn take(&mut self) -> Option<PartDraft> {
        match std::mem::take(self) {
            Draft::Writing(d) => Some(d),
            _ => None,
        }
    }

    fn rows(&self) -> Option<usize> {
        match self {
            Draft::NotBegun => Some(0),
            Draft::Writing(d) => Some(d.rows),
            Draft::Off => None,
        }
    }
}

/// One running episode, offered to [`Drafts::spill`].
pub struct Spillable<'a> {
    pub draft: &'a mut Draft,
    pub idx: i64,
    pub attempt: i64,
    pub rows: &'a TrajectoryRows,
}

/// What a lane needs to write its episodes' parts while they run: a `file://` store whose
/// parts go past the page cache, and the writer.
pub struct Drafts<'a> {
    objects: &'a Objects,
    submission: &'a str,
    writer: &'static Writer,
}

impl<'a> Drafts<'a> {
    /// `None` where parts are written whole at the end: a remote store, parts through the page
    /// cache, or no writer thread.
    pub fn for_store(objects: &'a Objects, submission: &'a str) -> Option<Self> {
        (objects.is_local() && objects.direct_parts()).then_some(())?;
        let folder = objects.local_path(&objects::episode_parts_prefix(submission))?;
        match takes_direct_writes(&folder) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                tracing::warn!("{e:#}; the parts of this session are written when their episodes end");
                return None;
            }
        }
        Some(Drafts {
            objects,
            submission,
            writer: writer()?,
        })
    }

    /// Hands over the rows of the episodes in `running` that hold [`BLOCK_ROWS`] or more not
    /// handed over yet (as many as buffers are free; the rest wait for a later call),
    /// serialised on every core; returns how many blocks went.
    pub fn spill(&self, running: Vec<Spillable<'_>>) -> usize {
        let mut due: Vec<Spillable<'_>> = running
            .into_iter()
            .filter(|s| s.draft.rows().is_some_and(|done| s.rows.len() >= done + BLOCK_ROWS))
            .collect();
        if due.is_empty() {
            return 0;
        }
        let buffers = self.writer.take(due.len());
        due.truncate(buffers.len());
        let jobs: Vec<Option<Job>> = due
            .into_par_iter()
            .zip(buffers)
            .map(|(s, mut block)| match self.serialise(s, &mut block) {
                Some((file, at)) => Some(Job { file, at, block }),
                None => {
                    self.writer.give_back(block);
                    None
                }
            })
            .collect();
        let jobs: Vec<Job> = jobs.into_iter().flatten().collect();
        let sent = jobs.len();
        let sender = self.writer.jobs.lock().unwrap_or_else(|e| e.into_inner());
        for job in jobs {
            if let Err(mpsc::SendError(lost)) = sender.send(job) {
                // The writer thread is gone: the draft's wait reports it and the part is
                // written whole.
                let mut progress = lost.file.progress.lock().unwrap_or_else(|e| e.into_inner());
                progress.pending -= 1;
                progress
                    .failed
                    .get_or_insert_with(|| "the drafts' writer thread stopped".into());
            }
        }
        sent
    }

    /// Begins `s`'s draft where needed and serialises its next block into `block`: the draft's
    /// file and the block's offset, or `None` (the draft is then off, its part written whole).
    fn serialise(&self, s: Spillable<'_>, block: &mut DirectBuffer) -> Option<(Arc<DraftFile>, u64)> {
        if matches!(s.draft, Draft::NotBegun) {
            let key = objects::episode_part_key(self.submission, s.idx, s.attempt);
            let target = self.objects.local_path(&key)?;
            *s.draft = Draft::Writing(PartDraft::begin(target));
        }
        let Draft::Writing(draft) = s.draft else { return None };
        let at = draft.next_at;
        if let Err(e) = draft.serialise(s.rows, block) {
            tracing::warn!("episode {}: {e}; its part is written when it ends", s.idx);
            *s.draft = Draft::Off;
            return None;
        }
        let file = draft.shared.clone();
        file.progress.lock().unwrap_or_else(|e| e.into_inner()).pending += 1;
        Some((file, at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store whose folder takes `O_DIRECT` (a disk's filesystem, not tmpfs), or `None`.
    fn direct_store() -> Option<(tempfile::TempDir, Objects)> {
        let dir = tempfile::tempdir().ok()?;
        let objects = Objects::open("", dir.path(), std::time::Duration::from_secs(1)).ok()?;
        takes_direct_writes(dir.path()).ok()?.then_some((dir, objects))
    }

    /// `record`'s first `n` rows, the actions one row ahead as a running episode's are.
    fn running(record: &EpisodeRecord, n: usize) -> TrajectoryRows {
        let mut rows = record.rows.clone();
        let widths = arena_data::trajectory::DATASETS.iter().map(|(_, w)| *w);
        for (v, w) in rows.arrays_mut().into_iter().zip(widths) {
            v.truncate(n * w);
        }
        rows.actions = record.rows.actions[..((n + 1) * 29).min(record.rows.actions.len())].to_vec();
        for v in rows.optional_arrays_mut() {
            v.truncate(n * 29);
        }
        rows
    }

    #[test]
    fn a_part_drafted_while_its_episode_runs_reads_back_as_the_record() {
        let Some((_dir, objects)) = direct_store() else {
            eprintln!("skipped: the temporary folder's filesystem refuses O_DIRECT");
            return;
        };
        let drafts = Drafts::for_store(&objects, "sub").expect("a local store with direct parts");
        let mut record = crate::trajectory_store::tests::record(3, 41);
        record.rows.torques = (0..41 * 29).map(|v| v as f64).collect();
        let mut draft = Draft::default();
        let mut handed = Vec::new();
        // Rows arrive one at a time; a block goes at 16 rows, 32, then none (40 < 48).
        for n in 1..=40 {
            let rows = running(&record, n);
            let spill = Spillable {
                draft: &mut draft,
                idx: 3,
                attempt: 1,
                rows: &rows,
            };
            handed.push(drafts.spill(vec![spill]));
        }
        assert_eq!(handed.iter().sum::<usize>(), 2, "{handed:?}");
        assert_eq!((handed[15], handed[31]), (1, 1));
        let draft = draft.take().expect("begun");
        let target = draft.target().to_path_buf();
        assert_eq!(
            target,
            objects.local_path(&objects::episode_part_key("sub", 3, 1)).unwrap()
        );
        draft.finish(&record).unwrap();
        let bytes = std::fs::read(&target).unwrap();
        assert_eq!(episode_part::read(&bytes).unwrap(), record);
        // No staging file left beside it.
        let left: Vec<_> = std::fs::read_dir(target.parent().unwrap()).unwrap().collect();
        assert_eq!(left.len(), 1);
    }

    #[test]
    fn a_draft_that_cannot_be_finished_or_is_dropped_leaves_no_file() {
        let Some((_dir, objects)) = direct_store() else {
            eprintln!("skipped: the temporary folder's filesystem refuses O_DIRECT");
            return;
        };
        let drafts = Drafts::for_store(&objects, "sub").unwrap();
        let record = crate::trajectory_store::tests::record(5, 20);
        let folder = objects.local_path(&objects::episode_parts_prefix("sub")).unwrap();
        let begun = |rows: &TrajectoryRows| {
            let mut draft = Draft::default();
            let spill = Spillable {
                draft: &mut draft,
                idx: 5,
                attempt: 1,
                rows,
            };
            assert_eq!(drafts.spill(vec![spill]), 1);
            draft.take().unwrap()
        };
        // Dropped unfinished (its episode given back).
        drop(begun(&running(&record, 17)));
        assert_eq!(std::fs::read_dir(&folder).unwrap().count(), 0);
        // A finished record that does not continue what was written (fewer rows).
        let short = crate::trajectory_store::tests::record(5, 10);
        let err = begun(&running(&record, 17)).finish(&short).unwrap_err();
        assert!(
            format!("{err:#}").contains("ended with 10 rows, 17 were written"),
            "{err:#}"
        );
        assert_eq!(std::fs::read_dir(&folder).unwrap().count(), 0);
        // Its staging file swept away meanwhile (a starting server's sweep).
        let draft = begun(&running(&record, 17));
        draft.shared.wait_written().unwrap();
        std::fs::remove_file(&draft.staged).unwrap();
        assert!(draft.finish(&record).is_err());
        assert_eq!(std::fs::read_dir(&folder).unwrap().count(), 0);
        // Dropped before the writer took its first block, which then creates no file.
        let draft = PartDraft::begin(folder.join("late.part"));
        let (shared, staged) = (draft.shared.clone(), draft.staged.clone());
        shared.progress.lock().unwrap().pending += 1;
        drop(draft);
        let block = drafts.writer.take(1).pop().unwrap();
        write_block(Job {
            file: shared.clone(),
            at: 0,
            block,
        });
        assert!(shared.wait_written().is_err(), "the block is not written");
        assert!(!staged.exists());
        assert_eq!(std::fs::read_dir(&folder).unwrap().count(), 0);
    }
}
