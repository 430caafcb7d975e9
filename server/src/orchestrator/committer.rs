//! The committer: scores finished episodes, writes their trajectories and results durably, and
//! only then tells the agent (EpisodeEnd). Runs on its own thread so the simulator never waits
//! for metrics, HDF5 or the database.

use super::lane::{Finished, LaneEnd};
use super::{RunContext, RunOutcome, Sink, db_call};
use crate::results;
use crate::storage::{EpisodeOutcome, StorageError, SubmissionStatus};
use crate::trajectory_store::{self, AheadWritten, MergeAhead, WrittenPart};
use arena_bench::aggregate::EpisodeStatus;
use arena_data::trajectory_file::EpisodeRecord;
use arena_data::trajectory_file::PreparedEpisode;
use arena_runner::episode;
use arena_runner::local::status_name;
use arena_sdk::protocol::{Disconnect, EpisodeEnd, Msg};
use rayon::prelude::*;
use std::sync::mpsc;

/// Most finished episodes scored in one parallel batch.
const SCORE_BATCH: usize = 256;

/// The threads that store the parts, apart from rayon's global pool where the next batch is
/// scored meanwhile: a part written past the page cache waits for the disk, and on rayon's
/// threads that wait held the cores scoring needed (on an H100 machine's 16 cores the
/// committer scored 4096 episodes in 1.5–2.4 s where `arena eval` took 0.33 s). More threads
/// than cores, since they mostly wait: finishing 1024 parts begun while their episodes ran (a
/// last write, a sync and a rename each) took 1.07 s on 2 threads and 0.65 s on 16, on 2
/// cores. `None` where the threads could not be started: then the global pool stores too.
fn store_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        rayon::ThreadPoolBuilder::new()
            .num_threads(cores.clamp(16, 32))
            .thread_name(|i| format!("arena-store-{i}"))
            .build()
            .inspect_err(|e| tracing::warn!("no threads of their own for storing parts ({e}); they share scoring's"))
            .ok()
    })
    .as_ref()
}

/// A finished episode's score: (status, metrics, reason), as `episode::score_finished` gives it.
type Scored = (EpisodeStatus, std::collections::BTreeMap<String, f64>, Option<String>);

/// The result of an episode whose scoring panicked: failed, saying so (the panic itself is in
/// the server's log).
fn scoring_panicked(done: &Finished) -> Scored {
    tracing::error!(
        episode = done.episode.index,
        "scoring an episode panicked; it is recorded as failed"
    );
    (
        EpisodeStatus::Failed,
        Default::default(),
        Some("scoring this episode failed on the server (a panic; the server's log has the details)".into()),
    )
}

/// Wall time of the committer's parts, logged at the end (the committer's half of an
/// evaluation's breakdown; the lanes log theirs). Scoring overlaps storing.
#[derive(Default)]
struct Timings {
    score_s: f64,
    store_s: f64,
    commit_s: f64,
    /// Waiting for the merge ahead's writer to take a committed run.
    ahead_wait_s: f64,
    /// Storing's threads, summed over episodes.
    store_work: StoreWork,
    episodes: u64,
}

/// What storing one episode took on its thread (summed over a session's episodes): writing
/// its part, compressing its copy for the merge ahead, and the part's size (array values, 8
/// bytes each). Against `store_s` these say how many threads stored at once and, with the
/// size, whether the parts waited for the disk.
#[derive(Default)]
struct StoreWork {
    part_s: f64,
    compress_s: f64,
    part_mb: f64,
}

impl StoreWork {
    fn add(&mut self, other: &StoreWork) {
        self.part_s += other.part_s;
        self.compress_s += other.compress_s;
        self.part_mb += other.part_mb;
    }
}

