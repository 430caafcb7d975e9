//! Two `arena serve` replicas on one PostgreSQL database and one S3-compatible store (s3s-fs),
//! behind a TCP proxy, with four teams' agents running g1-smoke submissions through it. One
//! replica is SIGKILLed while it runs episodes: the agents reconnect through the proxy to the
//! other replica, which claims the dead replica's episodes again once their leases expire.
//! Every submission completes, each episode is counted exactly once (with the lost run counted
//! as an attempt), and every trajectory is in the store.
//!
//!
//! The faults of a deployment, each with the same checks: the object store down for 10 s while
//! episodes finish, and PostgreSQL down for 3 s while two replicas (sharing a `file://` folder)
//! run episodes.
//!
//! Needs `ARENA_TEST_DATABASE_URL` (PostgreSQL) and s3s-fs (`ARENA_S3S_BIN`); skipped with the
//! reason printed without them, unless `ARENA_REQUIRE_POSTGRES=1` / `ARENA_REQUIRE_S3=1`.

mod common;

use arena_sdk::agents::ZeroAgent;
use arena_sdk::protocol::{EpisodeEnd, EpisodeInfo};
use arena_sdk::{Agent, Batch, ClientConfig, Mode};
use common::cluster::{PrivatePg, Proxy, S3_BUCKET, S3Server, s3s_binary};
use common::server::{ADMIN, PgDb, ServerProc, request_with};
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

