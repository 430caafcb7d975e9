//! A submission's trajectories in the object store ([`crate::objects`]).
//!
//! While a submission runs, each finished run of an episode is its own small file
//! (`trajectories/{submission}/ep{idx}-a{attempt}.part`, the flat format of
//! [`arena_data::episode_part`]), written by whichever replica ran it *before* its result is
//! committed: a committed episode always has its trajectory, and the attempt in the key is the
//! one the database row counts, so runs that were not committed (a lease lost, a replica killed
//! after the upload) are never read. Parts are written on every core at once (no HDF5 in them).
//! When the submission completes, the committed runs are written, in episode order, into one
//! HDF5 file `trajectories/{submission}.h5` (the format of `arena_data::trajectory_file`),
//! the compression on every core and the HDF5 calls on one, and the parts are deleted. Runs an
//! older server stored as one-episode HDF5 files (`….h5` beside the parts) are copied over.

use crate::objects::{self, ObjectError, Objects};
use crate::storage::EpisodeRow;
use anyhow::Context;
use arena_data::episode_part;
use arena_data::trajectory_file::{self, EpisodeRecord, PreparedEpisode, TrajectoryFile};
use rayon::prelude::*;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod blocking_reader;
pub mod merge_ahead;
pub mod part_draft;
mod part_file;
use blocking_reader::BlockingRuntime;
pub use blocking_reader::StoredEpisodes;
pub use merge_ahead::{AheadWritten, MergeAhead};

/// Writes one episode run as a part file in the scratch folder and returns its path; blocking,
/// and safe to run for many episodes at once (the committer does so on every core).
pub fn write_part(objects: &Objects, record: &EpisodeRecord) -> anyhow::Result<PathBuf> {
    let scratch = objects.scratch_file(".part");
    // Not synced here: storing it syncs what it places (`Objects::put_file`).
    part_file::write(&scratch, record, objects.direct_parts(), false).map(|_| scratch)
}

/// A part written by [`write_part_for`]: already stored, or a scratch file for [`put_part`].
pub enum WrittenPart {
    Stored,
    Scratch(PathBuf),
}

/// Writes run `attempt` of episode `idx` as its part: straight into a `file://` store (under a
/// temporary name in the key's folder, renamed once complete, as the store's own writes are),
/// else, or if that fails (then logged), into the scratch folder for [`put_part`], which
/// retries. Blocking, and safe to run for many episodes at once: the direct write saves the
/// committer a scratch file, a link and a removal per run, one after the other.
///
/// `draft`: the part as far as it was written while the episode ran ([`part_draft`]), finished
/// here; should that fail (logged), the part is written whole.
///
/// A write that fails (a full disk, a folder that cannot be written) is tried again with
/// backoff for `object_store_retry_s`, as the store's own writes are: space that comes back in
/// that time costs the episode nothing (it had been a server fault at once, FAILED at the
/// third when the agent reconnected quickly).
pub fn write_part_for(
    objects: &Objects,
    submission: &str,
    idx: i64,
    attempt: i64,
    record: &EpisodeRecord,
    draft: Option<part_draft::PartDraft>,
) -> anyhow::Result<WrittenPart> {
    let mut draft = draft;
    objects.retrying_blocking(&format!("writing the file of episode {idx}"), || {
        write_part_once(objects, submission, idx, attempt, record, draft.take())
    })
}

fn write_part_once(
    objects: &Objects,
    submission: &str,
    idx: i64,
    attempt: i64,
    record: &EpisodeRecord,
    draft: Option<part_draft::PartDraft>,
) -> anyhow::Result<WrittenPart> {
    if let Some(target) = objects.local_path(&objects::episode_part_key(submission, idx, attempt)) {
        if let Some(draft) = draft.filter(|d| d.target() == target) {
            match draft.finish(record) {
                Ok(()) => return Ok(WrittenPart::Stored),
                Err(e) => tracing::warn!("episode {idx}: {e:#}; writing its part whole instead"),
            }
        }
        match write_in_place(&target, record, objects.direct_parts()) {
            Ok(()) => return Ok(WrittenPart::Stored),
            Err(e) => tracing::warn!("{e:#}; writing it through the scratch folder instead"),
        }
    }
    write_part(objects, record).map(WrittenPart::Scratch)
}

/// Writes `target` by way of a temporary name beside it (`#` and a number: the store's own
/// staging names, which its listings skip).
fn write_in_place(target: &Path, record: &EpisodeRecord, direct: bool) -> anyhow::Result<()> {
    if let Some(dir) = target.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let staged = objects::staging_name(target);
    // Synced (its bytes and length) before its name is: the commit that follows says it is
    // stored; the folder's entries are synced once per batch (`sync_stored_parts`).
    part_file::write(&staged, record, direct, true)?;
    std::fs::rename(&staged, target)
        .with_context(|| format!("renaming {} to {}", staged.display(), target.display()))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&staged);
        })
}

/// Syncs the folder entries of the parts [`write_part_for`] renamed into a `file://` store's
/// submission folder (and that folder's own entry): once per committed batch, before the
/// commit that says they are stored. Nothing to do for another store.
pub fn sync_stored_parts(objects: &Objects, submission: &str) -> std::io::Result<()> {
    let Some(folder) = objects.local_path(&objects::episode_parts_prefix(submission)) else {
        return Ok(());
    };
    objects::sync_dir(&folder)?;
    folder.parent().map_or(Ok(()), objects::sync_dir)
}

/// Stores a part written by [`write_part`] as run `attempt` of episode `idx`, under
/// [`objects::episode_part_key`]; the scratch file is removed whatever happens.
pub async fn put_part(
    objects: &Objects,
    submission: &str,
    idx: i64,
    attempt: i64,
    scratch: &Path,
) -> anyhow::Result<()> {
    let key = objects::episode_part_key(submission, idx, attempt);
    let stored = objects.put_file(&key, scratch).await;
    let _ = tokio::fs::remove_file(scratch).await;
    Ok(stored?)
}

