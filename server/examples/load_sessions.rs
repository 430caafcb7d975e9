//! Load benchmark: many teams' agents at once against real `arena serve` processes on loopback.
//!
//! N teams each run g1-smoke submissions back to back with a zero-action agent (one session at
//! a time per team) for a fixed time, spread round-robin over one or more replicas (several
//! replicas share a PostgreSQL database and an object-store folder). It reports, for the
//! window: control steps per second in all, the step round trip as each agent sees it (from
//! returning its actions to the next request of its session: p50, p99, max), the servers'
//! resident memory per session (peak minus idle), and fairness: each team's share of the steps
//! (min / max and Jain's index, 1 = perfectly even). Bounded: it stops by itself after
//! `--seconds` plus the sessions in flight.
//!
//! ```text
//! cargo build --release -p arena-server --bin arena --example load_sessions
//! target/release/examples/load_sessions --sessions 64 --seconds 20
//! target/release/examples/load_sessions --sessions 64 --seconds 20 --replicas 2 \
//!     --database-url postgres://postgres@127.0.0.1:54329/arena_test
//! ```

use arena_sdk::agents::ZeroAgent;
use arena_sdk::client::{ClientConfig, Mode};
use arena_sdk::protocol::{EpisodeEnd, EpisodeInfo, EpisodeSpec};
use arena_sdk::{Agent, Batch};
use clap::Parser;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ADMIN: &str = "load-admin";

#[derive(Debug, Parser)]
struct Args {
    /// The `arena` binary.
    #[arg(long, default_value = "target/release/arena")]
    arena: PathBuf,
    /// Concurrent agent sessions (one team each).
    #[arg(long, default_value_t = 64)]
    sessions: usize,
    /// Server replicas (more than one needs --database-url).
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// PostgreSQL for the replicas (a fresh database is best: teams are added to it).
    #[arg(long)]
    database_url: Option<String>,
    /// Length of the measured window.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    #[arg(long, default_value = "g1-smoke")]
    benchmark: String,
    /// Episodes per request of each session.
    #[arg(long, default_value_t = 2)]
    max_batch: u32,
    /// Requests in flight per session.
    #[arg(long, default_value_t = 1)]
    lanes: u32,
}

/// A running `arena serve`.
struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