/// Scores, stores and commits what the lanes finish until every lane has ended; returns the
/// session's merge ahead (a submission's), for [`finish`].
pub fn run_committer(ctx: &RunContext, inbox: mpsc::Receiver<Finished>) -> Option<MergeAhead> {
    let spec = &ctx.benchmark.spec;
    let metric_config = episode::metric_config(spec);
    let mut timings = Timings::default();
    let mut ahead = match &ctx.sink {
        Sink::Submission {
            submission_id, objects, ..
        } => Some(MergeAhead::start(objects, submission_id, &spec.name)),
        Sink::Practice => None,
    };
    let begun = std::time::Instant::now();
    // Episodes that finished together are scored together on every core (scoring 4096 2-second
    // episodes one by one took 17.6 s on an H100 machine's 16 cores), in batches: while one
    // batch is stored and committed in order on this thread, the next is scored beside it
    // (storing is one thread's work: the HDF5 library serialises its calls).
    let score = |batch: Vec<Finished>| -> (Vec<Finished>, Vec<Scored>, f64) {
        let started = std::time::Instant::now();
        let scored = batch
            .par_iter()
            .map(|done| {
                // A panic in scoring fails its episode, with the reason, instead of the
                // committer: the batch's claims would stay held and renewed, and the submission
                // would never complete.
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    episode::score_finished(
                        &done.trajectory.rows,
                        done.status,
                        done.reason.clone(),
                        &spec.metrics.list,
                        &metric_config,
                    )
                }))
                .unwrap_or_else(|_| scoring_panicked(done))
            })
            .collect();
        (batch, scored, started.elapsed().as_secs_f64())
    };
    // The next batch: waits for its first episode only when nothing else is to be done.
    let gather = |wait: bool| -> Option<Vec<Finished>> {
        let first = if wait {
            inbox.recv().ok()?
        } else {
            inbox.try_recv().ok()?
        };
        let mut batch = vec![first];
        while batch.len() < SCORE_BATCH {
            match inbox.try_recv() {
                Ok(done) => batch.push(done),
                Err(_) => break,
            }
        }
        Some(batch)
    };
    let mut scored: Option<(Vec<Finished>, Vec<Scored>)> = None;
    loop {
        let next = gather(scored.is_none());
        if next.is_none() && scored.is_none() {
            break; // every lane has ended and everything is committed
        }
        let next_scored = std::thread::scope(|s| {
            let scoring = next.map(|batch| s.spawn(|| score(batch)));
            if let Some((batch, scores)) = scored.take() {
                store_and_commit(ctx, batch, scores, &metric_config, ahead.as_mut(), &mut timings);
            }
            scoring.map(|h| h.join().expect("scoring does not panic"))
        });
        if let Some((batch, scores, took)) = next_scored {
            timings.score_s += took;
            scored = Some((batch, scores));
        }
    }
    let round = |s: f64| (s * 1000.0).round() / 1000.0;
    let breakdown = serde_json::json!({
        "episodes": timings.episodes, "wall_s": round(begun.elapsed().as_secs_f64()),
        "score_s": round(timings.score_s), "store_s": round(timings.store_s), "commit_s": round(timings.commit_s),
        "ahead_wait_s": round(timings.ahead_wait_s),
        "store_part_thread_s": round(timings.store_work.part_s),
        "store_compress_thread_s": round(timings.store_work.compress_s),
        "store_part_mb": timings.store_work.part_mb.round(),
    });
    tracing::info!(target: "arena_timings", "committer {breakdown}");
    ahead
}

