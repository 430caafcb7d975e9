//! Latency of what the web pages ask for, on a database seeded with many completed submissions
//! (issue 16: 10,000 submissions × 30 episodes; goal p95 < 50 ms on a 2-core machine).
//!
//! Seeds teams, COMPLETED submissions (with their report) and episode rows straight into the
//! database through one connection pool (bulk inserts: the storage API's one-row statements
//! would take longer than the measurement), starts the real server in-process on loopback, then
//! times each request the pages make, one at a time, and prints p50 / p95 / max per request.
//!
//!   cargo run --release -p arena-server --example pages_latency -- \
//!       [--submissions 10000] [--episodes 30] [--requests 50] [--database-url URL] [--json]
//!
//! Without --database-url it uses a fresh SQLite file; give a PostgreSQL URL (an empty database)
//! to measure that engine.

use anyhow::Context;
use arena_bench::spec::BenchmarkSpec;
use arena_server::app;
use arena_server::config::ServerConfig;
use arena_server::state::AppState;
use arena_server::storage::{EpisodeRow, EpisodeState, Storage, Submission, SubmissionStatus, hash_token};
use arena_server::{leaderboard, results};
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use sqlx::Executor;
use std::collections::BTreeMap;
use std::time::Instant;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 10_000)]
    submissions: usize,
    #[arg(long, default_value_t = 30)]
    episodes: usize,
    #[arg(long, default_value_t = 50)]
    requests: usize,
    #[arg(long, default_value_t = 100)]
    teams: usize,
    #[arg(long)]
    database_url: Option<String>,
    #[arg(long)]
    json: bool,
}

const ADMIN: &str = "bench-admin";
const BENCHMARK: &str = "g1-smoke";

/// A deterministic spread of metric values for submission `s`, episode `e`.
fn metrics(spec: &BenchmarkSpec, s: usize, e: usize) -> BTreeMap<String, f64> {
    let x = ((s * 7919 + e * 104_729) % 1000) as f64 / 1000.0;
    spec.metrics
        .list
        .iter()
        .map(|m| {
            let v = match m.as_str() {
                "success" | "success_phc_linf" | "success_phc_mean" => f64::from(x > 0.7),
                "failure_time_s" => 4.0 * x,
                "proximity" | "obs_state_proximity" | "ndtw" => x,
                _ => 0.5 + x,
            };
            (m.clone(), v)
        })
        .collect()
}

