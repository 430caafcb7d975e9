//! The metadata storage layer on both engines: every scenario runs once on a fresh SQLite file
//! and once on a fresh PostgreSQL database (created under `ARENA_TEST_DATABASE_URL`, dropped
//! afterwards). Without that variable the PostgreSQL half is skipped, unless
//! `ARENA_REQUIRE_POSTGRES=1`, in which case it fails.

use std::collections::BTreeMap;
use std::path::PathBuf;

use arena_server::storage::{
    Engine, EpisodeOutcome, EpisodeRow, EpisodeState, Expired, HostedPolicy, NewEpisode, NewSubmission, Phase, Quota,
    Storage, StorageError, SubmissionStatus, Visibility, hash_token, now_ms,
};

mod common;

use common::server::PgDb;
use sqlx::Connection;

/// A fresh database for one test; removed when dropped.
struct TestDb {
    url: String,
    /// The SQLite test's folder; a PostgreSQL database is dropped by its `PgDb`.
    dir: Option<PathBuf>,
    _postgres: Option<PgDb>,
}

impl TestDb {
    fn sqlite(test: &str) -> TestDb {
        let dir = std::env::temp_dir().join(format!(
            "arena-storage-{}-{test}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        // The database lives in a directory that does not exist yet: connect creates it.
        let path = dir.join("nested").join("arena.db");
        TestDb {
            url: format!("sqlite://{}", path.display()),
            dir: Some(dir),
            _postgres: None,
        }
    }

    /// None (after saying so) when PostgreSQL is not configured and not required.
    async fn postgres(test: &str) -> Option<TestDb> {
        let db = PgDb::create(test)?;
        Some(TestDb {
            url: db.url.clone(),
            dir: None,
            _postgres: Some(db),
        })
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            std::fs::remove_dir_all(dir).ok();
        }
    }
}

/// Runs an `async fn(url: String, engine: Engine)` scenario on SQLite and on PostgreSQL.
macro_rules! on_both_engines {
    ($($scenario:ident),* $(,)?) => {
        $(
            mod $scenario {
                use super::*;

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    let db = TestDb::sqlite(stringify!($scenario));
                    super::$scenario(db.url.clone(), Engine::Sqlite).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    let Some(db) = TestDb::postgres(stringify!($scenario)).await else { return };
                    super::$scenario(db.url.clone(), Engine::Postgres).await;
                }
            }
        )*
    };
}

on_both_engines!(
    teams,
    submission_lifecycle,
    episodes_are_counted_once,
    nan_metrics_round_trip,
    a_completion_writes_its_summary_and_stamp_at_once,
    sessions_are_kept_in_order,
    hosted_policies_and_the_unfinished_ones,
    requeue_until_attempts_run_out,
    recover_after_restart,
    reopened_database_keeps_data,
    concurrent_claims_give_one_winner,
    leases_between_replicas,
    a_replica_whose_clock_is_off_takes_no_live_claim,
    no_claim_expires_at_once_after_a_database_outage,
    returned_after_a_server_error,
    server_faults_are_not_the_agents,
    batched_claims_take_the_lowest_pending_in_order,
    batched_commits_answer_each_run_as_single_ones,
    claimers_on_many_connections_share_a_submission,
    bad_arguments_are_refused,
    tokens_and_members,
    challenges_and_phases,
    quotas_per_day_and_in_total,
    concurrent_submissions_respect_the_quota,
    concurrent_submissions_outside_a_quota_are_all_created,
    legacy_team_tokens_survive_the_migration,
    an_upgrade_repairs_the_migration_edited_after_release,
    idle_submissions_and_their_expiry,
    a_stale_runs_cleanup_leaves_the_newer_claim,
    own_runs_committed_meanwhile_are_not_another_servers,
    a_version_takes_one_definition,
    a_connect_key_names_one_submission_of_its_team,
    a_submission_ended_while_its_claims_ran_is_told_to_their_holder,
);

async fn open(url: &str, engine: Engine) -> Storage {
    let storage = Storage::connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    assert_eq!(storage.engine(), engine);
    storage
}

fn episode(idx: i64) -> NewEpisode {
    NewEpisode {
        idx,
        motion: format!("motion_{}", idx % 7),
        category: if idx % 2 == 0 { "walk".into() } else { "dance".into() },
        start_s: 0.25 * idx as f64,
        duration_s: 10.0 + 1.0 / 3.0,
        seed: u64::MAX - idx as u64,
        dr_level: idx % 3,
    }
}

fn new_submission(id: &str, team_id: i64, benchmark: &str) -> NewSubmission {
    NewSubmission {
        id: id.into(),
        team_id,
        benchmark: benchmark.into(),
        agent_name: format!("agent-of-{id}"),
        phase_id: None,
        benchmark_version: 1,
        benchmark_definition: None,
        connect_key: None,
    }
}

fn outcome(status: EpisodeState, steps: i64) -> EpisodeOutcome {
    EpisodeOutcome {
        status,
        steps,
        metrics: [("mpjpe_g".to_string(), 0.125), ("success".to_string(), 1.0)]
            .into_iter()
            .collect(),
        reason: None,
        engine: Some("cpu (MuJoCo test)".into()),
    }
}

/// A team and a submission with `n` episodes.
async fn setup(storage: &Storage, team: &str, sub: &str, n: i64) -> i64 {
    let team = storage
        .create_team(team, &hash_token(&format!("token-{team}")))
        .await
        .unwrap();
    let episodes: Vec<NewEpisode> = (0..n).map(episode).collect();
    storage
        .create_submission(&new_submission(sub, team.id, "bench-a"), &episodes)
        .await
        .unwrap();
    team.id
}

async fn teams(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    assert!(storage.teams().await.unwrap().is_empty());
    let before = now_ms();
    let red = storage.create_team("red", &hash_token("red-secret")).await.unwrap();
    let blue = storage.create_team("blue", &hash_token("blue-secret")).await.unwrap();
    assert_eq!(red.name, "red");
    assert!(red.created_at >= before && red.created_at <= now_ms());
    assert_ne!(red.id, blue.id);

    let dup = storage
        .create_team("red", &hash_token("other-secret"))
        .await
        .unwrap_err();
    assert!(
        matches!(dup, StorageError::Conflict(ref m) if m.contains("red")),
        "{dup}"
    );
    let dup_token = storage
        .create_team("green", &hash_token("blue-secret"))
        .await
        .unwrap_err();
    assert!(
        matches!(dup_token, StorageError::Conflict(ref m) if m.contains("token")),
        "{dup_token}"
    );
    if engine == Engine::Postgres {
        // A team copied in with its id, the sequence left behind (a move from SQLite by hand):
        // the clash is the id's, not the name's.
        let mut conn = sqlx::AnyConnection::connect(&url).await.unwrap();
        let next: i64 = sqlx::query_scalar("SELECT last_value + 1 FROM teams_id_seq")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        sqlx::query("INSERT INTO teams (id, name, token_hash, created_at) VALUES ($1, 'copied', 'h', 1)")
            .bind(next)
            .execute(&mut conn)
            .await
            .unwrap();
        let e = storage
            .create_team("delta", &hash_token("delta-secret"))
            .await
            .unwrap_err();
        assert!(
            matches!(e, StorageError::Database { ref context, .. } if context.contains("next team id is already taken")),
            "{e}"
        );
        sqlx::query("DELETE FROM teams WHERE name = 'copied'")
            .execute(&mut conn)
            .await
            .unwrap();
    }

    let (owner, token) = storage
        .token_by_hash(&hash_token("blue-secret"))
        .await
        .unwrap()
        .expect("the first token is stored");
    assert_eq!(owner, blue);
    assert_eq!((token.team_id, token.label.as_str()), (blue.id, "initial"));
    assert_eq!((token.expires_at, token.revoked_at), (None, None));
    assert_eq!(storage.token_by_hash(&hash_token("nobody")).await.unwrap(), None);
    assert_eq!(storage.teams().await.unwrap(), vec![red.clone(), blue]);

    let json = serde_json::to_value(&red).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"id": red.id, "name": "red", "created_at": red.created_at})
    );
    assert_eq!(
        serde_json::to_value(storage.engine()).unwrap(),
        serde_json::json!(format!("{engine:?}").to_lowercase())
    );
}

async fn submission_lifecycle(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    let red = storage.create_team("red", &hash_token("r")).await.unwrap().id;
    let blue = storage.create_team("blue", &hash_token("b")).await.unwrap().id;

    // 250 episodes: more than one multi-row INSERT.
    let episodes: Vec<NewEpisode> = (0..250).rev().map(episode).collect();
    let s1 = storage
        .create_submission(&new_submission("s-1", red, "bench-a"), &episodes)
        .await
        .unwrap();
    assert_eq!(s1.id, "s-1");
    assert_eq!((s1.team_id, s1.team_name.as_str()), (red, "red"));
    assert_eq!(
        (s1.benchmark.as_str(), s1.agent_name.as_str()),
        ("bench-a", "agent-of-s-1")
    );
    assert_eq!(s1.status, SubmissionStatus::Pending);
    assert_eq!(s1.episodes_total, 250);
    assert_eq!(
        (
            s1.started_at,
            s1.finished_at,
            s1.report_json.as_deref(),
            s1.error.as_deref()
        ),
        (None, None, None, None)
    );
    assert_eq!(storage.submission("s-1").await.unwrap(), Some(s1.clone()));
    assert_eq!(storage.submission("s-404").await.unwrap(), None);

    let rows = storage.episodes("s-1").await.unwrap();
    assert_eq!(rows.len(), 250);
    for (i, row) in rows.iter().enumerate() {
        let want = episode(i as i64);
        assert_eq!(row.idx, want.idx);
        assert_eq!(
            (row.motion.as_str(), row.category.as_str()),
            (want.motion.as_str(), want.category.as_str())
        );
        assert_eq!((row.start_s, row.duration_s), (want.start_s, want.duration_s));
        assert_eq!((row.seed, row.dr_level), (want.seed, want.dr_level));
        assert_eq!((row.status, row.attempts, row.steps), (EpisodeState::Pending, 0, 0));
        assert!(row.metrics.is_empty() && row.reason.is_none());
    }
    assert_eq!(rows[0].seed, u64::MAX);
    assert_eq!(storage.episode_counts("s-1").await.unwrap(), (250, 0, 0));
    assert!(storage.episodes("s-404").await.unwrap().is_empty());

    let dup = storage
        .create_submission(&new_submission("s-1", blue, "bench-a"), &[episode(0)])
        .await
        .unwrap_err();
    assert!(
        matches!(dup, StorageError::Conflict(ref m) if m.contains("s-1")),
        "{dup}"
    );
    let no_team = storage
        .create_submission(&new_submission("s-x", 9999, "bench-a"), &[episode(0)])
        .await
        .unwrap_err();
    assert!(
        matches!(no_team, StorageError::NotFound(ref m) if m.contains("9999")),
        "{no_team}"
    );
    assert_eq!(storage.submission("s-x").await.unwrap(), None);
    assert!(
        storage.episodes("s-x").await.unwrap().is_empty(),
        "the failed transaction left episodes behind"
    );

    // Distinct creation times so that "newest first" is well defined.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    storage
        .create_submission(&new_submission("s-2", blue, "bench-a"), &[episode(0)])
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    storage
        .create_submission(&new_submission("s-3", red, "bench-b"), &[])
        .await
        .unwrap();
    let ids = |subs: Vec<arena_server::storage::Submission>| subs.into_iter().map(|s| s.id).collect::<Vec<_>>();
    assert_eq!(ids(storage.submissions(None).await.unwrap()), ["s-3", "s-2", "s-1"]);
    assert_eq!(ids(storage.submissions(Some(red)).await.unwrap()), ["s-3", "s-1"]);
    assert_eq!(ids(storage.submissions(Some(blue)).await.unwrap()), ["s-2"]);
    assert!(storage.submissions(Some(4242)).await.unwrap().is_empty());

    storage.mark_submission_running("s-1").await.unwrap();
    let running = storage.submission("s-1").await.unwrap().unwrap();
    assert_eq!(running.status, SubmissionStatus::Running);
    let started = running.started_at.expect("started_at set");
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    storage.mark_submission_running("s-1").await.unwrap();
    assert_eq!(
        storage.submission("s-1").await.unwrap().unwrap().started_at,
        Some(started),
        "started_at kept"
    );

    assert!(storage.completed_submissions("bench-a").await.unwrap().is_empty());
    let report = r#"{"benchmark":"bench-a","aggregated":{}}"#;
    storage
        .finish_submission("s-1", SubmissionStatus::Completed, Some(report), None)
        .await
        .unwrap();
    let done = storage.submission("s-1").await.unwrap().unwrap();
    assert_eq!(done.status, SubmissionStatus::Completed);
    assert_eq!(done.report_json.as_deref(), Some(report));
    assert!(done.finished_at.unwrap() >= started);
    let json = serde_json::to_value(&done).unwrap();
    assert_eq!(json["status"], "COMPLETED");
    assert_eq!(json["team_name"], "red");
    assert!(
        json.get("report_json").is_none(),
        "the report is not part of the submission's JSON"
    );

    storage
        .finish_submission("s-2", SubmissionStatus::Failed, None, Some("agent vanished"))
        .await
        .unwrap();
    let failed = storage.submission("s-2").await.unwrap().unwrap();
    assert_eq!(
        (failed.status, failed.error.as_deref()),
        (SubmissionStatus::Failed, Some("agent vanished"))
    );
    assert!(failed.finished_at.is_some());

    assert_eq!(ids(storage.completed_submissions("bench-a").await.unwrap()), ["s-1"]);
    assert!(storage.completed_submissions("bench-b").await.unwrap().is_empty());

    // A refused finish stamps nothing: the write and its leaderboard stamp are one transaction.
    let counter = storage.board_counter().await.unwrap();
    let again = storage
        .finish_submission("s-1", SubmissionStatus::Failed, None, Some("late"))
        .await
        .unwrap_err();
    assert_eq!(storage.board_counter().await.unwrap(), counter);
    assert!(
        matches!(again, StorageError::Conflict(ref m) if m.contains("COMPLETED")),
        "{again}"
    );
    let restart = storage.mark_submission_running("s-2").await.unwrap_err();
    assert!(matches!(restart, StorageError::Conflict(_)), "{restart}");
    let missing = storage.mark_submission_running("s-404").await.unwrap_err();
    assert!(
        matches!(missing, StorageError::NotFound(ref m) if m.contains("s-404")),
        "{missing}"
    );
    let missing = storage
        .finish_submission("s-404", SubmissionStatus::Completed, None, None)
        .await
        .unwrap_err();
    assert!(matches!(missing, StorageError::NotFound(_)), "{missing}");
}