/// Stores the trajectories of a scored batch, commits each result, hands each committed run to
/// the merge ahead, and only then tells the agent (EpisodeEnd); in the order the episodes
/// finished.
fn store_and_commit(
    ctx: &RunContext,
    batch: Vec<Finished>,
    scored: Vec<Scored>,
    metric_config: &arena_bench::metrics::MetricConfig,
    mut ahead: Option<&mut MergeAhead>,
    timings: &mut Timings,
) {
    // The trajectories move into their records.
    let submission = matches!(ctx.sink, Sink::Submission { .. });
    let mut ended: Vec<Ended> = Vec::with_capacity(batch.len());
    let mut records = Vec::with_capacity(batch.len());
    for (mut done, (status, metrics, reason)) in batch.into_iter().zip(scored) {
        let steps = done.trajectory.len().saturating_sub(1);
        let scored_until = arena_bench::metrics::scored_until(metric_config.success_rule, &metrics);
        ended.push(Ended {
            episode: done.episode,
            attempt: done.attempt,
            steps,
            status,
            metrics,
            reason: reason.clone(),
            engine: done.engine.clone(),
        });
        if submission {
            let (attempt, draft) = (done.attempt as i64, done.draft.take());
            records.push((
                attempt,
                record_of(ctx, done, status, reason.as_deref(), scored_until),
                draft,
            ));
        }
    }
    let started = std::time::Instant::now();
    let stored = match &ctx.sink {
        Sink::Submission {
            submission_id, objects, ..
        } => {
            // Part files are written on every core at once (no HDF5 in them; straight into a
            // file:// store, else then uploaded); the merge ahead's copy is compressed beside
            // them, for as many runs as it has room for (the rest wait for the final merge).
            let room = ahead.as_deref().map_or(0, MergeAhead::room);
            let write_all = || -> Vec<_> {
                records
                    .into_par_iter()
                    .enumerate()
                    .map(|(k, (attempt, record, draft))| {
                        let idx = record.episode as i64;
                        let started = std::time::Instant::now();
                        let part =
                            trajectory_store::write_part_for(objects, submission_id, idx, attempt, &record, draft);
                        let part_s = started.elapsed().as_secs_f64();
                        let bytes = record.values_len() * 8;
                        let started = std::time::Instant::now();
                        let prepared = (k < room && part.is_ok()).then(|| PreparedEpisode::new(record));
                        let work = StoreWork {
                            part_s,
                            compress_s: started.elapsed().as_secs_f64(),
                            part_mb: bytes as f64 / 1e6,
                        };
                        (idx, attempt, part, prepared, work)
                    })
                    .collect()
            };
            let written: Vec<_> = match store_pool() {
                Some(pool) => pool.install(write_all),
                None => write_all(),
            };
            for (_, _, _, _, work) in &written {
                timings.store_work.add(work);
            }
            // The parts renamed into place are on disk, their names too, before the commit
            // says they are stored: one folder sync for the batch (each part synced itself).
            let in_place = written
                .iter()
                .any(|(_, _, part, ..)| matches!(part, Ok(WrittenPart::Stored)));
            let synced = match in_place {
                true => trajectory_store::sync_stored_parts(objects, submission_id)
                    .map_err(|e| format!("syncing the folder of the episodes' files: {e}")),
                false => Ok(()),
            };
            written
                .into_iter()
                .map(|(idx, attempt, part, prepared, _)| {
                    let stored = part.and_then(|part| match part {
                        WrittenPart::Stored => synced.clone().map_err(anyhow::Error::msg),
                        WrittenPart::Scratch(scratch) => ctx.runtime.block_on(trajectory_store::put_part(
                            objects,
                            submission_id,
                            idx,
                            attempt,
                            &scratch,
                        )),
                    });
                    (stored, prepared)
                })
                .collect()
        }
        Sink::Practice => Vec::new(),
    }
    .into_iter();
    timings.store_s += started.elapsed().as_secs_f64();
    let (committed, mut prepared) = match &ctx.sink {
        Sink::Submission {
            storage, submission_id, ..
        } => {
            let submission = SubmissionRef {
                storage,
                id: submission_id,
            };
            commit_stored(ctx, &submission, &ended, stored, timings)
        }
        Sink::Practice => (vec![Some(true); ended.len()], Vec::new()),
    };
    prepared.reverse();
    for (ended, answer) in ended.into_iter().zip(committed) {
        let Ended {
            episode,
            attempt: run_attempt,
            steps,
            status,
            metrics,
            reason,
            ..
        } = ended;
        timings.episodes += 1;
        let ready = prepared.pop().flatten();
        if let Sink::Submission {
            submission_id, objects, ..
        } = &ctx.sink
        {
            let (idx, attempt) = (episode.index as i64, run_attempt as i64);
            match answer {
                Some(true) => {
                    if let (Some(ahead), Some(ready)) = (ahead.as_deref_mut(), ready) {
                        let started = std::time::Instant::now();
                        ahead.add(idx, attempt, ready);
                        timings.ahead_wait_s += started.elapsed().as_secs_f64();
                    }
                }
                Some(false) => {
                    tracing::warn!(
                        "episode {idx} is not this server's to commit any more (finished, cancelled or claimed again after its lease expired); result not counted"
                    );
                    ctx.runtime
                        .block_on(trajectory_store::discard_episode(objects, submission_id, idx, attempt));
                    continue;
                }
                None => continue,
            }
        }
        let reveal = ctx.reveal_results;
        let _ = ctx.out.send(Msg::EpisodeEnd(EpisodeEnd {
            episode_id: episode.index as u32,
            status: status_name(status).into(),
            // A hidden phase still tells the team the kind of its agent's failure.
            reason: match (reveal, reason) {
                (true, r) => r.unwrap_or_default(),
                (false, Some(r)) => crate::access::failure_kind(&r).to_string(),
                (false, None) => String::new(),
            },
            steps: steps as u32,
            metrics: if reveal && status.is_scored() {
                metrics
            } else {
                Default::default()
            },
        }));
        tracing::debug!(episode = episode.index, attempt = run_attempt, "episode committed");
    }
}