/// [`write_part_for`] then, for a scratch file, [`put_part`], for one episode.
pub async fn store_episode(
    objects: &Objects,
    submission: &str,
    attempt: i64,
    record: EpisodeRecord,
) -> anyhow::Result<()> {
    let idx = record.episode as i64;
    let (objects2, submission2) = (objects.clone(), submission.to_string());
    let written =
        tokio::task::spawn_blocking(move || write_part_for(&objects2, &submission2, idx, attempt, &record, None))
            .await
            .context("the trajectory writer stopped")??;
    match written {
        WrittenPart::Stored => Ok(()),
        WrittenPart::Scratch(scratch) => put_part(objects, submission, idx, attempt, &scratch).await,
    }
}

/// A stored run of an episode: a part, or a one-episode HDF5 file from an older server.
enum StoredRun {
    Part(PathBuf),
    Hdf5(PathBuf),
}

/// The committed run `attempt` of episode `idx`, if stored.
async fn stored_run(
    objects: &Objects,
    submission: &str,
    idx: i64,
    attempt: i64,
) -> Result<Option<StoredRun>, ObjectError> {
    if let Some(path) = objects
        .local_copy(&objects::episode_part_key(submission, idx, attempt))
        .await?
    {
        return Ok(Some(StoredRun::Part(path)));
    }
    let older = objects
        .local_copy(&objects::hdf5_episode_part_key(submission, idx, attempt))
        .await?;
    Ok(older.map(StoredRun::Hdf5))
}

/// The final episodes of `rows` whose committed run is stored nowhere: its results count a run
/// the store lost (a store restored from an older backup, a file deleted by hand), and the
/// submission's file cannot be made until it is back. Nothing is downloaded: a stored merged
/// file holds every counted run (a merge stores none that does not) and is taken on its
/// existence; without one, the runs' own files are looked up in one listing of the parts.
pub async fn runs_missing(objects: &Objects, submission: &str, rows: &[EpisodeRow]) -> Result<Vec<i64>, ObjectError> {
    let committed: Vec<(i64, i64)> = rows
        .iter()
        .filter_map(|r| committed_attempt(r).map(|a| (r.idx, a)))
        .collect();
    let merged = objects::trajectory_key(submission);
    if committed.is_empty() || objects.exists(&merged).await? {
        return Ok(Vec::new());
    }
    let stored: HashSet<String> = objects
        .list(&objects::episode_parts_prefix(submission))
        .await?
        .into_iter()
        .collect();
    let missing: Vec<i64> = committed
        .into_iter()
        .filter(|&(idx, attempt)| {
            !stored.contains(&objects::episode_part_key(submission, idx, attempt))
                && !stored.contains(&objects::hdf5_episode_part_key(submission, idx, attempt))
        })
        .map(|(idx, _)| idx)
        .collect();
    // A merge that stored the file and deleted the parts between the two looks.
    if !missing.is_empty() && objects.exists(&merged).await? {
        return Ok(Vec::new());
    }
    Ok(missing)
}

/// Reads a part file.
fn read_part(path: &Path) -> anyhow::Result<EpisodeRecord> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    episode_part::read(&bytes).with_context(|| format!("reading {}", path.display()))
}

/// Deletes a stored run that will not be counted (its result could not be committed).
pub async fn discard_episode(objects: &Objects, submission: &str, idx: i64, attempt: i64) {
    if let Err(e) = objects
        .delete(&objects::episode_part_key(submission, idx, attempt))
        .await
    {
        tracing::warn!("discarding an uncounted trajectory: {e}");
    }
}

/// Merges the committed runs of a completed submission's final episodes into
/// `trajectories/{submission}.h5`. Every final episode gets a group: an episode given up on
/// without a stored run (lost connections, an expired lease, never started) gets an empty one
/// (0 rows) with its status and reason, so the file lists what REST and the report list. A
/// committed episode whose run's own file is gone is taken from the submission's stored merged
/// file where that file holds the same run (a merge redone), and is an error otherwise, so an
/// incomplete file is never stored. Two sessions that both read every run write files with the
/// same groups and contents; the file records which run each group holds.
///
/// `ahead`: what this session's [`MergeAhead`] already wrote; the merge adds the rest to it
/// when it holds exactly committed runs of `rows`, else starts over (the reason logged).
pub async fn merge(
    objects: &Objects,
    submission: &str,
    benchmark: &str,
    rows: &[EpisodeRow],
    ahead: Option<AheadWritten>,
) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let ahead_drain_s = ahead.as_ref().map_or(0.0, AheadWritten::drain_s);
    let ahead_work = ahead.as_ref().map(AheadWritten::work).unwrap_or_default();
    let ahead = ahead.filter(|a| match a.misfit(rows) {
        None => true,
        Some(why) => {
            tracing::warn!("submission {submission}: the merge ahead is not used: {why}");
            false
        }
    });
    let merged = match &ahead {
        Some(a) => a.path().to_path_buf(),
        None => objects.scratch_file(".h5"),
    };
    let mut timings = MergeTimings::default();
    let result = merge_into(
        objects,
        submission,
        benchmark,
        rows,
        ahead.as_ref(),
        &merged,
        &mut timings,
    )
    .await;
    let _ = tokio::fs::remove_file(&merged).await;
    let round = |s: f64| (s * 1000.0).round() / 1000.0;
    let breakdown = serde_json::json!({
        "episodes": rows.len(), "written_ahead": ahead.as_ref().map_or(0, AheadWritten::len),
        "ahead_drain_s": round(ahead_drain_s),
        "ahead_busy_s": round(ahead_work.busy_s), "ahead_cpu_s": round(ahead_work.cpu_s),
        "merge_s": round(started.elapsed().as_secs_f64()),
        "find_s": round(timings.find_s), "write_s": round(timings.write_s), "store_s": round(timings.store_s),
    });
    tracing::info!(target: "arena_timings", "merge {breakdown}");
    result
}

