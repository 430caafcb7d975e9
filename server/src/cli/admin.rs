//! `arena admin`: the organiser's terminal over a running server's REST API (challenges, phases,
//! teams, tokens, submissions: cancel, re-score, baseline). Every command takes `--server` and
//! `--admin-token` and prints a short table, or the API's JSON with `--json`.

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::{Value, json};

#[derive(Debug, Args)]
pub struct AdminArgs {
    /// The server: http://HOST:PORT (its base URL), HOST:PORT, or an agent's ws:// or grpc://
    /// address (plain HTTP only).
    #[arg(long, env = "ARENA_SERVER", default_value = arena_sdk::client::DEFAULT_SERVER, global = true)]
    server: String,
    /// The administrator token (the server's --admin-token).
    #[arg(long, env = "ARENA_ADMIN_TOKEN", hide_env_values = true, global = true)]
    admin_token: Option<String>,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(Debug, Subcommand)]
enum AdminCommand {
    /// Challenges: list, create.
    #[command(subcommand)]
    Challenges(ChallengeCommand),
    /// Phases of a challenge: list, create, update.
    #[command(subcommand)]
    Phases(PhaseCommand),
    /// Teams: list, create (prints the team's first token once), show.
    #[command(subcommand)]
    Teams(TeamCommand),
    /// A team's tokens: list, create (printed once), revoke.
    #[command(subcommand)]
    Tokens(TokenCommand),
    /// Submissions: list, show, cancel, re-score, mark or unmark as baseline.
    #[command(subcommand)]
    Submissions(SubmissionCommand),
}

#[derive(Debug, Subcommand)]
enum ChallengeCommand {
    /// Every challenge with its phases.
    List,
    /// A new challenge (add phases with `phases create`).
    Create {
        /// Slug: 1-64 of a-z 0-9 - _.
        #[arg(long)]
        id: String,
        /// The title shown on the pages.
        #[arg(long)]
        title: String,
        /// A longer description (plain text).
        #[arg(long, default_value = "")]
        description: String,
    },
}

#[derive(Debug, Args)]
struct PhaseFields {
    /// Opens at (RFC 3339, e.g. 2026-12-01T00:00:00Z; an offset is converted to UTC; or unix
    /// milliseconds); `create` needs it, `update` changes it.
    #[arg(long)]
    starts_at: Option<String>,
    /// Closes at (RFC 3339, or unix milliseconds); `create` needs it, `update` changes it.
    #[arg(long)]
    ends_at: Option<String>,
    /// public or private (results hidden from teams until the phase ends).
    #[arg(long)]
    leaderboard: Option<String>,
    /// Submissions per team per UTC day: a positive number, or `none` for no limit (`update`
    /// lifts one so).
    #[arg(long, value_name = "N|none", value_parser = submission_limit)]
    max_per_day: Option<SubmissionLimit>,
    /// Submissions per team in the whole phase: a positive number, or `none` for no limit.
    #[arg(long, value_name = "N|none", value_parser = submission_limit)]
    max_total: Option<SubmissionLimit>,
    /// Observation groups agents may receive, comma-separated; `all` lifts the restriction (the
    /// benchmark's own groups).
    #[arg(long)]
    groups: Option<String>,
    /// true: hosted submissions only (uploaded policies the server runs; no agent of a team
    /// receives the phase's motions); false: agents too.
    #[arg(long, value_name = "BOOL")]
    hosted_only: Option<bool>,
}

/// A phase's submission limit on the command line: a number, or none.
#[derive(Debug, Clone, Copy)]
struct SubmissionLimit(Option<u32>);

/// `none` or a positive number. 0 is refused: read as "no submissions" by some and "no limit"
/// by others (the REST API refuses it too), it would do the opposite of what half intend.
fn submission_limit(text: &str) -> Result<SubmissionLimit, String> {
    if text.eq_ignore_ascii_case("none") {
        return Ok(SubmissionLimit(None));
    }
    match text.parse::<u32>() {
        Ok(0) => Err("0 is no limit to set: give a positive number, or `none` for no limit (to stop submissions, close the phase with --ends-at)".into()),
        Ok(n) => Ok(SubmissionLimit(Some(n))),
        Err(_) => Err(format!("{text:?} is not a positive number or `none`")),
    }
}

