//! A submission's trajectories in the object store ([`crate::objects`]).
//!
//! While a submission runs, each finished run of an episode is its own small HDF5 file
//! (`trajectories/{submission}/ep{idx}-a{attempt}.h5`), written by whichever replica ran it
//! *before* its result is committed: a committed episode always has its trajectory, and the
//! attempt in the key is the one the database row counts, so runs that were not committed (a
//! lease lost, a replica killed after the upload) are never read. When the submission completes,
//! the committed runs are merged, in episode order, into one file `trajectories/{submission}.h5`
//! (the format of `arena_data::trajectory_file`) and the parts are deleted.

use crate::objects::{self, ObjectError, Objects};
use crate::storage::EpisodeRow;
use anyhow::Context;
use arena_data::trajectory_file::{self, EpisodeRecord, TrajectoryFile};
use std::path::PathBuf;

/// Stores one episode run as its own file under [`objects::episode_part_key`]. HDF5 writes a
/// scratch file first; it is removed whatever happens.
pub async fn store_episode(
    objects: &Objects,
    submission: &str,
    benchmark: &str,
    attempt: i64,
    record: EpisodeRecord,
) -> anyhow::Result<()> {
    let key = objects::episode_part_key(submission, record.episode as i64, attempt);
    let scratch = objects.scratch_file(".h5");
    let (sub, bench, file) = (submission.to_string(), benchmark.to_string(), scratch.clone());
    let written = tokio::task::spawn_blocking(move || {
        TrajectoryFile::open_or_create(&file, &sub, &bench)?.write_episode(&record)
    })
    .await
    .context("the trajectory writer stopped")?;
    let stored = match written {
        Ok(()) => objects.put_file(&key, &scratch).await.map_err(anyhow::Error::from),
        Err(e) => Err(anyhow::Error::from(e).context("writing the episode's HDF5 file")),
    };
    let _ = tokio::fs::remove_file(&scratch).await;
    stored
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
/// `trajectories/{submission}.h5`. Episodes without a stored run (failed before their first
/// step was stored, or given up after lost connections) are skipped. Idempotent: two replicas
/// finishing the same submission write the same file.
pub async fn merge(objects: &Objects, submission: &str, benchmark: &str, rows: &[EpisodeRow]) -> anyhow::Result<()> {
    let merged = objects.scratch_file(".h5");
    let result = merge_into(objects, submission, benchmark, rows, &merged).await;
    let _ = tokio::fs::remove_file(&merged).await;
    result
}

async fn merge_into(
    objects: &Objects,
    submission: &str,
    benchmark: &str,
    rows: &[EpisodeRow],
    merged: &std::path::Path,
) -> anyhow::Result<()> {
    {
        let (path, sub, bench) = (merged.to_path_buf(), submission.to_string(), benchmark.to_string());
        tokio::task::spawn_blocking(move || TrajectoryFile::open_or_create(&path, &sub, &bench)).await??;
    }
    // A submission that was running when the server was upgraded from the one-file layout has
    // its earlier episodes in that file (same key as the merged one): they are carried over.
    let legacy = objects.local_copy(&objects::trajectory_key(submission)).await?;
    for row in rows.iter().filter(|r| r.status.is_final() && r.attempts > 0) {
        let key = objects::episode_part_key(submission, row.idx, row.attempts);
        let name = trajectory_file::episode_group_name(row.idx as u32);
        let source = match objects.local_copy(&key).await? {
            Some(part) => part,
            None => match &legacy {
                Some(file) if trajectory_file::episode_names(file).is_ok_and(|n| n.contains(&name)) => file.clone(),
                _ => continue,
            },
        };
        let path = merged.to_path_buf();
        tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
            let record = trajectory_file::read_episode(&source, &name)?;
            TrajectoryFile::open_or_create(&path, "", "")?.write_episode(&record)?;
            Ok(())
        })
        .await??;
    }
    objects.put_file(&objects::trajectory_key(submission), merged).await?;
    Ok(())
}

/// Deletes every per-episode file of a submission (after the merge is stored and the submission
/// is final; orphans of uncounted runs go too).
pub async fn delete_parts(objects: &Objects, submission: &str) -> Result<(), ObjectError> {
    let prefix = objects::episode_parts_prefix(submission);
    for key in objects.list(&prefix).await? {
        objects.delete(&key).await?;
    }
    objects.forget_cached(&prefix).await;
    Ok(())
}

/// A local HDF5 file with one episode's stored trajectory: the submission's merged file once it
/// has one, else the committed run's own file (`attempts` from the episode's row). None if
/// neither exists yet.
pub async fn episode_file(
    objects: &Objects,
    submission: &str,
    idx: i64,
    attempts: i64,
) -> Result<Option<PathBuf>, ObjectError> {
    if let Some(path) = objects.local_copy(&objects::trajectory_key(submission)).await? {
        return Ok(Some(path));
    }
    objects
        .local_copy(&objects::episode_part_key(submission, idx, attempts))
        .await
}

/// A local copy of a completed submission's merged trajectory file, if it has one.
pub async fn submission_file(objects: &Objects, submission: &str) -> Result<Option<PathBuf>, ObjectError> {
    objects.local_copy(&objects::trajectory_key(submission)).await
}

/// [`submission_file`] for blocking code (dataset exports, command-line tools): the path of the
/// merged file, downloaded first from a remote store. A file that is missing or cannot be
/// fetched gives its would-be path (the caller's open then fails and says which submission); a
/// fetch error is logged.
pub fn submission_path_blocking(objects: &Objects, submission: &str) -> PathBuf {
    let key = objects::trajectory_key(submission);
    if let Some(path) = objects.local_path(&key) {
        return path;
    }
    let fetch = || -> anyhow::Result<Option<PathBuf>> {
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => Ok(handle.block_on(objects.local_copy(&key))?),
            Err(_) => {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                Ok(runtime.block_on(objects.local_copy(&key))?)
            }
        }
    };
    match fetch() {
        Ok(Some(path)) => path,
        Ok(None) => PathBuf::from(format!("{}/{key}", objects.shown())),
        Err(e) => {
            tracing::error!("fetching the trajectories of {submission}: {e:#}");
            PathBuf::from(format!("{}/{key}", objects.shown()))
        }
    }
}