async fn episodes_are_counted_once(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    setup(&storage, "red", "s-1", 4).await;

    assert_eq!(storage.start_episode("s-1", 0).await.unwrap(), Some(1));
    assert_eq!(storage.start_episode("s-1", 0).await.unwrap(), None, "already running");
    assert_eq!(storage.start_episode("s-1", 1).await.unwrap(), Some(1));
    assert_eq!(storage.start_episode("s-1", 99).await.unwrap(), None, "no such episode");
    assert_eq!(
        storage.start_episode("s-404", 0).await.unwrap(),
        None,
        "no such submission"
    );
    assert_eq!(storage.episode_counts("s-1").await.unwrap(), (2, 2, 0));

    let mut fell = outcome(EpisodeState::Fell, 321);
    fell.reason = Some("pelvis below 0.3 m".into());
    assert!(storage.finish_episode("s-1", 0, &fell).await.unwrap());
    assert!(
        !storage
            .finish_episode("s-1", 0, &outcome(EpisodeState::Completed, 500))
            .await
            .unwrap(),
        "counted twice"
    );
    assert!(
        !storage
            .finish_episode("s-1", 2, &outcome(EpisodeState::Completed, 500))
            .await
            .unwrap(),
        "not running"
    );
    assert_eq!(storage.episode_counts("s-1").await.unwrap(), (2, 1, 1));
    assert_eq!(
        storage.start_episode("s-1", 0).await.unwrap(),
        None,
        "finished episodes are not restarted"
    );

    assert!(
        storage
            .finish_episode("s-1", 1, &outcome(EpisodeState::Timeout, 7))
            .await
            .unwrap()
    );
    assert_eq!(storage.episode_counts("s-1").await.unwrap(), (2, 0, 2));
    assert_eq!(storage.episode_counts("s-404").await.unwrap(), (0, 0, 0));

    let rows = storage.episodes("s-1").await.unwrap();
    assert_eq!(
        (rows[0].status, rows[0].steps, rows[0].attempts),
        (EpisodeState::Fell, 321, 1)
    );
    assert_eq!(rows[0].reason.as_deref(), Some("pelvis below 0.3 m"));
    assert_eq!(rows[0].metrics, fell.metrics);
    assert_eq!((rows[1].status, rows[1].steps), (EpisodeState::Timeout, 7));
    assert_eq!(rows[2].status, EpisodeState::Pending);
    // The engine that ran a committed run is kept with it; an episode not run has none.
    assert_eq!(rows[0].engine.as_deref(), Some("cpu (MuJoCo test)"));
    assert_eq!(rows[2].engine, None);
    let json = serde_json::to_value(&rows[0]).unwrap();
    assert_eq!(json["status"], "FELL");
    assert_eq!(json["engine"], "cpu (MuJoCo test)");
    assert_eq!(
        json["seed"],
        serde_json::json!(u64::MAX.to_string()),
        "exact, as a string"
    );

    for state in [EpisodeState::Completed, EpisodeState::Failed] {
        let idx = if state == EpisodeState::Completed { 2 } else { 3 };
        storage.start_episode("s-1", idx).await.unwrap();
        assert!(storage.finish_episode("s-1", idx, &outcome(state, 1)).await.unwrap());
    }
    assert_eq!(storage.episode_counts("s-1").await.unwrap(), (0, 0, 4));
    assert!(
        storage
            .episodes("s-1")
            .await
            .unwrap()
            .iter()
            .all(|e| e.status.is_final())
    );
}

async fn nan_metrics_round_trip(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    setup(&storage, "red", "s-1", 1).await;
    storage.start_episode("s-1", 0).await.unwrap();
    let metrics: BTreeMap<String, f64> = [
        ("nan".to_string(), f64::NAN),
        ("inf".to_string(), f64::INFINITY),
        ("neg_inf".to_string(), f64::NEG_INFINITY),
        ("tiny".to_string(), 1e-300),
        ("third".to_string(), 1.0 / 3.0),
        ("negative".to_string(), -2.5),
    ]
    .into_iter()
    .collect();
    let result = EpisodeOutcome {
        status: EpisodeState::Completed,
        steps: 10,
        metrics,
        reason: None,
        engine: None,
    };
    assert!(storage.finish_episode("s-1", 0, &result).await.unwrap());
    let back = &storage.episodes("s-1").await.unwrap()[0].metrics;
    assert_eq!(back.len(), 6);
    assert!(back["nan"].is_nan());
    assert_eq!(back["inf"], f64::INFINITY);
    assert_eq!(back["neg_inf"], f64::NEG_INFINITY);
    assert_eq!(back["tiny"], 1e-300);
    assert_eq!(back["third"], 1.0 / 3.0);
    assert_eq!(back["negative"], -2.5);
}

/// The committer's completion: status, report, leaderboard summary and the board stamp in one
/// write (the leaderboard's rows carry the summary as soon as the status is COMPLETED).
async fn a_completion_writes_its_summary_and_stamp_at_once(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    setup(&storage, "red", "s-1", 1).await;
    let before = storage.board_counter().await.unwrap();
    let summary = r#"{"episodes":1,"scored":1,"failed":0,"means":{"emd":0.5},"success_rates":{}}"#;
    storage.complete_submission("s-1", "{}", summary).await.unwrap();
    let done = storage.submission("s-1").await.unwrap().unwrap();
    assert_eq!(done.status, SubmissionStatus::Completed);
    assert_eq!(done.summary_json.as_deref(), Some(summary));
    let after = storage.board_counter().await.unwrap();
    assert_eq!(after, before + 1, "one stamp");
    let rows: serde_json::Value =
        serde_json::from_str(&storage.leaderboard_json_since("bench-a", None, before).await.unwrap()).unwrap();
    assert_eq!(rows[0]["summary"], summary, "the stored text: {rows}");
    assert_eq!(
        rows[0]["benchmark_version"], 1,
        "the version it was created under: {rows}"
    );
    assert_eq!(done.benchmark_version, Some(1));
    let again = storage.complete_submission("s-1", "{}", summary).await.unwrap_err();
    assert!(matches!(again, StorageError::Conflict(_)), "{again}");
    assert_eq!(
        storage.board_counter().await.unwrap(),
        after,
        "a refused write stamps nothing"
    );
    // Only rows stored before versions were kept get one at start-up: none here.
    assert_eq!(storage.set_missing_benchmark_versions("bench-a", 3).await.unwrap(), 0);
    // A re-score replaces report and summary in one write with its stamp.
    let rescored = r#"{"episodes":1,"scored":1,"failed":0,"means":{"emd":0.25},"success_rates":{}}"#;
    storage.replace_report_and_summary("s-1", "{}", rescored).await.unwrap();
    assert_eq!(storage.board_counter().await.unwrap(), after + 1);
    let rescored_row = storage.submission("s-1").await.unwrap().unwrap();
    assert_eq!(rescored_row.summary_json.as_deref(), Some(rescored));
}

