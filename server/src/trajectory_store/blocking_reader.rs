//! A submission's stored episodes for blocking code (dataset exports): from its merged file, and
//! from each committed run's own file while no merged file holds the episode. A submission is
//! COMPLETED before its runs are merged (the merge follows at once on the completing server, is
//! retried when it fails, and runs at a server's next start when that one stopped first), so an
//! export that read the merged file alone failed on a submission in that window, for good on a
//! replica whose merge failed.

use super::{committed_attempt, merged_path_blocking, run_record, unplayed_record};
use crate::objects::Objects;
use crate::storage::EpisodeRow;
use arena_data::trajectory_file::{self, EpisodeRecord};
use std::path::PathBuf;
use std::sync::Mutex;

/// Where blocking code runs the object store's calls: the runtime of the calling context (a
/// `spawn_blocking` thread's, and any thread it hands the value to), else one of its own (a
/// command-line tool's).
pub(super) enum BlockingRuntime {
    Handle(tokio::runtime::Handle),
    Own(tokio::runtime::Runtime),
}

impl BlockingRuntime {
    pub(super) fn current_or_own() -> std::io::Result<Self> {
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => Ok(BlockingRuntime::Handle(handle)),
            Err(_) => Ok(BlockingRuntime::Own(
                tokio::runtime::Builder::new_current_thread().enable_all().build()?,
            )),
        }
    }

    /// Runs `future` to its end; never on one of the runtime's own worker threads.
    pub(super) fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        match self {
            BlockingRuntime::Handle(handle) => handle.block_on(future),
            BlockingRuntime::Own(runtime) => runtime.block_on(future),
        }
    }
}

/// Reads the episodes of submissions one after another (an export's order: a submission's
/// episodes in a row), keeping the last submission's merged file at hand.
pub struct StoredEpisodes<'a> {
    objects: &'a Objects,
    runtime: BlockingRuntime,
    /// The submission whose merged file's path was found last, and that path (which may not
    /// exist: the merged file is not written yet).
    merged: Mutex<Option<(String, PathBuf)>>,
}

impl<'a> StoredEpisodes<'a> {
    /// A reader on the calling context's runtime, if it has one (see [`BlockingRuntime`]).
    pub fn new(objects: &'a Objects) -> anyhow::Result<Self> {
        let runtime = BlockingRuntime::current_or_own()
            .map_err(|e| anyhow::anyhow!("starting a runtime to read trajectories: {e}"))?;
        Ok(StoredEpisodes {
            objects,
            runtime,
            merged: Mutex::new(None),
        })
    }

    /// Final episode `row` of `submission`: from its merged file (once this server's merge of it,
    /// if one runs, is done: at most [`super::MERGE_WAIT`]), else from its committed run's own
    /// file, else, for an episode with no committed run, the empty record the merge writes for
    /// it. An error says where neither held a committed run.
    pub fn read(&self, submission: &str, row: &EpisodeRow) -> anyhow::Result<EpisodeRecord> {
        let name = trajectory_file::episode_group_name(row.idx as u32);
        let merged = self.merged_path(submission, false);
        let merged_error = match trajectory_file::read_episode(&merged, &name) {
            Ok(record) => return Ok(record),
            Err(e) => e,
        };
        let Some(committed) = committed_attempt(row) else {
            // Never run, or given up on without a commit (FAILED or TIMEOUT with no stored
            // run): what the merge writes for it, an empty group with its description.
            return Ok(unplayed_record(row));
        };
        let run = self
            .runtime
            .block_on(run_record(self.objects, submission, row.idx, Some(committed)));
        let run_said = match run {
            Ok(Some(record)) => return Ok(record),
            Ok(None) => format!("its committed run {committed} is not stored"),
            Err(e) => format!("its committed run: {e:#}"),
        };
        // Merged between the two looks (the runs are deleted after the merge): the merged file
        // holds it now.
        let merged = self.merged_path(submission, true);
        trajectory_file::read_episode(&merged, &name).map_err(|_| {
            anyhow::anyhow!(
                "{name} is stored neither in the submission's merged file ({merged_error}) nor on its own ({run_said})"
            )
        })
    }

    /// The merged file's path for `submission`, found again when `fresh` or when the last one
    /// found was another submission's.
    fn merged_path(&self, submission: &str, fresh: bool) -> PathBuf {
        let mut last = self.merged.lock().unwrap_or_else(|e| e.into_inner());
        if !fresh
            && let Some((of, path)) = last.as_ref()
            && of == submission
        {
            return path.clone();
        }
        let path = merged_path_blocking(&self.runtime, self.objects, submission);
        *last = Some((submission.to_string(), path.clone()));
        path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_without_a_runtime_gets_one_of_its_own_and_one_inside_uses_it() {
        assert!(matches!(
            BlockingRuntime::current_or_own().unwrap(),
            BlockingRuntime::Own(_)
        ));
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let _inside = runtime.enter();
        let found = BlockingRuntime::current_or_own().unwrap();
        assert!(matches!(found, BlockingRuntime::Handle(_)));
        // Handed to a thread of its own, it runs futures there.
        std::thread::scope(|s| {
            s.spawn(|| assert_eq!(found.block_on(async { 7 }), 7));
        });
    }
}