/// Wall time of a merge's parts (logged with its total): finding each episode's stored run,
/// writing the merged file, storing it.
#[derive(Default)]
struct MergeTimings {
    find_s: f64,
    write_s: f64,
    store_s: f64,
}

/// Episodes read and compressed at a time during a merge, while the previous batch is
/// written: bounds the memory (about 0.4 MB per two-second episode, twice) of a merge of
/// thousands of episodes.
const MERGE_BATCH: usize = 64;

/// What the merged file gets for one final episode.
enum MergeSource {
    Part(PathBuf),
    Hdf5(PathBuf, String),
    Unplayed(Box<EpisodeRecord>),
}

/// The attempt whose stored run is a final episode's trajectory: the one its commit counted.
/// None for an episode not final, or given up on without a commit (an expired lease, lost
/// connections, a cancel): a part stored under its attempt number then is a run that was never
/// counted (its server stopped between storing and committing, or its commit gave up), and must
/// not stand beside a row that says otherwise.
pub fn committed_attempt(row: &EpisodeRow) -> Option<i64> {
    (row.status.is_final() && row.attempts > 0 && crate::results::stored_a_run(row)).then_some(row.attempts)
}

async fn merge_into(
    objects: &Objects,
    submission: &str,
    benchmark: &str,
    rows: &[EpisodeRow],
    ahead: Option<&AheadWritten>,
    merged: &std::path::Path,
    timings: &mut MergeTimings,
) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    // A submission that was running when the server was upgraded from the one-file layout has
    // its earlier episodes in that file (same key as the merged one): they are carried over.
    let legacy = objects.local_copy(&objects::trajectory_key(submission)).await?;
    // The runs the file there holds, read once if a run is not stored any more.
    let mut legacy_runs: Option<Vec<(String, Option<u32>)>> = None;
    let mut sources = Vec::new();
    // Which run each episode's group holds, recorded in the file (`attempt`).
    let mut runs = Vec::new();
    let written_ahead = |idx| ahead.is_some_and(|a| a.holds(idx));
    for row in rows.iter().filter(|r| r.status.is_final()) {
        let committed = committed_attempt(row);
        if written_ahead(row.idx) {
            // Written as it was committed: the committed run.
            runs.extend(committed.map(|attempt| (row.idx as u32, attempt as u32)));
            continue;
        }
        let name = trajectory_file::episode_group_name(row.idx as u32);
        let stored = match committed {
            Some(attempt) => stored_run(objects, submission, row.idx, attempt).await?,
            None => None,
        };
        let source = match stored {
            Some(StoredRun::Part(path)) => MergeSource::Part(path),
            Some(StoredRun::Hdf5(path)) => MergeSource::Hdf5(path, name),
            // Merged before and its run deleted (a merge redone: after a database restored
            // from a backup older than the store, or parts left behind): the submission's
            // file holds that very run when its group says so (a group merged before runs
            // were recorded is taken at its word), and the copy keeps its attribute.
            None if committed.is_some()
                && legacy.as_ref().is_some_and(|file| {
                    let held =
                        legacy_runs.get_or_insert_with(|| trajectory_file::episode_attempts(file).unwrap_or_default());
                    held.iter()
                        .any(|(n, a)| *n == name && a.is_none_or(|a| Some(i64::from(a)) == committed))
                }) =>
            {
                MergeSource::Hdf5(legacy.clone().expect("checked"), name)
            }
            // A committed result always has its stored run, in its part or in the merged file:
            // gone from both, the file cannot be made (a database that counts runs nobody
            // stored: restored from a backup older than the store, with the store's file older
            // still or lost). A scored row stored a run whether or not it names who committed
            // it (servers before leases did not): merged as unplayed, it read "never ran a
            // step" for good.
            None if committed.is_some() => {
                anyhow::bail!(
                    "the stored run of episode {} (attempt {}) is gone ({})",
                    row.idx,
                    row.attempts,
                    objects::episode_part_key(submission, row.idx, row.attempts)
                );
            }
            None => match &legacy {
                Some(file) if trajectory_file::episode_names(file).is_ok_and(|n| n.contains(&name)) => {
                    MergeSource::Hdf5(file.clone(), name)
                }
                _ => MergeSource::Unplayed(Box::new(unplayed_record(row))),
            },
        };
        // The file says which run each group holds: the counted one, unless none was played.
        if let Some(attempt) = committed.filter(|_| !matches!(source, MergeSource::Unplayed(_))) {
            runs.push((row.idx as u32, attempt as u32));
        }
        sources.push(source);
    }
    timings.find_s = started.elapsed().as_secs_f64();
    let started = std::time::Instant::now();
    let (path, sub, bench) = (merged.to_path_buf(), submission.to_string(), benchmark.to_string());
    tokio::task::spawn_blocking(move || write_merged(&path, &sub, &bench, sources, &runs))
        .await
        .context("the trajectory merge stopped")??;
    timings.write_s = started.elapsed().as_secs_f64();
    let started = std::time::Instant::now();
    objects.put_file(&objects::trajectory_key(submission), merged).await?;
    timings.store_s = started.elapsed().as_secs_f64();
    Ok(())
}

/// What the merge's writer gets for one final episode: an episode ready to write (a part read
/// and compressed, or an unplayed one), or a run an older server stored as HDF5 (copied).
enum MergeItem {
    Prepared(Box<PreparedEpisode>),
    Copy(PathBuf, String),
}

/// Writes the merged file: each batch of parts is read and compressed on every core while the
/// one thread that calls HDF5 writes the batch before it, in one opening of the file for as
/// long as the episodes come prepared (the file is complete only once the merge stores it).
/// `runs` (episode, attempt): the run each stored episode's group holds, recorded at the end.
fn write_merged(
    path: &Path,
    submission: &str,
    benchmark: &str,
    sources: Vec<MergeSource>,
    runs: &[(u32, u32)],
) -> anyhow::Result<()> {
    let mut file = TrajectoryFile::open_or_create(path, submission, benchmark)?;
    write_sources(&mut file, sources)?;
    Ok(file.set_attempts(runs)?)
}