/// One finished run as the committer carries it from scoring to EpisodeEnd.
struct Ended {
    episode: arena_bench::spec::Episode,
    attempt: u32,
    /// Control steps run.
    steps: usize,
    status: EpisodeStatus,
    metrics: std::collections::BTreeMap<String, f64>,
    reason: Option<String>,
    /// The simulator that ran it ([`Finished::engine`]).
    engine: String,
}

impl Ended {
    /// The result the database keeps for this run (metrics only where the run is scored).
    fn outcome(&self) -> EpisodeOutcome {
        EpisodeOutcome {
            status: results::episode_state(self.status),
            steps: self.steps as i64,
            metrics: if self.status.is_scored() {
                self.metrics.clone()
            } else {
                Default::default()
            },
            reason: self.reason.clone(),
            engine: Some(self.engine.clone()),
        }
    }
}

/// The submission a batch is committed to.
struct SubmissionRef<'a> {
    storage: &'a crate::storage::Storage,
    id: &'a str,
}

/// Commits the runs of `ended` whose trajectory `stored` holds, all in one transaction; a run
/// whose store failed goes back to the queue instead, a server fault. Returns
/// each run's answer (Some(true) committed, Some(false) not this server's any more, None not
/// committed) and its copy prepared for the merge ahead, in `ended`'s order.
fn commit_stored(
    ctx: &RunContext,
    submission: &SubmissionRef<'_>,
    ended: &[Ended],
    mut stored: impl Iterator<Item = (anyhow::Result<()>, Option<PreparedEpisode>)>,
    timings: &mut Timings,
) -> (Vec<Option<bool>>, Vec<Option<PreparedEpisode>>) {
    let (storage, submission_id) = (submission.storage, submission.id);
    let mut answers = vec![None; ended.len()];
    let mut prepared = Vec::with_capacity(ended.len());
    let mut outcomes = Vec::with_capacity(ended.len());
    for (k, run) in ended.iter().enumerate() {
        let (idx, run_attempt) = (run.episode.index as i64, run.attempt as i64);
        let (stored, ready) = stored.next().expect("one store per episode of a submission");
        prepared.push(ready);
        if let Err(e) = stored {
            // Nothing is lost: the run goes back to the queue with the reason, a server fault
            // not charged to the agent (FAILED once the server has lost it
            // `MAX_SERVER_FAULTS` times). The error names server files and the store: the log
            // has it, the team gets the fact.
            tracing::error!("episode {idx}: could not store the trajectory: {e:#}");
            let why = "the server could not store the trajectory (details in the server log)";
            let just_this = [(idx, run_attempt)];
            let returned = db_call(&ctx.runtime, "re-queueing an episode", || {
                storage.return_episodes(submission_id, &just_this, why)
            });
            match returned {
                Ok((again, _)) => {
                    tracing::warn!(episode = idx, requeued = again == 1, "episode not committed: {why}")
                }
                Err(e) => {
                    // Its lease runs out and it is claimed again.
                    tracing::error!("re-queueing episode {idx}: {e}");
                    storage.forget_claim(submission_id, idx, run_attempt);
                }
            }
            continue;
        }
        outcomes.push((k, idx, run_attempt, run.outcome()));
    }
    if outcomes.is_empty() {
        return (answers, prepared);
    }
    let runs: Vec<(i64, i64, &EpisodeOutcome)> = outcomes
        .iter()
        .map(|(_, idx, attempt, outcome)| (*idx, *attempt, outcome))
        .collect();
    let started = std::time::Instant::now();
    let result = db_call(&ctx.runtime, "committing episodes", || {
        storage.commit_episodes(submission_id, &runs)
    });
    timings.commit_s += started.elapsed().as_secs_f64();
    match result {
        Ok(done) => {
            for ((k, ..), answer) in outcomes.iter().zip(done) {
                answers[*k] = Some(answer);
            }
        }
        Err(e) => {
            // Not counted, not lost: their leases run out and they are claimed again.
            tracing::error!("committing {} episodes: {e}", runs.len());
            for (_, idx, attempt, _) in &outcomes {
                storage.forget_claim(submission_id, *idx, *attempt);
            }
        }
    }
    (answers, prepared)
}

