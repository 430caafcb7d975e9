//! The board cannot reward falling (issue 16, item 4).
//!
//! EMD compares joint angles only, so open-loop replay, which lies on the floor after about a
//! second, can score a lower (better) EMD on `stand` than a robot that really stands with its
//! knees bent differently. The shipped benchmarks rank by success rate first, so the robot that
//! stays up ranks above the one that falls.
//!
//! The fall is real: replay run through the SDK's local runner on the simulator. The standing
//! robot is the reference itself with bent knees, hips, ankles and shoulders and the body 5 cm
//! lower (no agent of the project stands yet), scored by the same metric code as every episode.

use arena_bench::aggregate::{EpisodeResult, EpisodeStatus, MetricsAggregator, Report};
use arena_bench::spec::{BenchmarkSpec, find_benchmark, shipped_dir};
use arena_runner::episode;
use arena_runner::local::{LocalOptions, run_local};
use arena_sdk::agent::Agent;
use arena_sdk::agents::{ReplayAgent, ZeroAgent};
use arena_server::leaderboard;
use arena_server::storage::{Submission, SubmissionStatus};
use arena_sim::env::Trajectory;
use arena_sim::handler::NQ;
use arena_sim::motion::MotionLibrary;
use arena_sim::robot::NUM_BODIES_EXT;
use arena_sim::{CONTROL_DT, RobotConfig};
use std::path::Path;

/// g1-smoke narrowed to its `stand` motion, ranking rules as shipped.
fn stand_benchmark() -> BenchmarkSpec {
    let (path, _) = find_benchmark("g1-smoke", &shipped_dir(), &arena_bench::metrics::metric_names()).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text.find("builtin = [").unwrap();
    let end = start + text[start..].find(']').unwrap() + 1;
    let text = format!("{}builtin = [\"stand\"]{}", &text[..start], &text[end..]);
    BenchmarkSpec::parse(&text, &path, &arena_bench::metrics::metric_names()).unwrap()
}

/// The reference of `stand` held with bent legs and arms, 5 cm lower: a robot that stays up.
fn standing_report(spec: &BenchmarkSpec) -> Report {
    let robot = RobotConfig::default();
    let clips = episode::benchmark_clips(spec, Path::new("."), &robot).unwrap();
    let library = MotionLibrary::from_clips(&clips, &robot).unwrap();
    let motion = &library.motions[0];
    let episodes = spec.expand_episodes(&[motion.length_s]).unwrap();
    let ep = &episodes[0];
    let steps = episode::episode_steps(ep) as usize;
    let w = 3 * NUM_BODIES_EXT;
    let mut t = Trajectory::default();
    let (mut qpos, mut body) = ([0.0; NQ], vec![0.0; w]);
    for k in 0..=steps {
        let time = ep.start_s + k as f64 * CONTROL_DT;
        motion.pose_at(time, &mut qpos, &mut body);
        t.rows.times.push(time);
        t.rows.ref_qpos.extend_from_slice(&qpos);
        t.rows.ref_body_pos.extend_from_slice(&body);
        // Joints 0/6 hip pitch, 3/9 knee, 4/10 ankle pitch, 15/22 shoulder pitch.
        for (j, offset) in [
            (0, -0.3),
            (6, -0.3),
            (3, 0.55),
            (9, 0.55),
            (4, -0.3),
            (10, -0.3),
            (15, 0.2),
            (22, 0.2),
        ] {
            qpos[7 + j] += offset;
        }
        qpos[2] -= 0.05;
        for b in body.chunks_exact_mut(3) {
            b[2] -= 0.05;
        }
        t.rows.qpos.extend_from_slice(&qpos);
        t.rows.body_pos.extend_from_slice(&body);
        t.rows.qvel.extend_from_slice(&[0.0; 35]);
        t.rows.actions.extend_from_slice(&[0.0; 29]);
        t.rows.state.extend_from_slice(&[0.0; 64]);
        t.rows.ref_state.extend_from_slice(&[0.0; 64]);
    }
    let (status, metrics, reason) = episode::score_finished(
        &t.rows,
        EpisodeStatus::Completed,
        None,
        &spec.metrics.list,
        &episode::metric_config(spec),
    );
    let mut aggregator = MetricsAggregator::new();
    aggregator.add_episode(EpisodeResult {
        episode_id: "0".into(),
        motion: motion.name.clone(),
        category: "builtin".into(),
        status,
        metrics,
        num_steps: steps,
        start_s: ep.start_s,
        duration_s: ep.duration_s,
        seed: ep.seed,
        dr_level: 0,
        reason,
        scored_until_s: None,
    });
    aggregator.report(&spec.name, serde_json::json!({}))
}

