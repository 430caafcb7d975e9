//! How a session's lanes end when the server, not the agent, is the cause:
//! - a lane stopped by a server-side error gives its claims back at once, not charged to the
//!   agent: the episodes it was running and a claimed episode its benchmark lacks as server
//!   faults, the claim's other episodes (never started) charged to nobody, instead of staying
//!   RUNNING under a lease this server renews until it restarts;
//! - lanes that ran out of episodes to claim while some are not final (held by another
//!   replica's lease, or queued again after a failed store) tell the agent so, and it resumes;
//! - a stopping server's sessions charge nobody for the runs they cut, and say `shutdown`.

mod common;

use arena_bench::spec::shipped_dir;
use arena_sdk::protocol::{Action, EpisodeAction, GetAction, Msg};
use arena_server::catalog::{Catalog, LoadedBenchmark};
use arena_server::objects::Objects;
use arena_server::orchestrator::committer::EPISODES_PENDING;
use arena_server::orchestrator::runner::new_episodes;
use arena_server::orchestrator::warm::WarmSimulators;
use arena_server::orchestrator::{self, JobSource, RunContext, RunOutcome, Sink};
use arena_server::storage::{EpisodeState, NewSubmission, Storage, hash_token};
use common::tmp;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A database with team "red" and a submission `id` of g1-smoke's six episodes; the benchmark.
async fn submission_of_g1_smoke(dir: &Path, id: &str) -> (Storage, Arc<LoadedBenchmark>) {
    let storage = Storage::connect(&database_url(dir)).await.unwrap();
    let catalog = Catalog::new(shipped_dir(), dir.to_path_buf());
    let full = catalog.load("g1-smoke").unwrap();
    assert_eq!(full.episodes.len(), 6);
    let team = storage.create_team("red", &hash_token("red-secret")).await.unwrap();
    let submission = NewSubmission {
        id: id.into(),
        team_id: team.id,
        benchmark: "g1-smoke".into(),
        agent_name: "zeros".into(),
        phase_id: None,
        benchmark_version: 1,
        benchmark_definition: None,
        connect_key: None,
    };
    storage
        .create_submission(&submission, &new_episodes(&full))
        .await
        .unwrap();
    (storage, full)
}

fn database_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("arena.db").display())
}