impl PhaseFields {
    fn body(&self, body: &mut serde_json::Map<String, Value>) {
        let limit = |v: SubmissionLimit| v.0.map_or(Value::Null, |n| json!(n));
        // Unix milliseconds go as the number the API takes; anything else as text.
        let time = |v: &String| v.parse::<i64>().map_or_else(|_| json!(v), |ms| json!(ms));
        if let Some(v) = &self.starts_at {
            body.insert("starts_at".into(), time(v));
        }
        if let Some(v) = &self.ends_at {
            body.insert("ends_at".into(), time(v));
        }
        if let Some(v) = &self.leaderboard {
            body.insert("leaderboard".into(), json!(v));
        }
        if let Some(v) = self.max_per_day {
            body.insert("max_submissions_per_day".into(), limit(v));
        }
        if let Some(v) = self.hosted_only {
            body.insert("hosted_only".into(), json!(v));
        }
        if let Some(v) = self.max_total {
            body.insert("max_submissions_total".into(), limit(v));
        }
        if let Some(v) = &self.groups {
            if v.trim() == "all" {
                body.insert("observation_groups".into(), Value::Null);
            } else {
                let groups: Vec<&str> = v.split(',').map(str::trim).filter(|g| !g.is_empty()).collect();
                body.insert("observation_groups".into(), json!(groups));
            }
        }
    }
}

#[derive(Debug, Subcommand)]
enum PhaseCommand {
    /// The phases of a challenge.
    List {
        /// The challenge's id.
        #[arg(long)]
        challenge: String,
    },
    /// A new phase of a challenge, on one benchmark.
    Create {
        /// The challenge's id.
        #[arg(long)]
        challenge: String,
        /// Slug, unique across challenges.
        #[arg(long)]
        id: String,
        /// The benchmark the phase runs (its name, as `arena bench list` shows).
        #[arg(long)]
        benchmark: String,
        #[command(flatten)]
        fields: PhaseFields,
    },
    /// Change times, visibility, quotas or groups of a phase.
    Update {
        /// The phase's id.
        id: String,
        #[command(flatten)]
        fields: PhaseFields,
    },
}

#[derive(Debug, Subcommand)]
enum TeamCommand {
    /// Every team with its id.
    List,
    /// A new team; its first token is printed once.
    Create {
        /// The team's name, shown on the leaderboards.
        name: String,
        /// A member as "Name <email>" (repeatable).
        #[arg(long = "member")]
        members: Vec<String>,
    },
    /// A team's members and tokens (never a token itself).
    Show {
        /// The team: its name or its numeric id.
        team: String,
    },
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// A team's tokens (ids, labels, expiry, revocation).
    List {
        /// The team: its name or its numeric id.
        team: String,
    },
    /// A new token for a team, printed once.
    Create {
        /// The team: its name or its numeric id.
        team: String,
        /// A note to tell tokens apart (e.g. "laptop").
        #[arg(long)]
        label: Option<String>,
        /// When it stops working (RFC 3339); never without it.
        #[arg(long)]
        expires_at: Option<String>,
    },
    /// Revoke a token at once (a session already connected with it runs on).
    Revoke {
        /// The team: its name or its numeric id.
        team: String,
        /// The token's id (`tok-…`, from `tokens list`).
        token_id: String,
    },
}

#[derive(Debug, Subcommand)]
enum SubmissionCommand {
    /// Every submission, newest first.
    List,
    /// One submission with its progress.
    Show {
        /// The submission's id (`sub-…`).
        id: String,
    },
    /// A PENDING or RUNNING submission becomes FAILED ("cancelled by the organiser").
    Cancel { id: String },
    /// Score a COMPLETED submission's stored episodes again and rebuild its report.
    Rescore { id: String },
    /// Mark (or with --off unmark) a submission as a baseline.
    Baseline {
        id: String,
        #[arg(long)]
        off: bool,
    },
}

/// What the organiser typed, as a team id: digits alone (Rust's integer parsing also takes a
/// sign, and a team named `+2` is then not team 2).
fn as_team_id(typed: &str) -> Option<i64> {
    if typed.is_empty() || !typed.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    typed.parse().ok()
}