/// Open-loop replay on the simulator: it falls.
fn replay_report(spec: &BenchmarkSpec) -> Report {
    agent_report(spec, &mut ReplayAgent::new(), 1)
}

/// `agent` through the local runner on the simulator, `batch` episodes at a time.
fn agent_report(spec: &BenchmarkSpec, agent: &mut dyn Agent, batch: usize) -> Report {
    let clips = episode::benchmark_clips(spec, Path::new("."), &RobotConfig::default()).unwrap();
    run_local(
        spec,
        &clips,
        agent,
        &LocalOptions {
            batch,
            threads: 1,
            ..Default::default()
        },
        &mut |_, _, _| {},
    )
    .unwrap()
    .report(&spec.name, serde_json::json!({}))
}

fn submission(id: &str, team: &str, finished_at: i64, report: &Report) -> Submission {
    Submission {
        id: id.into(),
        team_id: 0,
        team_name: team.into(),
        benchmark: "g1-smoke".into(),
        agent_name: team.into(),
        status: SubmissionStatus::Completed,
        episodes_total: report.episodes.len() as i64,
        created_at: 0,
        started_at: Some(0),
        finished_at: Some(finished_at),
        report_json: Some(serde_json::to_string(report).unwrap()),
        error: None,
        phase_id: None,
        baseline: false,
        summary_json: Some(serde_json::to_string(&leaderboard::ReportSummary::of(report)).unwrap()),
        benchmark_version: None,
    }
}

/// A bump of the benchmark's `version` says results are not comparable: the board ranks only
/// the current version's submissions (and those stored before versions were kept), and says
/// how many it left off.
#[test]
fn only_the_benchmark_files_current_version_is_ranked() {
    let spec = stand_benchmark();
    let report = standing_report(&spec);
    let mut old = submission("sub-v0", "old", 1, &report);
    old.benchmark_version = Some(i64::from(spec.version) - 1);
    let mut now = submission("sub-now", "now", 2, &report);
    now.benchmark_version = Some(i64::from(spec.version));
    let legacy = submission("sub-legacy", "legacy", 3, &report);
    let board = leaderboard::rank(&spec, &[old, now, legacy]);
    let teams: Vec<&str> = board.entries.iter().map(|e| e.team.as_str()).collect();
    assert_eq!(teams, ["now", "legacy"]);
    assert_eq!((board.version, board.other_versions), (spec.version, 1));
    assert_eq!(board.scored_without_ranking_metrics, 0);
}

/// A ranking edited in place (no `version` bump) to a metric the stored reports lack: the
/// board says how many of its rows were scored without it, rather than showing blank scores
/// that pass for missing results.
#[test]
fn a_board_counts_the_rows_scored_without_its_ranking_metric() {
    let mut spec = stand_benchmark();
    let rescored = standing_report(&spec);
    // Scored when the file's list did not have mpjpe_rr.
    let mut report = rescored.clone();
    report.aggregated.remove("mpjpe_rr");
    spec.ranking.primary = "mpjpe_rr".into();
    let board = leaderboard::rank(
        &spec,
        &[
            submission("sub-old", "old", 1, &report),
            submission("sub-new", "new", 2, &rescored),
        ],
    );
    assert_eq!(board.entries.len(), 2);
    assert_eq!(board.scored_without_ranking_metrics, 1);
    let old = board.entries.iter().find(|e| e.team == "old").unwrap();
    assert_eq!(old.score, None);
}

