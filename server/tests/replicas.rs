//! Two `arena serve` replicas on one PostgreSQL database and one S3-compatible store (s3s-fs),
//! behind a TCP proxy, with four teams' agents running g1-smoke submissions through it. One
//! replica is SIGKILLed while it runs episodes: the agents reconnect through the proxy to the
//! other replica, which claims the dead replica's episodes again once their leases expire.
//! Every submission completes, each episode is counted exactly once (with the lost run counted
//! as an attempt), and every trajectory is in the store.
//!
//! Needs `ARENA_TEST_DATABASE_URL` (PostgreSQL) and s3s-fs (`ARENA_S3S_BIN`); skipped with the
//! reason printed without them, unless `ARENA_REQUIRE_POSTGRES=1` / `ARENA_REQUIRE_S3=1`.

mod common;

use arena_sdk::agents::ZeroAgent;
use arena_sdk::protocol::{EpisodeEnd, EpisodeInfo};
use arena_sdk::{Agent, Batch, ClientConfig, Mode};
use common::cluster::{Proxy, S3_BUCKET, S3Server, s3s_binary};
use common::server::{ADMIN, PgDb, ServerProc};
use std::time::{Duration, Instant};

/// Zero actions, slowly: a session lasts long enough to be cut by the kill.
struct SlowAgent(ZeroAgent);

impl Agent for SlowAgent {
    fn reset(&mut self, episodes: &[EpisodeInfo]) {
        self.0.reset(episodes)
    }
    fn act(&mut self, batch: &Batch<'_>, actions: &mut [f32]) {
        std::thread::sleep(Duration::from_millis(25));
        self.0.act(batch, actions)
    }
    fn end(&mut self, end: &EpisodeEnd) {
        self.0.end(end)
    }
}

const LEASE_S: &str = "2";

fn replica(name: &str, dir: &std::path::Path, db: &str, s3: &S3Server) -> ServerProc {
    let env = s3.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    ServerProc::start_with_env(
        &dir.join(name),
        &[
            "--database-url",
            db,
            "--object-store",
            &format!("s3://{S3_BUCKET}/run"),
            "--replica-id",
            name,
            "--lease-s",
            LEASE_S,
            "--lanes",
            "1",
            "--max-batch",
            "2",
        ],
        &env,
    )
}

fn running_on(db: &str, replica: &str) -> i64 {
    let (db, replica) = (db.to_string(), replica.to_string());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            use sqlx::Connection;
            let mut c = sqlx::PgConnection::connect(&db).await.unwrap();
            let n: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM episodes WHERE status = 'RUNNING' AND lease_owner = $1")
                    .bind(&replica)
                    .fetch_one(&mut c)
                    .await
                    .unwrap();
            n
        })
    })
    .join()
    .unwrap()
}

#[test]
fn a_killed_replica_loses_nothing() {
    let Some(s3s) = s3s_binary("a_killed_replica_loses_nothing") else {
        return;
    };
    let Some(pg) = PgDb::create("a_killed_replica_loses_nothing") else {
        return;
    };
    let dir = common::tmp("replicas");
    let s3 = S3Server::start(&s3s, &dir.join("s3"));
    let mut r1 = replica("r1", &dir, &pg.url, &s3);
    let r2 = replica("r2", &dir, &pg.url, &s3);
    let proxy = Proxy::start(vec![r1.addr, r2.addr]);

    let teams: Vec<String> = (0..4).map(|i| r1.team(&format!("team-{i}"))).collect();
    let agents: Vec<_> = teams
        .iter()
        .enumerate()
        .map(|(i, token)| {
            let mut config = ClientConfig::new(
                proxy.ws_url(),
                token.clone(),
                Mode::Submission {
                    benchmark: "g1-smoke".into(),
                    submission_id: None,
                },
            );
            config.agent_name = format!("slow-{i}");
            config.max_reconnects = 30;
            config.max_backoff = Duration::from_millis(500);
            std::thread::spawn(move || {
                let mut agent = SlowAgent(ZeroAgent);
                arena_sdk::client::run_blocking(&config, &mut agent, &mut |_| {})
            })
        })
        .collect();

    // Kill r1 while it runs episodes.
    let deadline = Instant::now() + Duration::from_secs(60);
    while running_on(&pg.url, "r1") == 0 {
        assert!(Instant::now() < deadline, "r1 never ran an episode:\n{}", r1.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    let cut = running_on(&pg.url, "r1");
    r1.kill9();
    eprintln!(
        "killed r1 with {cut} episodes running; routed per replica: {:?}",
        proxy.routed.lock().unwrap()
    );

    let mut ids = Vec::new();
    for agent in agents {
        let summary = agent
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("an agent failed: {e}\n{}", r2.log_text()));
        assert_eq!(summary.submission_status, "COMPLETED", "{summary:?}");
        ids.push(summary.submission_id);
    }

    // Every submission: 6 final episodes, the cut runs counted as attempts, one merged file in
    // the store with every episode's trajectory, no per-episode files left.
    let mut rerun = 0;
    for id in &ids {
        let (status, sub) = r2.get(&format!("/api/v1/submissions/{id}"), Some(ADMIN));
        assert_eq!(status, 200, "{sub}");
        assert_eq!(sub["status"], "COMPLETED", "{sub}");
        let (status, results) = r2.get(&format!("/api/v1/submissions/{id}/results"), Some(ADMIN));
        assert_eq!(status, 200, "{results}");
        let episodes = results["episodes"].as_array().unwrap();
        assert_eq!(episodes.len(), 6);
        for e in episodes {
            let state = e["status"].as_str().unwrap();
            assert!(["COMPLETED", "FELL"].contains(&state), "{e}");
            if e["attempts"].as_i64().unwrap() > 1 {
                rerun += 1;
            }
        }
        let merged = s3.object_path(&format!("run/trajectories/{id}.h5"));
        let names =
            arena_data::trajectory_file::episode_names(&merged).unwrap_or_else(|e| panic!("{}: {e}", merged.display()));
        assert_eq!(names.len(), 6, "{names:?}");
        let parts = s3.object_path(&format!("run/trajectories/{id}"));
        let left: Vec<_> = std::fs::read_dir(&parts)
            .map(|d| d.flatten().collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "per-episode files left: {left:?}");
        assert!(s3.object_path(&format!("run/reports/{id}.json")).is_file());
    }
    assert!(rerun >= cut as usize, "{rerun} episodes re-run, {cut} were cut");
    assert!(
        r2.log_text().contains("claims of a stopped server expired"),
        "{}",
        r2.log_text()
    );
    // The leaderboard, asked of the surviving replica, ranks all four.
    let (status, board) = r2.get("/api/v1/leaderboards/g1-smoke", None);
    assert_eq!(status, 200, "{board}");
    let text = board.to_string();
    for id in &ids {
        assert!(text.contains(id.as_str()), "{id} missing from {text}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