/// Issue 39: every agent session of a submission stays on record, oldest first; ending one
/// twice keeps the first end.
async fn sessions_are_kept_in_order(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    setup(&storage, "red", "s-1", 1).await;
    assert!(storage.sessions("s-1").await.unwrap().is_empty());
    storage.start_session("ses-b", "s-1", "second", 2_000).await.unwrap();
    storage.start_session("ses-a", "s-1", "first", 1_000).await.unwrap();
    storage.end_session("ses-a", "stopped", 1_500).await.unwrap();
    storage.end_session("ses-a", "error", 1_700).await.unwrap();
    let got = storage.sessions("s-1").await.unwrap();
    let view: Vec<_> = got
        .iter()
        .map(|s| {
            (
                s.id.as_str(),
                s.agent_name.as_str(),
                s.started_at,
                s.ended_at,
                s.outcome.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        view,
        [
            ("ses-a", "first", 1_000, Some(1_500), Some("stopped")),
            ("ses-b", "second", 2_000, None, None)
        ]
    );
    assert!(storage.sessions("s-2").await.unwrap().is_empty());
}

/// Issue 40: a hosted submission's policy is kept with it; the unfinished ones are what a
/// restarted server resumes.
async fn hosted_policies_and_the_unfinished_ones(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    let team = setup(&storage, "red", "s-1", 1).await;
    storage
        .create_submission(&new_submission("s-2", team, "bench-a"), &[episode(0)])
        .await
        .unwrap();
    assert_eq!(storage.hosted_policy("s-1").await.unwrap(), None);
    for (id, at) in [("s-1", 10), ("s-2", 20)] {
        let policy = HostedPolicy {
            submission_id: id.into(),
            sha256: format!("{id}-sha"),
            file_name: "policy.onnx".into(),
            bytes: 1234,
            overrides: "{}".into(),
            mapping: serde_json::json!({"convention": "mjlab", "terms": [{"columns": [0, 58]}]}),
            created_at: at,
        };
        storage.insert_hosted_policy(&policy).await.unwrap();
        assert_eq!(storage.hosted_policy(id).await.unwrap(), Some(policy));
    }
    let unfinished = |s: &Storage| {
        let s = s.clone();
        async move {
            s.unfinished_hosted_policies()
                .await
                .unwrap()
                .into_iter()
                .map(|p| p.submission_id)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(unfinished(&storage).await, ["s-1", "s-2"]);

    // The runs are claimed like episodes: the uploading server holds them; another replica
    // takes one over only once its claim expired; the holder takes back its own at once.
    let a = storage
        .clone()
        .with_lease("replica-a", std::time::Duration::from_millis(400));
    let b = storage
        .clone()
        .with_lease("replica-b", std::time::Duration::from_secs(60));
    let holder = storage.lease().owner.clone();
    assert!(!a.claim_hosted_run("s-1").await.unwrap(), "{holder} holds it");
    assert!(storage.claim_hosted_run("s-1").await.unwrap(), "its own, again");
    storage.release_hosted_run("s-1").await.unwrap();
    assert!(a.claim_hosted_run("s-1").await.unwrap(), "released: anyone's");
    assert!(!b.claim_hosted_run("s-1").await.unwrap(), "a holds it");
    assert_eq!(a.renew_hosted_runs(&["s-1".into(), "s-2".into()]).await.unwrap(), 1);
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    assert!(b.claim_hosted_run("s-1").await.unwrap(), "a's claim expired");
    assert_eq!(a.renew_hosted_runs(&["s-1".into()]).await.unwrap(), 0, "a lost it");
    assert!(!a.claim_hosted_run("s-1").await.unwrap());
    assert!(!a.claim_hosted_run("no-such").await.unwrap());
    // A server told to stop lets its hosted runs go at once and takes none up.
    assert_eq!(b.give_back_on_stop().await.unwrap(), 0);
    assert!(
        !b.claim_hosted_run("s-1").await.unwrap(),
        "a stopping server takes none"
    );
    let c = storage
        .clone()
        .with_lease("replica-c", std::time::Duration::from_secs(60));
    assert!(c.claim_hosted_run("s-1").await.unwrap(), "b let it go as it stopped");

    storage
        .finish_submission("s-1", SubmissionStatus::Failed, None, Some("cancelled"))
        .await
        .unwrap();
    assert_eq!(unfinished(&storage).await, ["s-2"]);
}

async fn requeue_until_attempts_run_out(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    setup(&storage, "red", "s-1", 4).await;
    let reason = "agent connection lost";

    assert_eq!(storage.start_episode("s-1", 0).await.unwrap(), Some(1));
    assert_eq!(storage.start_episode("s-1", 1).await.unwrap(), Some(1));
    assert_eq!(storage.start_episode("s-1", 2).await.unwrap(), Some(1));
    assert!(
        storage
            .finish_episode("s-1", 2, &outcome(EpisodeState::Completed, 9))
            .await
            .unwrap()
    );
    // 2 is finished and 3 is pending: neither is touched.
    assert_eq!(
        storage
            .requeue_episodes("s-1", &[(0, 1), (1, 1), (2, 1), (3, 1), (77, 1)], 2, reason)
            .await
            .unwrap(),
        (2, 0)
    );
    let rows = storage.episodes("s-1").await.unwrap();
    assert_eq!((rows[0].status, rows[0].attempts), (EpisodeState::Pending, 1));
    assert_eq!((rows[1].status, rows[1].attempts), (EpisodeState::Pending, 1));
    assert_eq!((rows[2].status, rows[2].steps), (EpisodeState::Completed, 9));
    assert_eq!((rows[3].status, rows[3].attempts), (EpisodeState::Pending, 0));
    assert_eq!(storage.episode_counts("s-1").await.unwrap(), (3, 0, 1));

    // Second attempt: 0 runs out of attempts, 1 is not running this time.
    assert_eq!(storage.start_episode("s-1", 0).await.unwrap(), Some(2));
    assert_eq!(
        storage
            .requeue_episodes("s-1", &[(0, 2), (1, 2)], 2, reason)
            .await
            .unwrap(),
        (0, 1)
    );
    let row = &storage.episodes("s-1").await.unwrap()[0];
    assert_eq!((row.status, row.attempts), (EpisodeState::Failed, 2));
    assert_eq!(row.reason.as_deref(), Some("agent connection lost (attempt 2 of 2)"));
    assert_eq!(
        storage.start_episode("s-1", 0).await.unwrap(),
        None,
        "a failed episode stays failed"
    );
    assert_eq!(
        storage.requeue_episodes("s-1", &[(0, 2)], 2, reason).await.unwrap(),
        (0, 0)
    );
    assert_eq!(storage.episode_counts("s-1").await.unwrap(), (2, 0, 2));
    assert_eq!(storage.requeue_episodes("s-1", &[], 2, reason).await.unwrap(), (0, 0));
    // What the re-runs cost, as listings show it (issue 39): episode 0 ran twice, the others
    // once or never.
    let reruns = storage.reruns(None, Some("s-1")).await.unwrap();
    assert_eq!(reruns.get("s-1"), Some(&(1, 1)), "{reruns:?}");
    assert_eq!(storage.reruns(Some(4242), None).await.unwrap().len(), 0);
}

async fn recover_after_restart(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    let team = setup(&storage, "red", "s-running", 3).await;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    storage
        .create_submission(&new_submission("s-pending", team, "bench-a"), &[episode(0)])
        .await
        .unwrap();
    storage
        .create_submission(&new_submission("s-done", team, "bench-a"), &[episode(0)])
        .await
        .unwrap();

    // A server claims under its replica id, which a restart keeps.
    let replica = |s: Storage| s.with_lease("replica-a", std::time::Duration::from_secs(30));
    let storage = replica(storage);
    storage.mark_submission_running("s-running").await.unwrap();
    storage.start_episode("s-running", 0).await.unwrap(); // attempt 1, in flight at the crash
    storage.start_episode("s-running", 1).await.unwrap();
    storage
        .finish_episode("s-running", 1, &outcome(EpisodeState::Completed, 5))
        .await
        .unwrap();
    storage.requeue_episodes("s-running", &[(1, 1)], 3, "x").await.unwrap();
    storage.start_episode("s-running", 2).await.unwrap();
    storage
        .requeue_episodes("s-running", &[(2, 1)], 3, "lost")
        .await
        .unwrap();
    storage.start_episode("s-running", 2).await.unwrap(); // attempt 2, in flight at the crash
    // Its agent's session was open at the crash; an earlier one had ended.
    storage
        .start_session("sess-ended", "s-running", "agent", 1)
        .await
        .unwrap();
    storage.end_session("sess-ended", "stopped", 2).await.unwrap();
    storage
        .start_session("sess-open", "s-running", "agent", 3)
        .await
        .unwrap();
    // A finished submission's stray RUNNING episode is left alone.
    storage.start_episode("s-done", 0).await.unwrap();
    storage
        .finish_submission("s-done", SubmissionStatus::Failed, None, Some("gave up"))
        .await
        .unwrap();

    drop(storage);
    // Another replica's start-up leaves replica-a's episodes alone on PostgreSQL (replica-a may
    // be alive); on SQLite there is one server per database, so every RUNNING episode is dead.
    if engine == Engine::Postgres {
        // A session that names no server (recorded before servers were) is no replica's to wait
        // for: the next start of any replica ends it.
        let other = open(&url, engine)
            .await
            .with_lease("replica-b", std::time::Duration::from_secs(30));
        other
            .start_session("sess-unnamed", "s-pending", "agent", 4)
            .await
            .unwrap();
        let mut conn = sqlx::AnyConnection::connect(&url).await.unwrap();
        sqlx::query("UPDATE submission_sessions SET server = NULL WHERE id = 'sess-unnamed'")
            .execute(&mut conn)
            .await
            .unwrap();
        other.recover_after_restart().await.unwrap();
        let rows = other.episodes("s-running").await.unwrap();
        assert_eq!((rows[0].status, rows[0].attempts), (EpisodeState::Running, 1));
        let sessions = other.sessions("s-running").await.unwrap();
        assert_eq!(
            sessions[1].ended_at, None,
            "replica-a's open session is left alone: {sessions:?}"
        );
        let unnamed = other.sessions("s-pending").await.unwrap();
        assert_eq!(
            unnamed[0].outcome.as_deref(),
            Some(arena_server::storage::SERVER_LOST),
            "{unnamed:?}"
        );
    }
    let storage = replica(open(&url, engine).await);
    let unfinished = storage.recover_after_restart().await.unwrap();
    assert_eq!(unfinished, ["s-running", "s-pending"]);
    // The session its killed predecessor left open ends as the server's loss; the ended one
    // keeps its end.
    let sessions = storage.sessions("s-running").await.unwrap();
    let ends: Vec<_> = sessions
        .iter()
        .map(|s| (s.id.as_str(), s.ended_at.is_some(), s.outcome.as_deref()))
        .collect();
    assert_eq!(
        ends,
        [
            ("sess-ended", true, Some("stopped")),
            ("sess-open", true, Some(arena_server::storage::SERVER_LOST))
        ]
    );
    assert_eq!(sessions[0].ended_at, Some(2));
    // The runs in flight were the server's loss, not the agent's: their numbers stay taken.
    let rows = storage.episodes("s-running").await.unwrap();
    let state = |r: &EpisodeRow| (r.status, r.attempts, r.server_faults);
    assert_eq!(state(&rows[0]), (EpisodeState::Pending, 1, 1));
    assert_eq!(state(&rows[1]), (EpisodeState::Completed, 1, 0));
    assert_eq!(state(&rows[2]), (EpisodeState::Pending, 2, 1));
    assert_eq!(rows[0].reason.as_deref(), Some(arena_server::storage::SERVER_RESTARTED));
    assert_eq!(storage.episode_counts("s-running").await.unwrap(), (2, 0, 1));
    let done = storage.episodes("s-done").await.unwrap();
    assert_eq!((done[0].status, done[0].attempts), (EpisodeState::Running, 1));
    assert_eq!(
        storage.submission("s-running").await.unwrap().unwrap().status,
        SubmissionStatus::Running
    );

    // Nothing in flight: a second recovery changes nothing.
    assert_eq!(
        storage.recover_after_restart().await.unwrap(),
        ["s-running", "s-pending"]
    );
    assert_eq!(storage.episodes("s-running").await.unwrap(), rows);
    assert_eq!(storage.start_episode("s-running", 0).await.unwrap(), Some(2));

    // A process of the same replica still alive while a new one took the id (cut off from the
    // database, then back): the new one takes back its episode and claims it again as the next
    // run; the old one's late commit of its run is refused, the new one's counts.
    let newer = replica(open(&url, engine).await);
    newer.recover_after_restart().await.unwrap();
    assert_eq!(newer.start_episode("s-running", 0).await.unwrap(), Some(3));
    assert_ne!(newer.lease().owner, storage.lease().owner);
    assert_eq!(newer.lease().replica, storage.lease().replica);
    let late = outcome(EpisodeState::Completed, 7);
    assert!(!storage.commit_episode("s-running", 0, Some(2), &late).await.unwrap());
    assert!(
        newer
            .commit_episode("s-running", 0, Some(3), &outcome(EpisodeState::Fell, 3))
            .await
            .unwrap()
    );
    let row = &newer.episodes("s-running").await.unwrap()[0];
    assert_eq!((row.status, row.steps, row.server_faults), (EpisodeState::Fell, 3, 2));
    assert!(!storage.commit_episode("s-running", 0, Some(2), &late).await.unwrap());

    // An episode in flight at every start (one that crashes its server) fails at the third
    // (its first was above).
    for run in 3..=4 {
        assert_eq!(newer.start_episode("s-running", 2).await.unwrap(), Some(run));
        newer.recover_after_restart().await.unwrap();
    }
    let row = &newer.episodes("s-running").await.unwrap()[2];
    assert_eq!(state(row), (EpisodeState::Failed, 4, 3), "{row:?}");
    assert_eq!(
        row.reason.as_deref(),
        Some(format!("{} (server fault 3 of 3)", arena_server::storage::SERVER_RESTARTED).as_str())
    );
}

/// Runs the server lost are not charged to the agent: `max_attempts` caps the agent's runs
/// (`attempts - server_faults - uncharged_runs`), `MAX_SERVER_FAULTS` the server's own losses;
/// claims that never started and runs a stopping server gives back are charged to nobody;
/// re-runs count the agent's only.
async fn server_faults_are_not_the_agents(url: String, engine: Engine) {
    let a = open(&url, engine)
        .await
        .with_lease("replica-a", std::time::Duration::from_secs(30));
    setup(&a, "red", "s-1", 3).await;
    let state = |r: &EpisodeRow| (r.status, r.attempts, r.server_faults);
    // Episode 0: lost once by the server, then once by the agent, with one attempt allowed.
    assert_eq!(a.claim_next_episode("s-1").await.unwrap(), Some((0, 1)));
    assert_eq!(
        a.return_episodes("s-1", &[(0, 1)], "the server: x").await.unwrap(),
        (1, 0)
    );
    assert_eq!(a.claim_next_episode("s-1").await.unwrap(), Some((0, 2)));
    assert_eq!(a.requeue_episodes("s-1", &[(0, 2)], 1, "lost").await.unwrap(), (0, 1));
    let row = &a.episodes("s-1").await.unwrap()[0];
    assert_eq!(state(row), (EpisodeState::Failed, 2, 1));
    assert_eq!(row.reason.as_deref(), Some("lost (attempt 1 of 1)"));
    // Episode 1: a lane fails on it every time (an episode that breaks the server): it fails
    // at the third loss, with the count.
    for run in 1..=3 {
        assert_eq!(a.claim_next_episode("s-1").await.unwrap(), Some((1, run)));
        let expected = if run < 3 { (1, 0) } else { (0, 1) };
        assert_eq!(
            a.return_episodes("s-1", &[(1, run)], "the server: boom").await.unwrap(),
            expected
        );
    }
    let row = &a.episodes("s-1").await.unwrap()[1];
    assert_eq!(state(row), (EpisodeState::Failed, 3, 3));
    assert_eq!(row.reason.as_deref(), Some("the server: boom (server fault 3 of 3)"));
    // Episode 2: a server fault, two lost connections (one re-run the agent's), then a claim
    // that never started and one a stopping server gave back: charged to nobody.
    assert_eq!(a.claim_next_episode("s-1").await.unwrap(), Some((2, 1)));
    assert_eq!(
        a.return_episodes("s-1", &[(2, 1)], "the server: x").await.unwrap(),
        (1, 0)
    );
    for run in 2..=3 {
        assert_eq!(a.claim_next_episode("s-1").await.unwrap(), Some((2, run)));
        assert_eq!(a.requeue_episodes("s-1", &[(2, run)], 3, "lost").await.unwrap(), (1, 0));
    }
    assert_eq!(a.claim_next_episode("s-1").await.unwrap(), Some((2, 4)));
    assert_eq!(
        a.unclaim_episodes("s-1", &[(2, 4)], "never started", true)
            .await
            .unwrap(),
        1
    );
    let row = &a.episodes("s-1").await.unwrap()[2];
    assert_eq!((state(row), row.uncharged_runs), ((EpisodeState::Pending, 4, 1), 1));
    // The run the agent never heard of is no failure: the last charged run's reason stays.
    assert_eq!(row.reason.as_deref(), Some("lost"));
    // A claim that could not start is given its reason.
    assert_eq!(a.claim_next_episode("s-1").await.unwrap(), Some((2, 5)));
    assert_eq!(
        a.unclaim_episodes("s-1", &[(2, 5)], "could not start", false)
            .await
            .unwrap(),
        1
    );
    let row = &a.episodes("s-1").await.unwrap()[2];
    assert_eq!((state(row), row.uncharged_runs), ((EpisodeState::Pending, 5, 1), 2));
    assert_eq!(row.reason.as_deref(), Some("could not start"));
    assert_eq!(a.claim_next_episode("s-1").await.unwrap(), Some((2, 6)));
    // Another process's claim is not this one's to give back, nor its session to end.
    let other = open(&url, engine)
        .await
        .with_lease("replica-b", std::time::Duration::from_secs(30));
    a.start_session("sess-a", "s-1", "agent", 1).await.unwrap();
    other.start_session("sess-b", "s-1", "agent", 2).await.unwrap();
    assert_eq!(a.give_back_on_stop().await.unwrap(), 1);
    let ends: Vec<_> = a
        .sessions("s-1")
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.id, s.outcome))
        .collect();
    assert_eq!(
        ends,
        [
            ("sess-a".to_string(), Some("stopped".to_string())),
            ("sess-b".to_string(), None)
        ]
    );
    assert_eq!(other.give_back_on_stop().await.unwrap(), 0);
    assert_eq!(a.renew_leases().await.unwrap(), 0, "nothing is held after the stop");
    let late = outcome(EpisodeState::Completed, 3);
    assert!(
        !a.commit_episode("s-1", 2, Some(6), &late).await.unwrap(),
        "a run given back cannot commit"
    );
    let row = &a.episodes("s-1").await.unwrap()[2];
    assert_eq!((state(row), row.uncharged_runs), ((EpisodeState::Pending, 6, 1), 3));
    assert_eq!(row.reason.as_deref(), Some(arena_server::storage::SERVER_STOPPED));
    // Re-runs the team is shown: the agent's only (episode 2's second connection).
    let reruns = a.reruns(None, Some("s-1")).await.unwrap();
    assert_eq!(reruns.get("s-1"), Some(&(1, 1)), "{reruns:?}");
    // The stopping server claims nothing more; another does, and a lost connection on the
    // agent's third run ends it: the reason counts the agent's runs.
    assert_eq!(a.claim_next_episode("s-1").await.unwrap(), None);
    assert_eq!(
        other.claim_next_episode("s-1").await.unwrap(),
        None,
        "it was told to stop too"
    );
    let next = open(&url, engine)
        .await
        .with_lease("replica-c", std::time::Duration::from_secs(30));
    assert_eq!(next.claim_next_episode("s-1").await.unwrap(), Some((2, 7)));
    assert_eq!(
        next.requeue_episodes("s-1", &[(2, 7)], 3, "lost").await.unwrap(),
        (0, 1)
    );
    let row = &a.episodes("s-1").await.unwrap()[2];
    assert_eq!(row.reason.as_deref(), Some("lost (attempt 3 of 3)"));
}

/// A lane stopped by a server-side error returns its running episodes: back to PENDING at once,
/// a server fault not charged to the agent, the claim no longer renewed; other holders'
/// episodes untouched.
async fn returned_after_a_server_error(url: String, engine: Engine) {
    let (a, b) = two_replicas(&url, engine).await;
    setup(&a, "red", "s-1", 3).await;
    assert_eq!(a.claim_next_episode("s-1").await.unwrap(), Some((0, 1)));
    assert_eq!(a.claim_next_episode("s-1").await.unwrap(), Some((1, 1)));
    assert_eq!(b.claim_next_episode("s-1").await.unwrap(), Some((2, 1)));
    assert_eq!(a.renew_leases().await.unwrap(), 2);
    // 2 is b's and 77 does not exist: only 0 goes back.
    let reason = "the server: simulator lane 0 panicked";
    assert_eq!(
        a.return_episodes("s-1", &[(0, 1), (2, 1), (77, 1)], reason)
            .await
            .unwrap(),
        (1, 0)
    );
    let rows = a.episodes("s-1").await.unwrap();
    assert_eq!(
        (rows[0].status, rows[0].attempts, rows[0].server_faults),
        (EpisodeState::Pending, 1, 1)
    );
    assert_eq!(rows[0].reason.as_deref(), Some(reason));
    assert_eq!((rows[1].status, rows[1].attempts), (EpisodeState::Running, 1));
    assert_eq!((rows[2].status, rows[2].attempts), (EpisodeState::Running, 1));
    assert_eq!(a.renew_leases().await.unwrap(), 1, "episode 0's claim is let go");
    // Claimed again at once, as its second run (the agent's first attempt).
    assert_eq!(b.claim_next_episode("s-1").await.unwrap(), Some((0, 2)));
    assert_eq!(a.return_episodes("s-1", &[], reason).await.unwrap(), (0, 0));
}

/// A lane with nothing left to claim asks whether another server still holds some of the
/// submission's episodes (`others_lease_expiry`), and waits up to a second if so, while the
/// committer commits this server's runs. A run committed between the query of the RUNNING rows
/// and the look at this server's claims is not another server's (it was: the lane at the end
/// of a 4096-episode evaluation on an H200 waited a second for nothing); a claim this server
/// gave up on still counts, with its own lease.
async fn own_runs_committed_meanwhile_are_not_another_servers(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    setup(&storage, "red", "s-1", 901).await;
    let claimed = storage.claim_next_episodes("s-1", 900).await.unwrap();
    assert_eq!(claimed.len(), 900);
    // The last episode claimed later, so its lease ends after the others', then given up.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert_eq!(storage.claim_next_episodes("s-1", 1).await.unwrap(), vec![(900, 1)]);
    storage.forget_claim("s-1", 900, 1);
    let given_up = storage.others_lease_expiry("s-1").await.unwrap();
    assert!(given_up.is_some(), "a claim given up on is waited for");
    let committer = {
        let storage = storage.clone();
        tokio::spawn(async move {
            let done = outcome(EpisodeState::Completed, 5);
            for batch in claimed.chunks(3) {
                let runs: Vec<_> = batch.iter().map(|&(idx, attempt)| (idx, attempt, &done)).collect();
                storage.commit_episodes("s-1", &runs).await.unwrap();
            }
        })
    };
    let mut looks = 0;
    while !committer.is_finished() {
        let foreign = storage.others_lease_expiry("s-1").await.unwrap();
        assert_eq!(
            foreign, given_up,
            "look {looks}: a run of this server's taken for another's"
        );
        looks += 1;
    }
    committer.await.unwrap();
    assert!(looks > 0);
    assert_eq!(storage.episode_counts("s-1").await.unwrap(), (0, 1, 900));
}

/// A submission cancelled while a server runs its episodes is marked ended for that server's
/// lanes: at once when the cancel is its own, at its next renewal when another replica's; the
/// mark goes with the submission's last claim, and a server without claims of it is not told.
async fn a_submission_ended_while_its_claims_ran_is_told_to_their_holder(url: String, engine: Engine) {
    use std::time::Duration;
    // Leases that outlast the test: a renewal here renews, expiring nothing.
    let a = open(&url, engine)
        .await
        .with_lease("replica-a", Duration::from_secs(60));
    let b = open(&url, engine)
        .await
        .with_lease("replica-b", Duration::from_secs(60));
    setup(&a, "red", "s-1", 3).await;
    setup(&a, "blue", "s-2", 2).await;
    assert_eq!(a.claim_next_episodes("s-1", 2).await.unwrap(), vec![(0, 1), (1, 1)]);
    assert_eq!(a.claim_next_episodes("s-2", 1).await.unwrap(), vec![(0, 1)]);
    assert_eq!(b.claim_next_episodes("s-2", 1).await.unwrap(), vec![(1, 1)]);
    assert!(!a.submission_ended("s-1") && !a.submission_ended("s-2"));
    // Cancelled here: told at once.
    a.cancel_submission("s-1", "cancelled by the organiser").await.unwrap();
    assert!(a.submission_ended("s-1") && !b.submission_ended("s-1"));
    assert!(!a.submission_ended("s-2"), "another submission's claims run on");
    // Cancelled on the other replica: told at this one's next renewal.
    b.cancel_submission("s-2", "cancelled by the organiser").await.unwrap();
    assert!(!a.submission_ended("s-2"));
    assert_eq!(
        a.renew_leases().await.unwrap(),
        0,
        "no claim of either is left to renew"
    );
    assert!(a.submission_ended("s-2"));
    // Their commits are refused; the mark goes with the last claim.
    let done = outcome(EpisodeState::Completed, 5);
    for idx in [0, 1] {
        assert!(!a.commit_episode("s-1", idx, Some(1), &done).await.unwrap());
    }
    assert!(!a.submission_ended("s-1"), "the mark outlived the submission's claims");
    assert!(!a.commit_episode("s-2", 0, Some(1), &done).await.unwrap());
    assert!(!a.submission_ended("s-2"));
    // A cancel while no claim of it is in hand (one whose statement committed may be taken into
    // hand just after) marks it all the same, until a renewal finds no claim of it.
    setup(&a, "white", "s-4", 1).await;
    a.cancel_submission("s-4", "cancelled by the organiser").await.unwrap();
    assert!(a.submission_ended("s-4"), "marked with no claim in hand");
    a.renew_leases().await.unwrap();
    assert!(
        !a.submission_ended("s-4"),
        "the mark goes at the renewal that finds no claim of it"
    );
}

/// Two handles on one database as two replicas: `replica-a` with a 0.6 s lease (it expires
/// within a test), `replica-b` with 30 s.
async fn two_replicas(url: &str, engine: Engine) -> (Storage, Storage) {
    use std::time::Duration;
    let a = open(url, engine)
        .await
        .with_lease("replica-a", Duration::from_millis(600));
    let b = open(url, engine).await.with_lease("replica-b", Duration::from_secs(30));
    (a, b)
}

/// Claims' times follow the database's clock, not each replica's own: a replica whose clock
/// is two minutes ahead does not settle another's live claim as expired (a replicas
/// walkthrough: it threw away a healthy replica's running episode), and one two minutes behind
/// writes claims that the others do not take at once; both see a claim expire when it does.
async fn a_replica_whose_clock_is_off_takes_no_live_claim(url: String, engine: Engine) {
    use std::time::Duration;
    let healthy = open(&url, engine)
        .await
        .with_lease("replica-ok", Duration::from_millis(1500));
    let ahead = open(&url, engine)
        .await
        .with_lease("replica-ahead", Duration::from_millis(1500))
        .with_local_clock_skew(120_000)
        .await
        .unwrap();
    let behind = open(&url, engine)
        .await
        .with_lease("replica-behind", Duration::from_millis(1500))
        .with_local_clock_skew(-120_000)
        .await
        .unwrap();
    let offset = ahead.clock_offset_ms();
    assert!((-121_000..=-119_000).contains(&offset), "{offset}");
    assert!(healthy.clock_offset_ms().abs() < 1_000, "{}", healthy.clock_offset_ms());
    setup(&healthy, "clocks", "s-1", 3).await;
    assert_eq!(healthy.claim_next_episode("s-1").await.unwrap(), Some((0, 1)));
    assert_eq!(behind.claim_next_episode("s-1").await.unwrap(), Some((1, 1)));
    // Live claims: nobody settles them, whatever its clock says.
    for other in [&ahead, &healthy] {
        assert_eq!(other.expire_leases("s-1").await.unwrap(), Expired::default());
    }
    assert_eq!(ahead.live_claims("s-1").await.unwrap(), 2);
    assert_eq!(ahead.claim_next_episode("s-1").await.unwrap(), Some((2, 1)));
    assert_eq!(
        ahead.claim_next_episode("s-1").await.unwrap(),
        None,
        "all claimed, none expired"
    );
    // Once the leases run out (nobody renews), every replica sees it.
    tokio::time::sleep(Duration::from_millis(1700)).await;
    assert_eq!(healthy.live_claims("s-1").await.unwrap(), 0);
    let expired = ahead.expire_leases("s-1").await.unwrap();
    assert_eq!(expired.requeued, 2, "{expired:?}");
}

/// After an outage of the database (nobody could renew a claim), a replica settles no other
/// one's claim as expired until a lease has gone by since it is back: the others renew theirs
/// first (a replicas walkthrough: after 75 s without PostgreSQL, a replica with nothing left to
/// claim took a healthy one's running episodes at once, each a server fault). A claim that is
/// still not renewed then expires as usual.
async fn no_claim_expires_at_once_after_a_database_outage(url: String, engine: Engine) {
    use std::time::Duration;
    let a = open(&url, engine)
        .await
        .with_lease("replica-a", Duration::from_millis(600));
    let b = open(&url, engine)
        .await
        .with_lease("replica-b", Duration::from_millis(1000));
    setup(&a, "outage", "s-1", 2).await;
    assert_eq!(a.claim_next_episode("s-1").await.unwrap(), Some((0, 1)));
    // The database goes away (b's renewal fails), a's lease runs out meanwhile, and it is back.
    b.note_database_unreachable();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        b.expire_leases("s-1").await.unwrap(),
        Expired::default(),
        "during the outage"
    );
    b.note_database_answers();
    assert_eq!(b.expire_leases("s-1").await.unwrap(), Expired::default(), "just back");
    // a renews within the grace; then dies: its claim expires once its lease runs out again.
    assert_eq!(a.renew_leases().await.unwrap(), 1);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(b.expire_leases("s-1").await.unwrap().requeued, 1);
}

/// A lane fills its free slots with one claim: the lowest PENDING indices, in order, each
/// counted as an attempt under this handle's lease; two replicas' batches never overlap; an
/// expired lease's episodes come back in a later batch.
async fn batched_claims_take_the_lowest_pending_in_order(url: String, engine: Engine) {
    use std::time::Duration;
    let (a, b) = two_replicas(&url, engine).await;
    setup(&a, "red", "s-1", 7).await;
    assert_eq!(a.claim_next_episodes("s-1", 0).await.unwrap(), vec![]);
    assert_eq!(
        a.claim_next_episodes("s-1", 3).await.unwrap(),
        vec![(0, 1), (1, 1), (2, 1)]
    );
    assert_eq!(
        b.claim_next_episodes("s-1", 100).await.unwrap(),
        vec![(3, 1), (4, 1), (5, 1), (6, 1)]
    );
    assert_eq!(b.claim_next_episodes("s-1", 100).await.unwrap(), vec![], "all claimed");
    let rows = a.episodes("s-1").await.unwrap();
    assert!(
        rows.iter()
            .all(|r| r.status == EpisodeState::Running && r.attempts == 1),
        "{rows:?}"
    );
    // a stops renewing: its three come back to b, as second attempts, once the lease is over.
    a.forget_claim("s-1", 0, 1);
    a.forget_claim("s-1", 1, 1);
    a.forget_claim("s-1", 2, 1);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        b.claim_next_episodes("s-1", 100).await.unwrap(),
        vec![(0, 2), (1, 2), (2, 2)]
    );
}