/// A report an older arena scored by older rules (format 1 scored whole episodes): ranked, but
/// marked on its row and counted on the board until a rescore; a summary stored before summaries
/// kept the format tells nothing (`None`), and is not counted.
#[test]
fn a_board_marks_the_rows_an_older_arena_scored() {
    let spec = stand_benchmark();
    let current = standing_report(&spec);
    let mut older = current.clone();
    older.format_version = 1;
    let mut unknown = submission("sub-unknown", "unknown", 3, &current);
    let mut summary: serde_json::Value = serde_json::from_str(unknown.summary_json.as_deref().unwrap()).unwrap();
    summary.as_object_mut().unwrap().remove("format_version");
    unknown.summary_json = Some(summary.to_string());
    let board = leaderboard::rank(
        &spec,
        &[
            submission("sub-old", "old", 1, &older),
            submission("sub-now", "now", 2, &current),
            unknown,
        ],
    );
    assert_eq!(board.entries.len(), 3);
    assert_eq!(board.older_report_format, 1);
    let format_of = |team: &str| {
        board
            .entries
            .iter()
            .find(|e| e.team == team)
            .unwrap()
            .report_format_version
    };
    assert_eq!(format_of("old"), Some(1));
    assert_eq!(format_of("now"), Some(arena_bench::aggregate::REPORT_FORMAT_VERSION));
    assert_eq!(format_of("unknown"), None);
}

#[test]
fn a_robot_that_stays_up_ranks_above_one_that_falls() {
    let spec = stand_benchmark();
    assert_eq!(
        spec.ranking.success.as_deref(),
        Some("success"),
        "g1-smoke ranks by success first"
    );
    let fallen = replay_report(&spec);
    let standing = standing_report(&spec);
    let emd = |r: &Report| r.aggregated["emd"].mean;
    let success = |r: &Report| r.aggregated["success"].mean;
    println!(
        "replay: emd {:.3} success {}; standing: emd {:.3} success {}",
        emd(&fallen),
        success(&fallen),
        emd(&standing),
        success(&standing)
    );
    // The flaw this ranking answers: the fallen robot's joint angles match better.
    assert!(
        emd(&fallen) < emd(&standing),
        "precondition: replay's EMD is the lower one"
    );
    assert_eq!(success(&fallen), 0.0, "replay falls");
    assert_eq!(success(&standing), 1.0);

    // The faller finished first, so on an equal footing it would win the tie.
    let subs = [
        submission("s-fall", "fallers", 1, &fallen),
        submission("s-up", "standers", 2, &standing),
    ];
    let board = leaderboard::rank(&spec, &subs);
    let order: Vec<&str> = board.entries.iter().map(|e| e.team.as_str()).collect();
    assert_eq!(order, ["standers", "fallers"]);
    assert_eq!(board.entries[0].success_rate, Some(1.0));
    assert_eq!(board.entries[1].success_rate, Some(0.0));
    assert_eq!(board.success_metric.as_deref(), Some("success"));

    // Ranked by EMD alone (the old rule), the faller would be first: the test can fail.
    let mut emd_only = spec.clone();
    emd_only.ranking.success = None;
    emd_only.ranking.survival = None;
    let board = leaderboard::rank(&emd_only, &subs);
    assert_eq!(board.entries[0].team, "fallers");
}