fn start_server(a: &Args, dir: &std::path::Path, name: &str) -> anyhow::Result<Server> {
    let data = dir.join(name);
    std::fs::create_dir_all(&data)?;
    let mut cmd = Command::new(&a.arena);
    cmd.args(["serve", "--bind", "127.0.0.1:0", "--admin-token", ADMIN])
        .arg("--data-dir")
        .arg(&data)
        .args(["--replica-id", name, "--sim-threads", "1", "--requests-per-minute", "0"])
        .args(["--lanes", &a.lanes.to_string(), "--max-batch", &a.max_batch.to_string()])
        .arg("--object-store")
        .arg(format!("file://{}", dir.join("objects").display()));
    if let Some(url) = &a.database_url {
        cmd.args(["--database-url", url]);
    }
    let log = std::fs::File::create(data.join("server.log"))?;
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::from(log)).spawn()?;
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let addr = loop {
        let line = lines
            .next()
            .ok_or_else(|| anyhow::anyhow!("{name} exited; see {}", data.join("server.log").display()))??;
        if let Some(rest) = line.strip_prefix("arena serve: listening on http://") {
            break rest.split_whitespace().next().unwrap_or_default().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Ok(Server { child, addr })
}

fn create_team(a: &Args, server: &Server, name: &str) -> anyhow::Result<String> {
    let out = Command::new(&a.arena)
        .args(["admin", "teams", "create", name, "--json", "--admin-token", ADMIN])
        .args(["--server", &format!("http://{}", server.addr)])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "creating team {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    v["token"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("no token in {v}"))
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// What one team's agent saw inside the window.
#[derive(Default)]
struct Seen {
    steps: u64,
    round_trips: Vec<f64>,
}

/// Zero actions; times the gap between answering a request and receiving the next.
struct Timed {
    inner: ZeroAgent,
    answered: Option<Instant>,
    window: (Instant, Instant),
    seen: Arc<Mutex<Seen>>,
}

impl Agent for Timed {
    fn configure(&mut self, _spec: &EpisodeSpec) {
        // A new session: the gap since the last one is not a step.
        self.answered = None;
    }
    fn reset(&mut self, episodes: &[EpisodeInfo]) {
        self.inner.reset(episodes);
    }
    fn act(&mut self, batch: &Batch<'_>, actions: &mut [f32]) {
        let now = Instant::now();
        if now >= self.window.0 && now < self.window.1 {
            let mut seen = self.seen.lock().expect("seen lock");
            seen.steps += batch.len() as u64;
            if let Some(t) = self.answered {
                seen.round_trips.push((now - t).as_secs_f64() * 1e3);
            }
        }
        self.inner.act(batch, actions);
        self.answered = Some(Instant::now());
    }
    fn end(&mut self, end: &EpisodeEnd) {
        self.inner.end(end);
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    anyhow::ensure!(
        a.replicas == 1 || a.database_url.is_some(),
        "--replicas {} needs --database-url (replicas share a PostgreSQL database)",
        a.replicas
    );
    let dir = std::env::temp_dir().join(format!("arena-load-{}", std::process::id()));
    let servers: Vec<Server> = (0..a.replicas)
        .map(|i| start_server(&a, &dir, &format!("r{}", i + 1)))
        .collect::<anyhow::Result<_>>()?;
    let run = uuid::Uuid::new_v4().simple().to_string();
    let tokens: Vec<String> = (0..a.sessions)
        .map(|i| create_team(&a, &servers[0], &format!("load-{}-{i}", &run[..6])))
        .collect::<anyhow::Result<_>>()?;
    let idle: Vec<u64> = servers.iter().map(|s| rss_kib(s.child.id())).collect();

    let warmup = Duration::from_secs(3);
    let start = Instant::now() + warmup;
    let window = (start, start + Duration::from_secs_f64(a.seconds));
    let stop = Arc::new(AtomicBool::new(false));
    let seen: Vec<Arc<Mutex<Seen>>> = (0..a.sessions).map(|_| Default::default()).collect();
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let agents: Vec<_> = tokens
        .iter()
        .enumerate()
        .map(|(i, token)| {
            let url = format!("ws://{}/api/v1/agent", servers[i % servers.len()].addr);
            let mut config = ClientConfig::new(
                url,
                token.clone(),
                Mode::Submission {
                    benchmark: a.benchmark.clone(),
                    submission_id: None,
                },
            );
            config.agent_name = format!("load-{i}");
            let (stop, seen, failures) = (stop.clone(), seen[i].clone(), failures.clone());
            std::thread::spawn(move || {
                let mut agent = Timed {
                    inner: ZeroAgent::default(),
                    answered: None,
                    window,
                    seen,
                };
                while !stop.load(Ordering::SeqCst) {
                    if let Err(e) = arena_sdk::client::run_blocking(&config, &mut agent, &mut |_| {}) {
                        failures.lock().expect("failures lock").push(e.to_string());
                        break;
                    }
                }
            })
        })
        .collect();

    let mut peak = idle.clone();
    while Instant::now() < window.1 {
        for (p, s) in peak.iter_mut().zip(&servers) {
            *p = (*p).max(rss_kib(s.child.id()));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::SeqCst);
    for agent in agents {
        let _ = agent.join();
    }

    let seconds = a.seconds;
    let steps: Vec<u64> = seen.iter().map(|s| s.lock().expect("seen lock").steps).collect();
    let mut rtts: Vec<f64> = seen
        .iter()
        .flat_map(|s| s.lock().expect("seen lock").round_trips.clone())
        .collect();
    rtts.sort_by(f64::total_cmp);
    let total: u64 = steps.iter().sum();
    let (min, max) = (*steps.iter().min().unwrap_or(&0), *steps.iter().max().unwrap_or(&0));
    let sum_sq: f64 = steps.iter().map(|&x| (x as f64).powi(2)).sum();
    let jain = (total as f64).powi(2) / (steps.len() as f64 * sum_sq.max(1.0));
    let per_session_mib: Vec<f64> = peak
        .iter()
        .zip(&idle)
        .enumerate()
        .map(|(r, (p, i))| {
            let sessions = (0..a.sessions).filter(|s| s % a.replicas == r).count().max(1);
            (p.saturating_sub(*i)) as f64 / 1024.0 / sessions as f64
        })
        .collect();
    println!(
        "{} sessions on {} replica(s), {} s window, max_batch {}, lanes {}:",
        a.sessions, a.replicas, seconds, a.max_batch, a.lanes
    );
    println!("  throughput      {:.0} control steps/s", total as f64 / seconds);
    println!(
        "  step round trip p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} samples)",
        percentile(&rtts, 0.5),
        percentile(&rtts, 0.99),
        rtts.last().copied().unwrap_or(f64::NAN),
        rtts.len()
    );
    for (r, ((i, p), m)) in idle.iter().zip(&peak).zip(&per_session_mib).enumerate() {
        println!(
            "  replica r{}: RSS idle {:.1} MiB, peak {:.1} MiB, {:.2} MiB per session",
            r + 1,
            *i as f64 / 1024.0,
            *p as f64 / 1024.0,
            m
        );
    }
    println!(
        "  fairness        steps per session min {min}, max {max} (min/max {:.2}), Jain's index {:.3}",
        min as f64 / max.max(1) as f64,
        jain
    );
    let failures = failures.lock().expect("failures lock");
    if !failures.is_empty() {
        println!("  {} sessions failed; first: {}", failures.len(), failures[0]);
    }
    println!(
        "{}",
        serde_json::json!({
            "sessions": a.sessions, "replicas": a.replicas, "seconds": seconds,
            "steps_per_s": total as f64 / seconds,
            "rtt_ms_p50": percentile(&rtts, 0.5), "rtt_ms_p99": percentile(&rtts, 0.99),
            "rss_mib_per_session": per_session_mib,
            "steps_min": min, "steps_max": max, "jain": jain,
            "failed_sessions": failures.len(),
        })
    );
    drop(servers);
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