fn write_sources(file: &mut TrajectoryFile, sources: Vec<MergeSource>) -> anyhow::Result<()> {
    let (to_writer, batches) = std::sync::mpsc::sync_channel::<Vec<MergeItem>>(1);
    std::thread::scope(|scope| {
        let writer = scope.spawn(move || -> anyhow::Result<()> {
            let mut items = batches.into_iter().flatten().peekable();
            while let Some(item) = items.peek() {
                match item {
                    MergeItem::Prepared(_) => {
                        let run = std::iter::from_fn(|| match items.next_if(|i| matches!(i, MergeItem::Prepared(_))) {
                            Some(MergeItem::Prepared(episode)) => Some(episode),
                            _ => None,
                        });
                        file.write_prepared_all(run)?;
                    }
                    // A raw copy: the run's compressed chunks move as stored.
                    MergeItem::Copy(..) => {
                        if let Some(MergeItem::Copy(from, name)) = items.next() {
                            file.copy_episode_from(&from, &name)?;
                        }
                    }
                }
            }
            Ok(())
        });
        let mut sources = sources.into_iter().peekable();
        while sources.peek().is_some() {
            let batch: Vec<_> = sources.by_ref().take(MERGE_BATCH).collect();
            let prepared = batch
                .into_par_iter()
                .map(|source| match source {
                    MergeSource::Part(part) => {
                        read_part(&part).map(|r| MergeItem::Prepared(Box::new(PreparedEpisode::new(r))))
                    }
                    MergeSource::Unplayed(record) => Ok(MergeItem::Prepared(Box::new(PreparedEpisode::new(*record)))),
                    MergeSource::Hdf5(from, name) => Ok(MergeItem::Copy(from, name)),
                })
                .collect::<anyhow::Result<Vec<_>>>();
            match prepared {
                // A writer that stopped returns its error when joined below.
                Ok(batch) => {
                    if to_writer.send(batch).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    drop(to_writer);
                    let _ = writer.join();
                    return Err(e);
                }
            }
        }
        drop(to_writer);
        writer.join().expect("the merge writer does not panic")
    })
}

/// The group of a final episode with no stored run: its description, status and reason, and no
/// rows.
fn unplayed_record(row: &EpisodeRow) -> EpisodeRecord {
    EpisodeRecord {
        episode: row.idx as u32,
        motion: row.motion.clone(),
        category: row.category.clone(),
        seed: row.seed,
        dr_level: row.dr_level as u32,
        status: row.status.as_str().to_ascii_lowercase(),
        reason: row.reason.clone().unwrap_or_default(),
        start_s: row.start_s,
        duration_s: row.duration_s,
        ..Default::default()
    }
}

/// A submission that ended FAILED (cancelled by the organiser, abandoned by its agent) keeps
/// what it committed: its stored runs are merged into the submission's file as a completed
/// one's are (episodes that never ran listed without rows, with their status and reason), and
/// the per-run files are deleted. Idempotent: run when it ends, and again when a session that
/// was still running it stops (issue 39).
pub async fn settle_failed(
    storage: &crate::storage::Storage,
    objects: &Objects,
    submission: &str,
) -> anyhow::Result<()> {
    // One at a time per submission in this process: an organiser's cancel settles it at once, and
    // the session that ran it again when its lanes run dry; side by side, one deleted the parts
    // the other was reading ("the stored run of episode 0 is gone").
    static SETTLING: std::sync::Mutex<Option<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> =
        std::sync::Mutex::new(None);
    let lock = {
        let mut all = SETTLING.lock().unwrap_or_else(|p| p.into_inner());
        let all = all.get_or_insert_with(HashMap::new);
        // Submissions nobody settles now are forgotten.
        all.retain(|_, l| Arc::strong_count(l) > 1);
        all.entry(submission.to_string()).or_default().clone()
    };
    let _one = lock.lock().await;
    let Some(s) = storage.submission(submission).await? else {
        return Ok(());
    };
    if s.status != crate::storage::SubmissionStatus::Failed {
        return Ok(());
    }
    let rows = storage.episodes(submission).await?;
    // Settled already (by the other caller): what parts are left are runs that were not
    // counted (a lane's run the cancel refused to commit).
    if !merged_is_current(objects, submission, &rows).await {
        merge(objects, submission, &s.benchmark, &rows, None).await?;
    }
    delete_parts(objects, submission).await?;
    Ok(())
}

/// Deletes every per-episode file of a submission (after the merge is stored and the submission
/// is final; orphans of uncounted runs go too; in a `file://` store the folder too, with any
/// part a killed server left half-written under its temporary name).
pub async fn delete_parts(objects: &Objects, submission: &str) -> Result<(), ObjectError> {
    let prefix = objects::episode_parts_prefix(submission);
    for key in objects.list(&prefix).await? {
        objects.delete(&key).await?;
    }
    if let Some(folder) = objects.local_path(&prefix)
        && let Err(e) = tokio::fs::remove_dir_all(&folder).await
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!("removing {}: {e}", folder.display());
    }
    objects.forget_cached(&prefix).await;
    Ok(())
}

/// Whether the submission's merged file is the one `rows` describe, so that the runs' own files
/// can go: no run the rows count is still stored on its own, and the file holds every final
/// episode as they count it ([`merged_holds_every_episode`]). A counted run stored apart is
/// merged, not trusted to the file: after a database restored from a backup older than the
/// store, an episode run again may count a run under the number the file's other run had. False
/// when the store cannot be listed.
pub async fn merged_is_current(objects: &Objects, submission: &str, rows: &[EpisodeRow]) -> bool {
    let Ok(stored) = objects.list(&objects::episode_parts_prefix(submission)).await else {
        return false;
    };
    let stored: std::collections::HashSet<String> = stored.into_iter().collect();
    let counted_run_apart = rows.iter().any(|r| {
        committed_attempt(r).is_some_and(|a| {
            stored.contains(&objects::episode_part_key(submission, r.idx, a))
                || stored.contains(&objects::hdf5_episode_part_key(submission, r.idx, a))
        })
    });
    !counted_run_apart && merged_holds_every_episode(objects, submission, rows).await
}