/// A team's numeric id from what the organiser typed: the id itself, or the team's name (looked
/// up in the team list; a name shared by no team or spelled differently is an error naming the
/// teams there are).
fn team_id(api: &Api, team: &str) -> anyhow::Result<i64> {
    if let Some(id) = as_team_id(team) {
        return Ok(id);
    }
    let teams = api.call("GET", "/api/v1/teams", None)?;
    let all: Vec<&Value> = teams["teams"].as_array().into_iter().flatten().collect();
    match all.iter().find(|t| t["name"].as_str() == Some(team)) {
        Some(t) => t["id"]
            .as_i64()
            .context("the team list gave a team without a numeric id"),
        None => {
            let names: Vec<&str> = all.iter().filter_map(|t| t["name"].as_str()).collect();
            bail!(
                "no team named {team:?} (teams: {}); give a team's name or its numeric id",
                if names.is_empty() {
                    "none yet".to_string()
                } else {
                    names.join(", ")
                }
            )
        }
    }
}

struct Api {
    base: String,
    token: String,
    runtime: tokio::runtime::Runtime,
    client: hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
}

impl Api {
    fn new(server: &str, token: Option<String>) -> anyhow::Result<Self> {
        let mut base = server.trim_end_matches('/').to_string();
        // Every form the agents take (one ARENA_SERVER serves every tool): HOST:PORT, the agent
        // endpoint ws://HOST:PORT[/prefix]/api/v1/agent, grpc://HOST:PORT.
        if !base.contains("://") {
            base = format!("http://{base}");
        }
        for scheme in ["ws://", "grpc://"] {
            if let Some(rest) = base.strip_prefix(scheme) {
                let rest = rest.strip_suffix("/api/v1/agent").unwrap_or(rest);
                base = format!("http://{rest}");
            }
        }
        if base.starts_with("https://") {
            bail!(
                "--server {server}: this client speaks plain HTTP; reach an HTTPS server through a local tunnel or its internal address"
            );
        }
        if !base.starts_with("http://") {
            return Err(arena_sdk::cli::UsageError(format!(
                "--server {server}: expected http://HOST:PORT or HOST:PORT"
            ))
            .into());
        }
        let token = token
            .filter(|t| !t.is_empty())
            .context("no admin token: give --admin-token or set ARENA_ADMIN_TOKEN")?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
        Ok(Self {
            base,
            token,
            runtime,
            client,
        })
    }

    /// Sends a request; a non-2xx answer is an error carrying the API's message.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(&url)
            .header("authorization", format!("Bearer {}", self.token));
        let payload = match body {
            Some(b) => {
                request = request.header("content-type", "application/json");
                Bytes::from(serde_json::to_vec(&b)?)
            }
            None => Bytes::new(),
        };
        let request = request
            .body(Full::new(payload))
            .with_context(|| format!("{method} {url}"))?;
        let (status, bytes) = self
            .runtime
            .block_on(async {
                let response = tokio::time::timeout(std::time::Duration::from_secs(60), self.client.request(request))
                    .await
                    .map_err(|_| anyhow::anyhow!("no answer in 60 s"))??;
                let status = response.status();
                let bytes = response.into_body().collect().await?.to_bytes();
                anyhow::Ok((status, bytes))
            })
            .with_context(|| format!("{method} {url}: is `arena serve` running there?"))?;
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if !status.is_success() {
            let message = value["error"]["message"].as_str().unwrap_or("(no message)");
            bail!(
                "{method} {path}: {status}: {}",
                arena_sdk::protocol::tamed(message, usize::MAX)
            );
        }
        Ok(value)
    }
}

fn time(v: &Value) -> String {
    v.as_i64().map(crate::access::rfc3339).unwrap_or_else(|| "-".into())
}

/// A value as printed: strings with their line breaks, escapes and bidi overrides escaped (text
/// that teams wrote must not draw rows or colours on the organiser's terminal).
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => arena_sdk::protocol::tamed(s, usize::MAX),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// Prints rows as an aligned table.
fn table(header: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let parts: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        println!("{}", parts.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect());
    for r in rows {
        line(r);
    }
}