/// The episode's HDF5 record; takes the trajectory's arrays rather than copying them.
fn record_of(
    ctx: &RunContext,
    done: Finished,
    status: EpisodeStatus,
    reason: Option<&str>,
    scored_until_s: Option<f64>,
) -> EpisodeRecord {
    let t = done.trajectory;
    EpisodeRecord {
        episode: done.episode.index as u32,
        motion: ctx.benchmark.motion_name(&done.episode).to_string(),
        category: ctx.benchmark.category(&done.episode).to_string(),
        seed: done.episode.seed,
        dr_level: ctx.benchmark.spec.episodes.dr_level as u32,
        status: status_name(status).to_string(),
        reason: reason.unwrap_or_default().to_string(),
        start_s: done.episode.start_s,
        duration_s: done.episode.duration_s,
        scored_until_s,
        rows: t.rows,
    }
}

/// The Disconnect reason of a session that ran every episode it could claim while others are
/// not final yet (docs/protocol.md §9): reconnecting resumes them.
pub const EPISODES_PENDING: &str = "episodes_pending";

/// The merge of a submission this session completed, to run once the session's outcome is
/// delivered ([`PendingMerge::run`]): the agent, its team's session count and the next
/// session need not wait for it.
pub struct PendingMerge {
    /// Held until the merged file is stored: downloads on this server wait for it.
    merging: crate::writes_in_flight::Writing,
    ahead: Option<MergeAhead>,
}

impl PendingMerge {
    /// Merges the submission's runs into its trajectory file ([`merge_completed`]).
    pub fn run(self, ctx: &RunContext) {
        let Sink::Submission {
            storage,
            submission_id,
            objects,
            ..
        } = &ctx.sink
        else {
            return;
        };
        let ahead = self.ahead.and_then(MergeAhead::finish);
        ctx.runtime.block_on(merge_completed(
            storage,
            objects,
            &ctx.benchmark.spec.name,
            submission_id,
            ahead,
        ));
        drop(self.merging);
    }
}

