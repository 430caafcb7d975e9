//! Access control end to end, on a real `arena serve` (SQLite) with debug logging: the admin
//! API (challenges, phases, teams, members, tokens), the refusal matrix over REST and over the
//! protocol (no / unknown / revoked / expired token, another team's data, phase rules, quotas),
//! private phases (hidden results, opaque episodes, no metrics in EpisodeEnd until the phase
//! ends), the per-team rate limit, and no token ever written to the server's log.

mod common;

use arena_sdk::agents::ReplayAgent;
use arena_sdk::client::{self, ClientConfig, ClientEvent, Mode};
use arena_sdk::protocol::{self, Connect, Encoding, EpisodeEnd, Frame, Msg, PROTOCOL_VERSION, codes};
use arena_server::access::{DAY_MS, day_start, rfc3339};
use common::server::{ADMIN, ServerProc};
use common::tmp;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

fn now_ms() -> i64 {
    arena_server::storage::now_ms()
}

/// Asserts a REST refusal: status, error code, and a part of the message.
#[track_caller]
fn refused(answer: (u16, Value), status: u16, code: &str, message_part: &str) -> Value {
    let (got, body) = answer;
    assert_eq!(got, status, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(message_part), "{message:?} lacks {message_part:?}");
    body
}

#[track_caller]
fn ok(answer: (u16, Value), status: u16) -> Value {
    assert_eq!(answer.0, status, "{}", answer.1);
    answer.1
}

fn patch(server: &ServerProc, path: &str, token: Option<&str>, body: &str) -> (u16, Value) {
    let (status, _, v) = server.call("PATCH", path, token, Some(body));
    (status, v)
}

fn delete(server: &ServerProc, path: &str, token: Option<&str>) -> (u16, Value) {
    let (status, _, v) = server.call("DELETE", path, token, None);
    (status, v)
}

/// An RFC 3339 time `offset_ms` from now.
fn at(offset_ms: i64) -> String {
    rfc3339(now_ms() + offset_ms)
}

const HOUR: i64 = 3_600_000;

fn create_phase(server: &ServerProc, body: Value) -> Value {
    ok(
        server.post("/api/v1/challenges/cup/phases", Some(ADMIN), &body.to_string()),
        201,
    )
}

/// Creates a team (with members) through the admin API: (team id, token).
fn team(server: &ServerProc, name: &str) -> (i64, String) {
    let body =
        json!({"name": name, "members": [{"name": format!("{name} lead"), "email": format!("lead@{name}.org")}]});
    let v = ok(server.post("/api/v1/teams", Some(ADMIN), &body.to_string()), 201);
    assert_eq!(v["members"][0]["email"], format!("lead@{name}.org"), "{v}");
    assert!(v["token_info"]["id"].as_str().unwrap().starts_with("tok-"), "{v}");
    (
        v["team"]["id"].as_i64().unwrap(),
        v["token"].as_str().unwrap().to_string(),
    )
}

/// No token used in the test appears in the server's log (which must have debug lines).
#[track_caller]
fn assert_no_tokens_in_log(server: &ServerProc, tokens: &[&str]) {
    let log = server.log_text();
    assert!(log.contains("DEBUG"), "the server did not log at debug level:\n{log}");
    for token in tokens {
        assert!(!token.is_empty());
        assert!(!log.contains(token), "a token appears in {}", server.log.display());
    }
}

// ---------------------------------------------------------------------------------------------
// Raw protocol client: a refusal is one Error, then the end of the session.

fn connect(token: &str, mode: &str, benchmark: &str, phase: &str) -> Connect {
    Connect {
        protocol_version: PROTOCOL_VERSION,
        agent_name: "raw".into(),
        token: token.into(),
        mode: mode.into(),
        benchmark: benchmark.into(),
        phase: phase.into(),
        ..Default::default()
    }
}

fn connect_refused(server: &ServerProc, connect: Connect) -> protocol::Error {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(server.ws_url()).await.unwrap();
        let Frame::Binary(bytes) = protocol::encode(&Msg::Connect(connect), Encoding::Binary) else {
            unreachable!("binary encoding")
        };
        ws.send(Message::Binary(bytes.into())).await.unwrap();
        let mut messages = Vec::new();
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(30), ws.next())
                .await
                .expect("the server answers");
            match frame {
                Some(Ok(Message::Binary(b))) => messages.push(protocol::decode_binary(&b).unwrap()),
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            }
        }
        match messages.as_slice() {
            [Msg::Error(e)] => e.clone(),
            other => panic!("expected one Error and the end of the session, got {other:?}"),
        }
    })
}

#[track_caller]
fn protocol_refused(e: &protocol::Error, code: &str, message_part: &str) {
    assert_eq!(e.code, code, "{e:?}");
    assert!(
        e.message.contains(message_part),
        "{:?} lacks {message_part:?}",
        e.message
    );
}

/// What an SDK client saw during a submission.
#[derive(Default)]
struct Seen {
    groups: Vec<String>,
    motions: Vec<String>,
    ends: Vec<EpisodeEnd>,
}

fn run_in_phase(server: &ServerProc, token: &str, phase: &str) -> (client::RunSummary, Seen) {
    let mut config = ClientConfig::new(
        server.ws_url(),
        token,
        Mode::Submission {
            benchmark: String::new(),
            submission_id: None,
        },
    );
    config.phase = phase.into();
    config.max_reconnects = 0;
    let mut seen = Seen::default();
    let summary = client::run_blocking(&config, &mut ReplayAgent::new(), &mut |event| match event {
        ClientEvent::Connected(c) => {
            seen.groups = c
                .spec
                .as_ref()
                .unwrap()
                .observations
                .iter()
                .map(|g| g.name.clone())
                .collect()
        }
        ClientEvent::EpisodeStart(infos) => seen.motions.extend(infos.iter().map(|i| i.motion.clone())),
        ClientEvent::EpisodeEnd(end) => seen.ends.push(end.clone()),
        _ => {}
    })
    .unwrap_or_else(|e| panic!("submission in phase {phase}: {e}"));
    (summary, seen)
}

// ---------------------------------------------------------------------------------------------