fn submission_rows(list: &[Value]) -> Vec<Vec<String>> {
    list.iter()
        .map(|s| {
            // The leaderboard row's numbers once there is a report: a COMPLETED submission whose
            // episodes mostly failed shows it here, not only on its own page.
            let scores = &s["scores"];
            let number = |v: &Value, digits: usize| v.as_f64().map_or("-".to_string(), |x| format!("{x:.digits$}"));
            vec![
                text(&s["id"]),
                text(&s["team_name"]),
                text(&s["benchmark"]),
                text(&s["phase"]),
                text(&s["status"]),
                if scores.is_null() {
                    "-".into()
                } else {
                    format!("{}/{}", text(&scores["scored"]), text(&scores["episodes"]))
                },
                if scores.is_null() {
                    "-".into()
                } else {
                    text(&scores["failed"])
                },
                scores["success_rate"].as_f64().map_or("-".into(), |r| {
                    format!("{:.0}% {}", 100.0 * r, text(&scores["success_metric"]))
                }),
                if scores.is_null() {
                    "-".into()
                } else {
                    format!("{} {}", text(&scores["primary"]), number(&scores["score"], 4))
                },
                if s["baseline"] == true { "yes".into() } else { "".into() },
                time(&s["created_at"]),
                text(&s["error"]),
            ]
        })
        .collect()
}

const SUBMISSION_HEADER: [&str; 12] = [
    "id",
    "team",
    "benchmark",
    "phase",
    "status",
    "scored",
    "failed",
    "success",
    "score",
    "baseline",
    "created",
    "error",
];

fn phase_rows(list: &[Value]) -> Vec<Vec<String>> {
    list.iter()
        .map(|p| {
            vec![
                text(&p["id"]),
                text(&p["benchmark"]),
                text(&p["state"]),
                text(&p["leaderboard"]),
                time(&p["starts_at"]),
                time(&p["ends_at"]),
                text(&p["max_submissions_per_day"]),
                text(&p["max_submissions_total"]),
            ]
        })
        .collect()
}

const PHASE_HEADER: [&str; 8] = [
    "id",
    "benchmark",
    "state",
    "leaderboard",
    "starts",
    "ends",
    "per day",
    "total",
];

fn parse_member(text: &str) -> anyhow::Result<Value> {
    let (name, rest) = text
        .split_once('<')
        .with_context(|| format!("--member {text:?}: expected \"Name <email>\""))?;
    let email = rest
        .strip_suffix('>')
        .with_context(|| format!("--member {text:?}: expected \"Name <email>\""))?;
    Ok(json!({"name": name.trim(), "email": email.trim()}))
}

/// How a command shows the API's answer without `--json`.
type Printer = Box<dyn FnOnce(&Value)>;