/// Whether the submission's merged file holds a group for every final episode of `rows`, of the
/// run each counts (an unplayed group for one that counts none), where the file says which
/// (files merged before runs were recorded are taken at their word). False when it has none, cannot be read, or is a file of
/// the one-file layout that an upgrade left with only the episodes run before it.
pub async fn merged_holds_every_episode(objects: &Objects, submission: &str, rows: &[EpisodeRow]) -> bool {
    let Ok(Some(path)) = objects.local_copy(&objects::trajectory_key(submission)).await else {
        return false;
    };
    let held = tokio::task::spawn_blocking(move || trajectory_file::episode_attempts(&path)).await;
    let Ok(Ok(held)) = held else {
        return false;
    };
    rows.iter().filter(|r| r.status.is_final()).all(|r| {
        let name = trajectory_file::episode_group_name(r.idx as u32);
        match held.binary_search_by(|(n, _)| n.cmp(&name)) {
            // 0: no run played (an unplayed group, of a file that records runs).
            Ok(at) => held[at]
                .1
                .is_none_or(|run| i64::from(run) == committed_attempt(r).unwrap_or(0)),
            Err(_) => false,
        }
    })
}

/// Whether a submission still has per-episode files (runs not merged yet, or left behind).
pub async fn has_parts(objects: &Objects, submission: &str) -> Result<bool, ObjectError> {
    Ok(!objects
        .list(&objects::episode_parts_prefix(submission))
        .await?
        .is_empty())
}

/// One episode's stored trajectory: from the submission's merged file once it has one (or a
/// file of the one-file layout holding it), else from the committed run's own file (`committed`:
/// [`committed_attempt`] of the episode's row). None if neither holds it yet.
pub async fn episode_record(
    objects: &Objects,
    submission: &str,
    idx: i64,
    committed: Option<i64>,
) -> anyhow::Result<Option<EpisodeRecord>> {
    if let Some(record) = from_merged(objects, submission, idx).await? {
        return Ok(Some(record));
    }
    match run_record(objects, submission, idx, committed).await {
        Ok(Some(record)) => Ok(Some(record)),
        // Gone or unreadable: the submission may have completed between the two looks (its
        // merged file stored, then its runs deleted). The merged file has the episode now.
        other => match from_merged(objects, submission, idx).await? {
            Some(record) => Ok(Some(record)),
            None => other,
        },
    }
}