/// One transaction commits many runs, each answered as `commit_episode` would answer it: its
/// own run commits, another replica's claim and a stale attempt do not, a retry stands; a
/// non-final status refuses the whole batch before anything is written.
async fn batched_commits_answer_each_run_as_single_ones(url: String, engine: Engine) {
    let (a, b) = two_replicas(&url, engine).await;
    setup(&a, "red", "s-1", 4).await;
    assert_eq!(
        a.claim_next_episodes("s-1", 3).await.unwrap(),
        vec![(0, 1), (1, 1), (2, 1)]
    );
    assert_eq!(b.claim_next_episodes("s-1", 1).await.unwrap(), vec![(3, 1)]);
    let (done, fell) = (outcome(EpisodeState::Completed, 7), outcome(EpisodeState::Fell, 3));
    let running = outcome(EpisodeState::Running, 1);
    let e = a
        .commit_episodes("s-1", &[(0, 1, &done), (1, 1, &running)])
        .await
        .unwrap_err();
    assert!(
        matches!(e, StorageError::Invalid(ref m) if m.contains("episode 1")),
        "{e}"
    );
    assert_eq!(a.episode_counts("s-1").await.unwrap(), (0, 4, 0), "nothing written");
    // Runs 0 and 2 are a's (2 with a stale attempt), 3 is b's.
    let answers = a
        .commit_episodes("s-1", &[(0, 1, &done), (2, 0, &fell), (3, 1, &done), (1, 1, &fell)])
        .await
        .unwrap();
    assert_eq!(answers, vec![true, false, false, true]);
    // A retry after an unknown outcome answers the same.
    assert_eq!(
        a.commit_episodes("s-1", &[(0, 1, &done), (1, 1, &fell)]).await.unwrap(),
        vec![true, true]
    );
    assert!(a.commit_episodes("s-1", &[]).await.unwrap().is_empty());
    let rows = a.episodes("s-1").await.unwrap();
    let states: Vec<_> = rows.iter().map(|r| (r.status, r.steps)).collect();
    assert_eq!(states[0], (EpisodeState::Completed, 7));
    assert_eq!(states[1], (EpisodeState::Fell, 3));
    assert_eq!(states[2].0, EpisodeState::Running);
    assert_eq!(states[3].0, EpisodeState::Running);
    assert_eq!(a.episode_counts("s-1").await.unwrap(), (0, 2, 2));
}