/// Runs one lane of `batch` envs on `benchmark` for submission `id` with an agent that sends
/// zero actions, calling `on_request` with each GetAction first: when it returns true, the
/// agent leaves right after its answer (the gateway drops the lanes' inboxes as when a
/// connection ends). Returns the outcome and every message the agent got.
async fn run_zero_agent(
    dir: &Path,
    storage: &Storage,
    id: &str,
    benchmark: Arc<LoadedBenchmark>,
    batch: usize,
    mut on_request: impl FnMut(&GetAction) -> bool,
) -> (RunOutcome, Vec<Msg>) {
    let (out, mut to_agent) = arena_server::outbox::outbox();
    let ctx = Arc::new(RunContext {
        benchmark,
        gains: None,
        out,
        step_timeout: Duration::from_secs(30),
        hosted: false,
        answers_heard: Default::default(),
        unanswered_since_ms: Default::default(),
        ending: Default::default(),
        session_id: "ses-test".into(),
        lanes: 1,
        batch,
        sim_threads: 1,
        backend: arena_sim::SimBackend::Cpu,
        warm: Arc::new(WarmSimulators::new(0)),
        sink: Sink::Submission {
            storage: storage.clone(),
            submission_id: id.into(),
            objects: Objects::open("", dir, Duration::from_secs(1)).unwrap(),
            max_attempts: 3,
        },
        source: JobSource::Claims,
        reveal_results: true,
        reference_value_bytes: None,
        row_value_bytes: None,
        goal_rows_once: false,
        runtime: tokio::runtime::Handle::current(),
    });
    let mut handle = orchestrator::start(ctx);
    let mut inbox = Some(handle.action_inboxes.remove(0));
    let mut received = Vec::new();
    let outcome = loop {
        tokio::select! {
            outcome = &mut handle.outcome => break outcome.unwrap(),
            msg = to_agent.recv() => {
                if let (Some(Msg::GetAction(g)), Some(to_lane)) = (&msg, &inbox) {
                    let leave = on_request(g);
                    let actions = g
                        .observations
                        .iter()
                        .map(|o| EpisodeAction { episode_id: o.episode_id, values: vec![0.0; 29] })
                        .collect();
                    // The lane may have stopped meanwhile.
                    let _ = to_lane.send(Action { step: g.step, actions });
                    if leave {
                        inbox = None;
                    }
                }
                received.extend(msg);
            }
        }
    };
    // What was sent just before the outcome.
    while let Some(msg) = to_agent.try_recv() {
        received.push(msg);
    }
    (outcome, received)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_error_returns_its_claims() {
    let dir = tmp("lane-error");
    let id = "sub-lane-error";
    let (storage, full) = submission_of_g1_smoke(&dir, id).await;
    // The lane's benchmark lacks episode 3, which the submission has: claiming it is an error
    // of the server's (as after an edited benchmark file), met while other episodes run.
    let partial = Arc::new(LoadedBenchmark {
        spec: full.spec.clone(),
        path: full.path.clone(),
        library: full.library.clone(),
        episodes: full.episodes.iter().filter(|e| e.index != 3).copied().collect(),
        definition: full.definition.clone(),
    });
    let (outcome, _) = run_zero_agent(&dir, &storage, id, partial, 2, |_| false).await;
    match &outcome {
        RunOutcome::Error(why) => assert!(why.contains("does not have"), "{why}"),
        other => panic!("expected the lane's error, got {other:?}"),
    }
    let rows = storage.episodes(id).await.unwrap();
    let running: Vec<_> = rows.iter().filter(|r| r.status == EpisodeState::Running).collect();
    assert!(
        running.is_empty(),
        "episodes left RUNNING after the lane's error: {running:?}"
    );
    // Episode 3 and the episode running beside it went back, a server fault each; another
    // episode of episode 3's claim, had there been one, never started: charged to nobody.
    // None of it is the agent's.
    let returned: Vec<_> = rows
        .iter()
        .filter(|r| r.reason.as_deref().is_some_and(|why| why.starts_with("the server: ")))
        .collect();
    assert!(returned.len() >= 2, "{rows:?}");
    for r in &returned {
        assert_eq!((r.status, r.attempts), (EpisodeState::Pending, 1), "{r:?}");
        assert_eq!(r.server_faults + r.uncharged_runs, 1, "{r:?}");
    }
    let third = returned.iter().find(|r| r.idx == 3).expect("episode 3 went back");
    assert_eq!(third.server_faults, 1, "{third:?}");
    assert!(returned.iter().any(|r| r.idx != 3 && r.server_faults == 1), "{rows:?}");
    // The episodes that ended before the error keep their results.
    assert!(rows.iter().any(|r| r.status.is_final()), "{rows:?}");
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lanes_out_of_claims_with_episodes_pending_say_so() {
    let dir = tmp("lane-pending");
    let id = "sub-lane-pending";
    let (storage, full) = submission_of_g1_smoke(&dir, id).await;
    let last = full.episodes.last().unwrap();
    let (last_idx, last_steps) = (last.index as u32, arena_runner::episode::episode_steps(last));
    // Near the end of the last episode the store stops taking this submission's parts (a file
    // where their folder was): the runs that end then cannot be stored and are queued again,
    // after the lane has found nothing left to claim.
    let parts = dir.join("trajectories").join(id);
    let mut blocked = false;
    let block_the_store = |g: &GetAction| {
        let near_end = g
            .observations
            .iter()
            .any(|o| o.episode_id == last_idx && o.episode_step + 5 >= last_steps);
        if near_end && !blocked {
            blocked = true;
            std::fs::rename(&parts, dir.join("parts-moved-away")).unwrap();
            std::fs::write(&parts, b"not a folder").unwrap();
        }
        false
    };
    let (outcome, received) = run_zero_agent(&dir, &storage, id, full.clone(), 2, block_the_store).await;
    assert_eq!(outcome, RunOutcome::Stopped);
    match received.last() {
        Some(Msg::Disconnect(d)) => {
            assert_eq!(
                (d.reason.as_str(), d.submission_status.as_str()),
                (EPISODES_PENDING, "")
            );
        }
        other => panic!(
            "expected a disconnect saying episodes are pending, got {:?}",
            other.map(arena_sdk::protocol::type_name)
        ),
    }
    let rows = storage.episodes(id).await.unwrap();
    let last_row = rows.iter().find(|r| r.idx == last_idx as i64).unwrap();
    // The server's fault, not the agent's.
    assert_eq!(
        (last_row.status, last_row.attempts, last_row.server_faults),
        (EpisodeState::Pending, 1, 1),
        "{rows:?}"
    );
    assert!(
        last_row
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("could not store the trajectory")),
        "{last_row:?}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_claims_nothing_for_an_agent_that_has_left() {
    let dir = tmp("lane-left");
    let id = "sub-lane-left";
    let (storage, full) = submission_of_g1_smoke(&dir, id).await;
    let first_steps = arena_runner::episode::episode_steps(&full.episodes[0]);
    // The agent answers episode 0's last step and leaves at once: the lane then finds its inbox
    // closed while its channel to the agent is still open (the writer has not noticed).
    let (outcome, received) = run_zero_agent(&dir, &storage, id, full.clone(), 1, |g| {
        g.observations
            .iter()
            .any(|o| o.episode_id == 0 && o.episode_step + 1 == first_steps)
    })
    .await;
    assert_eq!(outcome, RunOutcome::Stopped);
    let started: Vec<u32> = received
        .iter()
        .filter_map(|m| match m {
            Msg::EpisodeStart(s) => Some(s.episodes.iter().map(|e| e.episode_id)),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(started, [0], "no episode is started for an agent that has left");
    let rows = storage.episodes(id).await.unwrap();
    assert_eq!(rows[0].status, EpisodeState::Completed, "{rows:?}");
    // Claimed, never started: charged to nobody.
    for r in &rows[1..] {
        assert_eq!(
            (r.status, r.attempts - r.uncharged_runs, r.server_faults),
            (EpisodeState::Pending, 0, 0),
            "{r:?}"
        );
    }
    std::fs::remove_dir_all(dir).ok();
}

/// A stopping server whose give-back could not reach the database: the sessions it then ends
/// (the gateway drops their lanes' inboxes) give their running episodes back charged to
/// nobody, not as the agent's lost connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_the_stop_ends_charges_nobody() {
    let dir = tmp("lane-stop-ends");
    let id = "sub-lane-stop-ends";
    let (storage, full) = submission_of_g1_smoke(&dir, id).await;
    let stopping = storage.clone();
    let (outcome, _) = run_zero_agent(&dir, &storage, id, full, 2, |g| {
        // Mid-run: the stop (its give-back refused), then the session ends.
        let now = g.step == 10;
        if now {
            stopping.stop_claiming();
        }
        now
    })
    .await;
    assert_eq!(outcome, RunOutcome::Stopped);
    let rows = storage.episodes(id).await.unwrap();
    let cut: Vec<_> = rows
        .iter()
        .filter(|r| r.status == EpisodeState::Pending && r.attempts == 1)
        .collect();
    assert_eq!(cut.len(), 2, "the batch running at the stop: {rows:?}");
    for r in &cut {
        assert_eq!((r.uncharged_runs, r.server_faults), (1, 0), "{r:?}");
        assert_eq!(
            r.reason.as_deref(),
            Some(arena_server::storage::SERVER_STOPPED),
            "{r:?}"
        );
    }
    std::fs::remove_dir_all(dir).ok();
}

/// Lanes that find nothing to claim because the server is stopping tell the agent `shutdown`
/// (which both SDKs wait out), not `episodes_pending`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lanes_of_a_stopping_server_say_shutdown() {
    let dir = tmp("lane-stop-drained");
    let id = "sub-lane-stop-drained";
    let (storage, full) = submission_of_g1_smoke(&dir, id).await;
    let stopping = storage.clone();
    let (outcome, received) = run_zero_agent(&dir, &storage, id, full, 2, |g| {
        if g.step == 10 {
            stopping.stop_claiming();
        }
        false
    })
    .await;
    assert_eq!(outcome, RunOutcome::Stopped);
    match received.last() {
        Some(Msg::Disconnect(d)) => assert_eq!(d.reason, arena_server::gateway::SHUTDOWN),
        other => panic!(
            "expected a disconnect saying the server stops, got {:?}",
            other.map(arena_sdk::protocol::type_name)
        ),
    }
    // The batch running at the stop finished; nothing more was claimed.
    let rows = storage.episodes(id).await.unwrap();
    assert_eq!(rows.iter().filter(|r| r.status.is_final()).count(), 2, "{rows:?}");
    assert!(rows.iter().skip(2).all(|r| r.attempts == 0), "{rows:?}");
    std::fs::remove_dir_all(dir).ok();
}