/// Episode `idx`'s committed run (`committed`: [`committed_attempt`] of its row) from the run's
/// own file: a part, or a one-episode HDF5 file of an older server. None when no run is
/// committed or its file is gone (deleted after the submission's merge).
async fn run_record(
    objects: &Objects,
    submission: &str,
    idx: i64,
    committed: Option<i64>,
) -> anyhow::Result<Option<EpisodeRecord>> {
    let Some(attempts) = committed else {
        return Ok(None);
    };
    match stored_run(objects, submission, idx, attempts).await {
        Ok(Some(StoredRun::Part(path))) => {
            let read = tokio::task::spawn_blocking(move || read_part(&path));
            read.await.context("the trajectory reader stopped")?.map(Some)
        }
        Ok(Some(StoredRun::Hdf5(path))) => read_group(path, trajectory_file::episode_group_name(idx as u32)).await,
        Ok(None) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Episode `idx` from the submission's merged file, if it has one holding it.
async fn from_merged(objects: &Objects, submission: &str, idx: i64) -> anyhow::Result<Option<EpisodeRecord>> {
    match objects.local_copy(&objects::trajectory_key(submission)).await? {
        Some(merged) => read_group(merged, trajectory_file::episode_group_name(idx as u32)).await,
        None => Ok(None),
    }
}

/// Episode group `name` of an HDF5 trajectory file; None if the file lacks it or is gone (a
/// submission's parts are deleted after its merge).
async fn read_group(path: PathBuf, name: String) -> anyhow::Result<Option<EpisodeRecord>> {
    let read = tokio::task::spawn_blocking(move || match trajectory_file::read_episode(&path, &name) {
        Ok(record) => Ok(Some(record)),
        Err(
            trajectory_file::TrajectoryFileError::MissingEpisode { .. }
            | trajectory_file::TrajectoryFileError::Io { .. },
        ) => Ok(None),
        Err(e) => Err(anyhow::Error::from(e)),
    });
    read.await.context("the trajectory reader stopped")?
}

/// A local copy of a completed submission's merged trajectory file, if it has one.
pub async fn submission_file(objects: &Objects, submission: &str) -> Result<Option<PathBuf>, ObjectError> {
    objects.local_copy(&objects::trajectory_key(submission)).await
}

/// How long a reader of a merged file waits for this server's merge of it (a submission that
/// has just completed): a minute of merging is about 40,000 two-second episodes on one thread.
/// A longer one is answered as not merged yet.
pub const MERGE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// [`submission_file`] for blocking code (command-line tools): the path of the merged file
/// (once this server's merge of it, if any, is done), downloaded first from a remote store. A
/// file that is missing or cannot be fetched gives its would-be path (the caller's open then
/// fails and says which submission); a fetch error is logged. Dataset exports read each episode
/// through [`StoredEpisodes`], which also reads runs not merged yet.
pub fn submission_path_blocking(objects: &Objects, submission: &str) -> PathBuf {
    match BlockingRuntime::current_or_own() {
        Ok(runtime) => merged_path_blocking(&runtime, objects, submission),
        Err(e) => {
            tracing::error!("fetching the trajectories of {submission}: starting a runtime: {e}");
            PathBuf::from(format!("{}/{}", objects.shown(), objects::trajectory_key(submission)))
        }
    }
}

/// [`submission_path_blocking`] on a runtime the caller holds.
fn merged_path_blocking(runtime: &BlockingRuntime, objects: &Objects, submission: &str) -> PathBuf {
    let key = objects::trajectory_key(submission);
    // A submission that has just completed: its merge on this server is waited for.
    objects.writes_in_flight().wait_blocking(&key, MERGE_WAIT);
    if let Some(path) = objects.local_path(&key) {
        return path;
    }
    match runtime.block_on(objects.local_copy(&key)) {
        Ok(Some(path)) => path,
        Ok(None) => PathBuf::from(format!("{}/{key}", objects.shown())),
        Err(e) => {
            tracing::error!("fetching the trajectories of {submission}: {e:#}");
            PathBuf::from(format!("{}/{key}", objects.shown()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::EpisodeState;

    /// A record of `rows` rows whose values tell where they are (also for `part_file`'s tests).
    pub(super) fn record(episode: u32, rows: usize) -> EpisodeRecord {
        let fill = |width: usize| (0..rows * width).map(|i| (i + episode as usize) as f64).collect();
        EpisodeRecord {
            episode,
            motion: "stand".into(),
            category: "builtin".into(),
            status: "fell".into(),
            rows: arena_data::TrajectoryRows {
                times: (0..rows).map(|r| r as f64 * 0.02).collect(),
                qpos: fill(36),
                qvel: fill(35),
                body_pos: fill(93),
                actions: fill(29),
                ref_qpos: fill(36),
                ref_body_pos: fill(93),
                state: fill(64),
                ref_state: fill(64),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn row(idx: i64, status: EpisodeState, attempts: i64) -> EpisodeRow {
        EpisodeRow {
            idx,
            motion: "stand".into(),
            category: "builtin".into(),
            start_s: 0.0,
            duration_s: 1.0,
            seed: 1,
            dr_level: 0,
            status,
            attempts,
            server_faults: 0,
            uncharged_runs: 0,
            steps: 2,
            metrics: Default::default(),
            reason: None,
            updated_at: 0,
            agent_name: None,
            engine: None,
            committed_by: None,
        }
    }

    /// The merge takes each final episode's committed run (not an uncounted one), carries over
    /// episodes of a file in the one-file layout, gives episodes with no stored run an empty
    /// group with their status and reason, skips episodes that are not final, and the parts go
    /// afterwards.
    #[tokio::test]
    async fn merging_takes_the_committed_runs() {
        let dir = std::env::temp_dir().join(format!("arena-merge-{}", std::process::id()));
        let objects = Objects::open("", &dir, std::time::Duration::from_secs(1)).unwrap();
        // Episode 0 in the old one-file layout; 1 with an uncounted attempt 1 and committed
        // attempt 2; 2 FAILED with no run stored; 3 still running.
        let legacy = objects.local_path(&objects::trajectory_key("sub")).unwrap();
        TrajectoryFile::open_or_create(&legacy, "sub", "bench")
            .unwrap()
            .write_episode(&record(0, 3))
            .unwrap();
        store_episode(&objects, "sub", 1, record(1, 5)).await.unwrap();
        store_episode(&objects, "sub", 2, record(1, 4)).await.unwrap();
        store_episode(&objects, "sub", 1, record(3, 2)).await.unwrap();
        // Episode 2's attempt 1 was stored, then never committed (its server stopped): the row
        // says FAILED, given up on, and the run must not appear anywhere.
        store_episode(&objects, "sub", 1, record(2, 7)).await.unwrap();
        // Episode 5's committed run was stored by an older server, as a one-episode HDF5 file.
        let older = objects
            .local_path(&objects::hdf5_episode_part_key("sub", 5, 1))
            .unwrap();
        TrajectoryFile::open_or_create(&older, "sub", "bench")
            .unwrap()
            .write_episode(&record(5, 6))
            .unwrap();
        // Pages read a running submission's committed episodes from their parts.
        let read = |idx, committed| episode_record(&objects, "sub", idx, committed);
        assert_eq!(read(1, Some(2)).await.unwrap(), Some(record(1, 4)));
        assert_eq!(read(5, Some(1)).await.unwrap(), Some(record(5, 6)));
        assert_eq!(read(2, None).await.unwrap(), None, "an uncommitted run is not served");
        assert_eq!(read(3, None).await.unwrap(), None, "nor a running one's");
        // Episode 0 was committed before leases existed (no owner recorded).
        let committed = EpisodeRow {
            engine: None,
            committed_by: Some("r1".into()),
            ..row(1, EpisodeState::Completed, 2)
        };
        let lost = EpisodeRow {
            reason: Some("agent connection lost (attempt 3 of 3)".into()),
            ..row(2, EpisodeState::Failed, 1)
        };
        let rows = [
            row(0, EpisodeState::Fell, 1),
            committed,
            lost,
            row(3, EpisodeState::Running, 1),
            row(4, EpisodeState::Failed, 0),
            EpisodeRow {
                engine: None,
                committed_by: Some("r0".into()),
                ..row(5, EpisodeState::Completed, 1)
            },
        ];
        let committed: Vec<_> = rows.iter().map(committed_attempt).collect();
        assert_eq!(committed, [Some(1), Some(2), None, None, None, Some(1)]);
        // Before the merge, dataset exports read what the merged file will hold: the one-file
        // layout's episode, the committed runs, and an empty record for one never committed.
        std::thread::scope(|s| {
            s.spawn(|| {
                let stored = StoredEpisodes::new(&objects).unwrap();
                assert_eq!(stored.read("sub", &rows[0]).unwrap(), record(0, 3));
                assert_eq!(stored.read("sub", &rows[1]).unwrap(), record(1, 4));
                assert_eq!(stored.read("sub", &rows[5]).unwrap(), record(5, 6));
                let unplayed = stored.read("sub", &rows[2]).unwrap();
                assert_eq!(unplayed, unplayed_record(&rows[2]));
                assert_eq!((unplayed.status.as_str(), unplayed.num_rows()), ("failed", 0));
            });
        });
        merge(&objects, "sub", "bench", &rows, None).await.unwrap();
        let merged = submission_file(&objects, "sub").await.unwrap().unwrap();
        assert_eq!(
            trajectory_file::episode_names(&merged).unwrap(),
            [
                "episode_00000",
                "episode_00001",
                "episode_00002",
                "episode_00004",
                "episode_00005"
            ]
        );
        assert_eq!(
            read(5, Some(1)).await.unwrap(),
            Some(record(5, 6)),
            "from the merged file"
        );
        let unplayed = trajectory_file::read_episode(&merged, "episode_00002").unwrap();
        assert_eq!(
            (unplayed.num_rows(), unplayed.status.as_str(), unplayed.reason.as_str()),
            (0, "failed", "agent connection lost (attempt 3 of 3)")
        );
        assert_eq!(
            trajectory_file::read_episode(&merged, "episode_00004")
                .unwrap()
                .num_rows(),
            0
        );
        let one = trajectory_file::read_episode(&merged, "episode_00001").unwrap();
        assert_eq!(one, record(1, 4), "the committed attempt's run");
        assert_eq!(
            trajectory_file::read_episode(&merged, "episode_00000").unwrap(),
            record(0, 3)
        );
        assert_eq!(objects.list("trajectories/sub").await.unwrap().len(), 5);
        // Parts went straight into the file:// store; one a killed server left half-written
        // under its temporary name is not listed, and goes with the folder.
        let folder = objects.local_path(&objects::episode_parts_prefix("sub")).unwrap();
        std::fs::write(folder.join("ep00009-a1.part#123456"), b"half").unwrap();
        assert_eq!(objects.list("trajectories/sub").await.unwrap().len(), 5);
        delete_parts(&objects, "sub").await.unwrap();
        assert!(objects.list("trajectories/sub").await.unwrap().is_empty());
        assert!(!folder.exists());
        assert!(objects.exists(&objects::trajectory_key("sub")).await.unwrap());
        // A second merge after the runs were deleted (a concurrent completion) takes them from
        // the merged file, which records that it holds those very runs: nothing is lost.
        merge(&objects, "sub", "bench", &rows, None).await.unwrap();
        let kept = submission_file(&objects, "sub").await.unwrap().unwrap();
        assert_eq!(trajectory_file::episode_names(&kept).unwrap().len(), 5);
        assert_eq!(
            trajectory_file::read_episode(&kept, "episode_00001").unwrap(),
            record(1, 4)
        );
        assert_eq!(
            trajectory_file::read_episode(&kept, "episode_00005").unwrap(),
            record(5, 6)
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A merge ahead's file is completed with what it does not hold (parts, unplayed
    /// episodes); one that holds a run the rows do not count is dropped for the full merge; no
    /// ahead file outlives its merge or its session.
    #[tokio::test]
    async fn the_merge_ahead_is_completed_or_dropped() {
        let dir = std::env::temp_dir().join(format!("arena-merge-ahead-{}", std::process::id()));
        let objects = Objects::open("", &dir, std::time::Duration::from_secs(1)).unwrap();
        let scratch = objects.scratch_file("").parent().unwrap().to_path_buf();
        let ahead_files = || {
            std::fs::read_dir(&scratch)
                .unwrap()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".ahead.h5"))
                .count()
        };
        // Episodes 0 and 1 committed by this session, 2 by another one, 3 never played.
        for (idx, rows) in [(0, 3), (1, 5), (2, 4)] {
            store_episode(&objects, "sub", 1, record(idx, rows)).await.unwrap();
        }
        let committed = |idx| EpisodeRow {
            engine: None,
            committed_by: Some("r0".into()),
            ..row(idx, EpisodeState::Completed, 1)
        };
        let rows = [
            committed(0),
            committed(1),
            committed(2),
            row(3, EpisodeState::Failed, 0),
        ];
        let mut ahead = MergeAhead::start(&objects, "sub", "bench");
        ahead.add(0, 1, PreparedEpisode::new(record(0, 3)));
        ahead.add(1, 1, PreparedEpisode::new(record(1, 5)));
        let written = ahead.finish().expect("two runs written ahead");
        assert_eq!((written.len(), written.holds(1), written.holds(2)), (2, true, false));
        assert_eq!(written.misfit(&rows), None);
        assert_eq!(ahead_files(), 1);
        merge(&objects, "sub", "bench", &rows, Some(written)).await.unwrap();
        let merged = submission_file(&objects, "sub").await.unwrap().unwrap();
        let names = trajectory_file::episode_names(&merged).unwrap();
        assert_eq!(
            names,
            ["episode_00000", "episode_00001", "episode_00002", "episode_00003"]
        );
        for (idx, rows) in [(0, 3), (1, 5), (2, 4)] {
            let name = trajectory_file::episode_group_name(idx);
            assert_eq!(
                trajectory_file::read_episode(&merged, &name).unwrap(),
                record(idx, rows)
            );
        }
        assert_eq!(
            trajectory_file::read_episode(&merged, "episode_00003")
                .unwrap()
                .num_rows(),
            0
        );
        assert_eq!(ahead_files(), 0, "the ahead file went with the merge");

        // Run 1 of episode 2 written ahead, but the row counts run 2 (stored as a part): the
        // full merge takes the part.
        store_episode(&objects, "sub", 2, record(2, 6)).await.unwrap();
        let recounted = [
            committed(0),
            committed(1),
            EpisodeRow {
                attempts: 2,
                ..committed(2)
            },
        ];
        let mut ahead = MergeAhead::start(&objects, "sub", "bench");
        ahead.add(2, 1, PreparedEpisode::new(record(2, 4)));
        let written = ahead.finish().unwrap();
        let why = written.misfit(&recounted).unwrap();
        assert!(
            why.contains("run 1 of episode 2") && why.contains("counts run 2"),
            "{why}"
        );
        merge(&objects, "sub", "bench", &recounted, Some(written))
            .await
            .unwrap();
        let merged = submission_file(&objects, "sub").await.unwrap().unwrap();
        assert_eq!(
            trajectory_file::read_episode(&merged, "episode_00002").unwrap(),
            record(2, 6)
        );
        assert_eq!(ahead_files(), 0);

        // A file removed meanwhile (taken for abandoned scratch) is not used.
        let mut ahead = MergeAhead::start(&objects, "sub", "bench");
        ahead.add(0, 1, PreparedEpisode::new(record(0, 3)));
        let written = ahead.finish().unwrap();
        std::fs::remove_file(written.path()).unwrap();
        let why = written.misfit(&recounted).unwrap();
        assert!(why.contains("cannot be read"), "{why}");
        merge(&objects, "sub", "bench", &recounted, Some(written))
            .await
            .unwrap();
        let merged = submission_file(&objects, "sub").await.unwrap().unwrap();
        assert_eq!(
            trajectory_file::read_episode(&merged, "episode_00000").unwrap(),
            record(0, 3)
        );

        // A session that ends without completing the submission leaves no file; one that
        // committed nothing has nothing to offer.
        let mut ahead = MergeAhead::start(&objects, "sub", "bench");
        ahead.add(0, 1, PreparedEpisode::new(record(0, 3)));
        drop(ahead);
        assert_eq!(ahead_files(), 0);
        assert!(MergeAhead::start(&objects, "sub", "bench").finish().is_none());
        assert_eq!(ahead_files(), 0);
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A database restored from a backup older than the store (an operator's walkthrough): it
    /// counts runs the merged file may not hold. The file records the run of each group, so it
    /// is known not to hold them, and a merge redone takes each counted run from its part, or
    /// from the file where the file holds that run and its part is gone.
    #[tokio::test]
    async fn a_merge_redone_keeps_the_runs_the_rows_count() {
        let dir = std::env::temp_dir().join(format!("arena-merge-redone-{}", std::process::id()));
        let objects = Objects::open("", &dir, std::time::Duration::from_secs(1)).unwrap();
        let counted = |idx, attempts| EpisodeRow {
            committed_by: Some("r0".into()),
            ..row(idx, EpisodeState::Completed, attempts)
        };
        store_episode(&objects, "sub", 1, record(0, 3)).await.unwrap();
        store_episode(&objects, "sub", 1, record(1, 4)).await.unwrap();
        let first = [counted(0, 1), counted(1, 1), row(2, EpisodeState::Failed, 0)];
        merge(&objects, "sub", "bench", &first, None).await.unwrap();
        let merged = submission_file(&objects, "sub").await.unwrap().unwrap();
        let runs = |path: &Path| {
            trajectory_file::episode_attempts(path)
                .unwrap()
                .into_iter()
                .map(|(_, a)| a)
                .collect::<Vec<_>>()
        };
        assert_eq!(runs(&merged), [Some(1), Some(1), Some(0)], "episode 2 never ran");
        assert!(merged_holds_every_episode(&objects, "sub", &first).await);
        assert!(
            !merged_is_current(&objects, "sub", &first).await,
            "its runs are still stored apart"
        );
        delete_parts(&objects, "sub").await.unwrap();
        assert!(merged_is_current(&objects, "sub", &first).await);
        // The restored rows count run 2 of episode 1 (run 1 was lost in the other timeline).
        store_episode(&objects, "sub", 2, record(1, 6)).await.unwrap();
        store_episode(&objects, "sub", 1, record(2, 5)).await.unwrap();
        let restored = [counted(0, 1), counted(1, 2), counted(2, 1)];
        assert!(!merged_holds_every_episode(&objects, "sub", &restored).await);
        // Either difference alone is told: another run, or a run where the file has none.
        assert!(!merged_holds_every_episode(&objects, "sub", &[counted(0, 1), counted(1, 2)]).await);
        assert!(!merged_holds_every_episode(&objects, "sub", &[counted(0, 1), counted(1, 1), counted(2, 1)]).await);
        merge(&objects, "sub", "bench", &restored, None).await.unwrap();
        let merged = submission_file(&objects, "sub").await.unwrap().unwrap();
        assert_eq!(runs(&merged), [Some(1), Some(2), Some(1)]);
        assert_eq!(
            trajectory_file::read_episode(&merged, "episode_00002").unwrap(),
            record(2, 5)
        );
        assert_eq!(
            trajectory_file::read_episode(&merged, "episode_00000").unwrap(),
            record(0, 3),
            "from the file"
        );
        assert_eq!(
            trajectory_file::read_episode(&merged, "episode_00001").unwrap(),
            record(1, 6),
            "from its part"
        );
        assert!(merged_holds_every_episode(&objects, "sub", &restored).await);
        // Run 2 of episode 1 counted again and stored apart, under the number the file's run
        // has (an episode run again after another restore): the part is the run counted, so
        // the file is not trusted with it until merged.
        store_episode(&objects, "sub", 2, record(1, 9)).await.unwrap();
        assert!(!merged_is_current(&objects, "sub", &restored).await);
        merge(&objects, "sub", "bench", &restored, None).await.unwrap();
        let merged = submission_file(&objects, "sub").await.unwrap().unwrap();
        assert_eq!(
            trajectory_file::read_episode(&merged, "episode_00001").unwrap(),
            record(1, 9)
        );
        delete_parts(&objects, "sub").await.unwrap();
        assert!(merged_is_current(&objects, "sub", &restored).await);
        // A counted run neither stored nor in the file: the merge says which is gone.
        let lost = [counted(0, 1), counted(1, 3), counted(2, 1)];
        let e = merge(&objects, "sub", "bench", &lost, None)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("episode 1 (attempt 3) is gone"), "{e}");
        // As committed by a server before leases (no committer recorded): a scored row stored a
        // run all the same (it was merged as unplayed: "never ran a step").
        let unnamed = [counted(0, 1), row(1, EpisodeState::Completed, 3), counted(2, 1)];
        let e = merge(&objects, "sub", "bench", &unnamed, None)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("episode 1 (attempt 3) is gone"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