/// Two servers ("replicas") on one database: claims are leases, results commit only under the
/// lease, an expired lease puts the episode back with the lost run counted as the server's.
async fn leases_between_replicas(url: String, engine: Engine) {
    use std::time::Duration;
    let (a, b) = two_replicas(&url, engine).await;
    setup(&a, "red", "s-1", 3).await;
    assert_eq!(a.claim_next_episode("s-1").await.unwrap(), Some((0, 1)));
    assert_eq!(b.claim_next_episode("s-1").await.unwrap(), Some((1, 1)));
    assert_eq!(a.claim_next_episode("s-1").await.unwrap(), Some((2, 1)));
    assert_eq!(b.claim_next_episode("s-1").await.unwrap(), None, "all claimed");
    // Only the holder commits.
    assert!(
        !b.finish_episode("s-1", 0, &outcome(EpisodeState::Completed, 5))
            .await
            .unwrap()
    );
    assert!(
        b.finish_episode("s-1", 1, &outcome(EpisodeState::Completed, 5))
            .await
            .unwrap()
    );
    assert_eq!(
        b.requeue_episodes("s-1", &[(0, 1)], 2, "not mine").await.unwrap(),
        (0, 0)
    );
    // b waits for a's claims; a renews both of its own.
    let expiry = b.others_lease_expiry("s-1").await.unwrap().expect("a holds two");
    assert!(expiry > now_ms() && expiry <= now_ms() + 600, "{expiry}");
    assert_eq!(a.others_lease_expiry("s-1").await.unwrap(), None);
    assert_eq!(a.renew_leases().await.unwrap(), 2);
    assert!(
        a.finish_episode("s-1", 2, &outcome(EpisodeState::Fell, 3))
            .await
            .unwrap()
    );
    // a dies holding episode 0: once its lease runs out, b settles it and runs it again.
    assert_eq!(b.live_claims("s-1").await.unwrap(), 1, "a's claim of episode 0 runs");
    tokio::time::sleep(Duration::from_millis(700)).await;
    // Still RUNNING, but run nowhere (the pages then say the submission awaits its agent).
    assert_eq!(b.episode_counts("s-1").await.unwrap(), (0, 1, 2));
    assert_eq!(b.live_claims("s-1").await.unwrap(), 0);
    assert_eq!(b.claim_next_episode("s-1").await.unwrap(), Some((0, 2)));
    assert_eq!(b.live_claims("s-1").await.unwrap(), 1);
    let rows = b.episodes("s-1").await.unwrap();
    assert_eq!(rows[0].reason.as_deref(), Some(arena_server::storage::LEASE_EXPIRED));
    // The late result of a's run is not counted; b's is, once.
    assert!(
        !a.finish_episode("s-1", 0, &outcome(EpisodeState::Completed, 9))
            .await
            .unwrap()
    );
    let done = outcome(EpisodeState::Completed, 7);
    assert!(b.commit_episode("s-1", 0, Some(2), &done).await.unwrap());
    // A retry after an unknown outcome (the connection lost mid-commit): the commit stands.
    assert!(b.commit_episode("s-1", 0, Some(2), &done).await.unwrap());
    assert!(!b.commit_episode("s-1", 0, Some(1), &done).await.unwrap());
    assert!(!b.finish_episode("s-1", 0, &done).await.unwrap());
    let rows = b.episodes("s-1").await.unwrap();
    assert_eq!(
        (rows[0].status, rows[0].attempts, rows[0].steps),
        (EpisodeState::Completed, 2, 7)
    );
    assert_eq!(b.episode_counts("s-1").await.unwrap(), (0, 0, 3));

    // The last attempt lost to an expired lease: FAILED, with the count.
    let team = a.teams().await.unwrap()[0].id;
    a.create_submission(&new_submission("s-2", team, "bench-a"), &[episode(0)])
        .await
        .unwrap();
    assert_eq!(a.claim_next_episode("s-2").await.unwrap(), Some((0, 1)));
    tokio::time::sleep(Duration::from_millis(700)).await;
    // A claim a still holds is alive on a, whatever its lease says (renewals may have failed):
    // a does not settle it; a commit given up on (forgotten) is settled like any other.
    assert_eq!(a.claim_next_episode("s-2").await.unwrap(), None);
    a.forget_claim("s-2", 0, 1);
    assert_eq!(a.claim_next_episode("s-2").await.unwrap(), Some((0, 2)));
    // The old run cannot commit over the new one, though both are a's.
    assert!(!a.commit_episode("s-2", 0, Some(1), &done).await.unwrap());
    // Expired leases are the server's loss, not the agent's: they do not use up its attempts
    // (2 here), but the third run the servers lose fails the episode.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let expired = b.expire_leases("s-2").await.unwrap();
    assert_eq!((expired.requeued, expired.failed), (1, 0));
    assert_eq!(a.claim_next_episode("s-2").await.unwrap(), Some((0, 3)));
    a.forget_claim("s-2", 0, 3);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let expired = b.expire_leases("s-2").await.unwrap();
    assert_eq!((expired.requeued, expired.failed), (0, 1));
    let row = &b.episodes("s-2").await.unwrap()[0];
    assert_eq!(
        (row.status, row.attempts, row.server_faults),
        (EpisodeState::Failed, 3, 3)
    );
    assert_eq!(
        row.reason.as_deref(),
        Some(format!("{} (server fault 3 of 3)", arena_server::storage::LEASE_EXPIRED).as_str())
    );
    assert_eq!(b.claim_next_episode("s-2").await.unwrap(), None);

    // A leaderboard write on one replica moves the generation every replica reads (PostgreSQL;
    // SQLite has one server per database).
    let before = b.leaderboard_generation().await.unwrap();
    a.finish_submission("s-1", SubmissionStatus::Completed, Some("{}"), None)
        .await
        .unwrap();
    if engine == Engine::Postgres {
        assert_ne!(b.leaderboard_generation().await.unwrap(), before);
    }
    assert!(matches!(
        b.finish_submission("s-1", SubmissionStatus::Completed, Some("{}"), None)
            .await,
        Err(StorageError::Conflict(_))
    ));
}