pub fn run(a: AdminArgs) -> anyhow::Result<()> {
    let api = Api::new(&a.server, a.admin_token.clone())?;
    let (value, print): (Value, Printer) = match a.command {
        AdminCommand::Challenges(ChallengeCommand::List) => (
            api.call("GET", "/api/v1/challenges", None)?,
            Box::new(|v| {
                let rows = v["challenges"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| vec![text(&c["id"]), text(&c["title"]), time(&c["created_at"])])
                    .collect();
                table(&["id", "title", "created"], rows);
            }),
        ),
        AdminCommand::Challenges(ChallengeCommand::Create { id, title, description }) => (
            api.call(
                "POST",
                "/api/v1/challenges",
                Some(json!({"id": id, "title": title, "description": description})),
            )?,
            Box::new(|v| println!("created challenge {}", text(&v["id"]))),
        ),
        AdminCommand::Phases(PhaseCommand::List { challenge }) => (
            api.call("GET", &format!("/api/v1/challenges/{}", segment(&challenge)), None)?,
            Box::new(|v| table(&PHASE_HEADER, phase_rows(v["phases"].as_array().map_or(&[], |a| a)))),
        ),
        AdminCommand::Phases(PhaseCommand::Create {
            challenge,
            id,
            benchmark,
            fields,
        }) => {
            // Optional for `update` (the same flags), required here.
            if fields.starts_at.is_none() || fields.ends_at.is_none() {
                return Err(arena_sdk::cli::UsageError(
                    "phases create needs --starts-at and --ends-at (RFC 3339, e.g. 2026-12-01T00:00:00Z, or unix milliseconds)".into(),
                )
                .into());
            }
            let mut body = serde_json::Map::new();
            body.insert("id".into(), json!(id));
            body.insert("benchmark".into(), json!(benchmark));
            fields.body(&mut body);
            (
                api.call(
                    "POST",
                    &format!("/api/v1/challenges/{}/phases", segment(&challenge)),
                    Some(Value::Object(body)),
                )?,
                Box::new(|v| {
                    table(&PHASE_HEADER, phase_rows(std::slice::from_ref(v)));
                    for w in v["warnings"].as_array().map_or(&[][..], |a| a) {
                        eprintln!("warning: {}", text(w));
                    }
                }),
            )
        }
        AdminCommand::Phases(PhaseCommand::Update { id, fields }) => {
            let mut body = serde_json::Map::new();
            fields.body(&mut body);
            if body.is_empty() {
                return Err(arena_sdk::cli::UsageError(format!(
                    "phases update {id}: nothing to change (give --starts-at, --ends-at, --leaderboard, --max-per-day, --max-total or --groups)"
                ))
                .into());
            }
            (
                api.call(
                    "PATCH",
                    &format!("/api/v1/phases/{}", segment(&id)),
                    Some(Value::Object(body)),
                )?,
                Box::new(|v| table(&PHASE_HEADER, phase_rows(std::slice::from_ref(v)))),
            )
        }
        AdminCommand::Teams(TeamCommand::List) => (
            api.call("GET", "/api/v1/teams", None)?,
            Box::new(|v| {
                let rows = v["teams"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| vec![text(&t["id"]), text(&t["name"]), time(&t["created_at"])])
                    .collect();
                table(&["id", "name", "created"], rows);
            }),
        ),
        AdminCommand::Teams(TeamCommand::Create { name, members }) => {
            let members = members
                .iter()
                .map(|m| parse_member(m))
                .collect::<anyhow::Result<Vec<_>>>()?;
            (
                api.call("POST", "/api/v1/teams", Some(json!({"name": name, "members": members})))?,
                Box::new(|v| {
                    println!(
                        "created team {} (id {})",
                        text(&v["team"]["name"]),
                        text(&v["team"]["id"])
                    );
                    println!("token (shown once, store it now): {}", text(&v["token"]));
                }),
            )
        }
        AdminCommand::Teams(TeamCommand::Show { team }) => (
            api.call("GET", &format!("/api/v1/teams/{}", team_id(&api, &team)?), None)?,
            Box::new(|v| {
                println!("team {} (id {})", text(&v["team"]["name"]), text(&v["team"]["id"]));
                for m in v["members"].as_array().into_iter().flatten() {
                    println!("member: {} <{}>", text(&m["name"]), text(&m["email"]));
                }
                for t in v["tokens"].as_array().into_iter().flatten() {
                    println!(
                        "token {} {} revoked: {}",
                        text(&t["id"]),
                        text(&t["label"]),
                        time(&t["revoked_at"])
                    );
                }
            }),
        ),
        AdminCommand::Tokens(TokenCommand::List { team }) => (
            api.call("GET", &format!("/api/v1/teams/{}/tokens", team_id(&api, &team)?), None)?,
            Box::new(|v| {
                let rows = v["tokens"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| {
                        vec![
                            text(&t["id"]),
                            text(&t["label"]),
                            time(&t["created_at"]),
                            time(&t["expires_at"]),
                            time(&t["revoked_at"]),
                        ]
                    })
                    .collect();
                table(&["id", "label", "created", "expires", "revoked"], rows);
            }),
        ),
        AdminCommand::Tokens(TokenCommand::Create {
            team,
            label,
            expires_at,
        }) => {
            let mut body = serde_json::Map::new();
            if let Some(l) = label {
                body.insert("label".into(), json!(l));
            }
            if let Some(e) = expires_at {
                body.insert(
                    "expires_at".into(),
                    e.parse::<i64>().map_or_else(|_| json!(e), |ms| json!(ms)),
                );
            }
            (
                api.call(
                    "POST",
                    &format!("/api/v1/teams/{}/tokens", team_id(&api, &team)?),
                    Some(Value::Object(body)),
                )?,
                Box::new(|v| {
                    println!(
                        "token {} (shown once, store it now): {}",
                        text(&v["token_info"]["id"]),
                        text(&v["token"])
                    )
                }),
            )
        }
        AdminCommand::Tokens(TokenCommand::Revoke { team, token_id }) => (
            api.call(
                "DELETE",
                &format!("/api/v1/teams/{}/tokens/{}", team_id(&api, &team)?, segment(&token_id)),
                None,
            )?,
            Box::new(|v| {
                println!(
                    "revoked {} at {}",
                    text(&v["token_info"]["id"]),
                    time(&v["token_info"]["revoked_at"])
                )
            }),
        ),
        AdminCommand::Submissions(SubmissionCommand::List) => (
            api.call("GET", "/api/v1/submissions", None)?,
            Box::new(|v| {
                table(
                    &SUBMISSION_HEADER,
                    submission_rows(v["submissions"].as_array().map_or(&[], |a| a)),
                )
            }),
        ),
        AdminCommand::Submissions(SubmissionCommand::Show { id }) => (
            api.call("GET", &format!("/api/v1/submissions/{}", segment(&id)), None)?,
            Box::new(|v| {
                table(&SUBMISSION_HEADER, submission_rows(std::slice::from_ref(v)));
                let p = &v["progress"];
                println!(
                    "episodes: {} finished, {} running, {} pending of {}",
                    text(&p["finished"]),
                    text(&p["running"]),
                    text(&p["pending"]),
                    text(&v["episodes_total"])
                );
                let hosted = &v["hosted"];
                if hosted.is_object() {
                    println!(
                        "hosted policy: {} ({} bytes, sha256 {}; GET /api/v1/submissions/{}/policy)",
                        text(&hosted["file_name"]),
                        text(&hosted["bytes"]),
                        text(&hosted["sha256"]),
                        text(&v["id"])
                    );
                }
                for (k, session) in v["sessions"].as_array().map_or(&[][..], |a| a).iter().enumerate() {
                    let end = match session["ended_at"].as_i64() {
                        Some(_) => format!("ended {} ({})", time(&session["ended_at"]), text(&session["outcome"])),
                        None => "no end recorded (running, or its server stopped)".into(),
                    };
                    println!(
                        "session {}: agent {}, started {}, {end}",
                        k + 1,
                        text(&session["agent_name"]),
                        time(&session["started_at"])
                    );
                }
            }),
        ),
        AdminCommand::Submissions(SubmissionCommand::Cancel { id }) => (
            api.call("POST", &format!("/api/v1/submissions/{}/cancel", segment(&id)), None)?,
            Box::new(|v| println!("cancelled {}: {}", text(&v["id"]), text(&v["status"]))),
        ),
        AdminCommand::Submissions(SubmissionCommand::Rescore { id }) => (
            api.call("POST", &format!("/api/v1/submissions/{}/rescore", segment(&id)), None)?,
            Box::new(|v| {
                println!(
                    "re-scored {} episodes of {}",
                    text(&v["rescored_episodes"]),
                    text(&v["id"])
                )
            }),
        ),
        AdminCommand::Submissions(SubmissionCommand::Baseline { id, off }) => (
            api.call(
                "PATCH",
                &format!("/api/v1/submissions/{}", segment(&id)),
                Some(json!({"baseline": !off})),
            )?,
            Box::new(|v| {
                let word = if v["baseline"] == true { "is" } else { "is not" };
                println!("{} {word} a baseline", text(&v["id"]))
            }),
        ),
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print(&value);
    }
    Ok(())
}

/// `text` as one path segment of a URL: every byte but the unreserved ones (RFC 3986 §2.3)
/// percent-encoded, so that an id holding `?`, `/` or `#` names nothing rather than another
/// resource (`phases update "p2?"` updated phase `p2`).
fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::as_team_id;

    #[test]
    fn only_digits_are_a_team_id() {
        assert_eq!(as_team_id("12"), Some(12));
        for name in ["+2", "-2", " 2", "2 ", "", "alpha", "99999999999999999999"] {
            assert_eq!(as_team_id(name), None, "{name:?}");
        }
    }
}
