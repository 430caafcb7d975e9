//! A lane stopped by a server-side error gives its claims back: the episodes it was running and
//! the claim it could not start go back to PENDING at once, their attempts not counted, instead
//! of staying RUNNING under a lease this server renews until it restarts.

mod common;

use arena_bench::spec::shipped_dir;
use arena_sdk::protocol::{Action, EpisodeAction, Msg};
use arena_server::catalog::{Catalog, LoadedBenchmark};
use arena_server::objects::Objects;
use arena_server::orchestrator::runner::new_episodes;
use arena_server::orchestrator::warm::WarmSimulators;
use arena_server::orchestrator::{self, JobSource, RunContext, RunOutcome, Sink};
use arena_server::storage::{EpisodeState, NewSubmission, Storage, hash_token};
use common::tmp;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_error_returns_its_claims() {
    let dir = tmp("lane-error");
    let storage = Storage::connect(&format!("sqlite://{}", dir.join("arena.db").display()))
        .await
        .unwrap();
    let catalog = Catalog::new(shipped_dir(), dir.clone());
    let full = catalog.load("g1-smoke").unwrap();
    assert_eq!(full.episodes.len(), 6);
    let team = storage.create_team("red", &hash_token("red-secret")).await.unwrap();
    let submission = NewSubmission {
        id: "sub-lane-error".into(),
        team_id: team.id,
        benchmark: "g1-smoke".into(),
        agent_name: "zeros".into(),
        phase_id: None,
    };
    storage
        .create_submission(&submission, &new_episodes(&full))
        .await
        .unwrap();
    // The lane's benchmark lacks episode 3, which the submission has: claiming it is an error
    // of the server's (as after an edited benchmark file), met while other episodes run.
    let partial = Arc::new(LoadedBenchmark {
        spec: full.spec.clone(),
        path: full.path.clone(),
        library: full.library.clone(),
        episodes: full.episodes.iter().filter(|e| e.index != 3).copied().collect(),
    });
    let (out, mut to_agent) = tokio::sync::mpsc::unbounded_channel();
    let ctx = Arc::new(RunContext {
        benchmark: partial,
        gains: None,
        out,
        step_timeout: Duration::from_secs(30),
        lanes: 1,
        batch: 2,
        sim_threads: 1,
        backend: arena_sim::SimBackend::Cpu,
        warm: Arc::new(WarmSimulators::new(0)),
        sink: Sink::Submission {
            storage: storage.clone(),
            submission_id: submission.id.clone(),
            objects: Objects::open("", &dir, Duration::from_secs(1)).unwrap(),
            max_attempts: 3,
        },
        source: JobSource::Claims,
        reveal_results: true,
        reference_value_bytes: None,
        runtime: tokio::runtime::Handle::current(),
    });
    let mut handle = orchestrator::start(ctx);
    let inbox = handle.action_inboxes.remove(0);
    // The agent: zero actions for every episode asked about.
    let outcome = loop {
        tokio::select! {
            outcome = &mut handle.outcome => break outcome.unwrap(),
            msg = to_agent.recv() => {
                if let Some(Msg::GetAction(g)) = msg {
                    let actions = g
                        .observations
                        .iter()
                        .map(|o| EpisodeAction { episode_id: o.episode_id, values: vec![0.0; 29] })
                        .collect();
                    // The lane may have stopped meanwhile.
                    let _ = inbox.send(Action { step: g.step, actions });
                }
            }
        }
    };
    match &outcome {
        RunOutcome::Error(why) => assert!(why.contains("does not have"), "{why}"),
        other => panic!("expected the lane's error, got {other:?}"),
    }
    let rows = storage.episodes(&submission.id).await.unwrap();
    let running: Vec<_> = rows.iter().filter(|r| r.status == EpisodeState::Running).collect();
    assert!(
        running.is_empty(),
        "episodes left RUNNING after the lane's error: {running:?}"
    );
    // Episode 3 and the episode running beside it went back, their attempts not counted.
    let returned: Vec<_> = rows
        .iter()
        .filter(|r| r.reason.as_deref().is_some_and(|why| why.starts_with("the server: ")))
        .collect();
    assert!(returned.len() >= 2, "{rows:?}");
    for r in &returned {
        assert_eq!((r.status, r.attempts), (EpisodeState::Pending, 0), "{r:?}");
    }
    assert!(returned.iter().any(|r| r.idx == 3), "{rows:?}");
    // The episodes that ended before the error keep their results.
    assert!(rows.iter().any(|r| r.status.is_final()), "{rows:?}");
    std::fs::remove_dir_all(dir).ok();
}