/// Eight claimers, each with its own lease owner, drain one submission concurrently: every
/// episode is claimed exactly once.
async fn claimers_on_many_connections_share_a_submission(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    setup(&storage, "red", "s-1", 60).await;
    let claimers: Vec<_> = (0..8)
        .map(|i| {
            let url = url.clone();
            tokio::spawn(async move {
                let me = open(&url, engine)
                    .await
                    .with_lease(format!("replica-{i}"), std::time::Duration::from_secs(30));
                let mut mine = Vec::new();
                while let Some((idx, attempt)) = me.claim_next_episode("s-1").await.unwrap() {
                    assert_eq!(attempt, 1);
                    assert!(
                        me.finish_episode("s-1", idx, &outcome(EpisodeState::Completed, 1))
                            .await
                            .unwrap()
                    );
                    mine.push(idx);
                }
                mine
            })
        })
        .collect();
    let mut all = Vec::new();
    for c in claimers {
        all.extend(c.await.unwrap());
    }
    all.sort();
    assert_eq!(all, (0..60).collect::<Vec<i64>>());
    assert_eq!(storage.episode_counts("s-1").await.unwrap(), (0, 0, 60));
}

async fn reopened_database_keeps_data(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    setup(&storage, "red", "s-1", 3).await;
    storage.start_episode("s-1", 0).await.unwrap();
    storage
        .finish_episode("s-1", 0, &outcome(EpisodeState::Completed, 42))
        .await
        .unwrap();
    let before = (
        storage.teams().await.unwrap(),
        storage.submissions(None).await.unwrap(),
        storage.episodes("s-1").await.unwrap(),
    );
    if engine == Engine::Sqlite {
        let path = url.strip_prefix("sqlite://").unwrap();
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(mode.to_lowercase(), "wal", "{path}");
        conn.close().await.unwrap();
        assert!(
            std::path::Path::new(&format!("{path}-wal")).exists(),
            "WAL file next to {path}"
        );
    }
    drop(storage);

    // Connecting again re-runs the (already applied) migrations and finds everything.
    let storage = open(&url, engine).await;
    let after = (
        storage.teams().await.unwrap(),
        storage.submissions(None).await.unwrap(),
        storage.episodes("s-1").await.unwrap(),
    );
    assert_eq!(before, after);
    assert_eq!(after.2[0].steps, 42);
    let third = open(&url, engine).await;
    assert_eq!(third.episode_counts("s-1").await.unwrap(), (2, 0, 1));
}

async fn concurrent_claims_give_one_winner(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    setup(&storage, "red", "s-1", 2).await;
    let claims: Vec<_> = (0..8)
        .map(|_| {
            let storage = storage.clone();
            tokio::spawn(async move { storage.start_episode("s-1", 1).await.unwrap() })
        })
        .collect();
    let mut won = Vec::new();
    for claim in claims {
        won.extend(claim.await.unwrap());
    }
    assert_eq!(won, [1], "exactly one claim wins, on its first attempt");
    let finishes: Vec<_> = (0..8)
        .map(|_| {
            let storage = storage.clone();
            tokio::spawn(async move {
                storage
                    .finish_episode("s-1", 1, &outcome(EpisodeState::Completed, 3))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut changed = 0;
    for finish in finishes {
        changed += finish.await.unwrap() as usize;
    }
    assert_eq!(changed, 1, "exactly one finish counts");
    assert_eq!(storage.episode_counts("s-1").await.unwrap(), (1, 0, 1));
}

async fn bad_arguments_are_refused(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    let team = setup(&storage, "red", "s-1", 2).await;
    storage.start_episode("s-1", 0).await.unwrap();
    let e = storage
        .finish_episode("s-1", 0, &outcome(EpisodeState::Running, 1))
        .await
        .unwrap_err();
    assert!(matches!(e, StorageError::Invalid(_)), "{e}");
    assert_eq!(storage.episode_counts("s-1").await.unwrap(), (1, 1, 0));
    let e = storage
        .finish_submission("s-1", SubmissionStatus::Running, None, None)
        .await
        .unwrap_err();
    assert!(matches!(e, StorageError::Invalid(_)), "{e}");
    let e = storage
        .create_submission(
            &new_submission("s-2", team, "bench-a"),
            &[episode(0), episode(1), episode(0)],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, StorageError::Invalid(ref m) if m.contains("index 0")),
        "{e}"
    );
    assert_eq!(storage.submission("s-2").await.unwrap(), None);
}

#[tokio::test]
async fn unsupported_urls_are_refused() {
    for url in ["mysql://localhost/db", "arena.db", ""] {
        let e = Storage::connect(url).await.unwrap_err();
        assert!(matches!(e, StorageError::UnsupportedUrl(_)), "{url}: {e}");
    }
    // An unknown host fails at once (a refused connection is retried for 30 s).
    let e = Storage::connect("postgres://u:hunter2@nonexistent.invalid:5432/nothing")
        .await
        .unwrap_err();
    let message = e.to_string();
    assert!(
        message.contains("connecting to postgres://u:***@nonexistent.invalid:5432/nothing"),
        "{message}"
    );
    assert!(!message.contains("hunter2"), "{message}");
}

/// PostgreSQL over TLS: `sslmode=require` (managed services ask for it) connects encrypted, and
/// `verify-full` without the server's certificate among the trusted roots is refused, naming
/// why. The arena was built without a TLS client: `sslmode=require` failed. Needs a test server
/// that offers TLS (`scripts/postgres.sh` makes it a certificate).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_over_tls() {
    use sqlx::Connection;
    let Some(db) = TestDb::postgres("postgres_over_tls").await else {
        return;
    };
    let mut plain = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let offered: String = sqlx::query_scalar("SHOW ssl").fetch_one(&mut plain).await.unwrap();
    if offered != "on" {
        eprintln!("skipping postgres_over_tls: the test server offers no TLS (ssl = {offered})");
        return;
    }
    let required = format!("{}?sslmode=require", db.url);
    let mut tls = sqlx::PgConnection::connect(&required)
        .await
        .unwrap_or_else(|e| panic!("{required}: {e}"));
    let encrypted: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&mut tls)
        .await
        .unwrap();
    assert!(encrypted, "sslmode=require connected without TLS");
    let storage = Storage::connect(&required).await.unwrap();
    setup(&storage, "tls", "s-1", 2).await;
    assert_eq!(storage.episode_counts("s-1").await.unwrap(), (2, 0, 0));
    let verified = format!("{}?sslmode=verify-full", db.url);
    let e = Storage::connect(&verified).await.unwrap_err().to_string();
    assert!(e.to_lowercase().contains("certificate"), "{e}");
}

#[tokio::test]
async fn in_memory_sqlite_is_one_database() {
    let storage = Storage::connect("sqlite::memory:").await.unwrap();
    setup(&storage, "red", "s-1", 3).await;
    for _ in 0..3 {
        assert_eq!(storage.episode_counts("s-1").await.unwrap(), (3, 0, 0));
    }
    assert_eq!(storage.teams().await.unwrap().len(), 1);
}

async fn tokens_and_members(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    let members = [
        ("Ada".to_string(), "ada@example.org".to_string()),
        ("Grace".to_string(), "grace@example.org".to_string()),
    ];
    let (red, first) = storage
        .create_team_with("red", &members, &hash_token("red-1"))
        .await
        .unwrap();
    assert!(first.id.starts_with("tok-") && first.id.len() == 20, "{}", first.id);
    assert_eq!((first.team_id, first.label.as_str()), (red.id, "initial"));
    assert_eq!(storage.team(red.id).await.unwrap(), Some(red.clone()));
    assert_eq!(storage.team(red.id + 1000).await.unwrap(), None);
    let listed = storage.members(red.id).await.unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|m| (m.name.clone(), m.email.clone()))
            .collect::<Vec<_>>(),
        members
    );
    let added = storage.add_member(red.id, "Linus", "linus@example.org").await.unwrap();
    assert_eq!(storage.members(red.id).await.unwrap().last(), Some(&added));
    let e = storage.add_member(4242, "Nobody", "n@example.org").await.unwrap_err();
    assert!(matches!(e, StorageError::NotFound(ref m) if m.contains("4242")), "{e}");

    let expires = now_ms() + 60_000;
    let second = storage
        .create_token(red.id, &hash_token("red-2"), "laptop", Some(expires))
        .await
        .unwrap();
    assert_eq!((second.label.as_str(), second.expires_at), ("laptop", Some(expires)));
    assert_ne!(second.id, first.id);
    let (owner, found) = storage.token_by_hash(&hash_token("red-2")).await.unwrap().unwrap();
    assert_eq!((owner, found.clone()), (red.clone(), second.clone()));
    // Listed by creation time, then id: two tokens made in the same millisecond are ordered by
    // their (random) ids, so the expectation is sorted the same way.
    let mut both = vec![first.clone(), second.clone()];
    both.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    assert_eq!(storage.tokens(red.id).await.unwrap(), both);
    let json = serde_json::to_value(&second).unwrap();
    assert!(json.get("token_hash").is_none(), "{json}");

    let e = storage
        .create_token(red.id, &hash_token("red-1"), "copy", None)
        .await
        .unwrap_err();
    assert!(matches!(e, StorageError::Conflict(_)), "{e}");
    let e = storage
        .create_token(4242, &hash_token("x"), "", None)
        .await
        .unwrap_err();
    assert!(matches!(e, StorageError::NotFound(ref m) if m.contains("4242")), "{e}");

    // Revoking keeps the first revocation time; another team's token is not found.
    let revoked = storage.revoke_token(red.id, &first.id, 1_000).await.unwrap();
    assert_eq!(revoked.revoked_at, Some(1_000));
    let again = storage.revoke_token(red.id, &first.id, 2_000).await.unwrap();
    assert_eq!(again.revoked_at, Some(1_000));
    let (_, looked_up) = storage.token_by_hash(&hash_token("red-1")).await.unwrap().unwrap();
    assert_eq!(
        looked_up.revoked_at,
        Some(1_000),
        "lookups see revoked tokens (the caller says why)"
    );
    let blue = storage.create_team("blue", &hash_token("blue-1")).await.unwrap();
    let e = storage.revoke_token(blue.id, &second.id, 3_000).await.unwrap_err();
    assert!(matches!(e, StorageError::NotFound(_)), "{e}");
    let tokens = storage.tokens(red.id).await.unwrap();
    assert_eq!(tokens.iter().find(|t| t.id == second.id).unwrap().revoked_at, None);
    assert!(storage.members(blue.id).await.unwrap().is_empty());
}

fn phase(id: &str, challenge: &str, benchmark: &str) -> Phase {
    Phase {
        id: id.into(),
        challenge_id: challenge.into(),
        benchmark: benchmark.into(),
        starts_at: 1_000,
        ends_at: 4_000_000_000_000,
        leaderboard: Visibility::Public,
        max_per_day: None,
        max_total: None,
        observation_groups: None,
        hosted_only: false,
        created_at: now_ms(),
    }
}