fn sql_text(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

async fn seed(url: &str, args: &Args, spec: &BenchmarkSpec) -> anyhow::Result<(String, String)> {
    let storage = Storage::connect(url).await?;
    let mut teams = Vec::new();
    let mut first_token = String::new();
    for t in 0..args.teams {
        let token = format!("at_bench_{t}");
        if t == 0 {
            first_token = token.clone();
        }
        teams.push(
            storage
                .create_team(&format!("team-{t:03}"), &hash_token(&token))
                .await?,
        );
    }
    drop(storage);
    let pool = sqlx::AnyPool::connect(url).await?;
    let names: Vec<&str> = [
        "stand",
        "squat",
        "arm_wave",
        "torso_twist",
        "weight_shift",
        "step_in_place",
    ]
    .to_vec();
    let started = Instant::now();
    let mut some_id = String::new();
    for chunk_start in (0..args.submissions).step_by(200) {
        let mut tx = pool.begin().await?;
        let mut sub_rows = Vec::new();
        let mut episode_rows = Vec::new();
        for s in chunk_start..(chunk_start + 200).min(args.submissions) {
            let team = &teams[s % teams.len()];
            let id = format!("sub-bench{s:07}");
            let created = 1_790_000_000_000i64 + s as i64 * 1000;
            let rows: Vec<EpisodeRow> = (0..args.episodes)
                .map(|e| EpisodeRow {
                    idx: e as i64,
                    motion: names[e % names.len()].to_string(),
                    category: "builtin".into(),
                    start_s: 0.0,
                    duration_s: 4.0,
                    seed: (s * 1000 + e) as u64,
                    dr_level: 0,
                    status: EpisodeState::Completed,
                    attempts: 1,
                    server_faults: 0,
                    uncharged_runs: 0,
                    steps: 200,
                    metrics: metrics(spec, s, e),
                    reason: None,
                    updated_at: created + 500,
                    agent_name: None,
                    engine: None,
                    committed_by: None,
                })
                .collect();
            let submission = Submission {
                id: id.clone(),
                team_id: team.id,
                team_name: team.name.clone(),
                benchmark: BENCHMARK.into(),
                agent_name: "bench".into(),
                status: SubmissionStatus::Completed,
                episodes_total: args.episodes as i64,
                created_at: created,
                started_at: Some(created + 1),
                finished_at: Some(created + 500),
                report_json: None,
                error: None,
                phase_id: None,
                baseline: false,
                summary_json: None,
                benchmark_version: None,
            };
            let report = results::report(spec, &submission, &rows);
            let summary = serde_json::to_string(&leaderboard::ReportSummary::of(&report))?;
            let report = serde_json::to_string(&report)?;
            sub_rows.push(format!(
                "({}, {}, '{BENCHMARK}', 'bench', 'COMPLETED', {}, {created}, {}, {}, {}, NULL, {})",
                sql_text(&id),
                team.id,
                args.episodes,
                created + 1,
                created + 500,
                sql_text(&report),
                sql_text(&summary)
            ));
            for r in &rows {
                episode_rows.push(format!(
                    "({}, {}, {}, 'builtin', 0.0, 4.0, '{}', 0, 'COMPLETED', 1, 200, {}, NULL, {})",
                    sql_text(&id),
                    r.idx,
                    sql_text(&r.motion),
                    r.seed,
                    sql_text(&serde_json::to_string(&r.metrics)?),
                    r.updated_at
                ));
            }
            some_id = id;
        }
        tx.execute(
            format!(
                "INSERT INTO submissions (id, team_id, benchmark, agent_name, status, episodes_total, created_at, \
                 started_at, finished_at, report_json, phase_id, summary_json) VALUES {}",
                sub_rows.join(", ")
            )
            .as_str(),
        )
        .await
        .context("inserting submissions")?;
        for part in episode_rows.chunks(1000) {
            tx.execute(
                format!(
                    "INSERT INTO episodes (submission_id, idx, motion, category, start_s, duration_s, seed, dr_level, \
                     status, attempts, steps, metrics_json, reason, updated_at) VALUES {}",
                    part.join(", ")
                )
                .as_str(),
            )
            .await
            .context("inserting episodes")?;
        }
        tx.commit().await?;
    }
    if !args.json {
        eprintln!(
            "seeded {} submissions × {} episodes in {:.1} s",
            args.submissions,
            args.episodes,
            started.elapsed().as_secs_f64()
        );
    }
    Ok((some_id, first_token))
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = std::env::temp_dir().join(format!("arena-pages-latency-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = args
        .database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}", dir.join("arena.db").display()));
    let spec = arena_bench::spec::find_benchmark(
        BENCHMARK,
        &arena_bench::spec::shipped_dir(),
        &arena_bench::metrics::metric_names(),
    )?
    .1;
    let runtime = tokio::runtime::Runtime::new()?;
    let result = runtime.block_on(async {
        let (submission, team_token) = seed(&url, &args, &spec).await?;
        let config = ServerConfig {
            data_dir: dir.clone(),
            database_url: url.clone(),
            admin_token: ADMIN.into(),
            requests_per_minute: 0,
            ..Default::default()
        };
        let state = AppState::open(config).await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(app::serve(listener, state, std::future::pending()));
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http::<Full<Bytes>>();
        let requests: Vec<(&str, String, Option<&str>)> = vec![
            ("leaderboard", format!("/api/v1/leaderboards/{BENCHMARK}"), None),
            ("benchmark", format!("/api/v1/benchmarks/{BENCHMARK}"), None),
            ("submission", format!("/api/v1/submissions/{submission}"), Some(ADMIN)),
            (
                "results",
                format!("/api/v1/submissions/{submission}/results"),
                Some(ADMIN),
            ),
            ("team submissions", "/api/v1/submissions".into(), Some(&team_token)),
            ("page html", "/".into(), None),
            ("page script", "/static/page-leaderboard.js".into(), None),
        ];
        let mut table = Vec::new();
        for (name, path, token) in &requests {
            let mut times = Vec::with_capacity(args.requests);
            let mut bytes = 0;
            // One warm-up request (the benchmark's motions load on the first benchmark call).
            for i in 0..=args.requests {
                let mut req = hyper::Request::get(format!("http://{addr}{path}"));
                if let Some(t) = token {
                    req = req.header("authorization", format!("Bearer {t}"));
                }
                let t0 = Instant::now();
                let response = client.request(req.body(Full::new(Bytes::new()))?).await?;
                let status = response.status();
                let body = response.into_body().collect().await?.to_bytes();
                let ms = t0.elapsed().as_secs_f64() * 1000.0;
                anyhow::ensure!(status.is_success(), "{name} {path}: {status}");
                if i > 0 {
                    times.push(ms);
                    bytes = body.len();
                }
            }
            times.sort_by(f64::total_cmp);
            table.push(serde_json::json!({
                "request": name,
                "path": path,
                "p50_ms": percentile(&times, 0.5),
                "p95_ms": percentile(&times, 0.95),
                "max_ms": times[times.len() - 1],
                "bytes": bytes,
            }));
        }
        // The leaderboard's first request after a change (here: a baseline flag toggled), when
        // the cached board is ranked again from the database.
        let mut times = Vec::new();
        for i in 0..args.requests.min(20) {
            let patch = hyper::Request::patch(format!("http://{addr}/api/v1/submissions/{submission}"))
                .header("authorization", format!("Bearer {ADMIN}"))
                .body(Full::new(Bytes::from(format!("{{\"baseline\": {}}}", i % 2 == 0))))?;
            let response = client.request(patch).await?;
            anyhow::ensure!(response.status().is_success(), "PATCH: {}", response.status());
            response.into_body().collect().await?;
            let t0 = Instant::now();
            let req = hyper::Request::get(format!("http://{addr}/api/v1/leaderboards/{BENCHMARK}"))
                .body(Full::new(Bytes::new()))?;
            let body = client.request(req).await?.into_body().collect().await?.to_bytes();
            times.push(t0.elapsed().as_secs_f64() * 1000.0);
            anyhow::ensure!(!body.is_empty());
        }
        times.sort_by(f64::total_cmp);
        table.push(serde_json::json!({
            "request": "leaderboard after a change",
            "path": format!("/api/v1/leaderboards/{BENCHMARK}"),
            "p50_ms": percentile(&times, 0.5),
            "p95_ms": percentile(&times, 0.95),
            "max_ms": times[times.len() - 1],
            "bytes": 0,
        }));
        anyhow::Ok(table)
    });
    let _ = std::fs::remove_dir_all(&dir);
    let table = result?;
    let engine = if url.starts_with("postgres") {
        "postgres"
    } else {
        "sqlite"
    };
    if args.json {
        println!(
            "{}",
            serde_json::json!({"engine": engine, "submissions": args.submissions, "episodes": args.episodes, "requests": table})
        );
    } else {
        println!(
            "{engine}: {} submissions × {} episodes, {} requests each",
            args.submissions, args.episodes, args.requests
        );
        println!(
            "{:<27} {:>9} {:>9} {:>9} {:>10}",
            "request", "p50 ms", "p95 ms", "max ms", "bytes"
        );
        for r in &table {
            println!(
                "{:<27} {:>9.2} {:>9.2} {:>9.2} {:>10}",
                r["request"].as_str().unwrap_or(""),
                r["p50_ms"].as_f64().unwrap_or(0.0),
                r["p95_ms"].as_f64().unwrap_or(0.0),
                r["max_ms"].as_f64().unwrap_or(0.0),
                r["bytes"]
            );
        }
    }
    Ok(())
}