/// A replica with short leases, one lane of two episodes per session, on `db`, storing objects
/// in `store` (with `env`, the S3 settings, if any).
fn replica(name: &str, dir: &std::path::Path, db: &str, store: &str, env: &[(&'static str, String)]) -> ServerProc {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    ServerProc::start_with_env(
        &dir.join(name),
        &[
            "--database-url",
            db,
            "--object-store",
            store,
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

/// Runs `teams` g1-smoke submissions with slow zero-action agents through `url`, each on a
/// thread; join them with [`finish_agents`].
fn start_agents(
    url: &str,
    teams: &[String],
) -> Vec<std::thread::JoinHandle<Result<arena_sdk::RunSummary, arena_sdk::ClientError>>> {
    teams
        .iter()
        .enumerate()
        .map(|(i, token)| {
            let mut config = ClientConfig::new(
                url,
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
                let mut agent = SlowAgent(ZeroAgent::default());
                arena_sdk::client::run_blocking(&config, &mut agent, &mut |_| {})
            })
        })
        .collect()
}

/// Waits for every agent; each submission must be COMPLETED. Returns the submission ids.
fn finish_agents(
    agents: Vec<std::thread::JoinHandle<Result<arena_sdk::RunSummary, arena_sdk::ClientError>>>,
    log: &dyn Fn() -> String,
) -> Vec<String> {
    agents
        .into_iter()
        .map(|agent| {
            let summary = agent
                .join()
                .unwrap()
                .unwrap_or_else(|e| panic!("an agent failed: {e}\n{}", log()));
            assert_eq!(summary.submission_status, "COMPLETED", "{summary:?}");
            summary.submission_id
        })
        .collect()
}

/// Every submission: COMPLETED, 6 final scored episodes, one merged trajectory file (found with
/// `object`: key → local path) holding all 6, no per-episode files left, a stored report.
/// Returns how many episodes ran more than once.
fn check_submissions(server: &ServerProc, ids: &[String], object: &dyn Fn(&str) -> std::path::PathBuf) -> usize {
    let mut rerun = 0;
    for id in ids {
        let (status, sub) = server.get(&format!("/api/v1/submissions/{id}"), Some(ADMIN));
        assert_eq!(status, 200, "{sub}");
        assert_eq!(sub["status"], "COMPLETED", "{sub}");
        let (status, results) = server.get(&format!("/api/v1/submissions/{id}/results"), Some(ADMIN));
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
        // Merged after the completion, by the replica that completed it.
        server.wait_merged(id, ADMIN, std::time::Duration::from_secs(60));
        let merged = object(&format!("trajectories/{id}.h5"));
        let names =
            arena_data::trajectory_file::episode_names(&merged).unwrap_or_else(|e| panic!("{}: {e}", merged.display()));
        assert_eq!(names.len(), 6, "{names:?}");
        // Downloaded through the server, whole and resumed (a byte range of the stored object).
        let path = format!("/api/v1/submissions/{id}/trajectories");
        let stored = std::fs::read(&merged).unwrap();
        let (status, _, whole) = request_with(server.addr, "GET", &path, Some(ADMIN), None, &[]);
        assert!(
            status == 200 && whole == stored,
            "{status}: the download differs from the stored file"
        );
        let (status, head, rest) = request_with(
            server.addr,
            "GET",
            &path,
            Some(ADMIN),
            None,
            &[("Range", "bytes=1000-")],
        );
        assert_eq!(status, 206, "{head}");
        assert!(rest == stored[1000..], "the resumed download differs");
        // The parts go once the agent has been told (cleanup, after the Disconnect).
        let parts = object(&format!("trajectories/{id}"));
        let waited = std::time::Instant::now();
        let left = loop {
            let left: Vec<_> = std::fs::read_dir(&parts)
                .map(|d| d.flatten().collect())
                .unwrap_or_default();
            if left.is_empty() || waited.elapsed() > std::time::Duration::from_secs(30) {
                break left;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        assert!(left.is_empty(), "per-episode files left: {left:?}");
        assert!(object(&format!("reports/{id}.json")).is_file());
    }
    rerun
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
            let n: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM episodes WHERE status = 'RUNNING' AND substr(lease_owner, 10) = $1",
            )
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
    let store = format!("s3://{S3_BUCKET}/run");
    let mut r1 = replica("r1", &dir, &pg.url, &store, &s3.env());
    let r2 = replica("r2", &dir, &pg.url, &store, &s3.env());
    let proxy = Proxy::start(vec![r1.addr, r2.addr]);

    let teams: Vec<String> = (0..4).map(|i| r1.team(&format!("team-{i}"))).collect();
    let agents = start_agents(&proxy.ws_url(), &teams);

    // Kill r1 while it runs episodes.
    let deadline = Instant::now() + Duration::from_secs(60);
    while running_on(&pg.url, "r1") == 0 {
        assert!(Instant::now() < deadline, "r1 never ran an episode:\n{}", r1.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    r1.kill9();
    // Counted after the kill: what r1 held then is cut for good (its leases run 2 s more).
    let cut = running_on(&pg.url, "r1");
    eprintln!(
        "killed r1 with {cut} episodes running; connections per replica: {:?}",
        proxy.routed.lock().unwrap()
    );

    let ids = finish_agents(agents, &|| r2.log_text());
    let rerun = check_submissions(&r2, &ids, &|key| s3.object_path(&format!("run/{key}")));
    assert!(rerun >= cut as usize, "{rerun} episodes re-run, {cut} were cut");
    assert!(
        cut == 0 || r2.log_text().contains("claims of a stopped server expired"),
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

/// The S3 store stops for 10 s while episodes finish: their writes retry, the runs wait, and
/// every submission completes with every trajectory.
#[test]
fn the_object_store_down_for_ten_seconds_loses_nothing() {
    let Some(s3s) = s3s_binary("the_object_store_down_for_ten_seconds_loses_nothing") else {
        return;
    };
    let dir = common::tmp("store-down");
    let mut s3 = S3Server::start(&s3s, &dir.join("s3"));
    let store = format!("s3://{S3_BUCKET}/run");
    let db = format!("sqlite://{}/arena.db", dir.join("r1").display());
    let server = replica("r1", &dir, &db, &store, &s3.env());
    let teams: Vec<String> = (0..2).map(|i| server.team(&format!("team-{i}"))).collect();
    let agents = start_agents(&server.ws_url(), &teams);
    // Stop the store as the first episodes end.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !server.log_text().contains("session started") {
        assert!(Instant::now() < deadline, "no session started:\n{}", server.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(800));
    s3.stop();
    std::thread::sleep(Duration::from_secs(10));
    s3.restart();
    let ids = finish_agents(agents, &|| server.log_text());
    check_submissions(&server, &ids, &|key| s3.object_path(&format!("run/{key}")));
    assert!(server.log_text().contains("failed, retrying"), "{}", server.log_text());
    std::fs::remove_dir_all(&dir).ok();
}

/// PostgreSQL stops for 3 s (longer than a lease) while two replicas (sharing a folder as their object store) run
/// episodes: they reconnect, and every submission completes with every trajectory.
#[test]
fn postgres_restarted_mid_run_loses_nothing() {
    let Some(pg) = PrivatePg::start("postgres_restarted_mid_run_loses_nothing") else {
        return;
    };
    let dir = common::tmp("pg-restart");
    let shared = dir.join("objects");
    let store = format!("file://{}", shared.display());
    let r1 = replica("r1", &dir, &pg.url, &store, &[]);
    let r2 = replica("r2", &dir, &pg.url, &store, &[]);
    let proxy = Proxy::start(vec![r1.addr, r2.addr]);
    let teams: Vec<String> = (0..4).map(|i| r1.team(&format!("team-{i}"))).collect();
    let agents = start_agents(&proxy.ws_url(), &teams);
    let deadline = Instant::now() + Duration::from_secs(60);
    while running_on(&pg.url, "r1") + running_on(&pg.url, "r2") == 0 {
        assert!(Instant::now() < deadline, "no episode ran:\n{}", r1.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let (status, health) = r1.get("/api/v1/health", Some(ADMIN));
    assert_eq!((status, health["status"].as_str()), (200, Some("ok")), "{health}");
    assert!(health["load"]["agent_connections"].as_u64() >= Some(1), "{health}");
    let down = Instant::now();
    pg.halt();
    // The health check says so (503, for a load balancer to route elsewhere): it said ok. Its
    // look at the database holds a second.
    let (status, health) = loop {
        let (status, health) = r1.get("/api/v1/health", None);
        if status != 200 || down.elapsed() > Duration::from_secs(10) {
            break (status, health);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        (status, health["status"].as_str()),
        (503, Some("unavailable")),
        "{health}"
    );
    assert!(
        health["error"]
            .as_str()
            .unwrap_or_default()
            .contains("the database does not answer"),
        "{health}"
    );
    assert!(health.get("load").is_none(), "the load is the admin's: {health}");
    std::thread::sleep(Duration::from_secs(3).saturating_sub(down.elapsed()));
    pg.resume();
    eprintln!("PostgreSQL was down for {:.1} s", down.elapsed().as_secs_f64());
    let logs = || format!("r1:\n{}\nr2:\n{}", r1.log_text(), r2.log_text());
    let ids = finish_agents(agents, &logs);
    check_submissions(&r2, &ids, &|key| shared.join(key));
    let (status, health) = r1.get("/api/v1/health", None);
    assert_eq!((status, health["status"].as_str()), (200, Some("ok")), "{health}");
    // Calls made while it was down mostly wait in the pool for a new connection (up to 30 s);
    // the ones cut mid-query are retried (logged).
    let retried = logs().matches("retrying").count();
    eprintln!("database retries logged across the restart: {retried}");
    std::fs::remove_dir_all(&dir).ok();
}

/// One submission, two sessions at once: one on each replica. Both claim its episodes from the
/// database; every episode runs once, and the submission completes once.
#[test]
fn one_submission_runs_on_both_replicas_at_once() {
    let Some(pg) = PgDb::create("one_submission_runs_on_both_replicas_at_once") else {
        return;
    };
    let dir = common::tmp("shared-submission");
    let shared = dir.join("objects");
    let store = format!("file://{}", shared.display());
    let r1 = replica("r1", &dir, &pg.url, &store, &[]);
    let r2 = replica("r2", &dir, &pg.url, &store, &[]);
    let token = r1.team("both-replicas");
    let (status, created) = r1.post("/api/v1/submissions", Some(&token), r#"{"benchmark": "g1-smoke"}"#);
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().expect("an id").to_string();
    let sessions: Vec<_> = [&r1, &r2]
        .iter()
        .map(|server| {
            let mut config = ClientConfig::new(
                server.ws_url(),
                token.clone(),
                Mode::Submission {
                    benchmark: String::new(),
                    submission_id: Some(id.clone()),
                },
            );
            config.max_reconnects = 30;
            std::thread::spawn(move || {
                let mut agent = SlowAgent(ZeroAgent::default());
                arena_sdk::client::run_blocking(&config, &mut agent, &mut |_| {})
            })
        })
        .collect();
    let mut ended = Vec::new();
    for session in sessions {
        let summary = session
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("a session failed: {e}"));
        assert_eq!(summary.submission_status, "COMPLETED", "{summary:?}");
        ended.push(summary.episodes.len());
    }
    // Each replica ran some of the six, and none twice.
    assert_eq!(ended.iter().sum::<usize>(), 6, "episode ends per session: {ended:?}");
    assert!(ended.iter().all(|&n| n > 0), "one replica ran nothing: {ended:?}");
    assert_eq!(
        check_submissions(&r2, std::slice::from_ref(&id), &|key| shared.join(key)),
        0
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A hosted submission (issue 40) outlives the replica that runs it: no agent will reconnect
/// for it, so when its replica is SIGKILLed mid-run the other one takes the run over once the
/// dead replica's claim on it expires, and completes it with every episode counted once.
#[test]
fn a_hosted_run_survives_its_replica() {
    let Some(pg) = PgDb::create("a_hosted_run_survives_its_replica") else {
        return;
    };
    let dir = common::tmp("hosted-replicas");
    let shared = dir.join("objects");
    let store = format!("file://{}", shared.display());
    let mut r1 = replica("r1", &dir, &pg.url, &store, &[]);
    let r2 = replica("r2", &dir, &pg.url, &store, &[]);
    let token = r1.team("uploaders");
    let file =
        std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../ppo/checkpoints/g1-smoke/policy.onnx"))
            .unwrap();
    let (status, created) = r1.upload_policy("benchmark=g1-smoke-robot&file_name=policy.onnx", &token, &file);
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    while running_on(&pg.url, "r1") == 0 {
        assert!(Instant::now() < deadline, "r1 never ran an episode:\n{}", r1.log_text());
        std::thread::sleep(Duration::from_millis(10));
    }
    r1.kill9();
    let (_, results) = r2.get(&format!("/api/v1/submissions/{id}/results"), Some(ADMIN));
    let finished = results["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| ["COMPLETED", "FELL", "FAILED"].contains(&e["status"].as_str().unwrap()))
        .count();
    eprintln!("killed r1 with {finished} of 6 episodes final");
    let submission = r2.wait_final(&id, ADMIN, Duration::from_secs(120));
    assert_eq!(submission["status"], "COMPLETED", "{submission}\n{}", r2.log_text());
    assert!(
        r2.log_text().contains("taking up hosted submission"),
        "{}",
        r2.log_text()
    );
    // The run's sessions: r1's, cut, then r2's to the end.
    let sessions = submission["sessions"].as_array().unwrap();
    assert_eq!(sessions.last().unwrap()["outcome"], "completed", "{submission}");
    check_submissions(&r2, std::slice::from_ref(&id), &|key| shared.join(key));
    std::fs::remove_dir_all(&dir).ok();
}

/// A remote store the server cannot use (no such bucket, wrong credentials, nothing listening)
/// stops the start naming `object_store` and the variables to check: before, the server
/// started, and every episode of the first submission ran and then failed to store.
#[test]
fn a_store_the_server_cannot_use_stops_its_start() {
    let Some(s3s) = s3s_binary("a_store_the_server_cannot_use_stops_its_start") else {
        return;
    };
    let dir = common::tmp("store-check");
    let s3 = S3Server::start(&s3s, &dir.join("s3"));
    let start = |store: &str, env: &[(&str, String)]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_arena"))
            .args(["serve", "--bind", "127.0.0.1:0", "--object-store", store])
            .args(["--data-dir", dir.join("data").to_str().unwrap()])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = out.wait_with_output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let mut wrong_key = s3.env();
    wrong_key[1].1 = "not-the-key".into();
    let mut nobody_there = s3.env();
    nobody_there[0].1 = format!("http://127.0.0.1:{}", common::cluster::free_port());
    for (store, env) in [
        ("s3://no-such-bucket/run".to_string(), s3.env()),
        (format!("s3://{S3_BUCKET}/run"), wrong_key),
        (format!("s3://{S3_BUCKET}/run"), nobody_there),
    ] {
        let (ok, err) = start(&store, &env);
        assert!(
            !ok && err.contains("object_store s3://") && err.contains("AWS_ENDPOINT"),
            "{store}: {err}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A replica id serves one live server on a PostgreSQL database: a second server started under
/// the id of a live one is refused, naming the id (before, both ran and took each other's
/// episodes); once the first is killed, a server under its id starts at once (it takes the dead
/// one's episodes back, as a restarted replica does).
#[test]
fn a_replica_id_serves_one_live_server() {
    let Some(pg) = PgDb::create("a_replica_id_serves_one_live_server") else {
        return;
    };
    let dir = common::tmp("replica-twins");
    let args = ["--database-url", pg.url.as_str(), "--replica-id", "twin"];
    let mut first = ServerProc::start(&dir.join("first"), &args);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("twin.log");
    let mut twin = std::process::Command::new(env!("CARGO_BIN_EXE_arena"))
        .args(["serve", "--bind", "127.0.0.1:0"])
        .args(["--data-dir", dir.join("second").to_str().unwrap()])
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // Refused within the lock's wait; one still running after 60 s was served.
    let deadline = Instant::now() + Duration::from_secs(60);
    let exit = loop {
        if let Some(exit) = twin.try_wait().unwrap() {
            break Some(exit);
        }
        if Instant::now() >= deadline {
            twin.kill().ok();
            twin.wait().ok();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(
        exit.is_some_and(|e| !e.success()),
        "a second server under a live id started: {stderr}"
    );
    assert!(
        stderr.contains("replica_id \"twin\" is in use by another live arena server"),
        "{stderr}"
    );
    // Another id on the same database is served beside it.
    let other = ServerProc::start(
        &dir.join("other"),
        &["--database-url", pg.url.as_str(), "--replica-id", "other"],
    );
    drop(other);

    first.kill9();
    let again = ServerProc::start(&dir.join("second"), &args);
    let (status, _) = again.get("/api/v1/health", None);
    assert_eq!(status, 200);
    std::fs::remove_dir_all(&dir).ok();
}

/// A server that loses its replica lock's connection and finds its id taken meanwhile (here by a
/// session that was queued for the lock, as a server started under the same id would be) stops,
/// non-zero and saying why, instead of running the id's episodes beside the other holder.
#[test]
fn a_server_whose_id_was_taken_meanwhile_stops() {
    let Some(pg) = PgDb::create("a_server_whose_id_was_taken_meanwhile_stops") else {
        return;
    };
    let dir = common::tmp("replica-taken");
    let mut first = ServerProc::start(
        &dir.join("first"),
        &["--database-url", pg.url.as_str(), "--replica-id", "taken"],
    );
    let key = arena_server::replica_lock::lock_key("taken");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Held until the end of the test: the other holder of the id.
    let _other = rt.block_on(async {
        use sqlx::Connection;
        // Queued behind the server's lock, it is granted the moment the server's session ends,
        // before the server's keeper can try again.
        let mut other = sqlx::PgConnection::connect(&pg.url).await.unwrap();
        let queued = async {
            sqlx::query("SELECT pg_advisory_lock($1)")
                .bind(key)
                .execute(&mut other)
                .await
                .unwrap();
        };
        let cut = async {
            let mut admin = sqlx::PgConnection::connect(&pg.url).await.unwrap();
            // Ends the server's lock session once the other one waits for the lock.
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let cut: Vec<bool> = sqlx::query_scalar(
                    "WITH here AS (SELECT oid FROM pg_database WHERE datname = current_database()) \
                     SELECT pg_terminate_backend(holder.pid) FROM pg_locks holder, here \
                     WHERE holder.locktype = 'advisory' AND holder.granted AND holder.database = here.oid \
                     AND EXISTS (SELECT 1 FROM pg_locks waiting WHERE waiting.locktype = 'advisory' \
                                 AND NOT waiting.granted AND waiting.database = here.oid)",
                )
                .fetch_all(&mut admin)
                .await
                .unwrap();
                if !cut.is_empty() {
                    break;
                }
            }
        };
        tokio::join!(queued, cut);
        other
    });
    let exit = first.wait_exit(Duration::from_secs(60));
    let log = first.log_text();
    assert!(
        exit.is_some_and(|e| !e.success()),
        "a server whose id was taken went on ({exit:?}): {log}"
    );
    assert!(
        log.contains("lost the database connection holding replica_id \"taken\""),
        "{log}"
    );
    assert!(
        log.contains("replica_id \"taken\" is in use by another live arena server")
            && log.contains("this server stops so that no episode runs twice"),
        "{log}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