async fn challenges_and_phases(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    assert!(storage.challenges().await.unwrap().is_empty());
    let cup = storage
        .create_challenge("cup", "The Cup", "track everything")
        .await
        .unwrap();
    assert_eq!((cup.id.as_str(), cup.title.as_str()), ("cup", "The Cup"));
    let e = storage.create_challenge("cup", "Again", "").await.unwrap_err();
    assert!(matches!(e, StorageError::Conflict(ref m) if m.contains("cup")), "{e}");
    assert_eq!(storage.challenge("cup").await.unwrap(), Some(cup.clone()));
    assert_eq!(storage.challenge("nope").await.unwrap(), None);

    let mut dev = phase("dev", "cup", "bench-a");
    dev.max_per_day = Some(5);
    dev.observation_groups = Some(vec!["state".into(), "reference".into()]);
    let mut test = phase("test", "cup", "bench-b");
    test.starts_at = 2_000;
    test.leaderboard = Visibility::Private;
    test.max_total = Some(u32::MAX);
    assert_eq!(storage.create_phase(&dev).await.unwrap(), dev);
    storage.create_phase(&test).await.unwrap();
    assert_eq!(storage.phase("dev").await.unwrap(), Some(dev.clone()));
    assert_eq!(storage.phase("test").await.unwrap(), Some(test.clone()));
    assert_eq!(storage.phase("nope").await.unwrap(), None);
    let e = storage.create_phase(&dev).await.unwrap_err();
    assert!(matches!(e, StorageError::Conflict(ref m) if m.contains("dev")), "{e}");
    let e = storage
        .create_phase(&phase("lost", "no-such-cup", "bench-a"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, StorageError::NotFound(ref m) if m.contains("no-such-cup")),
        "{e}"
    );
    let ids = |phases: Vec<Phase>| phases.into_iter().map(|p| p.id).collect::<Vec<_>>();
    assert_eq!(ids(storage.phases_of_challenge("cup").await.unwrap()), ["dev", "test"]);
    assert_eq!(ids(storage.phases_of_benchmark("bench-b").await.unwrap()), ["test"]);
    assert!(storage.phases_of_benchmark("bench-z").await.unwrap().is_empty());
    let json = serde_json::to_value(&dev).unwrap();
    assert_eq!(json["max_submissions_per_day"], 5);
    assert_eq!(json["leaderboard"], "public");

    // Window, visibility, limits and groups change; identity stays.
    let mut changed = test.clone();
    changed.ends_at = 3_000;
    changed.leaderboard = Visibility::Public;
    changed.max_total = None;
    changed.max_per_day = Some(1);
    changed.observation_groups = Some(vec!["state".into()]);
    changed.benchmark = "ignored".into();
    let stored = storage.update_phase(&changed).await.unwrap();
    changed.benchmark = "bench-b".into();
    assert_eq!(stored, changed);
    let e = storage.update_phase(&phase("nope", "cup", "x")).await.unwrap_err();
    assert!(matches!(e, StorageError::NotFound(_)), "{e}");

    // Submissions record their phase; a phase leaderboard sees only its own.
    let team = storage.create_team("red", &hash_token("r")).await.unwrap().id;
    let mut in_dev = new_submission("s-dev", team, "bench-a");
    in_dev.phase_id = Some("dev".into());
    let s = storage.create_submission(&in_dev, &[episode(0)]).await.unwrap();
    assert_eq!(s.phase_id.as_deref(), Some("dev"));
    assert_eq!(serde_json::to_value(&s).unwrap()["phase"], "dev");
    storage
        .create_submission(&new_submission("s-free", team, "bench-a"), &[episode(0)])
        .await
        .unwrap();
    for id in ["s-dev", "s-free"] {
        storage
            .finish_submission(id, SubmissionStatus::Completed, Some("{}"), None)
            .await
            .unwrap();
    }
    let subs = storage.completed_submissions_of_phase("dev").await.unwrap();
    assert_eq!(subs.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["s-dev"]);
    assert!(storage.completed_submissions_of_phase("test").await.unwrap().is_empty());
    let mut lost = new_submission("s-lost", team, "bench-a");
    lost.phase_id = Some("no-phase".into());
    let e = storage.create_submission(&lost, &[]).await.unwrap_err();
    assert!(
        matches!(e, StorageError::NotFound(ref m) if m.contains("no-phase")),
        "{e}"
    );
}

/// A challenge with one phase and a team; returns the team id.
async fn quota_setup(storage: &Storage, team: &str) -> i64 {
    if storage.challenge("cup").await.unwrap().is_none() {
        storage.create_challenge("cup", "Cup", "").await.unwrap();
        storage.create_phase(&phase("p", "cup", "bench-a")).await.unwrap();
    }
    storage.create_team(team, &hash_token(team)).await.unwrap().id
}

fn in_phase(id: &str, team: i64) -> NewSubmission {
    let mut s = new_submission(id, team, "bench-a");
    s.phase_id = Some("p".into());
    s
}

async fn quotas_per_day_and_in_total(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    let red = quota_setup(&storage, "red").await;
    let blue = quota_setup(&storage, "blue").await;
    let today = now_ms() - 1_000;
    let quota = |day_start| Quota {
        phase_id: "p",
        max_per_day: Some(2),
        max_total: Some(3),
        day_start,
    };
    for i in 0..2 {
        storage
            .create_submission_within(&in_phase(&format!("r-{i}"), red), &[episode(0)], Some(&quota(today)))
            .await
            .unwrap();
    }
    let e = storage
        .create_submission_within(&in_phase("r-2", red), &[episode(0)], Some(&quota(today)))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            StorageError::QuotaExceeded {
                limit: 2,
                used: 2,
                daily: true
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("today"), "{e}");
    assert_eq!(storage.submission("r-2").await.unwrap(), None, "nothing stored");
    // Another team, and the same team outside the phase, are not limited by red's count.
    storage
        .create_submission_within(&in_phase("b-0", blue), &[episode(0)], Some(&quota(today)))
        .await
        .unwrap();
    storage
        .create_submission(&new_submission("r-free", red, "bench-a"), &[episode(0)])
        .await
        .unwrap();
    // The next day: the daily count starts again, the total does not.
    let tomorrow = now_ms() + 1;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    storage
        .create_submission_within(&in_phase("r-3", red), &[episode(0)], Some(&quota(tomorrow)))
        .await
        .unwrap();
    let e = storage
        .create_submission_within(&in_phase("r-4", red), &[episode(0)], Some(&quota(tomorrow)))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            StorageError::QuotaExceeded {
                limit: 3,
                used: 3,
                daily: false
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("in total"), "{e}");
    // No quota: nothing is counted.
    storage
        .create_submission_within(&in_phase("r-5", red), &[episode(0)], None)
        .await
        .unwrap();
}

async fn concurrent_submissions_respect_the_quota(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    let red = quota_setup(&storage, "red").await;
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let storage = storage.clone();
            tokio::spawn(async move {
                let quota = Quota {
                    phase_id: "p",
                    max_per_day: None,
                    max_total: Some(3),
                    day_start: 0,
                };
                let episodes: Vec<NewEpisode> = (0..20).map(episode).collect();
                storage
                    .create_submission_within(&in_phase(&format!("c-{i}"), red), &episodes, Some(&quota))
                    .await
            })
        })
        .collect();
    let (mut created, mut refused) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => created += 1,
            Err(StorageError::QuotaExceeded { limit: 3, .. }) => refused += 1,
            Err(e) => panic!("neither created nor refused by the quota: {e}"),
        }
    }
    assert_eq!((created, refused), (3, 5));
    assert_eq!(storage.submissions(Some(red)).await.unwrap().len(), 3);
}

/// Many agents of one team connecting at once outside a quota (a phase without limits, or no
/// phase): each creation reads (its connect key) and then writes (the benchmark's definition,
/// the submission). On SQLite a transaction that read first could not take the write lock once
/// another had written, and failed at once instead of waiting (a load walkthrough: 17 of 30
/// agents refused `internal`). Every one is created.
async fn concurrent_submissions_outside_a_quota_are_all_created(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    let team = storage.create_team("crowd", &hash_token("crowd")).await.unwrap().id;
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let storage = storage.clone();
            tokio::spawn(async move {
                let mut s = new_submission(&format!("crowd-{i}"), team, "bench-a");
                s.connect_key = Some(format!("key-{i}"));
                s.benchmark_definition = Some("[benchmark]\nname = \"bench-a\"\n".into());
                let episodes: Vec<NewEpisode> = (0..20).map(episode).collect();
                storage.create_submission_within(&s, &episodes, None).await
            })
        })
        .collect();
    for t in tasks {
        if let Err(e) = t.await.unwrap() {
            panic!("a creation outside a quota failed: {e}");
        }
    }
    assert_eq!(storage.submissions(Some(team)).await.unwrap().len(), 16);
}

/// A database made by the first schema version keeps its teams' tokens working after the
/// migration to team_tokens.
async fn legacy_team_tokens_survive_the_migration(url: String, engine: Engine) {
    migrate_as_an_older_arena(&url, engine, 1, None).await;
    let mut conn = sqlx::AnyConnection::connect(&url).await.unwrap();
    sqlx::query("INSERT INTO teams (name, token_hash, created_at) VALUES ('old', $1, 5)")
        .bind(hash_token("old-secret"))
        .execute(&mut conn)
        .await
        .unwrap();
    drop(conn);
    let storage = open(&url, engine).await;
    let (team, token) = storage
        .token_by_hash(&hash_token("old-secret"))
        .await
        .unwrap()
        .expect("the old token still works");
    assert_eq!(
        (team.name.as_str(), token.label.as_str(), token.created_at),
        ("old", "initial", 5)
    );
    assert_eq!(storage.tokens(team.id).await.unwrap(), vec![token.clone()]);
    // New tokens of the migrated team get ids unlike the migrated one.
    let new = storage
        .create_token(team.id, &hash_token("old-2"), "", None)
        .await
        .unwrap();
    assert_ne!(new.id, token.id);
}

/// Migration 0015 as commit e2f44e2 shipped it (bf22ded then edited the file: `uncharged_runs`,
/// and BIGINT on PostgreSQL), which databases of the commits between carry.
fn migration_0015_as_first_released(engine: Engine) -> String {
    let dialect = match engine {
        Engine::Sqlite => "-- SQLite dialect (keep in step with ../postgres/).",
        Engine::Postgres => "-- PostgreSQL dialect (keep in step with ../sqlite/).",
    };
    format!(
        "-- How many of an episode's runs the server lost (its restart, a lane's error, a store that
-- failed, another replica's lease running out): each started run counts in `attempts` (it
-- stays the run's number), but only `attempts - server_faults` are charged to the agent
-- against max_attempts. An episode the server keeps losing fails at MAX_SERVER_FAULTS, so a
-- poison episode that kills every replica in turn still ends.
{dialect}
ALTER TABLE episodes ADD COLUMN server_faults INTEGER NOT NULL DEFAULT 0;
"
    )
}

/// Applies this tree's migrations up to `last` (with 0015 replaced by `replace_0015`) to a fresh
/// database, as an older arena left it.
async fn migrate_as_an_older_arena(url: &str, engine: Engine, last: i64, replace_0015: Option<String>) {
    sqlx::any::install_default_drivers();
    let dir = std::env::temp_dir().join(format!("arena-mig-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let folder = match engine {
        Engine::Sqlite => "sqlite",
        Engine::Postgres => "postgres",
    };
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../migrations/{folder}"));
    for entry in std::fs::read_dir(&source).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let version: i64 = name[..4].parse().unwrap();
        if version > last {
            continue;
        }
        match (&replace_0015, version) {
            (Some(text), 15) => std::fs::write(dir.join(&name), text).unwrap(),
            _ => {
                std::fs::copy(&path, dir.join(&name)).unwrap();
            }
        }
    }
    let older = sqlx::migrate::Migrator::new(dir.as_path()).await.unwrap();
    let conn_url = match engine {
        Engine::Sqlite => {
            let path = url.trim_start_matches("sqlite://");
            std::fs::create_dir_all(std::path::Path::new(path).parent().unwrap()).unwrap();
            format!("{url}?mode=rwc")
        }
        Engine::Postgres => url.to_string(),
    };
    let pool = sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .connect(&conn_url)
        .await
        .unwrap();
    older.run(&pool).await.unwrap();
    pool.close().await;
    std::fs::remove_dir_all(&dir).ok();
}

async fn applied_migrations(url: &str) -> Vec<i64> {
    let mut conn = sqlx::AnyConnection::connect(url).await.unwrap();
    sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version")
        .fetch_all(&mut conn)
        .await
        .unwrap()
}