/// A connect lost before its `connected` arrived made a submission whose id its client never
/// learnt: the client's next connect, with the same `connect_key`, attaches to that submission
/// instead of making another, which a phase's daily quota of 1 then refused (a network
/// walkthrough: the day's submission lost to one dropped packet, and elsewhere a second
/// submission left RUNNING for a day). Another key is another submission; a key of another
/// form is refused.
#[test]
fn a_connect_key_attaches_the_submission_a_lost_connect_made() {
    let dir = tmp("access-connect-key");
    let server = ServerProc::start(&dir, &[]);
    let (_, alpha) = team(&server, "alpha");
    let (_, beta) = team(&server, "beta");
    let challenge = r#"{"id": "cup", "title": "The Cup"}"#;
    ok(server.post("/api/v1/challenges", Some(ADMIN), challenge), 201);
    create_phase(
        &server,
        json!({"id": "daily", "benchmark": "g1-smoke", "starts_at": at(-HOUR), "ends_at": at(HOUR), "max_submissions_per_day": 1}),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Connects and reads the answer: the connected submission's id, or the refusal. The
    // connection is then dropped, as one lost would be.
    let answer = |token: &str, key: &str| -> Result<String, protocol::Error> {
        let mut c = connect(token, "submission", "", "daily");
        c.connect_key = key.into();
        runtime.block_on(async {
            let (mut ws, _) = tokio_tungstenite::connect_async(server.ws_url()).await.unwrap();
            let Frame::Binary(bytes) = protocol::encode(&Msg::Connect(c), Encoding::Binary) else {
                unreachable!("binary encoding")
            };
            ws.send(Message::Binary(bytes.into())).await.unwrap();
            loop {
                match tokio::time::timeout(Duration::from_secs(30), ws.next())
                    .await
                    .expect("an answer")
                {
                    Some(Ok(Message::Binary(b))) => match protocol::decode_binary(&b).unwrap() {
                        Msg::Connected(c) => return Ok(c.submission_id),
                        Msg::Error(e) if e.code == codes::SUBMISSION_BUSY => {
                            // The lost connection's session is still being torn down.
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            let (again, _) = tokio_tungstenite::connect_async(server.ws_url()).await.unwrap();
                            ws = again;
                            let mut c = connect(token, "submission", "", "daily");
                            c.connect_key = key.into();
                            let Frame::Binary(bytes) = protocol::encode(&Msg::Connect(c), Encoding::Binary) else {
                                unreachable!("binary encoding")
                            };
                            ws.send(Message::Binary(bytes.into())).await.unwrap();
                        }
                        Msg::Error(e) => return Err(e),
                        _ => {}
                    },
                    other => panic!("the session ended without an answer: {other:?}"),
                }
            }
        })
    };
    let first = answer(&alpha, "3f2a9c0e6b8d4e1fa7c5d2b9e0f1a3c4").unwrap();
    // The same key again: the same submission, and the quota is not spent twice.
    let again = answer(&alpha, "3f2a9c0e6b8d4e1fa7c5d2b9e0f1a3c4").unwrap();
    assert_eq!(again, first);
    // Another key is another submission, which the day's quota refuses.
    let other = answer(&alpha, "another-key").unwrap_err();
    protocol_refused(&other, codes::QUOTA_EXCEEDED, "has used 1 of its 1");
    // The key names the team's submission only: another team's same key is its own.
    let beta_first = answer(&beta, "3f2a9c0e6b8d4e1fa7c5d2b9e0f1a3c4").unwrap();
    assert_ne!(beta_first, first);
    let bad = answer(&beta, "not a key").unwrap_err();
    protocol_refused(&bad, codes::INVALID_MESSAGE, "connect.connect_key");
    let (_, subs) = server.get("/api/v1/submissions", Some(&alpha));
    let ids: Vec<&str> = subs["submissions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(ids, [first.as_str()], "{subs}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The admin API: validation of challenges and phases, teams, members, tokens; the token matrix
/// (none, malformed, unknown, revoked, expired); quotas over REST and the protocol.
#[test]
fn admin_api_tokens_and_quotas() {
    let dir = tmp("access-admin");
    let server = ServerProc::start_with_env(&dir, &[], &[("ARENA_LOG", "debug")]);
    let (alpha_id, alpha) = team(&server, "alpha");
    let (_, beta) = team(&server, "beta");

    // Challenges: admin only, validated.
    let body = r#"{"id": "cup", "title": "The Cup", "description": "track it all"}"#;
    refused(
        server.post("/api/v1/challenges", None, body),
        401,
        "unauthorized",
        "missing Authorization",
    );
    refused(
        server.post("/api/v1/challenges", Some(&alpha), body),
        403,
        "forbidden",
        "admin token required",
    );
    refused(
        server.post("/api/v1/challenges", Some(ADMIN), r#"{"id": "Cup!", "title": "x"}"#),
        400,
        "bad_request",
        "id: expected",
    );
    ok(server.post("/api/v1/challenges", Some(ADMIN), body), 201);
    refused(
        server.post("/api/v1/challenges", Some(ADMIN), body),
        409,
        "conflict",
        "already exists",
    );
    let list = ok(server.get("/api/v1/challenges", None), 200);
    assert_eq!(list["challenges"][0]["id"], "cup", "{list}");

    // Phases: validated against the benchmark; listed with their state.
    let phase = |id: &str| json!({"id": id, "benchmark": "g1-smoke", "starts_at": at(-HOUR), "ends_at": at(HOUR)});
    let post_phase = |body: Value| server.post("/api/v1/challenges/cup/phases", Some(ADMIN), &body.to_string());
    let mut bad = phase("p");
    bad["benchmark"] = json!("nope");
    refused(
        post_phase(bad),
        400,
        "bad_request",
        // The names there are, not the server's folder.
        "benchmark: no benchmark named \"nope\"; available: ",
    );
    let mut bad = phase("p");
    bad["observation_groups"] = json!(["state", "privileged_state"]);
    refused(
        post_phase(bad),
        400,
        "bad_request",
        "does not offer \"privileged_state\"",
    );
    let mut bad = phase("p");
    bad["ends_at"] = json!(at(-2 * HOUR));
    refused(post_phase(bad), 400, "bad_request", "must be after starts_at");
    let mut bad = phase("p");
    bad["starts_at"] = json!("tomorrow");
    refused(post_phase(bad), 400, "bad_request", "starts_at: expected an RFC 3339");
    let mut bad = phase("p");
    bad["max_submissions_total"] = json!(0);
    refused(
        post_phase(bad),
        400,
        "bad_request",
        "max_submissions_total: expected a positive integer",
    );
    let mut bad = phase("p");
    bad["leaderboard"] = json!("secret");
    refused(
        post_phase(bad),
        400,
        "bad_request",
        "leaderboard: expected \"public\" or \"private\"",
    );
    refused(
        server.post("/api/v1/challenges/nope/phases", Some(ADMIN), &phase("p").to_string()),
        404,
        "not_found",
        "no challenge \"nope\"",
    );
    refused(
        server.post("/api/v1/challenges/cup/phases", Some(&alpha), &phase("p").to_string()),
        403,
        "forbidden",
        "admin token required",
    );
    let mut daily = phase("daily");
    daily["max_submissions_per_day"] = json!(1);
    daily["starts_at"] = json!(now_ms() - HOUR); // unix milliseconds work too
    let created = create_phase(&server, daily);
    assert_eq!(
        (created["state"].as_str(), created["max_submissions_per_day"].as_u64()),
        (Some("open"), Some(1)),
        "{created}"
    );
    refused(post_phase(phase("daily")), 409, "conflict", "already exists");
    let mut total = phase("total");
    total["max_submissions_total"] = json!(1);
    create_phase(&server, total);
    let mut future = phase("future");
    future["starts_at"] = json!(at(HOUR));
    future["ends_at"] = json!(at(2 * HOUR));
    create_phase(&server, future);
    let mut past = phase("past");
    past["starts_at"] = json!(at(-2 * HOUR));
    past["ends_at"] = json!(at(-HOUR));
    create_phase(&server, past);
    let cup = ok(server.get("/api/v1/challenges/cup", None), 200);
    let states: Vec<(String, String)> = cup["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap().into(), p["state"].as_str().unwrap().into()))
        .collect();
    for (id, state) in [
        ("daily", "open"),
        ("total", "open"),
        ("future", "upcoming"),
        ("past", "closed"),
    ] {
        assert!(states.contains(&(id.into(), state.into())), "{states:?}");
    }
    refused(server.get("/api/v1/phases/nope", None), 404, "not_found", "no phase");
    // PATCH: only known keys; null clears a limit.
    refused(
        patch(&server, "/api/v1/phases/total", Some(ADMIN), r#"{"benchmark": "x"}"#),
        400,
        "bad_request",
        "unknown field `benchmark`",
    );
    refused(
        patch(&server, "/api/v1/phases/total", Some(&alpha), "{}"),
        403,
        "forbidden",
        "admin",
    );
    let v = ok(
        patch(
            &server,
            "/api/v1/phases/daily",
            Some(ADMIN),
            r#"{"max_submissions_total": 5}"#,
        ),
        200,
    );
    assert_eq!(
        (
            v["max_submissions_total"].as_u64(),
            v["max_submissions_per_day"].as_u64()
        ),
        (Some(5), Some(1))
    );
    let v = ok(
        patch(
            &server,
            "/api/v1/phases/daily",
            Some(ADMIN),
            r#"{"max_submissions_total": null}"#,
        ),
        200,
    );
    assert!(v["max_submissions_total"].is_null(), "{v}");
    // Updates at once, each of another field: every one lands (each used to write back the
    // whole phase it had read, undoing the others').
    let base = now_ms() / 1000 * 1000;
    for round in 0..4u64 {
        let bodies = [
            json!({"max_submissions_total": 10 + round}),
            json!({"max_submissions_per_day": 20 + round}),
            json!({"hosted_only": round % 2 == 0}),
            json!({"ends_at": base + (3 + round as i64) * HOUR}),
            json!({"leaderboard": if round % 2 == 0 { "private" } else { "public" }}),
        ];
        std::thread::scope(|scope| {
            for body in &bodies {
                let server = &server;
                scope.spawn(move || {
                    ok(
                        patch(server, "/api/v1/phases/future", Some(ADMIN), &body.to_string()),
                        200,
                    )
                });
            }
        });
        let v = ok(server.get("/api/v1/phases/future", Some(ADMIN)), 200);
        assert_eq!(v["max_submissions_total"], 10 + round, "round {round}: {v}");
        assert_eq!(v["max_submissions_per_day"], 20 + round, "round {round}: {v}");
        assert_eq!(v["hosted_only"], round % 2 == 0, "round {round}: {v}");
        assert_eq!(v["ends_at"], bodies[3]["ends_at"], "round {round}: {v}");
        assert_eq!(v["leaderboard"], bodies[4]["leaderboard"], "round {round}: {v}");
    }

    // Teams: members and token metadata for the admin; never a token or its hash.
    let alpha_path = format!("/api/v1/teams/{alpha_id}");
    let member = ok(
        server.post(
            &format!("{alpha_path}/members"),
            Some(ADMIN),
            r#"{"name": "Bo", "email": "bo@alpha.org"}"#,
        ),
        201,
    );
    assert_eq!(member["name"], "Bo");
    refused(
        server.post(
            &format!("{alpha_path}/members"),
            Some(ADMIN),
            r#"{"name": "Bo", "email": "bo"}"#,
        ),
        400,
        "bad_request",
        "email: expected an address",
    );
    refused(
        server.get("/api/v1/teams/999", Some(ADMIN)),
        404,
        "not_found",
        "no team with id \"999\"",
    );
    refused(
        server.get(&alpha_path, Some(&alpha)),
        403,
        "forbidden",
        "admin token required",
    );
    refused(
        server.post(
            &format!("{alpha_path}/tokens"),
            Some(ADMIN),
            &json!({"expires_at": at(-1000)}).to_string(),
        ),
        400,
        "bad_request",
        "expires_at",
    );
    let short = ok(
        server.post(
            &format!("{alpha_path}/tokens"),
            Some(ADMIN),
            &json!({"label": "ci", "expires_at": now_ms() + 1500}).to_string(),
        ),
        201,
    );
    let expiring = short["token"].as_str().unwrap().to_string();
    let revocable = ok(
        server.post(&format!("{alpha_path}/tokens"), Some(ADMIN), r#"{"label": "laptop"}"#),
        201,
    );
    let revoked = revocable["token"].as_str().unwrap().to_string();
    let revoked_id = revocable["token_info"]["id"].as_str().unwrap().to_string();
    // Both work until expiry / revocation.
    for token in [&expiring, &revoked] {
        ok(server.get("/api/v1/submissions", Some(token)), 200);
    }
    let v = ok(
        delete(&server, &format!("{alpha_path}/tokens/{revoked_id}"), Some(ADMIN)),
        200,
    );
    assert!(v["token_info"]["revoked_at"].as_i64().is_some(), "{v}");
    refused(
        delete(&server, &format!("{alpha_path}/tokens/tok-0000"), Some(ADMIN)),
        404,
        "not_found",
        "tok-0000",
    );
    let details = ok(server.get(&alpha_path, Some(ADMIN)), 200);
    assert_eq!(details["members"].as_array().unwrap().len(), 2, "{details}");
    assert_eq!(details["tokens"].as_array().unwrap().len(), 3, "{details}");
    let text = details.to_string();
    for secret in [&alpha, &expiring, &revoked] {
        assert!(!text.contains(secret.as_str()), "a token is listed");
        assert!(
            !text.contains(&arena_server::storage::hash_token(secret)),
            "a token hash is listed"
        );
    }
    let listed = ok(server.get(&format!("{alpha_path}/tokens"), Some(ADMIN)), 200);
    assert_eq!(listed["tokens"], details["tokens"]);

    // The token matrix over REST.
    refused(
        server.get("/api/v1/submissions", None),
        401,
        "unauthorized",
        "missing Authorization",
    );
    refused(
        server.get("/api/v1/submissions", Some("at_nope")),
        401,
        "unauthorized",
        "unknown token",
    );
    let body = refused(
        server.get("/api/v1/submissions", Some(&revoked)),
        401,
        "unauthorized",
        "was revoked at",
    );
    assert!(
        body.to_string().contains(&revoked_id),
        "the message names the token id: {body}"
    );
    {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(server.addr).unwrap();
        let req = format!(
            "GET /api/v1/submissions HTTP/1.1\r\nHost: {}\r\nAuthorization: Basic {alpha}\r\nConnection: close\r\n\r\n",
            server.addr
        );
        s.write_all(req.as_bytes()).unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
        assert!(answer.contains("must be \\\"Bearer <token>\\\""), "{answer}");
    }
    std::thread::sleep(Duration::from_millis(1600));
    refused(
        server.get("/api/v1/submissions", Some(&expiring)),
        401,
        "unauthorized",
        "(\"ci\") of team \"alpha\" expired at",
    );

    // ... and over the protocol.
    let e = connect_refused(&server, connect("at_nope", "submission", "g1-smoke", ""));
    protocol_refused(&e, codes::UNAUTHORIZED, "unknown token");
    let e = connect_refused(&server, connect(&revoked, "submission", "", "daily"));
    protocol_refused(&e, codes::UNAUTHORIZED, "was revoked at");
    let e = connect_refused(&server, connect(&expiring, "submission", "", "daily"));
    protocol_refused(&e, codes::UNAUTHORIZED, "expired at");
    let e = connect_refused(&server, connect("", "submission", "", "daily"));
    protocol_refused(&e, codes::UNAUTHORIZED, "token is required");

    // Phase rules over REST and the protocol.
    let submit = |token: &str, body: Value| server.post("/api/v1/submissions", Some(token), &body.to_string());
    refused(
        submit(&alpha, json!({"phase": "nope"})),
        404,
        "unknown_phase",
        "no phase \"nope\"",
    );
    refused(
        submit(&alpha, json!({"phase": "future"})),
        403,
        "phase_closed",
        "opens at",
    );
    refused(
        submit(&alpha, json!({"phase": "past"})),
        403,
        "phase_closed",
        "closed at",
    );
    refused(
        submit(&alpha, json!({"phase": "daily", "benchmark": "g1-other"})),
        400,
        "bad_request",
        "runs benchmark g1-smoke",
    );
    refused(
        submit(&alpha, json!({"benchmark": "g1-smoke"})),
        403,
        "forbidden",
        "benchmark g1-smoke belongs to challenge phase(s)",
    );
    refused(
        submit(&alpha, json!({})),
        400,
        "bad_request",
        "a benchmark or a phase is required",
    );
    let e = connect_refused(&server, connect(&alpha, "submission", "", "nope"));
    protocol_refused(&e, codes::UNKNOWN_PHASE, "no phase \"nope\"");
    let e = connect_refused(&server, connect(&alpha, "submission", "", "future"));
    protocol_refused(&e, codes::PHASE_CLOSED, "opens at");
    let e = connect_refused(&server, connect(&alpha, "practice", "", "past"));
    protocol_refused(&e, codes::PHASE_CLOSED, "closed at");
    let e = connect_refused(&server, connect(&alpha, "submission", "g1-smoke", ""));
    protocol_refused(&e, codes::FORBIDDEN, "belongs to challenge phase(s) past, ");
    assert!(e.message.contains("(phase="), "{}", e.message);

    // Quotas: per day (resets at the next UTC midnight, Retry-After) and in total (never).
    let midnights = || day_start(now_ms()) + DAY_MS;
    let before = midnights();
    let first = ok(submit(&alpha, json!({"phase": "daily", "agent_name": "one"})), 201);
    assert_eq!(first["phase"], "daily", "{first}");
    let (status, head, body) = server.call(
        "POST",
        "/api/v1/submissions",
        Some(&alpha),
        Some(&json!({"phase": "daily"}).to_string()),
    );
    let body = refused(
        (status, body),
        429,
        "quota_exceeded",
        "1 submission(s) per day in phase daily",
    );
    let after = midnights();
    assert_eq!(body["error"]["limit"], 1, "{body}");
    let resets = body["error"]["resets_at"].as_str().unwrap().to_string();
    assert!([rfc3339(before), rfc3339(after)].contains(&resets), "{resets}");
    assert!(body["error"]["message"].as_str().unwrap().contains(&resets), "{body}");
    let retry: i64 = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("retry-after:")
                .map(|v| v.trim().parse().unwrap())
        })
        .expect("a Retry-After header");
    assert!((0..=DAY_MS / 1000).contains(&retry), "{retry}");
    let e = connect_refused(&server, connect(&alpha, "submission", "", "daily"));
    protocol_refused(&e, codes::QUOTA_EXCEEDED, "per day");
    assert_eq!(e.limit, 1);
    assert!(
        [rfc3339(before), rfc3339(after)].contains(&e.resets_at),
        "{}",
        e.resets_at
    );
    // The quota is per team: beta still may.
    ok(submit(&beta, json!({"phase": "daily"})), 201);
    ok(submit(&alpha, json!({"phase": "total"})), 201);
    let (status, head, body) = server.call(
        "POST",
        "/api/v1/submissions",
        Some(&alpha),
        Some(&json!({"phase": "total"}).to_string()),
    );
    let body = refused((status, body), 429, "quota_exceeded", "does not reset");
    assert_eq!(
        (body["error"]["limit"].as_u64(), body["error"]["resets_at"].is_null()),
        (Some(1), true)
    );
    assert!(!head.to_ascii_lowercase().contains("retry-after"), "{head}");
    let e = connect_refused(&server, connect(&alpha, "submission", "g1-smoke", "total"));
    protocol_refused(&e, codes::QUOTA_EXCEEDED, "does not reset");
    assert_eq!((e.limit, e.resets_at.as_str()), (1, ""));
    // Raising the limit lifts the refusal.
    ok(
        patch(
            &server,
            "/api/v1/phases/total",
            Some(ADMIN),
            r#"{"max_submissions_total": 2}"#,
        ),
        200,
    );
    ok(submit(&alpha, json!({"phase": "total"})), 201);
    // A team sees only its own submissions.
    let mine = ok(server.get("/api/v1/submissions", Some(&beta)), 200);
    assert_eq!(mine["submissions"].as_array().unwrap().len(), 1, "{mine}");
    let id = first["id"].as_str().unwrap();
    refused(
        server.get(&format!("/api/v1/submissions/{id}"), Some(&beta)),
        404,
        "not_found",
        id,
    );

    assert_no_tokens_in_log(&server, &[&alpha, &beta, &expiring, &revoked, ADMIN]);
    drop(server);
    std::fs::remove_dir_all(&dir).ok();
}

/// Public and private phases with real runs: what each team, the public and the admin see,
/// before and after the private phase ends.
#[test]
fn public_and_private_phases() {
    let dir = tmp("access-phases");
    // TRACE: even the transports' frame-level logs must not carry a token.
    let server = ServerProc::start_with_env(&dir, &[], &[("ARENA_LOG", "trace")]);
    ok(
        server.post(
            "/api/v1/challenges",
            Some(ADMIN),
            r#"{"id": "cup", "title": "The Cup"}"#,
        ),
        201,
    );
    create_phase(
        &server,
        json!({"id": "dev", "benchmark": "g1-smoke", "starts_at": at(-HOUR), "ends_at": at(HOUR),
               "leaderboard": "public", "max_submissions_per_day": 5}),
    );
    create_phase(
        &server,
        json!({"id": "final", "benchmark": "g1-smoke", "starts_at": at(-HOUR), "ends_at": at(HOUR),
               "leaderboard": "private", "observation_groups": ["state", "reference"]}),
    );
    let (_, alpha) = team(&server, "alpha");
    let (_, beta) = team(&server, "beta");

    // Alpha in the public phase: metrics and results as usual, but g1-smoke is the private
    // phase's test set until it ends, so no motion reaches any team (issue 30): no names or
    // windows in episode_start or the results, none on the benchmark page, no practice.
    let (summary, seen) = run_in_phase(&server, &alpha, "dev");
    assert_eq!(summary.submission_status, "COMPLETED");
    assert_eq!(
        seen.groups,
        ["state", "last_action", "history_actor", "reference", "reference_goal"]
    );
    assert!(seen.motions.iter().all(String::is_empty), "{:?}", seen.motions);
    assert!(seen.ends.iter().all(|e| e.metrics.contains_key("emd")));
    let public_id = summary.submission_id.clone();
    let results = ok(
        server.get(&format!("/api/v1/submissions/{public_id}/results"), Some(&alpha)),
        200,
    );
    assert_eq!(results["aggregated"]["emd"]["count"], 6, "{results}");
    // Nor their statistics (the longest survival time is the longest clip's length).
    for table in std::iter::once(&results["aggregated"]).chain(results["groups"].as_object().unwrap().values()) {
        assert!(table.get("emd").is_some(), "{table}");
        assert!(
            table.get("failure_time_s").is_none() && table.get("mjlab_failure_time_s").is_none(),
            "{table}"
        );
    }
    assert_eq!(results["submission"]["phase"], "dev");
    for e in results["episodes"].as_array().unwrap() {
        for key in ["motion", "start_s", "duration_s", "steps", "updated_at"] {
            assert!(e[key].is_null(), "{key} of a hidden motion: {e}");
        }
        // A survival time is the clip's length where nothing broke: no metric in seconds.
        assert!(e["metrics"]["emd"].is_number(), "{e}");
        for key in ["failure_time_s", "mjlab_failure_time_s"] {
            assert!(
                e["metrics"].get(key).is_none_or(Value::is_null),
                "{key} of a hidden motion: {e}"
            );
        }
    }
    refused(
        server.get(&format!("/api/v1/submissions/{public_id}/report"), Some(&alpha)),
        403,
        "hidden",
        "test set of private phase final",
    );
    // Failed episodes are listed apart, and hide their motions the same way: a submission
    // made and cancelled before it ran has all six.
    let cancelled = ok(
        server.post(
            "/api/v1/submissions",
            Some(&alpha),
            &json!({"phase": "dev"}).to_string(),
        ),
        201,
    );
    let cancelled = cancelled["id"].as_str().unwrap();
    ok(
        server.post(&format!("/api/v1/submissions/{cancelled}/cancel"), Some(ADMIN), ""),
        200,
    );
    let results = ok(
        server.get(&format!("/api/v1/submissions/{cancelled}/results"), Some(&alpha)),
        200,
    );
    let failed = results["failed_episodes"].as_array().unwrap();
    assert_eq!(failed.len(), 6, "{results}");
    for e in failed {
        assert!(e["motion"].is_null(), "a hidden motion in the failed list: {e}");
        // Of a reason only the kind: a reason's step number or value can tell a hidden motion.
        assert_eq!(e["reason"], "the submission was cancelled", "{e}");
    }
    let names = [
        "stand",
        "squat",
        "arm_wave",
        "torso_twist",
        "weight_shift",
        "step_in_place",
    ];
    let text = results.to_string();
    assert!(!names.iter().any(|n| text.contains(&format!("\"{n}"))), "{results}");
    for token in [None, Some(alpha.as_str())] {
        let page = ok(server.get("/api/v1/benchmarks/g1-smoke", token), 200);
        assert!(page["motion_list"].is_null(), "{page}");
        assert_eq!(page["motions"]["hidden"], true, "{page}");
        assert!(!page.to_string().contains("squat"), "no name anywhere: {page}");
        assert!(
            page["motions_hidden"].as_str().unwrap().contains("private phase final"),
            "{page}"
        );
    }
    let page = ok(server.get("/api/v1/benchmarks/g1-smoke", Some(ADMIN)), 200);
    assert_eq!(
        page["motion_list"].as_array().unwrap().len(),
        6,
        "the admin sees the motions"
    );
    let board = ok(server.get("/api/v1/phases/dev/leaderboard", None), 200);
    assert_eq!(board["entries"][0]["submission_id"], public_id.as_str(), "{board}");
    assert_eq!(board["phase"], "dev");
    // No mean in seconds on the boards or in the lists while the motions are hidden: a mean
    // survival time where nothing broke is the mean clip length. The admin sees it.
    assert_eq!(board["survival_metric"], "failure_time_s", "{board}");
    let survival_of = |board: &Value| board["entries"][0]["survival"].clone();
    assert!(survival_of(&board).is_null(), "{board}");
    assert_eq!(
        board["seconds_withheld"], true,
        "a null that is hidden, not missing: {board}"
    );
    for token in [None, Some(alpha.as_str())] {
        let board = ok(server.get("/api/v1/leaderboards/g1-smoke", token), 200);
        assert!(survival_of(&board).is_null(), "{board}");
    }
    for path in ["/api/v1/leaderboards/g1-smoke", "/api/v1/phases/dev/leaderboard"] {
        let board = ok(server.get(path, Some(ADMIN)), 200);
        assert!(survival_of(&board).as_f64().is_some(), "{path}: {board}");
        assert_eq!(board["seconds_withheld"], false, "{path}: {board}");
    }
    let listed = ok(server.get("/api/v1/submissions", Some(&alpha)), 200);
    let listed = listed["submissions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == public_id.as_str())
        .unwrap()
        .clone();
    assert!(listed["scores"]["score"].is_number(), "{listed}");
    assert!(listed["scores"]["survival"].is_null(), "{listed}");

    // Practice in the public phase would run the test set's motions: refused, saying why.
    let e = connect_refused(&server, connect(&alpha, "practice", "", "dev"));
    protocol_refused(&e, codes::FORBIDDEN, "test set of private phase final");

    // Beta in the private phase: opaque episodes, only its groups, no metrics or reasons.
    let e = connect_refused(&server, connect(&beta, "practice", "", "final"));
    protocol_refused(&e, codes::FORBIDDEN, "practice is not available in phase final");
    let (summary, seen) = run_in_phase(&server, &beta, "final");
    assert_eq!(summary.submission_status, "COMPLETED");
    assert_eq!(seen.groups, ["state", "reference"]);
    assert_eq!(seen.motions.len(), 6);
    assert!(seen.motions.iter().all(String::is_empty), "{:?}", seen.motions);
    assert_eq!(seen.ends.len(), 6);
    for end in &seen.ends {
        assert_eq!(end.status, "completed", "{end:?}");
        assert!(
            end.steps > 0 && end.metrics.is_empty() && end.reason.is_empty(),
            "{end:?}"
        );
    }
    let private_id = summary.submission_id.clone();

    // Before the end: beta sees status only; alpha not even that; the admin sees everything.
    let sub = ok(
        server.get(&format!("/api/v1/submissions/{private_id}"), Some(&beta)),
        200,
    );
    assert_eq!(
        (sub["status"].as_str(), sub["phase"].as_str()),
        (Some("COMPLETED"), Some("final"))
    );
    assert!(!sub.to_string().contains("emd"), "{sub}");
    for what in ["results", "report", "trajectories"] {
        let path = format!("/api/v1/submissions/{private_id}/{what}");
        refused(
            server.get(&path, Some(&beta)),
            403,
            "hidden",
            "hidden until private phase final ends at",
        );
        refused(server.get(&path, Some(&alpha)), 404, "not_found", &private_id);
        refused(server.get(&path, None), 401, "unauthorized", "missing");
        let public = format!("/api/v1/submissions/{public_id}/{what}");
        refused(server.get(&public, Some(&beta)), 404, "not_found", &public_id);
    }
    // Its datasets say so too (issue 30: an empty, malformed file came back), and the
    // benchmark's, whose motions are the phase's test set.
    refused(
        server.get("/api/v1/datasets/phases/final/card", Some(&beta)),
        403,
        "hidden",
        "datasets of private phase final are hidden",
    );
    refused(
        server.get("/api/v1/datasets/benchmarks/g1-smoke/card", Some(&alpha)),
        403,
        "hidden",
        "test set of private phase final",
    );
    ok(server.get("/api/v1/datasets/phases/final/card", Some(ADMIN)), 200);
    let admin_view = ok(
        server.get(&format!("/api/v1/submissions/{private_id}/results"), Some(ADMIN)),
        200,
    );
    assert_eq!(admin_view["aggregated"]["emd"]["count"], 6);
    assert_eq!(
        admin_view["episodes"][1]["motion"], "squat",
        "stored results keep the names"
    );
    for token in [None, Some(alpha.as_str()), Some(beta.as_str())] {
        refused(
            server.get("/api/v1/phases/final/leaderboard", token),
            403,
            "hidden",
            "leaderboard of private phase final is hidden until",
        );
    }
    let board = ok(server.get("/api/v1/phases/final/leaderboard", Some(ADMIN)), 200);
    assert_eq!(board["entries"][0]["team"], "beta", "{board}");
    // The benchmark's leaderboard leaves the hidden submission out (the admin sees it).
    let teams_on = |token: Option<&str>| -> Vec<String> {
        ok(server.get("/api/v1/leaderboards/g1-smoke", token), 200)["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["team"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(teams_on(None), ["alpha"]);
    let mut all = teams_on(Some(ADMIN));
    all.sort();
    assert_eq!(all, ["alpha", "beta"]);
    // Public endpoints need no token, but one that is sent must be valid (never silently ignored).
    for public in [
        "/api/v1/leaderboards/g1-smoke",
        "/api/v1/benchmarks",
        "/api/v1/benchmarks/g1-smoke",
        "/api/v1/challenges",
        "/api/v1/challenges/cup",
        "/api/v1/phases/final",
    ] {
        ok(server.get(public, None), 200);
        refused(
            server.get(public, Some("at_nope")),
            401,
            "unauthorized",
            "unknown token",
        );
    }

    // The admin ends the phase: results and leaderboard open to everyone.
    ok(
        patch(
            &server,
            "/api/v1/phases/final",
            Some(ADMIN),
            &json!({"ends_at": at(-1000)}).to_string(),
        ),
        200,
    );
    let results = ok(
        server.get(&format!("/api/v1/submissions/{private_id}/results"), Some(&beta)),
        200,
    );
    assert_eq!(results["aggregated"]["emd"]["count"], 6, "{results}");
    ok(
        server.get(&format!("/api/v1/submissions/{private_id}/report"), Some(&beta)),
        200,
    );
    let (status, bytes) = common::server::http(
        server.addr,
        "GET",
        &format!("/api/v1/submissions/{private_id}/trajectories"),
        Some(&beta),
        None,
    );
    assert_eq!((status, &bytes[1..4]), (200, &b"HDF"[..]));
    let board = ok(server.get("/api/v1/phases/final/leaderboard", None), 200);
    assert_eq!(board["entries"][0]["submission_id"], private_id.as_str(), "{board}");
    assert!(survival_of(&board).as_f64().is_some(), "the test set is out: {board}");
    assert_eq!(teams_on(None).len(), 2);
    // The private phase over, the public phase is an ordinary one again: practice is allowed
    // (here over gRPC) and motion names show.
    let mut config = ClientConfig::new(
        server.grpc_url(),
        &alpha,
        Mode::Practice {
            benchmark: String::new(),
            episodes: vec![protocol::ResetEpisode {
                motion: "stand".into(),
                duration_s: 0.5,
                ..Default::default()
            }],
        },
    );
    config.phase = "dev".into();
    config.max_reconnects = 0;
    let practice = client::run_blocking(&config, &mut ReplayAgent::new(), &mut |_| {}).unwrap();
    assert!(
        practice.episodes[0].metrics.contains_key("emd"),
        "{:?}",
        practice.episodes
    );
    let page = ok(server.get("/api/v1/benchmarks/g1-smoke", None), 200);
    assert_eq!(page["motion_list"].as_array().unwrap().len(), 6, "{page}");

    // ... and it takes no more submissions.
    let e = connect_refused(&server, connect(&beta, "submission", "", "final"));
    protocol_refused(&e, codes::PHASE_CLOSED, "closed at");

    assert_no_tokens_in_log(&server, &[&alpha, &beta, ADMIN]);
    drop(server);
    std::fs::remove_dir_all(&dir).ok();
}

/// Requests per team per minute: REST calls and Connects share the count; past it, 429 /
/// `rate_limited` with the limit and when the minute ends; other teams and the admin go on.
#[test]
fn rate_limit_per_team_and_minute() {
    let dir = tmp("access-rate");
    let server = ServerProc::start(&dir, &["--requests-per-minute", "3"]);
    let (_, alpha) = team(&server, "alpha");
    let (_, beta) = team(&server, "beta");
    // Counts are per wall-clock minute: start well inside one so the test cannot straddle two.
    let into_minute = now_ms().rem_euclid(60_000);
    if into_minute > 50_000 {
        std::thread::sleep(Duration::from_millis((60_000 - into_minute + 200) as u64));
    }
    for _ in 0..2 {
        ok(server.get("/api/v1/submissions", Some(&alpha)), 200);
    }
    // The third request is a Connect (practice on g1-smoke): allowed, it completes.
    let mut config = ClientConfig::new(
        server.ws_url(),
        &alpha,
        Mode::Practice {
            benchmark: "g1-smoke".into(),
            episodes: vec![protocol::ResetEpisode {
                motion: "stand".into(),
                duration_s: 0.2,
                ..Default::default()
            }],
        },
    );
    config.max_reconnects = 0;
    let practice = client::run_blocking(&config, &mut arena_sdk::agents::ZeroAgent::default(), &mut |_| {}).unwrap();
    assert_eq!(practice.episodes.len(), 1);
    // The fourth: refused over REST with the limit, the end of the minute and Retry-After...
    let (status, head, body) = server.call("GET", "/api/v1/submissions", Some(&alpha), None);
    let body = refused((status, body), 429, "rate_limited", "3 requests this minute");
    assert_eq!(body["error"]["limit"], 3);
    let resets = body["error"]["resets_at"].as_str().unwrap().to_string();
    assert!(resets.ends_with(":00Z"), "{resets}");
    let retry: i64 = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("retry-after:")
                .map(|v| v.trim().to_string())
        })
        .expect("a Retry-After header")
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    // ... and over the protocol.
    let e = connect_refused(&server, connect(&alpha, "submission", "g1-smoke", ""));
    protocol_refused(&e, "rate_limited", "retry after");
    assert_eq!((e.limit, e.resets_at.as_str()), (3, resets.as_str()));
    // Another team and the admin are not affected.
    ok(server.get("/api/v1/submissions", Some(&beta)), 200);
    ok(server.get("/api/v1/teams", Some(ADMIN)), 200);
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 40 §3: a private phase whose clips participants can reach through another benchmark
/// (practice or submissions of one that no private phase holds) is created with a warning that
/// names the benchmark and the clips, matched by content; a public phase gets none.
#[test]
fn a_private_phase_on_clips_of_a_public_benchmark_is_warned() {
    let dir = tmp("access-shared-clips");
    let server = ServerProc::start(&dir, &[]);
    ok(
        server.post(
            "/api/v1/challenges",
            Some(ADMIN),
            r#"{"id": "cup", "title": "The Cup"}"#,
        ),
        201,
    );
    let private = create_phase(
        &server,
        json!({"id": "final", "benchmark": "g1-smoke-robot", "starts_at": at(HOUR), "ends_at": at(2 * HOUR),
               "leaderboard": "private"}),
    );
    let warnings: Vec<&str> = private["warnings"]
        .as_array()
        .unwrap_or_else(|| panic!("{private}"))
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    let smoke: Vec<&&str> = warnings.iter().filter(|w| w.contains("benchmark g1-smoke,")).collect();
    assert_eq!(smoke.len(), 1, "{warnings:?}");
    for clip in [
        "stand",
        "squat",
        "arm_wave",
        "torso_twist",
        "weight_shift",
        "step_in_place",
    ] {
        assert!(smoke[0].contains(clip), "{clip}: {}", smoke[0]);
    }
    assert!(smoke[0].starts_with("6 of this private phase's clips"), "{}", smoke[0]);
    let public = create_phase(
        &server,
        json!({"id": "open", "benchmark": "g1-smoke", "starts_at": at(-HOUR), "ends_at": at(HOUR)}),
    );
    assert_eq!(public["warnings"], json!([]), "{public}");
    // A private phase that has ended hides nothing any more: g1-smoke's clips stay reachable
    // and a later private phase on them is warned again. A private phase on the benchmark of
    // a public one runs the public one's episodes: its hidden scores are shown there.
    let old_final = create_phase(
        &server,
        json!({"id": "old-final", "benchmark": "g1-smoke", "starts_at": at(-3 * HOUR), "ends_at": at(-2 * HOUR),
               "leaderboard": "private"}),
    );
    let same: Vec<&str> = old_final["warnings"]
        .as_array()
        .unwrap_or_else(|| panic!("{old_final}"))
        .iter()
        .filter_map(|w| {
            w.as_str()
                .filter(|w| w.starts_with("benchmark g1-smoke also runs in public phase open"))
        })
        .collect();
    // ... though not of the same episodes: an ended private phase's results are public.
    assert_eq!(same.len(), 0, "{old_final}");
    // Created the other way round (the public phase second), the same warning.
    let dev = create_phase(
        &server,
        json!({"id": "dev", "benchmark": "g1-smoke-robot", "starts_at": at(-HOUR), "ends_at": at(3 * HOUR)}),
    );
    assert!(
        dev["warnings"]
            .as_array()
            .unwrap_or_else(|| panic!("{dev}"))
            .iter()
            .any(|w| {
                let w = w.as_str().unwrap();
                w.starts_with("benchmark g1-smoke-robot also runs in private phase final")
                    && w.contains("private phase final hides")
                    // Until it ends, the test set hides the motions in the public phase too.
                    && w.contains("its motions are hidden from every team in every phase, dev included")
            }),
        "{dev}"
    );
    let again = create_phase(
        &server,
        json!({"id": "final-2", "benchmark": "g1-smoke-robot", "starts_at": at(HOUR), "ends_at": at(2 * HOUR),
               "leaderboard": "private"}),
    );
    assert!(
        again["warnings"]
            .as_array()
            .unwrap_or_else(|| panic!("{again}"))
            .iter()
            .any(|w| w.as_str().unwrap().contains("benchmark g1-smoke,")),
        "{again}"
    );
    let log = std::fs::read_to_string(&server.log).unwrap_or_default();
    assert!(
        log.contains("also appear in benchmark g1-smoke"),
        "the organiser's log says it too"
    );
    // A benchmark whose phases are private still streams its references to the agents that
    // run them: its clips are reachable. Only phases that all take uploaded files seal them.
    let private_on_smoke = |id: &str| {
        create_phase(
            &server,
            json!({"id": id, "benchmark": "g1-smoke-robot", "starts_at": at(HOUR), "ends_at": at(2 * HOUR),
                   "leaderboard": "private"}),
        )
        .to_string()
    };
    let patch_smoke_phases = |body: &str| {
        for id in ["open", "old-final"] {
            ok(patch(&server, &format!("/api/v1/phases/{id}"), Some(ADMIN), body), 200);
        }
    };
    patch_smoke_phases(r#"{"leaderboard": "private"}"#);
    // Lasting past the new phase's end (a private phase that held the clips throughout was
    // taken as keeping them from the teams).
    let longer = json!({"ends_at": at(3 * HOUR)}).to_string();
    ok(patch(&server, "/api/v1/phases/open", Some(ADMIN), &longer), 200);
    let w = private_on_smoke("final-3");
    assert!(
        w.contains("also appear in benchmark g1-smoke,"),
        "private phases stream clips too: {w}"
    );
    patch_smoke_phases(r#"{"hosted_only": true}"#);
    let w = private_on_smoke("final-4");
    assert!(
        !w.contains("also appear in benchmark g1-smoke,"),
        "hosted-only phases seal: {w}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A submission whose session ran when its phase closed may still resume after the close (a
/// replica's crash or a deploy at the deadline otherwise stranded it for good: `phase_closed`
/// at every reconnect, while its page said it waited for its agent). One made in time but never
/// run may not (an agent brought in after the deadline), and its page no longer says it waits.
#[test]
fn a_submission_running_at_its_phase_close_may_resume_after_it() {
    let dir = tmp("access-resume-after-close");
    let server = ServerProc::start(&dir, &["--lanes", "1"]);
    ok(
        server.post(
            "/api/v1/challenges",
            Some(ADMIN),
            r#"{"id": "cup", "title": "The Cup"}"#,
        ),
        201,
    );
    create_phase(
        &server,
        json!({"id": "day", "benchmark": "g1-smoke", "starts_at": at(-HOUR), "ends_at": at(HOUR),
               "leaderboard": "public"}),
    );
    let (_, alpha) = team(&server, "alpha");
    let never_run = ok(
        server.post(
            "/api/v1/submissions",
            Some(&alpha),
            &json!({"phase": "day"}).to_string(),
        ),
        201,
    )["id"]
        .as_str()
        .unwrap()
        .to_string();
    // A session runs when the phase closes; its connection is then lost.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let running = runtime.block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(server.ws_url()).await.unwrap();
        let mut c = connect(&alpha, "submission", "", "day");
        c.max_batch = 1;
        let Frame::Binary(bytes) = protocol::encode(&Msg::Connect(c), Encoding::Binary) else {
            unreachable!("binary encoding")
        };
        ws.send(Message::Binary(bytes.into())).await.unwrap();
        let mut id = String::new();
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(30), ws.next())
                .await
                .expect("the server answers");
            match frame {
                Some(Ok(Message::Binary(b))) => match protocol::decode_binary(&b).unwrap() {
                    Msg::Connected(c) => id = c.submission_id,
                    Msg::GetAction(_) => break,
                    _ => {}
                },
                other => panic!("the session ended: {other:?}"),
            }
        }
        ok(
            patch(
                &server,
                "/api/v1/phases/day",
                Some(ADMIN),
                &json!({"ends_at": at(1000)}).to_string(),
            ),
            200,
        );
        // The phase ends within a second (times are whole seconds), while the session runs; its
        // connection is lost after.
        std::thread::sleep(Duration::from_millis(1100));
        drop(ws);
        id
    });
    let waited = std::time::Instant::now();
    loop {
        let sub = ok(server.get(&format!("/api/v1/submissions/{running}"), Some(&alpha)), 200);
        if sub["sessions"][0]["ended_at"].is_i64() {
            assert_eq!(sub["awaiting_agent"], true, "{sub}");
            // The listing says the same (the pages' lists show it).
            let listed = ok(server.get("/api/v1/submissions", Some(&alpha)), 200);
            let row = listed["submissions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["id"] == running.as_str());
            assert_eq!(
                row.map(|s| &s["awaiting_agent"]),
                Some(&serde_json::json!(true)),
                "{listed}"
            );
            break;
        }
        assert!(waited.elapsed() < Duration::from_secs(30), "{sub}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut config = ClientConfig::new(
        server.ws_url(),
        &alpha,
        Mode::Submission {
            benchmark: String::new(),
            submission_id: Some(running.clone()),
        },
    );
    config.max_reconnects = 0;
    let resumed = client::run_blocking(&config, &mut ReplayAgent::new(), &mut |_| {}).expect("resumed after the close");
    assert_eq!(resumed.submission_status, "COMPLETED");
    // Made in time, never run: no resume after the close, and its page does not say it waits.
    let mut c = connect(&alpha, "submission", "", "");
    c.submission_id = never_run.clone();
    let e = connect_refused(&server, c);
    protocol_refused(&e, codes::PHASE_CLOSED, "closed at");
    let sub = ok(
        server.get(&format!("/api/v1/submissions/{never_run}"), Some(&alpha)),
        200,
    );
    assert_eq!(sub["awaiting_agent"], false, "{sub}");
    let listed = ok(server.get("/api/v1/submissions", Some(&alpha)), 200);
    let row = listed["submissions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == never_run.as_str());
    assert_eq!(
        row.map(|s| &s["awaiting_agent"]),
        Some(&serde_json::json!(false)),
        "{listed}"
    );
    drop(server);
    std::fs::remove_dir_all(&dir).ok();
}