/// After the lanes and the committer stop: completes the submission when every episode is final
/// (report from the stored rows, so episodes of earlier sessions count exactly once) and tells
/// the agent; its trajectories are merged after that, by the returned [`PendingMerge`].
/// `ahead`: the session's merge ahead, from [`run_committer`].
pub fn finish(ctx: &RunContext, lanes: &[LaneEnd], ahead: Option<MergeAhead>) -> (RunOutcome, Option<PendingMerge>) {
    if let Some(LaneEnd::Error(e)) = lanes.iter().find(|l| matches!(l, LaneEnd::Error(_))) {
        return (RunOutcome::Error(e.clone()), None);
    }
    let Sink::Submission {
        storage,
        submission_id,
        objects,
        ..
    } = &ctx.sink
    else {
        return (RunOutcome::Stopped, None);
    };
    // From before the status says COMPLETED until the merged file is stored, a download of
    // this server waits for it rather than finding none.
    let merging = objects
        .writes_in_flight()
        .begin(&crate::objects::trajectory_key(submission_id));
    // A database restarting meanwhile is waited for (every step below is idempotent).
    let started = std::time::Instant::now();
    let mut retried = false;
    let complete = loop {
        let attempt = ctx.runtime.block_on(complete_submission(
            storage,
            objects,
            &ctx.benchmark.spec,
            submission_id,
        ));
        match attempt {
            Err(e)
                if e.downcast_ref::<StorageError>().is_some_and(StorageError::is_transient)
                    && started.elapsed() < super::DB_RETRY_FOR =>
            {
                tracing::warn!("completing submission {submission_id}: {e:#}; retrying");
                retried = true;
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
            other => break other,
        }
    };
    match complete {
        Ok(Some(Completion { status, completed_now })) => {
            let reason = if status == SubmissionStatus::Completed {
                "submission_complete"
            } else {
                "submission_cancelled"
            };
            // The agent learns what became of every episode, those it did not see end too.
            let (scored, failed) = match ctx.runtime.block_on(storage.final_counts(submission_id)) {
                Ok(counts) => counts,
                Err(e) => {
                    tracing::warn!(submission = %submission_id, "counting its final episodes: {e}");
                    (0, 0)
                }
            };
            let _ = ctx.out.send(Msg::Disconnect(Disconnect {
                reason: reason.into(),
                submission_status: status.as_str().into(),
                episodes_scored: scored as u32,
                episodes_failed: failed as u32,
            }));
            // A try that failed may have committed the status before its error: this session
            // completed it then, and its merge is this session's.
            let ours = completed_now || (retried && status == SubmissionStatus::Completed);
            let merge = ours.then_some(PendingMerge { merging, ahead });
            let outcome = match status {
                SubmissionStatus::Completed => RunOutcome::SubmissionComplete,
                _ => RunOutcome::SubmissionCancelled,
            };
            (outcome, merge)
        }
        Ok(None) => {
            if lanes.iter().all(|l| *l == LaneEnd::Drained) {
                // The agent is still there and nothing is left to claim, yet some episodes are
                // not final: queued again after the server failed to store the last ones, or
                // held by another replica's claim until its lease runs out. Say so: both SDKs
                // reconnect (with their back-off) and resume them.
                // A stopping server claims nothing more: that is its stop, which both SDKs
                // wait out (`shutdown`), not episodes to resume after a back-off.
                let reason = if storage.is_stopping() {
                    crate::gateway::SHUTDOWN
                } else {
                    tracing::info!(submission = %submission_id, "no episode left to claim but some are not final; the agent is asked to resume later");
                    EPISODES_PENDING
                };
                let _ = ctx.out.send(Msg::Disconnect(Disconnect {
                    reason: reason.into(),
                    submission_status: String::new(),
                    ..Default::default()
                }));
            }
            (RunOutcome::Stopped, None)
        }
        Err(e) => (
            RunOutcome::Error(format!("finishing submission {submission_id}: {e:#}")),
            None,
        ),
    }
}

/// Completes a submission whose episodes are all final: its report into the store, then
/// COMPLETED with the report and leaderboard summary. None while episodes are left. Run at the
/// end of a session, by a starting server for submissions whose server stopped between the
/// last episode and this ([`crate::state::AppState::open`]), and by the idle expiry's look for
/// one whose completion failed while its server lived. The trajectories are merged after
/// it ([`merge_completed`]): the agent and the leaderboard need not wait for a file of
/// hundreds of megabytes, and the runs' parts are the durable copy until it is stored.
pub async fn complete_submission(
    storage: &crate::storage::Storage,
    objects: &crate::objects::Objects,
    spec: &arena_bench::spec::BenchmarkSpec,
    submission_id: &str,
) -> anyhow::Result<Option<Completion>> {
    let ended = |status| Completion {
        status,
        completed_now: false,
    };
    let (pending, running, _) = storage.episode_counts(submission_id).await?;
    if pending > 0 || running > 0 {
        return Ok::<_, anyhow::Error>(None);
    }
    let submission = storage
        .submission(submission_id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("submission {submission_id} vanished"))?;
    // Already final: completed by an earlier session, or cancelled (by the organiser, or as
    // abandoned) while this session ran: what it committed joins the submission's file.
    if submission.status.is_final() {
        if submission.status == SubmissionStatus::Failed
            && let Err(e) = trajectory_store::settle_failed(storage, objects, submission_id).await
        {
            tracing::warn!("submission {submission_id}: merging the runs of a failed submission: {e:#}");
        }
        return Ok(Some(ended(submission.status)));
    }
    let rows = storage.episodes(submission_id).await?;
    let report = results::report(spec, &submission, &rows);
    let json = serde_json::to_string(&report)?;
    // The report first, then the status: a replica that dies in between leaves the submission
    // open, and whichever session ends it next does this again (every step is idempotent).
    objects
        .put(
            &crate::objects::report_key(submission_id),
            serde_json::to_vec_pretty(&report)?,
        )
        .await?;
    let summary = serde_json::to_string(&crate::leaderboard::ReportSummary::of(&report))?;
    match storage.complete_submission(submission_id, &json, &summary).await {
        Ok(()) => {}
        // Finished meanwhile: completed by another session (another replica), or cancelled
        // (the organiser, the idle expiry) between the report and here. Say which: a cancelled
        // one is not COMPLETED, and its parts are still read by the cancel's own merge.
        Err(StorageError::Conflict(_)) => {
            return match storage.submission(submission_id).await? {
                Some(s) if s.status.is_final() => Ok(Some(ended(s.status))),
                _ => Ok(None),
            };
        }
        Err(e) => return Err(e.into()),
    }
    Ok(Some(Completion {
        status: SubmissionStatus::Completed,
        completed_now: true,
    }))
}

/// A final submission, as [`complete_submission`] found or left it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Completion {
    pub status: SubmissionStatus,
    /// This call marked it COMPLETED, so its merge is this caller's to run; false when it was
    /// final already: ended by another session or replica, which merges it (or, had that one
    /// stopped first, the next start's sweep), or cancelled.
    pub completed_now: bool,
}