/// A database whose 0015 is the file's first release is refused by the commands that do not
/// upgrade (in words) and repaired by a server's start: `uncharged_runs` added, the checksum
/// brought to the present file's, the later migrations applied. A database of an older schema is
/// left as it is by those commands.
async fn an_upgrade_repairs_the_migration_edited_after_release(url: String, engine: Engine) {
    migrate_as_an_older_arena(&url, engine, 15, Some(migration_0015_as_first_released(engine))).await;
    let Err(refused) = Storage::connect_as_found(&url).await else {
        panic!("an older schema is refused")
    };
    assert!(
        matches!(refused, StorageError::OlderSchema { found: 14, .. }),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("`arena serve` of this arena upgrades it"),
        "{refused}"
    );
    assert_eq!(applied_migrations(&url).await.last(), Some(&15), "nothing changed");
    let storage = open(&url, engine).await;
    let newest = applied_migrations(&url).await;
    assert!(newest.len() > 15, "{newest:?}");
    // The repaired column is there, and the episodes' queries that read it run.
    setup(&storage, "t", "s-1", 1).await;
    assert_eq!(storage.start_episode("s-1", 0).await.unwrap(), Some(1));
    let mut conn = sqlx::AnyConnection::connect(&url).await.unwrap();
    let uncharged: i64 = sqlx::query_scalar("SELECT uncharged_runs FROM episodes")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(uncharged, 0);
    drop(conn);
    drop(storage);
    Storage::connect_as_found(&url).await.expect("up to date now");

    // An older schema: refused by the commands beside a server, unchanged.
    let other = format!("{url}-older");
    let (other, _keep) = match engine {
        Engine::Sqlite => (other, None),
        Engine::Postgres => {
            let Some(db) = TestDb::postgres("an_upgrade_older").await else {
                return;
            };
            (db.url.clone(), Some(db))
        }
    };
    migrate_as_an_older_arena(&other, engine, 12, None).await;
    let Err(refused) = Storage::connect_as_found(&other).await else {
        panic!("an older schema is refused")
    };
    assert!(
        matches!(refused, StorageError::OlderSchema { found: 12, .. }),
        "{refused}"
    );
    assert_eq!(applied_migrations(&other).await.last(), Some(&12));
}

/// The idle expiry's two halves: which submissions are idle (none running under a live claim,
/// no change since; a replica gone for good leaves RUNNING rows whose lease ran out, and they
/// count as idle; hosted submissions never are), and the expiry itself, which looks again in
/// its own statement (an agent that came back after the listing keeps its run).
async fn idle_submissions_and_their_expiry(url: String, engine: Engine) {
    use std::time::Duration;
    let storage = open(&url, engine).await;
    let a = storage.clone().with_lease("replica-a", Duration::from_millis(200));
    let b = storage.clone().with_lease("replica-b", Duration::from_secs(60));
    let team = setup(&storage, "red", "gone", 2).await;
    for id in ["live", "hosted", "quiet", "attached"] {
        storage
            .create_submission(&new_submission(id, team, "bench-a"), &[episode(0)])
            .await
            .unwrap();
    }
    storage
        .insert_hosted_policy(&HostedPolicy {
            submission_id: "hosted".into(),
            sha256: "sha".into(),
            file_name: "policy.onnx".into(),
            bytes: 1,
            overrides: "{}".into(),
            mapping: serde_json::json!({}),
            created_at: 1,
        })
        .await
        .unwrap();
    // Replica a claims and dies; b runs "live".
    assert_eq!(a.claim_next_episode("gone").await.unwrap(), Some((0, 1)));
    assert_eq!(b.claim_next_episode("live").await.unwrap(), Some((0, 1)));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let idle_since = now_ms();
    let mut idle = storage.idle_submissions(idle_since).await.unwrap();
    idle.sort();
    assert_eq!(idle, ["attached", "gone", "quiet"]);
    // An agent attaches to "attached" on another replica after the listing, not claiming yet.
    storage
        .start_session("ses-1", "attached", "late agent", now_ms())
        .await
        .unwrap();
    assert!(
        !storage
            .expire_idle_submission("attached", "abandoned", idle_since)
            .await
            .unwrap()
    );

    // An agent comes back to "gone" on b after the listing: the expiry leaves it alone.
    assert!(b.claim_next_episode("gone").await.unwrap().is_some());
    assert!(
        !storage
            .expire_idle_submission("gone", "abandoned", idle_since)
            .await
            .unwrap()
    );
    let gone = storage.submission("gone").await.unwrap().unwrap();
    assert!(!gone.status.is_final(), "{:?}", gone.status);
    // "quiet" is still idle: it ends, with its episodes, once.
    assert!(
        storage
            .expire_idle_submission("quiet", "abandoned", idle_since)
            .await
            .unwrap()
    );
    let quiet = storage.submission("quiet").await.unwrap().unwrap();
    assert_eq!(
        (quiet.status, quiet.error.as_deref()),
        (SubmissionStatus::Failed, Some("abandoned"))
    );
    let rows = storage.episodes("quiet").await.unwrap();
    assert_eq!(
        (rows[0].status, rows[0].reason.as_deref()),
        (EpisodeState::Failed, Some("abandoned"))
    );
    assert!(
        !storage
            .expire_idle_submission("quiet", "abandoned", now_ms())
            .await
            .unwrap()
    );
    assert!(matches!(
        storage.cancel_submission("quiet", "again").await,
        Err(StorageError::Conflict(_))
    ));
    assert!(matches!(
        storage.cancel_submission("no-such", "x").await,
        Err(StorageError::NotFound(_))
    ));
}

/// A run whose lease ran out while it went on (renewals failing), and whose episode this same
/// replica then claimed again: the old run's cleanup (its commit refused, a requeue, a return
/// after a server error, a claim given up on) leaves the newer claim held, renewed and
/// counted as it is.
async fn a_stale_runs_cleanup_leaves_the_newer_claim(url: String, engine: Engine) {
    use std::time::Duration;
    let (a, b) = two_replicas(&url, engine).await;
    setup(&a, "red", "s-1", 1).await;
    assert_eq!(a.claim_next_episode("s-1").await.unwrap(), Some((0, 1)));
    // a's run 1 goes on, but a's renewals fail (none is made here): b settles the claim.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let expired = b.expire_leases("s-1").await.unwrap();
    assert_eq!((expired.requeued, expired.failed), (1, 0));
    // a claims it again: run 2. Run 1's late cleanup must not touch it.
    assert_eq!(a.claim_next_episode("s-1").await.unwrap(), Some((0, 2)));
    let done = outcome(EpisodeState::Completed, 4);
    assert!(
        !a.commit_episode("s-1", 0, Some(1), &done).await.unwrap(),
        "run 1 is stale"
    );
    assert_eq!(a.renew_leases().await.unwrap(), 1, "run 2 is still held");
    assert_eq!(a.requeue_episodes("s-1", &[(0, 1)], 3, "lost").await.unwrap(), (0, 0));
    assert_eq!(
        a.return_episodes("s-1", &[(0, 1)], "server error").await.unwrap(),
        (0, 0)
    );
    assert_eq!(
        a.unclaim_episodes("s-1", &[(0, 1)], "never started", false)
            .await
            .unwrap(),
        0
    );
    a.forget_claim("s-1", 0, 1);
    assert_eq!(a.renew_leases().await.unwrap(), 1, "run 2 is still held");
    let row = &a.episodes("s-1").await.unwrap()[0];
    assert_eq!((row.status, row.attempts), (EpisodeState::Running, 2));
    assert!(a.commit_episode("s-1", 0, Some(2), &done).await.unwrap());
    assert_eq!(a.renew_leases().await.unwrap(), 0);
}

/// The first submission of a benchmark version records what it defines; another definition
/// under that version is refused, creating nothing; a new version, or another benchmark, records
/// its own.
async fn a_version_takes_one_definition(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    let team = storage
        .create_team("definers", &hash_token("definers"))
        .await
        .unwrap()
        .id;
    let defined = |id: &str, benchmark: &str, version: u32, definition: &str| {
        let mut s = new_submission(id, team, benchmark);
        s.benchmark_version = version;
        s.benchmark_definition = Some(definition.into());
        s
    };
    let episodes = [episode(0)];
    storage
        .create_submission(&defined("d1", "bench-a", 1, "d1:aaa"), &episodes)
        .await
        .unwrap();
    storage
        .create_submission(&defined("d2", "bench-a", 1, "d1:aaa"), &episodes)
        .await
        .unwrap();
    let e = storage
        .create_submission(&defined("d3", "bench-a", 1, "d1:bbb"), &episodes)
        .await
        .unwrap_err();
    assert!(
        matches!(e, StorageError::BenchmarkChanged { ref benchmark, version: 1 } if benchmark == "bench-a"),
        "{e}"
    );
    assert!(e.to_string().contains("bump its `version`"), "{e}");
    assert!(storage.submission("d3").await.unwrap().is_none(), "nothing stored");
    storage
        .create_submission(&defined("d4", "bench-a", 2, "d1:bbb"), &episodes)
        .await
        .unwrap();
    storage
        .create_submission(&defined("d5", "bench-b", 1, "d1:bbb"), &episodes)
        .await
        .unwrap();
    // Recorded under another scheme (a server that digested otherwise): recorded again, and
    // then held to.
    storage
        .create_submission(&defined("d7", "bench-a", 1, "d2:ccc"), &episodes)
        .await
        .unwrap();
    let e = storage
        .create_submission(&defined("d8", "bench-a", 1, "d2:ddd"), &episodes)
        .await
        .unwrap_err();
    assert!(matches!(e, StorageError::BenchmarkChanged { .. }), "{e}");
    // Unchecked (a caller without a definition) goes through.
    storage
        .create_submission(&new_submission("d6", team, "bench-a"), &episodes)
        .await
        .unwrap();
}

/// A submission made by a connect with a key is found by the team's key; the key names one
/// submission of its team (a second is refused, storing nothing), and another team's same key is
/// its own.
async fn a_connect_key_names_one_submission_of_its_team(url: String, engine: Engine) {
    let storage = open(&url, engine).await;
    let team = |name: &str| {
        let storage = &storage;
        let name = name.to_string();
        async move { storage.create_team(&name, &hash_token(&name)).await.unwrap().id }
    };
    let (red, blue) = (team("keyed-red").await, team("keyed-blue").await);
    let keyed = |id: &str, team: i64, key: &str| {
        let mut s = new_submission(id, team, "bench-a");
        s.connect_key = Some(key.into());
        s
    };
    let episodes = [episode(0)];
    assert!(storage.submission_by_connect_key(red, "k1").await.unwrap().is_none());
    storage
        .create_submission(&keyed("k-red-1", red, "k1"), &episodes)
        .await
        .unwrap();
    let found = storage.submission_by_connect_key(red, "k1").await.unwrap().unwrap();
    assert_eq!(found.id, "k-red-1");
    match storage.create_submission(&keyed("k-red-2", red, "k1"), &episodes).await {
        Err(StorageError::ConnectKeyTaken(key)) => assert_eq!(key, "k1"),
        other => panic!("expected ConnectKeyTaken, got {other:?}"),
    }
    assert!(storage.submission("k-red-2").await.unwrap().is_none(), "nothing stored");
    storage
        .create_submission(&keyed("k-blue-1", blue, "k1"), &episodes)
        .await
        .unwrap();
    assert_eq!(
        storage.submission_by_connect_key(blue, "k1").await.unwrap().unwrap().id,
        "k-blue-1"
    );
    assert!(storage.submission_by_connect_key(red, "k2").await.unwrap().is_none());
    // Under a quota the key is looked at first: a second connect with the key (at the same
    // moment as the first) is told it is taken, to attach, not that the quota is spent.
    let green = quota_setup(&storage, "keyed-green").await;
    let one_a_day = Quota {
        phase_id: "p",
        max_per_day: Some(1),
        max_total: None,
        day_start: now_ms() - 1_000,
    };
    let keyed_in_phase = |id: &str| {
        let mut s = in_phase(id, green);
        s.connect_key = Some("kq".into());
        s
    };
    storage
        .create_submission_within(&keyed_in_phase("k-green-1"), &episodes, Some(&one_a_day))
        .await
        .unwrap();
    match storage
        .create_submission_within(&keyed_in_phase("k-green-2"), &episodes, Some(&one_a_day))
        .await
    {
        Err(StorageError::ConnectKeyTaken(key)) => assert_eq!(key, "kq"),
        other => panic!("expected ConnectKeyTaken before the quota, got {other:?}"),
    }
}