/// Issue 30 §3: on the whole g1-smoke every agent falls (success 0 for all), and holding the
/// default pose matches the joint angles better (lower EMD) than replay. Among agents that fail,
/// the one that stays up longer must rank higher: the shipped rule ranks the mean time to
/// failure before EMD.
#[test]
fn among_agents_that_fall_the_one_that_stays_up_longer_ranks_higher() {
    let (path, spec) = find_benchmark("g1-smoke", &shipped_dir(), &arena_bench::metrics::metric_names()).unwrap();
    assert_eq!(
        spec.ranking.survival.as_deref(),
        Some("failure_time_s"),
        "{} ranks by time to failure after success",
        path.display()
    );
    let replay = agent_report(&spec, &mut ReplayAgent::new(), 6);
    let zero = agent_report(&spec, &mut ZeroAgent::default(), 6);
    let mean = |r: &Report, m: &str| r.aggregated[m].mean;
    println!(
        "replay: success {} failure_time_s {:.3} emd {:.3}; zero: success {} failure_time_s {:.3} emd {:.3}",
        mean(&replay, "success"),
        mean(&replay, "failure_time_s"),
        mean(&replay, "emd"),
        mean(&zero, "success"),
        mean(&zero, "failure_time_s"),
        mean(&zero, "emd"),
    );
    assert_eq!(
        (mean(&replay, "success"), mean(&zero, "success")),
        (0.0, 0.0),
        "both fall"
    );
    let (longer, shorter) = if mean(&replay, "failure_time_s") > mean(&zero, "failure_time_s") {
        ("replay", "zero")
    } else {
        ("zero", "replay")
    };
    // The one that falls sooner finished first, so it would win any tie.
    let report_of = |name: &str| if name == "replay" { &replay } else { &zero };
    let subs = [
        submission("s-short", shorter, 1, report_of(shorter)),
        submission("s-long", longer, 2, report_of(longer)),
    ];
    let board = leaderboard::rank(&spec, &subs);
    let order: Vec<&str> = board.entries.iter().map(|e| e.team.as_str()).collect();
    assert_eq!(order, [longer, shorter], "the one that stays up longer ranks first");
    assert_eq!(board.survival_metric.as_deref(), Some("failure_time_s"));
    // mjlab's rule is shown beside PHC's (both agents fall: 0 by both).
    assert_eq!(board.other_success_metric.as_deref(), Some("mjlab_success"));
    assert!(board.entries.iter().all(|e| e.other_success_rate == Some(0.0)));
    assert_eq!(
        board.entries[0].survival,
        Some(mean(report_of(longer), "failure_time_s"))
    );
    assert_eq!(board.entries[0].rank, Some(1));

    // Without survival (success, then EMD) the lower EMD ranks first. (Since scoring stops at
    // the success rule's break, each agent's EMD covers its frames up to its fall, so which
    // agent that is no longer follows from falling sooner, as it did when whole episodes were
    // scored, issue 30.)
    let lower_emd = if mean(&replay, "emd") < mean(&zero, "emd") {
        "replay"
    } else {
        "zero"
    };
    let mut emd_rule = spec.clone();
    emd_rule.ranking.survival = None;
    let board = leaderboard::rank(&emd_rule, &subs);
    assert_eq!(board.entries[0].team, lower_emd);
}

/// Issue 30 §2: a submission whose every episode failed is not ranked (listed apart unless its
/// team has a ranked one), and every baseline is a row of its own, never a team's best.
#[test]
fn failed_submissions_are_unranked_and_baselines_are_rows_of_their_own() {
    let spec = stand_benchmark();
    let standing = standing_report(&spec);
    let fallen = replay_report(&spec);
    let mut failed = standing.clone();
    for e in &mut failed.episodes {
        e.status = EpisodeStatus::Failed;
        e.metrics.clear();
    }
    let failed = {
        let mut aggregator = MetricsAggregator::new();
        for e in failed.episodes {
            aggregator.add_episode(e);
        }
        aggregator.report(&spec.name, serde_json::json!({}))
    };
    let mut base_good = submission("s-base-good", "organisers", 1, &standing);
    base_good.baseline = true;
    let mut base_fallen = submission("s-base-fallen", "organisers", 2, &fallen);
    base_fallen.baseline = true;
    let subs = [
        base_good,
        base_fallen,
        submission("s-org", "organisers", 3, &fallen),
        submission("s-team", "walkers", 4, &fallen),
        submission("s-broken", "crashers", 5, &failed),
        submission("s-broken-too", "walkers", 6, &failed),
    ];
    let board = leaderboard::rank(&spec, &subs);
    let rows: Vec<(&str, Option<usize>)> = board
        .entries
        .iter()
        .map(|e| (e.submission_id.as_str(), e.rank))
        .collect();
    // Both baselines show, in order, unnumbered; the organisers' own best is ranked apart from them.
    assert_eq!(
        rows,
        [
            ("s-base-good", None),
            ("s-base-fallen", None),
            ("s-org", Some(1)),
            ("s-team", Some(2)),
        ]
    );
    let unranked: Vec<&str> = board.unranked.iter().map(|e| e.submission_id.as_str()).collect();
    assert_eq!(unranked, ["s-broken"], "walkers have a ranked submission");
    assert_eq!(board.unranked[0].rank, None);
    assert_eq!(board.unranked[0].scored_episodes, 0);
    // No episode succeeded by either rule: 0, not "unknown", beside the ranked rule's 0.
    assert!(board.other_success_metric.is_some());
    assert_eq!(board.unranked[0].other_success_rate, Some(0.0));
}