/// Merges a COMPLETED submission's runs into its trajectory file, then removes the runs' part
/// files. `ahead`: what the ending session's merge ahead wrote ([`trajectory_store::merge`]).
/// A merge that fails is logged and leaves the parts: downloads say the file is not merged yet,
/// the pages read each episode from its part, and the merge is tried again a minute later (then
/// less often, while the server lives) and at the server's next start
/// ([`crate::state::AppState::open`]).
pub async fn merge_completed(
    storage: &crate::storage::Storage,
    objects: &crate::objects::Objects,
    benchmark: &str,
    submission_id: &str,
    ahead: Option<AheadWritten>,
) {
    let Err(e) = merge_and_clean(storage, objects, benchmark, submission_id, ahead).await else {
        return;
    };
    tracing::warn!(
        "submission {submission_id}: merging its trajectories failed: {e:#}; its runs stay stored one file each, and the merge is tried again"
    );
    let (storage, objects) = (storage.clone(), objects.clone());
    let (benchmark, submission_id) = (benchmark.to_string(), submission_id.to_string());
    tokio::spawn(async move { retry_merge(&storage, &objects, &benchmark, &submission_id).await });
}

/// [`merge_completed`] without its retries, for a periodic look that is itself the retry
/// (`state::sweep_unmerged`): whether a merged file holds the runs now.
pub async fn merge_completed_once(
    storage: &crate::storage::Storage,
    objects: &crate::objects::Objects,
    benchmark: &str,
    submission_id: &str,
) -> bool {
    match merge_and_clean(storage, objects, benchmark, submission_id, None).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(
                "submission {submission_id}: merging its trajectories failed: {e:#}; its runs stay stored one file each until the next look"
            );
            false
        }
    }
}