#[test]
fn every_shipped_benchmark_ranks_by_success_first() {
    let names = arena_bench::metrics::metric_names();
    for (path, spec) in arena_bench::spec::list_benchmarks(&shipped_dir(), &names) {
        let spec = spec.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            spec.ranking.success.is_some(),
            "{} must rank by a success rate first",
            path.display()
        );
    }
}

/// A COMPLETED submission stored before summaries existed (report, no summary) is summarised
/// when the server starts, and then ranks; the database's leaderboard rows carry the summary.
#[test]
fn older_reports_get_their_summary_when_the_server_starts() {
    use arena_server::config::ServerConfig;
    use arena_server::state::AppState;
    use arena_server::storage::{NewSubmission, Storage};
    let spec = stand_benchmark();
    let report = serde_json::to_string(&standing_report(&spec)).unwrap();
    let dir = std::env::temp_dir().join(format!("arena-summary-backfill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("arena.db").display());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let storage = Storage::connect(&url).await.unwrap();
        let team = storage.create_team("old-timers", "hash-old").await.unwrap();
        let new = NewSubmission {
            id: "sub-old".into(),
            team_id: team.id,
            benchmark: "g1-smoke".into(),
            agent_name: "v1".into(),
            phase_id: None,
            benchmark_version: 1,
            benchmark_definition: None,
            connect_key: None,
        };
        storage.create_submission(&new, &[]).await.unwrap();
        storage
            .finish_submission("sub-old", SubmissionStatus::Completed, Some(&report), None)
            .await
            .unwrap();
        let rows: Vec<leaderboard::RankRow> =
            serde_json::from_str(&storage.leaderboard_json("g1-smoke", None).await.unwrap()).unwrap();
        assert_eq!(rows.len(), 1);
        assert!(rows[0].summary.is_none(), "no summary stored yet");
        // Scored by an arena of report format 1, summarised by one whose summaries did not keep
        // the format: computed again at the start, then counted on the board.
        let mut older = standing_report(&spec);
        older.format_version = 1;
        let mut summary = serde_json::to_value(leaderboard::ReportSummary::of(&older)).unwrap();
        summary.as_object_mut().unwrap().remove("format_version");
        let team = storage.create_team("older-rules", "hash-older").await.unwrap();
        let new = NewSubmission {
            id: "sub-older".into(),
            team_id: team.id,
            agent_name: "v0".into(),
            ..new
        };
        storage.create_submission(&new, &[]).await.unwrap();
        storage
            .complete_submission(
                "sub-older",
                &serde_json::to_string(&older).unwrap(),
                &summary.to_string(),
            )
            .await
            .unwrap();
        drop(storage);

        let config = ServerConfig {
            data_dir: dir.clone(),
            database_url: url.clone(),
            ..Default::default()
        };
        let state = AppState::open(config).await.unwrap();
        let rows: Vec<leaderboard::RankRow> =
            serde_json::from_str(&state.storage.leaderboard_json("g1-smoke", None).await.unwrap()).unwrap();
        let summary_of = |id: &str| rows.iter().find(|r| r.id == id).unwrap().summary.clone();
        let summary = summary_of("sub-old").expect("summarised at start-up");
        assert_eq!(summary.success_rates["success"], 1.0);
        assert_eq!(
            summary.format_version,
            Some(arena_bench::aggregate::REPORT_FORMAT_VERSION)
        );
        assert_eq!(summary_of("sub-older").unwrap().format_version, Some(1));
        let board = leaderboard::rank_rows(&spec, rows);
        assert_eq!(board.entries.len(), 2);
        assert_eq!(board.older_report_format, 1);
        assert_eq!(board.entries[0].team, "old-timers");
        // A summary that does not read (hand-edited, or of another version) leaves its row
        // off, not the board: the other rows still rank.
        let broken = state.storage.create_team("broken", "hash-broken").await.unwrap();
        let new = NewSubmission {
            id: "sub-broken".into(),
            team_id: broken.id,
            benchmark: "g1-smoke".into(),
            agent_name: "v2".into(),
            phase_id: None,
            benchmark_version: 1,
            benchmark_definition: None,
            connect_key: None,
        };
        state.storage.create_submission(&new, &[]).await.unwrap();
        state
            .storage
            .complete_submission("sub-broken", &report, "{\"episodes\": \"many\"")
            .await
            .unwrap();
        let rows = state.leaderboards.rows(&state.storage, "g1-smoke", None).await.unwrap();
        assert_eq!(rows.len(), 3);
        let board = leaderboard::rank_rows(&spec, rows);
        let teams: Vec<&str> = board.entries.iter().map(|e| e.team.as_str()).collect();
        assert_eq!(teams, ["old-timers", "older-rules"]);
    });
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 30 §5: after a write, a cached leaderboard re-reads only the submissions stamped since
/// (one row, not the whole benchmark), and what it ranks is what a full read gives.
#[test]
fn a_cached_board_rereads_only_what_changed() {
    use arena_server::leaderboard::LeaderboardCache;
    use arena_server::storage::{NewSubmission, Storage};
    let spec = stand_benchmark();
    let report = standing_report(&spec);
    let report_json = serde_json::to_string(&report).unwrap();
    let summary = serde_json::to_string(&leaderboard::ReportSummary::of(&report)).unwrap();
    let dir = std::env::temp_dir().join(format!("arena-board-seq-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("arena.db").display());
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let storage = Storage::connect(&url).await.unwrap();
        let team = storage.create_team("stampers", "hash-s").await.unwrap();
        let complete = async |id: &str| {
            let new = NewSubmission {
                id: id.into(),
                team_id: team.id,
                benchmark: "g1-smoke".into(),
                agent_name: "v1".into(),
                phase_id: None,
                benchmark_version: 1,
                benchmark_definition: None,
                connect_key: None,
            };
            storage.create_submission(&new, &[]).await.unwrap();
            storage
                .finish_submission(id, SubmissionStatus::Completed, Some(&report_json), None)
                .await
                .unwrap();
            storage.set_summary(id, &summary).await.unwrap();
        };
        for i in 0..5 {
            complete(&format!("sub-{i}")).await;
        }
        let cache = LeaderboardCache::default();
        let ids = |rows: &[std::sync::Arc<leaderboard::RankRow>]| {
            let mut v: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
            v.sort();
            v
        };
        let rows = cache.rows(&storage, "g1-smoke", None).await.unwrap();
        assert_eq!(ids(&rows), ["sub-0", "sub-1", "sub-2", "sub-3", "sub-4"]);
        let before = storage.board_counter().await.unwrap();
        storage.set_baseline("sub-3", true).await.unwrap();
        let changed: Vec<leaderboard::RankRow> =
            serde_json::from_str(&storage.leaderboard_json_since("g1-smoke", None, before).await.unwrap()).unwrap();
        assert_eq!(changed.len(), 1, "only the stamped row is read again");
        assert_eq!((changed[0].id.as_str(), changed[0].baseline), ("sub-3", 1));
        complete("sub-5").await;
        let rows = cache.rows(&storage, "g1-smoke", None).await.unwrap();
        assert_eq!(ids(&rows).len(), 6);
        assert!(
            rows.iter().any(|r| r.id == "sub-3" && r.baseline == 1),
            "the change is seen"
        );
        // The incrementally kept rows rank exactly as a full read does.
        let full: Vec<leaderboard::RankRow> =
            serde_json::from_str(&storage.leaderboard_json("g1-smoke", None).await.unwrap()).unwrap();
        let board = leaderboard::rank_rows(&spec, rows.iter().map(|r| r.as_ref()));
        assert_eq!(board, leaderboard::rank_rows(&spec, full), "incremental = full read");
    });
    std::fs::remove_dir_all(&dir).ok();
}