/// The first wait before a failed merge is tried again, doubled after each failure up to
/// [`MERGE_RETRY_MAX`], for [`MERGE_RETRIES`] tries (about 75 minutes); after them the
/// server's next start merges it.
const MERGE_RETRY_FIRST: std::time::Duration = std::time::Duration::from_secs(60);
const MERGE_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(900);
const MERGE_RETRIES: usize = 8;

/// Tries a failed merge again until it is stored (by this or another session), while the server
/// lives, at most [`MERGE_RETRIES`] times.
async fn retry_merge(storage: &crate::storage::Storage, objects: &crate::objects::Objects, benchmark: &str, id: &str) {
    let key = crate::objects::trajectory_key(id);
    let mut wait = MERGE_RETRY_FIRST;
    for _ in 0..MERGE_RETRIES {
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(MERGE_RETRY_MAX);
        if matches!(trajectory_store::has_parts(objects, id).await, Ok(false)) {
            return; // merged and cleaned up meanwhile (another session, a restart's sweep)
        }
        let Some(_merging) = objects.writes_in_flight().try_begin(&key) else {
            continue; // another session of this server is merging it
        };
        match merge_and_clean(storage, objects, benchmark, id, None).await {
            Ok(()) => {
                tracing::info!("submission {id}: its runs are merged now");
                return;
            }
            Err(e) => tracing::warn!("submission {id}: merging its trajectories failed again: {e:#}"),
        }
    }
    tracing::warn!("submission {id}: its runs stay stored one file each; the server's next start merges them");
}

/// The merge and the parts' removal of [`merge_completed`]; an error when no merged file holds
/// the runs afterwards (a merge by another session that deleted the runs meanwhile is no error).
async fn merge_and_clean(
    storage: &crate::storage::Storage,
    objects: &crate::objects::Objects,
    benchmark: &str,
    submission_id: &str,
    ahead: Option<AheadWritten>,
) -> anyhow::Result<()> {
    let merged = async {
        let rows = storage.episodes(submission_id).await?;
        trajectory_store::merge(objects, submission_id, benchmark, &rows, ahead).await
    };
    let Err(e) = merged.await else {
        remove_merged_parts(objects, submission_id).await;
        return Ok(());
    };
    // Another session (another replica) may have merged it and deleted the runs meanwhile.
    let parts = trajectory_store::has_parts(objects, submission_id).await;
    let merged_key = crate::objects::trajectory_key(submission_id);
    if matches!(parts, Ok(false)) && objects.exists(&merged_key).await.unwrap_or(false) {
        tracing::info!("submission {submission_id}: merged by another session meanwhile");
        return Ok(());
    }
    Err(e)
}

/// Removes the runs' part files of a completed submission whose merged file is stored (a
/// missing file keeps them: another session may still be merging). The callers know that file
/// holds every run: their own merge stored it, or [`trajectory_store::merged_is_current`]
/// said so. Only
/// cleanup, after the agent has been told (deleting a 1024-episode submission's parts took
/// about 0.15 s): a server that stops in between leaves them, as a failed deletion does
/// (logged), and its next start removes them.
pub async fn remove_merged_parts(objects: &crate::objects::Objects, submission_id: &str) {
    match objects.exists(&crate::objects::trajectory_key(submission_id)).await {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => {
            tracing::warn!("submission {submission_id}: per-episode files left behind: {e}");
            return;
        }
    }
    if let Err(e) = trajectory_store::delete_parts(objects, submission_id).await {
        tracing::warn!("submission {submission_id}: per-episode files left behind: {e}");
    }
}
