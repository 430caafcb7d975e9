//! Misbehaving agents over a raw protocol client (real sockets, no SDK): each fault ends in a
//! recorded status with a reason, and the rest of the submission is unaffected.

mod common;

use arena_sdk::protocol::{
    self, Action, Connect, Encoding, EpisodeAction, Frame, Msg, PROTOCOL_VERSION, ResetEpisode, codes,
};
use common::server::{ADMIN, ServerProc};
use common::tmp;
use futures_util::{SinkExt, StreamExt};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

fn frame(msg: &Msg, encoding: Encoding) -> Message {
    match protocol::encode(msg, encoding) {
        Frame::Text(t) => Message::Text(t.into()),
        Frame::Binary(b) => Message::Binary(b.into()),
    }
}

async fn recv(ws: &mut Socket) -> Option<Msg> {
    loop {
        match tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await
            .expect("server answers")
        {
            Some(Ok(Message::Binary(b))) => return Some(protocol::decode_binary(&b).unwrap()),
            Some(Ok(Message::Text(t))) => return Some(protocol::decode_json(&t).unwrap()),
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
            Some(Ok(_)) => {}
        }
    }
}

fn connect_msg(token: &str, mode: &str, submission: &str) -> Msg {
    Msg::Connect(Connect {
        protocol_version: PROTOCOL_VERSION,
        agent_name: "faulty".into(),
        token: token.into(),
        mode: mode.into(),
        benchmark: "g1-smoke".into(),
        submission_id: submission.into(),
        max_batch: 1,
        ..Default::default()
    })
}

/// Connects; retries while the previous session of the submission is still being torn down.
async fn open(url: &str, connect: &Msg, encoding: Encoding) -> (Socket, protocol::Connected) {
    for _ in 0..100 {
        let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        ws.send(frame(connect, encoding)).await.unwrap();
        match recv(&mut ws).await {
            Some(Msg::Connected(c)) => return (ws, c),
            Some(Msg::Error(e)) if e.code == codes::SUBMISSION_BUSY => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("expected connected, got {other:?}"),
        }
    }
    panic!("submission stayed busy")
}

fn action(step: u64, episode: u32, values: Vec<f32>) -> Msg {
    Msg::Action(Action {
        step,
        actions: vec![EpisodeAction {
            episode_id: episode,
            values,
        }],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_are_recorded_and_the_rest_continues() {
    let dir = tmp("faults");
    let server = ServerProc::start(&dir, &["--lanes", "1", "--step-timeout-s", "0.5"]);
    let token = server.team("faulty");
    let url = server.ws_url();
    let enc = Encoding::Binary;
    let (mut ws, connected) = open(&url, &connect_msg(&token, "submission", ""), enc).await;
    let id = connected.submission_id.clone();
    assert_eq!((connected.episodes_total, connected.spec.unwrap().max_batch), (6, 1));
    let mut drops = 0;
    let mut errors: Vec<String> = Vec::new();
    let mut sent_garbage = false;
    loop {
        let Some(msg) = recv(&mut ws).await else {
            panic!("server closed before the submission completed");
        };
        match msg {
            Msg::GetAction(g) => {
                let o = &g.observations[0];
                let (ep, k) = (o.episode_id, o.episode_step);
                let zeros = vec![0.0f32; 29];
                let reply = match (ep, k) {
                    (0, 0) if g.step == 0 => {
                        // The session's first request waits for the agent's set-up: a stall
                        // longer than the step deadline is no timeout here (episode 0 goes on
                        // to fail at step 5 below, not to time out).
                        tokio::time::sleep(Duration::from_millis(900)).await;
                        action(g.step, ep, zeros)
                    }
                    (0, 5) => {
                        let mut a = zeros;
                        a[7] = f32::NAN;
                        action(g.step, ep, a)
                    }
                    (1, 3) => action(g.step, ep, vec![0.0; 28]),
                    (2, 4) => {
                        // Stall past the 0.5 s deadline, then answer late.
                        tokio::time::sleep(Duration::from_millis(900)).await;
                        action(g.step, ep, zeros)
                    }
                    (3, 10) => {
                        // Vanish mid-episode, then come back to the same submission.
                        drop(ws);
                        drops += 1;
                        let (again, c) = open(&url, &connect_msg(&token, "submission", &id), enc).await;
                        ws = again;
                        assert_eq!(c.submission_id, id);
                        continue;
                    }
                    (4, 2) if !sent_garbage => {
                        sent_garbage = true;
                        ws.send(Message::Binary(vec![0xff, 0x01, 0x02].into())).await.unwrap();
                        // An Envelope whose only field (99) this version does not know.
                        ws.send(Message::Binary(vec![0x9a, 0x06, 0x00].into())).await.unwrap();
                        action(g.step, ep, zeros)
                    }
                    (4, 3) => {
                        // An entry for an episode the request does not hold: an Error, and the
                        // episode that is in it goes on.
                        let mut both = action(g.step, ep, zeros.clone());
                        if let Msg::Action(a) = &mut both {
                            a.actions.push(EpisodeAction {
                                episode_id: 99,
                                values: zeros,
                            });
                        }
                        both
                    }
                    (5, 3) => {
                        // Two entries for one episode: it fails, named.
                        let mut twice = action(g.step, ep, zeros.clone());
                        if let Msg::Action(a) = &mut twice {
                            a.actions.push(EpisodeAction {
                                episode_id: ep,
                                values: zeros,
                            });
                        }
                        twice
                    }
                    _ => action(g.step, ep, zeros),
                };
                ws.send(frame(&reply, enc)).await.unwrap();
            }
            Msg::Error(e) => errors.push(e.code),
            Msg::Disconnect(d) => {
                assert_eq!(
                    (d.reason.as_str(), d.submission_status.as_str()),
                    ("submission_complete", "COMPLETED")
                );
                break;
            }
            _ => {}
        }
    }
    assert_eq!(
        drops, 3,
        "the disconnecting episode is re-run until its attempts run out"
    );
    for code in [
        codes::STALE_STEP,
        codes::MALFORMED_MESSAGE,
        codes::UNKNOWN_MESSAGE,
        codes::INVALID_ACTION,
    ] {
        assert!(
            errors.iter().any(|e| e == code),
            "expected an Error {code}, got {errors:?}"
        );
    }
    let (status, results) = server.get(&format!("/api/v1/submissions/{id}/results"), Some(ADMIN));
    assert_eq!(status, 200);
    let eps = results["episodes"].as_array().unwrap();
    let field = |i: usize, k: &str| eps[i][k].as_str().unwrap_or("").to_string();
    assert_eq!(field(0, "status"), "FAILED");
    assert!(
        field(0, "reason").contains("non-finite action for episode 0 (at its step 5; joint"),
        "{}",
        eps[0]
    );
    assert_eq!(field(1, "status"), "FAILED");
    assert!(field(1, "reason").contains("has 28 values, expected 29"), "{}", eps[1]);
    assert_eq!(field(2, "status"), "TIMEOUT");
    assert!(field(2, "reason").contains("step deadline"), "{}", eps[2]);
    assert_eq!(field(3, "status"), "FAILED");
    assert!(field(3, "reason").contains("attempt 3 of 3"), "{}", eps[3]);
    assert_eq!(eps[3]["attempts"], 3);
    assert!(
        ["COMPLETED", "FELL"].contains(&field(4, "status").as_str()),
        "{}",
        eps[4]
    );
    assert_eq!(eps[4]["attempts"], 1);
    assert!(eps[4]["metrics"]["emd"].as_f64().is_some());
    assert_eq!(field(5, "status"), "FAILED");
    assert!(
        field(5, "reason").contains("two actions for episode 5 (at its step 3)"),
        "{}",
        eps[5]
    );
    let (_, sub) = server.get(&format!("/api/v1/submissions/{id}"), Some(ADMIN));
    assert_eq!(sub["status"], "COMPLETED");
    let (_, report) = server.get(&format!("/api/v1/submissions/{id}/report"), Some(ADMIN));
    assert_eq!(report["failed_episodes"].as_array().unwrap().len(), 5);
    assert_eq!(report["episodes"].as_array().unwrap().len(), 6);
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_gets_an_error_and_the_session_continues() {
    let dir = tmp("faults-json");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("json");
    let url = server.ws_url();
    let enc = Encoding::Json;
    let (mut ws, _) = open(&url, &connect_msg(&token, "practice", ""), enc).await;
    let expect_error = async |ws: &mut Socket, text: &str, code: &str| {
        ws.send(Message::Text(text.to_string().into())).await.unwrap();
        match recv(ws).await {
            Some(Msg::Error(e)) => assert_eq!(e.code, code, "{text}: {}", e.message),
            other => panic!("{text}: expected an Error, got {other:?}"),
        }
    };
    expect_error(&mut ws, "{not json", codes::MALFORMED_MESSAGE).await;
    expect_error(&mut ws, r#"{"type":"dance","step":1}"#, codes::UNKNOWN_MESSAGE).await;
    expect_error(&mut ws, r#"{"type":"action","step":"one"}"#, codes::INVALID_MESSAGE).await;
    expect_error(
        &mut ws,
        r#"{"type":"reset_episode","motion":"moonwalk"}"#,
        codes::UNKNOWN_MOTION,
    )
    .await;
    expect_error(
        &mut ws,
        r#"{"type":"connect","protocol_version":1}"#,
        codes::UNEXPECTED_MESSAGE,
    )
    .await;
    // Still alive: a practice episode runs to its end.
    let reset = Msg::ResetEpisode(ResetEpisode {
        motion: "stand".into(),
        start_s: 0.0,
        duration_s: 0.5,
        seed: 1,
    });
    ws.send(frame(&reset, enc)).await.unwrap();
    let end = loop {
        match recv(&mut ws).await.expect("session alive") {
            Msg::GetAction(g) => {
                let a = action(g.step, g.observations[0].episode_id, vec![0.0; 29]);
                ws.send(frame(&a, enc)).await.unwrap();
            }
            Msg::EpisodeEnd(e) => break e,
            _ => {}
        }
    };
    assert_eq!((end.status.as_str(), end.steps), ("completed", 25));
    // An unknown protocol version is refused with a clear Error.
    let (mut ws2, _) = tokio_tungstenite::connect_async(url.as_str()).await.unwrap();
    let text = format!(r#"{{"type":"connect","protocol_version":2,"token":"{token}","benchmark":"g1-smoke"}}"#);
    ws2.send(Message::Text(text.into())).await.unwrap();
    match recv(&mut ws2).await {
        Some(Msg::Error(e)) => {
            assert_eq!(e.code, codes::UNSUPPORTED_VERSION);
            assert!(e.message.contains("version 1"), "{}", e.message);
        }
        other => panic!("expected an Error, got {other:?}"),
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// An action for a step of a lane that has finished its episodes is answered `stale_step`, as a
/// late action for a live lane is. Two lanes run one episode at a time; the lane whose last
/// episode ends first stops while the other still runs, and from then on an action for the
/// stopped lane's steps (its parity) must be refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_for_a_finished_lane_is_a_stale_step() {
    let dir = tmp("faults-finished-lane");
    let server = ServerProc::start(&dir, &["--lanes", "2"]);
    let token = server.team("late");
    let (mut ws, _) = open(&server.ws_url(), &connect_msg(&token, "submission", ""), Encoding::Json).await;
    let mut finished_lane_errors = Vec::new();
    while let Some(msg) = recv(&mut ws).await {
        match msg {
            Msg::GetAction(g) => {
                let answer = Msg::Action(Action {
                    step: g.step,
                    actions: g
                        .observations
                        .iter()
                        .map(|o| EpisodeAction {
                            episode_id: o.episode_id,
                            values: vec![0.0; 29],
                        })
                        .collect(),
                });
                ws.send(frame(&answer, Encoding::Json)).await.unwrap();
                // A step of the other lane that it has not asked for (yet, or ever).
                let other = Msg::Action(Action {
                    step: g.step + 1 + 2 * 100_000,
                    actions: vec![],
                });
                ws.send(frame(&other, Encoding::Json)).await.unwrap();
            }
            Msg::Error(e) if e.code == codes::STALE_STEP && e.message.contains("its lane has finished") => {
                finished_lane_errors.push(e)
            }
            Msg::Disconnect(d) => {
                assert_eq!(d.reason, "submission_complete");
                break;
            }
            _ => {}
        }
    }
    assert!(!finished_lane_errors.is_empty(), "no stale_step naming a finished lane");
    assert!(finished_lane_errors.iter().all(|e| e.step > 200_000));
    std::fs::remove_dir_all(&dir).ok();
}

/// A late action for a step whose episode has ended, sent while the lane is idle (issue 30 §7:
/// it sat in the lane's inbox with no answer), is answered `stale_step`. One lane, a practice
/// episode whose second request is not answered in time: the episode times out, the lane waits
/// for the next practice request, and then the late answer comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_action_after_its_episode_ended_is_a_stale_step() {
    let dir = tmp("faults-late-after-end");
    let server = ServerProc::start(&dir, &["--lanes", "1", "--step-timeout-s", "0.3"]);
    let token = server.team("late");
    let enc = Encoding::Json;
    let (mut ws, _) = open(&server.ws_url(), &connect_msg(&token, "practice", ""), enc).await;
    let reset = Msg::ResetEpisode(ResetEpisode {
        motion: "stand".into(),
        start_s: 0.0,
        duration_s: 1.0,
        seed: 1,
    });
    ws.send(frame(&reset, enc)).await.unwrap();
    let mut withheld = None;
    let end = loop {
        match recv(&mut ws).await.expect("session alive") {
            Msg::GetAction(g) if withheld.is_none() && g.step > 0 => withheld = Some(g),
            Msg::GetAction(g) => {
                let a = action(g.step, g.observations[0].episode_id, vec![0.0; 29]);
                ws.send(frame(&a, enc)).await.unwrap();
            }
            Msg::EpisodeEnd(e) => break e,
            _ => {}
        }
    };
    assert_eq!(end.status, "timeout", "{end:?}");
    let late = withheld.expect("a request was withheld");
    let a = action(late.step, late.observations[0].episode_id, vec![0.0; 29]);
    ws.send(frame(&a, enc)).await.unwrap();
    loop {
        match recv(&mut ws).await {
            Some(Msg::Heartbeat(_)) => {}
            Some(Msg::Error(e)) => {
                assert_eq!(
                    (e.code.as_str(), e.step),
                    (codes::STALE_STEP, late.step),
                    "{}",
                    e.message
                );
                break;
            }
            other => panic!("expected stale_step for step {}, got {other:?}", late.step),
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 30 §2: a submission resumed by another agent shows the last session's agent, and each
/// episode keeps the agent that ran it. The first agent ("faulty", a raw client) plays one
/// episode and drops the connection; the SDK's replay agent ("second") finishes the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_by_another_agent_is_recorded_per_episode() {
    let dir = tmp("faults-resume-agent");
    let server = ServerProc::start(&dir, &["--lanes", "1"]);
    let token = server.team("switchers");
    let (mut ws, connected) = open(&server.ws_url(), &connect_msg(&token, "submission", ""), Encoding::Json).await;
    let id = connected.submission_id.clone();
    loop {
        match recv(&mut ws).await.expect("session alive") {
            Msg::GetAction(g) => {
                let a = action(g.step, g.observations[0].episode_id, vec![0.0; 29]);
                ws.send(frame(&a, Encoding::Json)).await.unwrap();
            }
            Msg::EpisodeEnd(_) => break,
            _ => {}
        }
    }
    drop(ws);
    let url = server.ws_url();
    let (token2, id2) = (token.clone(), id.clone());
    let summary = tokio::task::spawn_blocking(move || {
        let mut config = arena_sdk::ClientConfig::new(
            url,
            &token2,
            arena_sdk::Mode::Submission {
                benchmark: "g1-smoke".into(),
                submission_id: Some(id2),
            },
        );
        config.agent_name = "second".into();
        arena_sdk::client::run_blocking(&config, &mut arena_sdk::agents::ReplayAgent::new(), &mut |_| {})
    })
    .await
    .unwrap()
    .expect("the resume completes");
    assert_eq!(summary.submission_status, "COMPLETED");
    let (_, s) = server.get(&format!("/api/v1/submissions/{id}"), Some(&token));
    assert_eq!(s["agent_name"], "second", "the last session's agent: {s}");
    let (_, results) = server.get(&format!("/api/v1/submissions/{id}/results"), Some(&token));
    let agents: Vec<&str> = results["episodes"]
        .as_array()
        .unwrap_or_else(|| panic!("{results}"))
        .iter()
        .map(|e| e["agent_name"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(agents[0], "faulty", "{agents:?}");
    assert!(agents[1..].iter().all(|a| *a == "second"), "{agents:?}");
    // Issue 39: each session's agent is on record, with how the session ended. The server
    // records the end just after it has sent the agent its Disconnect, so it is waited for.
    let waited = std::time::Instant::now();
    let s = loop {
        let (_, s) = server.get(&format!("/api/v1/submissions/{id}"), Some(&token));
        let ended = s["sessions"]
            .as_array()
            .is_some_and(|all| all.iter().all(|x| !x["outcome"].is_null()));
        if ended || waited.elapsed() > std::time::Duration::from_secs(10) {
            break s;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let sessions: Vec<(String, String, bool)> = s["sessions"]
        .as_array()
        .unwrap_or_else(|| panic!("{s}"))
        .iter()
        .map(|x| {
            (
                x["agent_name"].as_str().unwrap_or("-").to_string(),
                x["outcome"].as_str().unwrap_or("-").to_string(),
                x["started_at"].as_i64() <= x["ended_at"].as_i64(),
            )
        })
        .collect();
    assert_eq!(
        sessions,
        [
            ("faulty".into(), "stopped".into(), true),
            ("second".into(), "completed".into(), true)
        ],
        "{s}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Heartbeats come at the configured interval: over 3 s at 0.25 s, twelve beats. (The server
/// used to compare a shared one-second ticker against the interval, so a tick landing a hair
/// early skipped its beat: half the beats were missing at this interval.) The bounds leave room
/// for a loaded machine; they only fail if beats are skipped systematically.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_come_at_the_configured_interval() {
    let dir = tmp("faults-heartbeat");
    let server = ServerProc::start(&dir, &["--heartbeat-interval-s", "0.25"]);
    let token = server.team("beats");
    let (mut ws, connected) = open(&server.ws_url(), &connect_msg(&token, "practice", ""), Encoding::Json).await;
    assert_eq!(connected.heartbeat_interval_s, 0.25);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    let mut beats = 0;
    while let Ok(Some(Ok(m))) = tokio::time::timeout_at(deadline, ws.next()).await {
        if let Message::Text(t) = m
            && let Ok(Msg::Heartbeat(_)) = protocol::decode_json(&t)
        {
            beats += 1;
        }
    }
    assert!(
        (9..=13).contains(&beats),
        "{beats} heartbeats in 3 s at a 0.25 s interval (12 expected)"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 39: a frame over the 16 MiB limit ends the connection with close code 1009 ("message
/// too big") and a reason with the sizes, not a bare drop (code 1005). The 40 MiB frame is far
/// more than the sockets buffer, so the client is still sending when the server gives up (the
/// server drains the rest before closing; on loopback the close frame also arrives without
/// that, across a network a reset can discard it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_size_frame_is_closed_with_1009_and_the_sizes() {
    let dir = tmp("faults-too-big");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("big");
    let (mut ws, _) = open(&server.ws_url(), &connect_msg(&token, "practice", ""), Encoding::Binary).await;
    let size = 40 << 20;
    let sent = ws.send(Message::Binary(vec![0u8; size].into())).await;
    let close = loop {
        match tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await
            .expect("the server closes the connection")
        {
            Some(Ok(Message::Close(Some(frame)))) => break frame,
            Some(Ok(Message::Close(None))) => panic!(
                "closed without a code (1005); send: {sent:?}; log: {}",
                std::fs::read_to_string(&server.log).unwrap_or_default()
            ),
            Some(Ok(_)) => {}
            other => panic!("expected a close frame, got {other:?}; send: {sent:?}"),
        }
    };
    assert_eq!(u16::from(close.code), 1009, "{close:?}");
    assert!(
        close.reason.contains(&size.to_string()) && close.reason.contains("16777216"),
        "the reason gives both sizes: {close:?}"
    );
    let (status, _) = server.get("/api/v1/health", None);
    assert_eq!(status, 200);
    std::fs::remove_dir_all(&dir).ok();
}

/// A server told to stop (SIGTERM) ends a session with `disconnect {shutdown}`, then closes
/// with code 1001 ("going away") for what reads close codes rather than the protocol.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_server_says_shutdown_and_closes_going_away() {
    let dir = tmp("faults-stopping");
    let mut server = ServerProc::start(&dir, &[]);
    let token = server.team("stopped");
    let (mut ws, _) = open(&server.ws_url(), &connect_msg(&token, "practice", ""), Encoding::Json).await;
    let term = std::process::Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let mut disconnect = None;
    let close = loop {
        match tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await
            .expect("the server closes the connection")
        {
            Some(Ok(Message::Text(t))) => {
                if let Ok(Msg::Disconnect(d)) = protocol::decode_json(&t) {
                    disconnect = Some(d.reason);
                }
            }
            Some(Ok(Message::Close(frame))) => break frame,
            Some(Ok(_)) => {}
            other => panic!("expected a close frame, got {other:?}; disconnect: {disconnect:?}"),
        }
    };
    assert_eq!(disconnect.as_deref(), Some("shutdown"));
    let close = close.expect("a close code");
    assert_eq!(u16::from(close.code), 1001, "{close:?}");
    assert!(
        server.wait_exit(Duration::from_secs(30)).is_some_and(|e| e.success()),
        "the server exits 0 once told"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A second SIGTERM while the first's stop waits for an open request ends the process at once,
/// with 143 (128 + 15, as a shell reports a process it killed), instead of after the grace.
#[test]
fn a_second_signal_ends_the_stop_at_once() {
    use std::io::Write;
    let dir = tmp("faults-second-signal");
    let mut server = ServerProc::start(&dir, &[]);
    // A request whose head never ends: the stop waits for it (up to its grace), once the server
    // has taken the connection up and read those bytes (a connection it has not read from yet
    // is closed at once, and the server would exit 0 before the second signal): a moment
    // before the signal lets it.
    let mut held = std::net::TcpStream::connect(server.addr).unwrap();
    held.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: arena\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let kill = |server: &ServerProc| {
        let term = std::process::Command::new("kill")
            .args(["-TERM", &server.pid().to_string()])
            .status()
            .unwrap();
        assert!(term.success());
    };
    kill(&server);
    // The first signal has been handled once the stop says so.
    let waited = std::time::Instant::now();
    while !server.log_text().contains("SIGTERM: stopping") {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "no stop in the log:\n{}",
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    kill(&server);
    let exit = server.wait_exit(Duration::from_secs(30)).expect("the server exits");
    assert_eq!(exit.code(), Some(143), "log:\n{}", server.log_text());
    assert!(
        server.log_text().contains("SIGTERM again: exiting now"),
        "{}",
        server.log_text()
    );
    drop(held);
    std::fs::remove_dir_all(&dir).ok();
}

/// A GetAction must fit one message (16 MiB): the server limits the batch it announces to as
/// many rows of the benchmark's observation as one message holds in the client's encoding.
/// g1-smoke's rows are 4,717 values (its `reference_goal` group): 4 bytes each in binary
/// frames, up to 16 as JSON text. At the requested 4096 episodes a GetAction would be 77 MB,
/// and the client would drop the connection at every request. A session sent each
/// `reference_goal` row once has rows of 1,028 values, and is limited by those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_is_limited_to_what_one_message_holds() {
    let dir = tmp("faults-batch-fits");
    let server = ServerProc::start(&dir, &["--max-batch", "4096"]);
    let token = server.team("wide");
    let ask = |max_batch: u32, once: bool| {
        let Msg::Connect(mut c) = connect_msg(&token, "practice", "") else {
            unreachable!()
        };
        c.max_batch = max_batch;
        c.reference_goal_once = once;
        Msg::Connect(c)
    };
    let whole = 64 + 29 + 372 + 36 + 8 * 527;
    let cases = [(Encoding::Binary, 4), (Encoding::Json, 16)];
    for ((encoding, bytes), once) in cases.into_iter().flat_map(|c| [(c, false), (c, true)]) {
        let (_ws, connected) = open(&server.ws_url(), &ask(4096, once), encoding).await;
        let spec = connected.spec.unwrap();
        let values: u32 = spec.observations.iter().map(|g| g.size).sum();
        assert_eq!(values as usize, whole, "the layout announced is whole either way");
        assert_eq!(spec.reference_goal_once, once, "{encoding:?}");
        // The rows as sent: each reference_goal row once leaves 7 × 527 values out.
        let row = if once { whole - 7 * 527 } else { whole };
        let fit = spec.max_batch as usize;
        assert!(fit < 4096, "{encoding:?}: {fit}");
        assert!(
            fit * (row * bytes + 64) + (64 << 10) <= 16 << 20,
            "{encoding:?}: {fit} rows do not fit"
        );
        assert!(
            (fit + 1) * (row * bytes + 64) + (64 << 10) > 16 << 20,
            "{encoding:?}: {fit} is not the most"
        );
        // A smaller request stays as asked.
        let (_ws, connected) = open(&server.ws_url(), &ask(8, once), encoding).await;
        assert_eq!(connected.spec.unwrap().max_batch, 8);
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A revealed reference is the whole clip in every EpisodeInfo: the EpisodeStart of a batch is
/// split into messages that each fit a frame. A reference that fits no message is refused before
/// anything runs: in JSON text at connect (no submission is made), in every encoding when the
/// benchmark loads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revealed_references_are_sent_in_messages_that_fit() {
    let dir = tmp("faults-reveal-long");
    let motions = dir.join("motions");
    let benchmarks = dir.join("benchmarks");
    std::fs::create_dir_all(&benchmarks).unwrap();
    common::ok(&common::arena(&[
        "motion",
        "generate",
        "--out",
        motions.to_str().unwrap(),
    ]));
    // The standing clip's first frame held for 400 s (20,000 frames at 50 fps), and for 1200 s.
    let stand = std::fs::read_to_string(motions.join("builtin__stand.csv")).unwrap();
    let first = stand
        .lines()
        .find(|l| l.starts_with(|c: char| c == '-' || c.is_ascii_digit()))
        .unwrap();
    let frames = 20_000;
    for (file, n) in [("long.csv", frames), ("longer.csv", 60_000)] {
        std::fs::write(motions.join(file), format!("{first}\n").repeat(n)).unwrap();
        let name = file.trim_end_matches(".csv");
        std::fs::write(
            benchmarks.join(format!("reveal-{name}.toml")),
            format!(
                r#"name = "reveal-{name}"
version = 1
description = "Short windows of a long clip whose whole reference is revealed."
task = "tracking"
[motions]
files = ["{file}"]
fps = 50
[episodes]
window = {{ length_s = 0.1, stride_s = 60.0 }}
[observations]
reveal_reference = true
[metrics]
list = ["mpjpe_g", "success"]
[ranking]
primary = "mpjpe_g"
"#
            ),
        )
        .unwrap();
    }
    let dirs = [
        "--benchmarks-dir",
        benchmarks.to_str().unwrap(),
        "--motions-root",
        motions.to_str().unwrap(),
        "--lanes",
        "1",
    ];
    let server = ServerProc::start(&dir.join("data"), &dirs);
    let token = server.team("revealing");
    let connect = |benchmark: &str| {
        Msg::Connect(Connect {
            protocol_version: PROTOCOL_VERSION,
            agent_name: "reader".into(),
            token: token.clone(),
            mode: "submission".into(),
            benchmark: benchmark.into(),
            max_batch: 64,
            ..Default::default()
        })
    };
    let refusal = |encoding: Encoding, benchmark: &str| {
        let msg = connect(benchmark);
        let url = server.ws_url();
        async move {
            let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
            ws.send(frame(&msg, encoding)).await.unwrap();
            match recv(&mut ws).await {
                Some(Msg::Error(e)) => e,
                other => panic!("expected a refusal, got {other:?}"),
            }
        }
    };

    // Binary frames: 5.8 MB a reference, two a message.
    let (mut ws, connected) = open(&server.ws_url(), &connect("reveal-long"), Encoding::Binary).await;
    let episodes = connected.episodes_total as usize;
    assert_eq!(episodes, 7, "windows at 0, 60, …, 360 s");
    let mut starts: Vec<Vec<protocol::EpisodeInfo>> = Vec::new();
    loop {
        match recv(&mut ws).await.expect("the session goes on") {
            Msg::EpisodeStart(s) => starts.push(s.episodes),
            Msg::GetAction(g) => {
                let actions = g
                    .observations
                    .iter()
                    .map(|o| EpisodeAction {
                        episode_id: o.episode_id,
                        values: vec![0.0; 29],
                    })
                    .collect();
                let reply = Msg::Action(Action { step: g.step, actions });
                ws.send(frame(&reply, Encoding::Binary)).await.unwrap();
            }
            Msg::Disconnect(d) => {
                assert_eq!(d.reason, "submission_complete");
                break;
            }
            _ => {}
        }
    }
    assert_eq!(starts.iter().map(Vec::len).collect::<Vec<_>>(), vec![2, 2, 2, 1]);
    for info in starts.iter().flatten() {
        let reference = info.reference.as_ref().expect("revealed");
        assert_eq!(reference.frames as usize, frames);
        assert_eq!(reference.qpos.len(), frames * 36);
    }
    let (_, results) = server.get(
        &format!("/api/v1/submissions/{}/results", connected.submission_id),
        Some(ADMIN),
    );
    let eps = results["episodes"].as_array().unwrap();
    assert_eq!(eps.len(), episodes);
    assert!(eps.iter().all(|e| e["status"] == "COMPLETED"), "{results}");

    // JSON text: 18 MB a reference. Refused before a submission is made.
    let e = refusal(Encoding::Json, "reveal-long").await;
    assert_eq!(e.code, codes::INVALID_MESSAGE);
    assert!(
        e.message.contains("20000 frames") && e.message.contains("connect with binary frames"),
        "{}",
        e.message
    );
    let (_, listed) = server.get("/api/v1/submissions", Some(&token));
    assert_eq!(listed["submissions"].as_array().map(Vec::len), Some(1), "{listed}");

    // 1200 s fits no message in any encoding: the benchmark is unavailable, the log says why.
    let e = refusal(Encoding::Binary, "reveal-longer").await;
    assert_eq!(e.code, codes::BENCHMARK_UNAVAILABLE, "{}", e.message);
    let log = server.log_text();
    assert!(
        log.contains("observations.reveal_reference: motion longer's reference (60000 frames)"),
        "{log}"
    );
    // The organiser's check says the same before any server loads it.
    let validate = |name: &str| {
        let file = benchmarks.join(format!("{name}.toml"));
        let out = common::arena(&[
            "bench",
            "validate",
            file.to_str().unwrap(),
            "--motions-root",
            motions.to_str().unwrap(),
        ]);
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, err) = validate("reveal-longer");
    assert!(
        !ok && err.contains("reference (60000 frames)") && err.contains("at most 58025 frames"),
        "{err}"
    );
    let (ok, err) = validate("reveal-long");
    assert!(ok, "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `connect.agent_name` is checked as a REST agent name is: a NUL or an over-long name is
/// refused with `invalid_message` naming the field, before any submission is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_with_a_bad_agent_name_is_refused() {
    let dir = tmp("faults-agent-name");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("named");
    for (name, part) in [
        ("nul\u{0}".to_string(), "connect.agent_name: control characters"),
        ("a".repeat(129), "connect.agent_name: expected at most 128 characters"),
    ] {
        let Msg::Connect(mut c) = connect_msg(&token, "submission", "") else {
            unreachable!()
        };
        c.agent_name = name;
        let (mut ws, _) = tokio_tungstenite::connect_async(server.ws_url()).await.unwrap();
        ws.send(frame(&Msg::Connect(c), Encoding::Binary)).await.unwrap();
        match recv(&mut ws).await {
            Some(Msg::Error(e)) => {
                assert_eq!(e.code, codes::INVALID_MESSAGE);
                assert!(e.message.contains(part), "{}", e.message);
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    let (_, listed) = server.get("/api/v1/submissions", Some(&token));
    assert_eq!(listed["submissions"].as_array().map(Vec::len), Some(0), "{listed}");
    // A good name is kept trimmed, as over REST.
    let Msg::Connect(mut c) = connect_msg(&token, "submission", "") else {
        unreachable!()
    };
    c.agent_name = "  spaced  ".into();
    let (_ws, connected) = open(&server.ws_url(), &Msg::Connect(c), Encoding::Binary).await;
    let (_, s) = server.get(
        &format!("/api/v1/submissions/{}", connected.submission_id),
        Some(&token),
    );
    assert_eq!(s["agent_name"], "spaced", "{s}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A client that stops reading (its socket's buffers full of the server's answers) and falls
/// silent: the session ends at the silence limit, and the connection is dropped a limit later
/// instead of being held, with its queue, for as long as the client keeps it open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_disconnected() {
    let dir = tmp("faults-no-reading");
    let server = ServerProc::start(&dir, &["--heartbeat-interval-s", "0.5", "--heartbeat-timeout-s", "1"]);
    let token = server.team("deaf");
    let (mut ws, _) = open(&server.ws_url(), &connect_msg(&token, "practice", ""), Encoding::Binary).await;
    // Each undecodable frame is answered with an Error: far more than the socket buffers hold.
    let garbage = Message::Binary(vec![0xff, 0x01, 0x02].into());
    for _ in 0..200_000 {
        ws.feed(garbage.clone()).await.unwrap();
    }
    ws.flush().await.unwrap();
    // Neither reading nor sending now.
    let closed_in_log = std::time::Instant::now();
    loop {
        let log = server.log_text();
        if log.contains("an agent took no frame for") || log.contains("read nothing for") {
            break;
        }
        assert!(
            closed_in_log.elapsed() < Duration::from_secs(30),
            "the server still holds the connection:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // What the socket held is still readable; then the connection ends.
    let drained = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    assert!(drained.is_ok(), "the connection stayed open");
    std::fs::remove_dir_all(&dir).ok();
}

/// The same over gRPC, where the HTTP/2 layer stops polling the response stream of a client
/// that reads nothing: messages left untaken for the silence limit close the connection.
/// Before, the stream, its session's queue and the connection stayed until the client left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_client_that_stops_reading_is_disconnected() {
    use arena_sdk::protocol::Envelope;
    use arena_sdk::protocol::agent_gateway_client::AgentGatewayClient;
    let dir = tmp("faults-no-reading-grpc");
    let server = ServerProc::start(&dir, &["--heartbeat-interval-s", "0.5", "--heartbeat-timeout-s", "1"]);
    let token = server.team("deaf");
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = AgentGatewayClient::new(channel);
    // A Connect, then envelopes with no message, each answered with an Error: far more than
    // the flow-control windows and the socket buffers hold.
    let connect = Envelope {
        msg: Some(connect_msg(&token, "practice", "")),
    };
    let empties = std::iter::repeat_with(|| Envelope { msg: None }).take(200_000);
    let outbound = futures_util::stream::iter(std::iter::once(connect).chain(empties));
    let mut responses = client.session(outbound).await.unwrap().into_inner();
    // Reading nothing now.
    let noticed = std::time::Instant::now();
    loop {
        let log = server.log_text();
        if log.contains("a gRPC agent took no message for") {
            break;
        }
        assert!(
            noticed.elapsed() < Duration::from_secs(30),
            "the server still holds the stream:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // What was on its way is still readable; then the stream fails with the connection. (Had
    // the server waited, the client would now read all that waits and the session's
    // Disconnect, and the stream would end normally.)
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match responses.message().await {
                Ok(Some(Envelope {
                    msg: Some(Msg::Disconnect(d)),
                })) => return Err(format!("the whole queue was kept and delivered: {d:?}")),
                Ok(Some(_)) => {}
                Ok(None) => return Err("the stream ended normally".to_string()),
                Err(status) => return Ok(status),
            }
        }
    })
    .await
    .expect("the stream stayed open");
    let status = ended.unwrap();
    eprintln!("the stream ended with {status:?}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Refusals that quote what the client sent quote at most a little of it: a motion name of a
/// million control bytes got an Error of 5 MB (escaped), and at 16 MiB one over the frame limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_quote_a_little_of_what_was_sent() {
    let dir = tmp("faults-quoted");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("verbose");
    let (mut ws, _) = open(&server.ws_url(), &connect_msg(&token, "practice", ""), Encoding::Binary).await;
    let reset = Msg::ResetEpisode(ResetEpisode {
        motion: "\u{1}".repeat(1 << 20),
        ..Default::default()
    });
    ws.send(frame(&reset, Encoding::Binary)).await.unwrap();
    loop {
        match recv(&mut ws).await.expect("the session goes on") {
            Msg::Error(e) => {
                assert_eq!(e.code, codes::UNKNOWN_MOTION);
                assert!(
                    e.message.chars().count() <= protocol::MAX_ERROR_MESSAGE_CHARS,
                    "{}",
                    e.message.len()
                );
                assert!(e.message.contains("(1048576 characters)"), "{}", e.message);
                assert!(e.message.contains("it has: stand"), "{}", e.message);
                break;
            }
            Msg::Heartbeat(_) => {}
            other => panic!("expected the refusal, got {}", protocol::type_name(&other)),
        }
    }
    assert!(protocol::clip_message("x".repeat(5000)).ends_with("(5000 characters in all)"));
    std::fs::remove_dir_all(&dir).ok();
}

/// Practice episodes asked for wait for a slot up to a bound; beyond it `reset_episode` is
/// refused (uses no episode id) instead of queueing without end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn practice_requests_wait_up_to_a_bound() {
    let dir = tmp("faults-practice-flood");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("eager");
    let (mut ws, _) = open(&server.ws_url(), &connect_msg(&token, "practice", ""), Encoding::Binary).await;
    let reset = Msg::ResetEpisode(ResetEpisode {
        motion: "stand".into(),
        duration_s: 1.0,
        ..Default::default()
    });
    let asked = arena_server::gateway::PRACTICE_WAITING + 50;
    for _ in 0..asked {
        ws.feed(frame(&reset, Encoding::Binary)).await.unwrap();
    }
    ws.flush().await.unwrap();
    loop {
        match recv(&mut ws).await.expect("the session goes on") {
            Msg::Error(e) if e.message.contains("already waiting to start") => {
                assert_eq!(e.code, codes::INVALID_MESSAGE);
                break;
            }
            Msg::Error(e) => panic!("{}: {}", e.code, e.message),
            _ => {}
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The server's memory for a client that floods it with frames each answered by an error and
/// reads nothing is bounded: once enough answers wait, the server reads no more of its frames
/// (before, 400,000 such frames grew the server by 190 MB in 6 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_client_that_reads_nothing_is_held_back() {
    let dir = tmp("faults-flood");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("flood");
    let rss_kb = || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap().to_string();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap()
    };
    let (mut ws, _) = open(&server.ws_url(), &connect_msg(&token, "practice", ""), Encoding::Binary).await;
    let before = rss_kb();
    let garbage = Message::Binary(vec![0xff, 0x01, 0x02].into());
    let mut sent = 0u64;
    // The sends block once the server stops reading: stop after a quiet second.
    let _ = tokio::time::timeout(Duration::from_secs(20), async {
        while sent < 5_000_000 {
            match tokio::time::timeout(Duration::from_secs(1), ws.feed(garbage.clone())).await {
                Ok(Ok(())) => sent += 1,
                _ => break,
            }
        }
    })
    .await;
    let grown_mb = (rss_kb().saturating_sub(before)) / 1024;
    // (How many frames the sockets' buffers take before the sends block depends on the kernel:
    // what is checked is the server's memory.)
    assert!(sent > 20_000, "only {sent} frames went out");
    assert!(grown_mb < 100, "{sent} frames grew the server by {grown_mb} MB");
    std::fs::remove_dir_all(&dir).ok();
}

/// A session's first frame is its connect, decoded before its token is checked: one over the
/// opening limit (256 KiB) is refused undecoded, and the server stays up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_frame_over_the_opening_limit_is_refused_undecoded() {
    let dir = tmp("faults-opening");
    let server = ServerProc::start(&dir, &[]);
    for encoding in [Encoding::Json, Encoding::Binary] {
        let (mut ws, _) = tokio_tungstenite::connect_async(server.ws_url()).await.unwrap();
        let size = protocol::MAX_OPENING_MESSAGE_BYTES + 1;
        let big = match encoding {
            Encoding::Json => Message::Text(format!("[{}0]", "0,".repeat((size - 2) / 2)).into()),
            Encoding::Binary => Message::Binary(vec![0x12u8; size].into()),
        };
        ws.send(big).await.unwrap();
        let Some(Msg::Error(e)) = recv(&mut ws).await else {
            panic!("{encoding:?}: no error")
        };
        assert_eq!(e.code, codes::MALFORMED_MESSAGE, "{encoding:?}: {e:?}");
        assert!(
            e.message.contains("first message") && e.message.contains("262144"),
            "{encoding:?}: {e:?}"
        );
    }
    let (status, _) = server.get("/api/v1/health", None);
    assert_eq!(status, 200);
    std::fs::remove_dir_all(&dir).ok();
}

/// Over WebSocket the same from the frame headers: a client whose first frame announces 8 MiB
/// and sends 64 KiB of it, and one whose first message comes in fragments that together pass
/// the limit, are refused at once. Before, tungstenite read a message whole (up to 16 MiB)
/// before it was measured: these clients, which never send the rest, heard nothing until the
/// connect deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_connect_announced_over_the_opening_limit_is_refused_from_its_headers() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tmp("faults-opening-headers");
    let server = ServerProc::start(&dir, &[]);
    // A client frame's header (masked with a zero key, so the payload goes as it is).
    let header = |fin: bool, opcode: u8, len: u64| {
        let mut h = vec![if fin { 0x80 } else { 0 } | opcode, 0x80 | 127];
        h.extend(len.to_be_bytes());
        h.extend([0u8; 4]);
        h
    };
    let limit = protocol::MAX_OPENING_MESSAGE_BYTES as u64;
    let one_frame = [header(true, 2, 8 << 20), vec![0x12; 64 << 10]].concat();
    let fragments = [
        header(false, 1, limit - 10),
        vec![b' '; (limit - 10) as usize],
        header(false, 0, 11),
    ]
    .concat();
    // A ping may carry 125 bytes; tungstenite measured it only once all of it had come.
    let big_ping = [header(true, 9, 16 << 20), vec![0u8; 64 << 10]].concat();
    for (case, opening, expected) in [
        ("one frame", one_frame, "first message is 8388608 bytes"),
        ("fragments", fragments, "first message is at least 262145 bytes"),
        ("a ping", big_ping, "a control frame of 16777216 bytes"),
    ] {
        let mut tcp = tokio::net::TcpStream::connect(&server.addr).await.unwrap();
        let request = format!(
            "GET /api/v1/agent HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
            server.addr
        );
        tcp.write_all(request.as_bytes()).await.unwrap();
        tcp.write_all(&opening).await.unwrap();
        // The socket stays open: the rest never comes.
        let reply = tokio::time::timeout(Duration::from_secs(20), async {
            let mut bytes = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&bytes[..end]).to_string();
                    assert!(head.starts_with("HTTP/1.1 101"), "{case}: {head}");
                    let frames = &bytes[end + 4..];
                    // The server's first frame: unmasked, its length in 7 or 7+16 bits.
                    if frames.len() >= 4 {
                        let (len, start) = match frames[1] & 0x7f {
                            126 => (u16::from_be_bytes([frames[2], frames[3]]) as usize, 4),
                            n => (n as usize, 2),
                        };
                        if frames.len() >= start + len {
                            return String::from_utf8(frames[start..start + len].to_vec()).unwrap();
                        }
                    }
                }
                let n = tcp.read(&mut chunk).await.unwrap();
                assert!(n > 0, "{case}: the connection closed without a reply");
                bytes.extend_from_slice(&chunk[..n]);
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{case}: no reply while the rest of the message was awaited"));
        let Ok(Msg::Error(e)) = protocol::decode_json(&reply) else {
            panic!("{case}: expected an error, got {reply}")
        };
        assert_eq!(e.code, codes::MALFORMED_MESSAGE, "{case}: {e:?}");
        assert!(e.message.contains(expected), "{case}: {e:?}");
    }
    let (status, _) = server.get("/api/v1/health", None);
    assert_eq!(status, 200);
    std::fs::remove_dir_all(&dir).ok();
}

/// Over gRPC the opening limit is read from the first message's 5-byte prefix: a client that
/// announces 8 MiB and sends 64 KiB of it is refused at once. Before, tonic buffered a message
/// whole before the codec measured it, so the server held what an unauthenticated client sent,
/// up to 16 MiB a stream, and this client (which never sends the rest) heard nothing until the
/// connect deadline, 30 s, ended it as `unexpected_message`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_connect_announced_over_the_opening_limit_is_refused_from_its_prefix() {
    use arena_sdk::protocol::Envelope;
    use http_body_util::{BodyExt, StreamBody};
    use hyper::body::{Bytes, Frame};
    use prost::Message as _;
    let dir = tmp("faults-opening-grpc");
    let server = ServerProc::start(&dir, &[]);
    let tcp = tokio::net::TcpStream::connect(&server.addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(connection);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::convert::Infallible>>(1);
    let announced: u32 = 8 << 20;
    let mut start = vec![0u8];
    start.extend(announced.to_be_bytes());
    start.extend(vec![0x12u8; 64 << 10]);
    tx.send(Ok(Frame::data(Bytes::from(start)))).await.unwrap();
    let request = hyper::Request::post(format!("http://{}/arena.v1.AgentGateway/Session", server.addr))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx)))
        .unwrap();
    // `tx` stays open: the rest of the message never comes.
    let reply = tokio::time::timeout(Duration::from_secs(20), async {
        let mut body = sender.send_request(request).await.unwrap().into_body();
        let mut bytes = Vec::new();
        loop {
            if bytes.len() >= 5 {
                let len = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
                if bytes.len() >= 5 + len {
                    return Envelope::decode(&bytes[5..5 + len]).unwrap();
                }
            }
            match body.frame().await {
                Some(Ok(frame)) => bytes.extend_from_slice(frame.data_ref().map(|d| &d[..]).unwrap_or_default()),
                other => panic!("the stream ended without a message: {other:?}"),
            }
        }
    })
    .await
    .expect("no reply while the rest of the message was awaited");
    let Some(Msg::Error(e)) = reply.msg else {
        panic!("expected an error, got {reply:?}")
    };
    assert_eq!(e.code, codes::MALFORMED_MESSAGE, "{e:?}");
    assert!(
        e.message.contains("first message is 8388608 bytes") && e.message.contains("262144"),
        "{e:?}"
    );
    drop(tx);
    let (status, _) = server.get("/api/v1/health", None);
    assert_eq!(status, 200);
    std::fs::remove_dir_all(&dir).ok();
}

/// Actions nobody asked for wait for their lane up to a bound (64): each one past it is answered
/// `stale_step` at once and dropped, where the server kept every one until the lane looked. Every
/// Action gets exactly one answer either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_sent_unasked_wait_up_to_a_bound() {
    let dir = tmp("faults-unasked");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("flood");
    let (ws, _) = open(&server.ws_url(), &connect_msg(&token, "practice", ""), Encoding::Binary).await;
    let (mut tx, mut rx) = ws.split();
    let n: u64 = 2000;
    // No episode was asked for: every step is one the lane has not asked for.
    let sending = tokio::spawn(async move {
        for i in 0..n {
            tx.feed(frame(&action(1_000_000 + i, 0, vec![0.0; 29]), Encoding::Binary))
                .await
                .unwrap();
        }
        tx.flush().await.unwrap();
        tx
    });
    let (mut answered, mut over_the_bound) = (0, 0);
    while answered < n {
        let next = tokio::time::timeout(Duration::from_secs(30), rx.next())
            .await
            .unwrap_or_else(|_| panic!("{answered} of {n} actions answered"));
        let Some(Ok(Message::Binary(b))) = next else { continue };
        if let Msg::Error(e) = protocol::decode_binary(&b).unwrap() {
            assert_eq!(e.code, codes::STALE_STEP, "{e:?}");
            answered += 1;
            if e.message.contains("Actions already wait for its lane") {
                over_the_bound += 1;
            }
        }
    }
    let _tx = sending.await.unwrap();
    assert!(over_the_bound > 0, "all {n} actions were kept for the lane");
    assert!(over_the_bound <= n - 64, "{over_the_bound}: fewer than 64 were kept");
    let (status, _) = server.get("/api/v1/health", None);
    assert_eq!(status, 200);
    std::fs::remove_dir_all(&dir).ok();
}

/// A resume refused as busy (the submission's earlier session still held) is tried again, not
/// counted against `max_reconnects`: with none allowed, the SDK waits for the holder to go and
/// then runs the submission.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_waits_out_a_busy_submission() {
    let dir = tmp("faults-busy-wait");
    let server = ServerProc::start(&dir, &["--lanes", "1"]);
    let token = server.team("waiters");
    let (ws, connected) = open(&server.ws_url(), &connect_msg(&token, "submission", ""), Encoding::Json).await;
    let id = connected.submission_id.clone();
    let (url, id2) = (server.ws_url(), id.clone());
    let resumed = tokio::task::spawn_blocking(move || {
        let mut config = arena_sdk::ClientConfig::new(
            url,
            &token,
            arena_sdk::Mode::Submission {
                benchmark: "g1-smoke".into(),
                submission_id: Some(id2),
            },
        );
        config.max_reconnects = 0;
        config.initial_backoff = Duration::from_millis(20);
        config.max_backoff = Duration::from_millis(100);
        let mut busy = 0;
        let summary =
            arena_sdk::client::run_blocking(&config, &mut arena_sdk::agents::ReplayAgent::new(), &mut |event| {
                if let arena_sdk::ClientEvent::ServerError(e) = event {
                    busy += usize::from(e.code == codes::SUBMISSION_BUSY);
                }
            });
        (summary, busy)
    });
    // The holder goes after a while without a word (its connection dropped).
    tokio::time::sleep(Duration::from_millis(800)).await;
    drop(ws);
    let (summary, busy) = resumed.await.unwrap();
    let summary = summary.expect("the resume waits for the busy submission and completes it");
    assert_eq!(summary.submission_status, "COMPLETED");
    assert!(busy >= 2, "refused as busy {busy} times");
    std::fs::remove_dir_all(&dir).ok();
}

/// Connects that say two things at once are refused with the reason, and a resume refused as
/// busy changes nothing: a second agent asking for a running submission does not rename it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contradictory_or_busy_connects_change_nothing() {
    let dir = tmp("faults-contradictory");
    let server = ServerProc::start(&dir, &["--lanes", "1"]);
    let token = server.team("contrary");
    let (mut ws, connected) = open(&server.ws_url(), &connect_msg(&token, "submission", ""), Encoding::Json).await;
    let id = connected.submission_id.clone();
    let refused = |connect: Msg| {
        let url = server.ws_url();
        async move {
            let (mut other, _) = tokio_tungstenite::connect_async(url).await.unwrap();
            other.send(frame(&connect, Encoding::Json)).await.unwrap();
            match recv(&mut other).await {
                Some(Msg::Error(e)) => e,
                got => panic!("expected a refusal, got {got:?}"),
            }
        }
    };
    // The session above holds the submission: another agent's resume is busy, and renames nothing.
    let mut second = connect_msg(&token, "submission", &id);
    if let Msg::Connect(c) = &mut second {
        c.agent_name = "second".into();
    }
    let e = refused(second).await;
    assert_eq!(e.code, codes::SUBMISSION_BUSY, "{e:?}");
    let (_, s) = server.get(&format!("/api/v1/submissions/{id}"), Some(&token));
    assert_eq!(
        s["agent_name"], "faulty",
        "a refused resume renamed the submission: {s}"
    );
    // A practice session naming a submission, a resume naming another benchmark.
    let e = refused(connect_msg(&token, "practice", &id)).await;
    assert_eq!(e.code, codes::INVALID_MESSAGE, "{e:?}");
    assert!(e.message.contains("practice runs no submission"), "{e:?}");
    let mut other_benchmark = connect_msg(&token, "submission", &id);
    if let Msg::Connect(c) = &mut other_benchmark {
        c.benchmark = "g1-smoke-robot".into();
    }
    let e = refused(other_benchmark).await;
    assert_eq!(e.code, codes::INVALID_MESSAGE, "{e:?}");
    assert!(e.message.contains("runs benchmark \"g1-smoke\""), "{e:?}");
    // The first session runs on.
    ws.send(frame(&Msg::Heartbeat(Default::default()), Encoding::Json))
        .await
        .unwrap();
    loop {
        match recv(&mut ws).await.expect("session alive") {
            Msg::GetAction(g) => {
                let a = action(g.step, g.observations[0].episode_id, vec![0.0; 29]);
                ws.send(frame(&a, Encoding::Json)).await.unwrap();
            }
            Msg::EpisodeEnd(_) => break,
            _ => {}
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A team runs at most `max_sessions_per_team` sessions at once: one more is refused
/// `rate_limited` with the limit and when to retry, and a place comes back when a session ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_runs_at_most_its_sessions_at_once() {
    let dir = tmp("faults-team-sessions");
    let server = ServerProc::start(&dir, &["--max-sessions-per-team", "2"]);
    let token = server.team("many");
    let practice = connect_msg(&token, "practice", "");
    let (first, _) = open(&server.ws_url(), &practice, Encoding::Json).await;
    let (_second, _) = open(&server.ws_url(), &practice, Encoding::Json).await;
    let third = || async {
        let (mut ws, _) = tokio_tungstenite::connect_async(server.ws_url()).await.unwrap();
        ws.send(frame(&practice, Encoding::Json)).await.unwrap();
        (recv(&mut ws).await, ws)
    };
    let (answer, _) = third().await;
    let Some(Msg::Error(e)) = answer else {
        panic!("a third session was not refused: {answer:?}")
    };
    assert_eq!(e.code, codes::RATE_LIMITED, "{e:?}");
    assert_eq!(e.limit, 2, "{e:?}");
    assert!(
        !e.resets_at.is_empty() && e.message.contains("max_sessions_per_team"),
        "{e:?}"
    );
    // A submission's Connect at the cap is refused before anything is created: the SDKs retry
    // `rate_limited`, and each refusal left a submission counted against the quota.
    for _ in 0..3 {
        let (mut ws, _) = tokio_tungstenite::connect_async(server.ws_url()).await.unwrap();
        ws.send(frame(&connect_msg(&token, "submission", ""), Encoding::Json))
            .await
            .unwrap();
        let answer = recv(&mut ws).await;
        assert!(
            matches!(&answer, Some(Msg::Error(e)) if e.code == codes::RATE_LIMITED),
            "{answer:?}"
        );
    }
    let (_, listed) = server.get("/api/v1/submissions", Some(&token));
    assert_eq!(listed["submissions"].as_array().map(Vec::len), Some(0), "{listed}");
    // Another team is counted apart.
    let other = server.team("other");
    let (_other, _) = open(&server.ws_url(), &connect_msg(&other, "practice", ""), Encoding::Json).await;
    // A session that ends gives its place back (once the server has seen it end).
    drop(first);
    let waited = std::time::Instant::now();
    loop {
        match third().await {
            (Some(Msg::Connected(_)), _) => break,
            (Some(Msg::Error(e)), _) if e.code == codes::RATE_LIMITED => {
                assert!(waited.elapsed() < Duration::from_secs(30), "no place came back: {e:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (other, _) => panic!("{other:?}"),
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A list of more entries than any batch holds is refused before it is built, in either
/// encoding and whatever the message (a client's action, or a get_action only a server sends),
/// and the session goes on (the next message is answered as usual).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_over_a_batch_is_refused_undecoded() {
    let dir = tmp("faults-entries");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("entries");
    let over_action = Msg::Action(Action {
        step: 1,
        actions: vec![EpisodeAction::default(); protocol::MAX_BATCH + 1],
    });
    let over_request = Msg::GetAction(protocol::GetAction {
        step: 1,
        observations: vec![protocol::EpisodeObservation::default(); protocol::MAX_BATCH + 1],
    });
    for (encoding, over) in [
        (Encoding::Binary, &over_action),
        (Encoding::Json, &over_action),
        (Encoding::Binary, &over_request),
        (Encoding::Json, &over_request),
    ] {
        let (mut ws, _) = open(&server.ws_url(), &connect_msg(&token, "practice", ""), encoding).await;
        ws.send(frame(over, encoding)).await.unwrap();
        match recv(&mut ws).await {
            Some(Msg::Error(e)) => {
                assert_eq!(e.code, codes::INVALID_MESSAGE, "{encoding:?}: {e:?}");
                assert!(e.message.contains("4096"), "{encoding:?}: {e:?}");
            }
            got => panic!("{encoding:?}: expected a refusal, got {got:?}"),
        }
        // One entry is decoded and reaches the lane, which never asked for this step.
        ws.send(frame(&action(5, 0, vec![0.0; 29]), encoding)).await.unwrap();
        match recv(&mut ws).await {
            Some(Msg::Error(e)) => assert_eq!(e.code, codes::STALE_STEP, "{encoding:?}: {e:?}"),
            got => panic!("{encoding:?}: expected stale_step, got {got:?}"),
        }
    }
    // gRPC: the stream is not read past the refused message, so the session ends saying why.
    use arena_sdk::protocol::Envelope;
    use arena_sdk::protocol::agent_gateway_client::AgentGatewayClient;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let over = Msg::Action(Action {
        step: 1,
        actions: vec![EpisodeAction::default(); protocol::MAX_BATCH + 1],
    });
    let outbound =
        futures_util::stream::iter([connect_msg(&token, "practice", ""), over].map(|msg| Envelope { msg: Some(msg) }));
    let mut responses = AgentGatewayClient::new(channel)
        .session(outbound)
        .await
        .unwrap()
        .into_inner();
    let mut heard = Vec::new();
    while let Ok(Some(Envelope { msg: Some(msg) })) = tokio::time::timeout(Duration::from_secs(30), responses.message())
        .await
        .expect("the server answers")
    {
        heard.push(msg);
    }
    let refusal = heard.iter().find_map(|m| match m {
        Msg::Error(e) => Some(e),
        _ => None,
    });
    let refusal = refusal.unwrap_or_else(|| panic!("no refusal in {heard:?}"));
    assert_eq!(refusal.code, codes::INVALID_MESSAGE, "{refusal:?}");
    assert!(refusal.message.contains("4097 entries"), "{refusal:?}");
    assert!(
        matches!(heard.last(), Some(Msg::Disconnect(d)) if d.reason == codes::INVALID_MESSAGE),
        "{heard:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// When the request an agent missed held every episode left, the submission completes at once:
/// the lane waiting for a sign of life after the missed deadline sees nothing left to claim.
/// Before, it waited for the agent's silence to end the session (the heartbeat timeout, 60 s
/// by default), the submission RUNNING meanwhile with every episode final.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missed_request_that_ends_every_episode_completes_the_submission() {
    let dir = tmp("faults-missed-last");
    let server = ServerProc::start(
        &dir,
        &["--lanes", "1", "--step-timeout-s", "0.2", "--heartbeat-timeout-s", "60"],
    );
    let token = server.team("stalled");
    let enc = Encoding::Binary;
    let mut connect = connect_msg(&token, "submission", "");
    if let Msg::Connect(c) = &mut connect {
        c.max_batch = 6;
    }
    let (mut ws, connected) = open(&server.ws_url(), &connect, enc).await;
    let first = loop {
        if let Some(Msg::GetAction(g)) = recv(&mut ws).await {
            break g;
        }
    };
    assert_eq!(first.observations.len(), 6);
    let all: Vec<(u32, Vec<f32>)> = first
        .observations
        .iter()
        .map(|o| (o.episode_id, vec![0.0; 29]))
        .collect();
    let answer = Msg::Action(protocol::Action {
        step: first.step,
        actions: all
            .into_iter()
            .map(|(episode_id, values)| protocol::EpisodeAction { episode_id, values })
            .collect(),
    });
    ws.send(frame(&answer, enc)).await.unwrap();
    // Silent from now on: the next request is missed, ending all six.
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match recv(&mut ws).await {
                Some(Msg::Disconnect(d)) => return d,
                None => panic!("closed without a disconnect"),
                Some(_) => {}
            }
        }
    })
    .await
    .expect("the submission completed before the heartbeat timeout");
    assert_eq!(
        (ended.reason.as_str(), ended.episodes_scored + ended.episodes_failed),
        ("submission_complete", 6)
    );
    let (_, sub) = server.get(&format!("/api/v1/submissions/{}", connected.submission_id), Some(ADMIN));
    assert_eq!(sub["status"], "COMPLETED", "{sub}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A connection that dies without the server seeing it (a NAT's or Wi-Fi's drop sends no FIN):
/// its client's next connect names the session it lost (`previous_session_id`) and takes the
/// session's place at once, and the episodes the old connection was running are re-run as a
/// lost connection's (attempt 2). Before, the connect was `submission_busy` until the old
/// session's deadlines ran out, which ended those episodes as timeouts, for good (a network
/// walkthrough: a 3 s stall lost all 6 episodes). A connect naming another session is still
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_naming_its_lost_session_takes_its_place() {
    let dir = tmp("faults-take-over");
    let server = ServerProc::start(&dir, &["--lanes", "1", "--step-timeout-s", "20"]);
    let token = server.team("roaming");
    let enc = Encoding::Binary;
    let (mut lost, first) = open(&server.ws_url(), &connect_msg(&token, "submission", ""), enc).await;
    let asked = loop {
        if let Some(Msg::GetAction(g)) = recv(&mut lost).await {
            break g;
        }
    };
    let running: Vec<u32> = asked.observations.iter().map(|o| o.episode_id).collect();
    // `lost` stays open and silent: to the server, the session goes on.
    let again = |previous: &str| {
        let mut c = connect_msg(&token, "submission", &first.submission_id);
        if let Msg::Connect(c) = &mut c {
            c.previous_session_id = previous.into();
        }
        c
    };
    let (mut other, _) = tokio_tungstenite::connect_async(server.ws_url()).await.unwrap();
    other.send(frame(&again("ses-not-the-lost-one"), enc)).await.unwrap();
    match recv(&mut other).await {
        Some(Msg::Error(e)) => assert_eq!(e.code, codes::SUBMISSION_BUSY, "{e:?}"),
        reply => panic!("expected submission_busy, got {reply:?}"),
    }
    let (mut ws, second) = tokio::time::timeout(
        Duration::from_secs(15),
        open(&server.ws_url(), &again(&first.session_id), enc),
    )
    .await
    .expect("the lost session gave way");
    assert_eq!(second.submission_id, first.submission_id);
    assert_ne!(second.session_id, first.session_id);
    let restarted = loop {
        if let Some(Msg::EpisodeStart(s)) = recv(&mut ws).await {
            break s;
        }
    };
    let attempts: Vec<(u32, u32)> = restarted.episodes.iter().map(|e| (e.episode_id, e.attempt)).collect();
    for id in &running {
        assert!(
            attempts.contains(&(*id, 2)),
            "episode {id} re-run as attempt 2: {attempts:?}"
        );
    }
    // The old connection, should it be alive after all, is told why its session ended.
    let told = loop {
        match recv(&mut lost).await {
            Some(Msg::Disconnect(d)) => break d.reason,
            Some(_) => {}
            None => panic!("closed without a disconnect"),
        }
    };
    assert_eq!(told, "session_replaced");
    let (_, sub) = server.get(&format!("/api/v1/submissions/{}", first.submission_id), Some(ADMIN));
    let ended = sub["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == first.session_id.as_str())
        .unwrap_or_else(|| panic!("{sub}"));
    assert!(!ended["ended_at"].is_null(), "the replaced session ended: {ended}");
    drop(ws);

    // A connect whose `connected` never arrived has no session id to name: coming again with
    // its connect key takes its session's place too.
    let keyed = |key: &str| {
        let mut c = connect_msg(&token, "submission", "");
        if let Msg::Connect(c) = &mut c {
            c.connect_key = key.into();
        }
        c
    };
    let (mut unheard, made) = open(&server.ws_url(), &keyed("run-7c1d"), enc).await;
    let _ = recv(&mut unheard).await;
    let (_, again) = tokio::time::timeout(Duration::from_secs(15), open(&server.ws_url(), &keyed("run-7c1d"), enc))
        .await
        .expect("the unheard session gave way");
    assert_eq!(again.submission_id, made.submission_id);
    std::fs::remove_dir_all(&dir).ok();
}

/// An agent that hangs with its connection open loses the request it missed, not the
/// submission: after a missed deadline the lane claims no episode until the agent answers
/// something (here its late Action), and its silence ends the session with the rest still to
/// run (before, the lane claimed and timed out a batch every step deadline, 32 episodes a second
/// at the defaults, until the heartbeat timeout: most of a submission). Heartbeats alone do not
/// count: an SDK sends them whether or not the requests reach it, so over a link stalled from
/// server to agent each one handed the lane a batch the agent never saw (a network walkthrough:
/// 4 of 6 episodes TIMEOUT with 0 steps).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_agent_loses_the_request_it_missed_not_the_submission() {
    let dir = tmp("faults-hung");
    let server = ServerProc::start(
        &dir,
        &[
            "--lanes",
            "1",
            "--step-timeout-s",
            "0.2",
            "--heartbeat-interval-s",
            "1",
            "--heartbeat-timeout-s",
            "3",
        ],
    );
    let token = server.team("hung");
    let enc = Encoding::Json;
    let (mut ws, connected) = open(&server.ws_url(), &connect_msg(&token, "submission", ""), enc).await;
    let id = connected.submission_id.clone();
    // The requests (step, episode) that come while the agent sends nothing but a heartbeat every
    // `beat` (if any) for `quiet`, and how the session ended if it did.
    async fn quiet_for(
        ws: &mut Socket,
        quiet: Duration,
        beat: Option<Duration>,
        errors: &mut Vec<String>,
    ) -> (Vec<(u64, u32)>, Option<String>) {
        let until = tokio::time::Instant::now() + quiet;
        let mut next_beat = beat.map(|b| tokio::time::Instant::now() + b);
        let mut asked = Vec::new();
        loop {
            let wake = next_beat.map_or(until, |b| b.min(until));
            match tokio::time::timeout_at(wake, recv(ws)).await {
                Ok(Some(Msg::GetAction(g))) => asked.extend(g.observations.iter().map(|o| (g.step, o.episode_id))),
                Ok(Some(Msg::Disconnect(d))) => return (asked, Some(d.reason)),
                Ok(None) => return (asked, Some("closed".into())),
                Ok(Some(Msg::Error(e))) => errors.push(e.message),
                Ok(Some(_)) => {}
                Err(_) if wake == until => return (asked, None),
                Err(_) => {
                    let beat_msg = Msg::Heartbeat(protocol::Heartbeat { time: 1.0 });
                    ws.send(frame(&beat_msg, Encoding::Json)).await.unwrap();
                    next_beat = beat.map(|b| tokio::time::Instant::now() + b);
                }
            }
        }
    }
    let first = loop {
        if let Msg::GetAction(g) = recv(&mut ws).await.expect("session alive") {
            break g;
        }
    };
    let episode = first.observations[0].episode_id;
    ws.send(frame(&action(first.step, episode, vec![0.0; 29]), enc))
        .await
        .unwrap();
    // Heartbeats only, as an SDK sends over a link stalled towards it: the next request is
    // missed, and nothing more is asked (the heartbeats also keep the session from timing out).
    let mut errors = Vec::new();
    let (asked, ended) = quiet_for(
        &mut ws,
        Duration::from_millis(2000),
        Some(Duration::from_millis(500)),
        &mut errors,
    )
    .await;
    assert_eq!(asked.len(), 1, "one request missed, no more asked: {asked:?}");
    assert_eq!((asked[0].1, ended), (episode, None));
    // Its late answer: the agent reads the requests, and gets an episode again. Then it
    // answers nothing more, heartbeats only: the session ends at the silence limit (3 s) all
    // the same, its lanes claiming nothing meanwhile (before, the heartbeats kept it for ever).
    ws.send(frame(&action(asked[0].0, episode, vec![0.0; 29]), enc))
        .await
        .unwrap();
    let (asked, ended) = quiet_for(
        &mut ws,
        Duration::from_secs(10),
        Some(Duration::from_millis(500)),
        &mut errors,
    )
    .await;
    assert_eq!(
        asked.len(),
        1,
        "one new episode's request after the late answer: {asked:?}"
    );
    // The late answer is told how late it came (a slow link takes the deadline too).
    assert!(
        errors
            .iter()
            .any(|e| e.contains("this answer came") && e.contains("past the 0.200 s step deadline")),
        "{errors:?}"
    );
    assert_ne!(asked[0].1, episode);
    assert_eq!(ended.as_deref(), Some("heartbeat_timeout"));
    let (status, results) = server.get(&format!("/api/v1/submissions/{id}/results"), Some(ADMIN));
    assert_eq!(status, 200, "{results}");
    let statuses: Vec<&str> = results["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == "TIMEOUT").count(),
        2,
        "the two requests missed, and no other episode: {statuses:?}"
    );
    let (_, sub) = server.get(&format!("/api/v1/submissions/{id}"), Some(ADMIN));
    assert_eq!(sub["status"], "RUNNING", "{sub}");
    assert_eq!(sub["progress"]["pending"], 4, "{sub}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A submission resumed after its benchmark file changed is refused, saying what changed
/// (`benchmark_changed`; a file gone is `benchmark_unavailable`: the organisers' to fix). Before, a bumped version ran the rest
/// under the new rules (a hybrid the board then left out) and fewer episodes ended every session
/// at the first one missing (hundreds of sessions). Restored, the file resumes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_after_the_benchmark_changed_is_refused_naming_the_change() {
    let dir = tmp("faults-changed");
    let benchmarks = dir.join("benchmarks");
    std::fs::create_dir_all(&benchmarks).unwrap();
    let smoke =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../benchmarks/g1-smoke.toml"))
            .unwrap();
    let original = smoke.replace("name = \"g1-smoke\"", "name = \"changing\"");
    let file = benchmarks.join("changing.toml");
    std::fs::write(&file, &original).unwrap();
    let args = ["--lanes", "1", "--benchmarks-dir", benchmarks.to_str().unwrap()];
    let data = dir.join("data");
    let mut server = ServerProc::start(&data, &args);
    let token = server.team("changes");
    let connect = |submission: &str| {
        let mut c = connect_msg(&token, "submission", submission);
        if let Msg::Connect(c) = &mut c {
            c.benchmark = if submission.is_empty() {
                "changing".into()
            } else {
                String::new()
            };
        }
        c
    };
    let enc = Encoding::Json;
    let (mut ws, connected) = open(&server.ws_url(), &connect(""), enc).await;
    let id = connected.submission_id.clone();
    let g = loop {
        if let Msg::GetAction(g) = recv(&mut ws).await.expect("session alive") {
            break g;
        }
    };
    ws.send(frame(&action(g.step, g.observations[0].episode_id, vec![0.0; 29]), enc))
        .await
        .unwrap();
    drop(ws);
    // The first answer to a resume, with the file as `text` (None: removed).
    let mut resume_with = |text: Option<String>| {
        server.terminate();
        match text {
            Some(t) => std::fs::write(&file, t).unwrap(),
            None => std::fs::remove_file(&file).unwrap(),
        }
        server = ServerProc::start(&data, &args);
        let (url, c) = (server.ws_url(), connect(&id));
        async move {
            let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
            ws.send(frame(&c, enc)).await.unwrap();
            recv(&mut ws).await.expect("an answer")
        }
    };
    let refused = |m: Msg, code: &str| match m {
        Msg::Error(e) if e.code == code => e.message,
        other => panic!("expected {code}, got {other:?}"),
    };
    let bumped = original.replace("version = 1 ", "version = 2 ");
    let m = refused(resume_with(Some(bumped)).await, codes::BENCHMARK_CHANGED);
    assert!(m.contains("started on version 1") && m.contains("has version 2"), "{m}");
    let more = original.replace("repeats = 1", "repeats = 2");
    let m = refused(resume_with(Some(more)).await, codes::BENCHMARK_CHANGED);
    assert!(m.contains("12 episodes, where the submission has 6"), "{m}");
    let reseeded = original.replace("seed = 0", "seed = 5");
    let m = refused(resume_with(Some(reseeded)).await, codes::BENCHMARK_CHANGED);
    assert!(m.contains("episode 0's motion, window or seed differs"), "{m}");
    let swapped = original.replace("builtin = [\"stand\", \"squat\"", "builtin = [\"squat\", \"stand\"");
    assert_ne!(swapped, original);
    let m = refused(resume_with(Some(swapped)).await, codes::BENCHMARK_CHANGED);
    assert!(m.contains("episode 0's motion, window or seed differs"), "{m}");
    let m = refused(resume_with(None).await, codes::BENCHMARK_UNAVAILABLE);
    assert!(
        m.contains(&format!("submission {id}'s benchmark cannot be loaded")),
        "{m}"
    );
    match resume_with(Some(original.clone())).await {
        Msg::Connected(c) => assert_eq!(c.submission_id, id),
        other => panic!("the restored file resumes it, got {other:?}"),
    }
    // The same episodes under another dr_level, the version kept: the resume is refused, and
    // so is a new submission (its results would share a board with the first level's), and the
    // start says so.
    let harder = original.replace("dr_level = 0", "dr_level = 2");
    assert_ne!(harder, original);
    server.terminate();
    std::fs::write(&file, harder).unwrap();
    let server = ServerProc::start(&data, &args);
    let answer = |c: Msg| {
        let url = server.ws_url();
        async move {
            let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
            ws.send(frame(&c, enc)).await.unwrap();
            recv(&mut ws).await.expect("an answer")
        }
    };
    let m = refused(answer(connect(&id)).await, codes::BENCHMARK_CHANGED);
    assert!(m.contains("rules of play or motions differ"), "{m}");
    let m = refused(answer(connect("")).await, codes::BENCHMARK_UNAVAILABLE);
    assert!(
        m.contains("changed since version 1 first ran a submission") && m.contains("bump"),
        "{m}"
    );
    let waited = std::time::Instant::now();
    while !server
        .log_text()
        .contains("benchmark changing's file changed since version 1")
    {
        assert!(waited.elapsed() < Duration::from_secs(30), "{}", server.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The listing says so too: not offered as runnable while new submissions are refused.
    let (status, list) = server.get("/api/v1/benchmarks", None);
    assert_eq!(status, 200, "{list}");
    let row = list["benchmarks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "changing")
        .cloned()
        .unwrap_or_default();
    assert_eq!(row["available"], false, "{list}");
    assert!(
        row["unavailable"]
            .as_str()
            .is_some_and(|m| m.contains("changed since version 1")),
        "{list}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// An agent that ends its own session saying why (both SDKs send `agent failed: …` when the
/// policy raises) has the episodes it was running re-queued with its words in their reason,
/// not the bare "agent connection lost" of a network drop (a participant's walkthrough). No run
/// is charged twice for the one lost connection: a lane whose claim was under way as the
/// connection went gives what it took back uncharged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_disconnects_saying_why_has_its_words_in_the_reason() {
    let dir = tmp("faults-agent-said");
    let server = ServerProc::start(&dir, &["--lanes", "2"]);
    let token = server.team("crashing");
    let enc = Encoding::Json;
    let (mut ws, connected) = open(&server.ws_url(), &connect_msg(&token, "submission", ""), enc).await;
    loop {
        if let Some(Msg::GetAction(_)) = recv(&mut ws).await {
            break;
        }
    }
    let said = "agent failed: ZeroDivisionError: division by zero";
    ws.send(frame(
        &Msg::Disconnect(protocol::Disconnect {
            reason: said.into(),
            ..Default::default()
        }),
        enc,
    ))
    .await
    .unwrap();
    drop(ws);
    let id = connected.submission_id;
    let waited = std::time::Instant::now();
    let episodes = loop {
        let (_, results) = server.get(&format!("/api/v1/submissions/{id}/results"), Some(ADMIN));
        let episodes = results["episodes"].as_array().cloned().unwrap_or_default();
        let requeued = episodes.iter().filter(|e| e["attempts"].as_u64() >= Some(1)).count();
        if requeued > 0 && episodes.iter().all(|e| e["status"] == "PENDING") {
            break episodes;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "{results}\n{}",
            server.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Runs charged to the agent: attempts less those the server lost or gave back uncharged
    // (a claim under way as the connection went, `the session ended before they started`).
    let charged = |e: &serde_json::Value| {
        e["attempts"].as_i64().unwrap() - e["uncharged_runs"].as_i64().unwrap() - e["server_faults"].as_i64().unwrap()
    };
    assert!(episodes.iter().any(|e| charged(e) == 1), "{episodes:?}");
    for e in &episodes {
        let reason = e["reason"].as_str().unwrap_or_default();
        match charged(e) {
            0 => assert!(
                e["attempts"] == 0 || reason == "the session ended before they started",
                "{e}"
            ),
            1 => assert!(
                reason.starts_with("agent connection lost: the agent disconnected saying")
                    && reason.contains("ZeroDivisionError"),
                "{e}"
            ),
            _ => panic!("one lost connection, one charged run: {e}"),
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The hand-over across replicas: a client whose connection to one replica died unseen comes
/// back through the load balancer to another, naming its lost session. The session is marked
/// replaced in the database, and the replica still running it ends it as a lost connection at
/// its next missed deadline: its episodes run again on the new session (attempt 2) rather than
/// ending TIMEOUT for good (a replicas walkthrough: 5 of 6 scored where one replica gave 6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_to_another_replica_takes_the_lost_sessions_episodes() {
    let Some(pg) = common::server::PgDb::create("a_reconnect_to_another_replica_takes_the_lost_sessions_episodes")
    else {
        return;
    };
    let dir = tmp("faults-take-over-replicas");
    let store = format!("file://{}", dir.join("objects").display());
    let replica = |name: &str| {
        ServerProc::start(
            &dir.join(name),
            &[
                "--database-url",
                &pg.url,
                "--replica-id",
                name,
                "--object-store",
                &store,
                "--lanes",
                "1",
                "--step-timeout-s",
                "3",
                "--lease-s",
                "30",
            ],
        )
    };
    let (r1, r2) = (replica("r1"), replica("r2"));
    let token = r1.team("roaming");
    let enc = Encoding::Binary;
    let mut first_connect = connect_msg(&token, "submission", "");
    if let Msg::Connect(c) = &mut first_connect {
        c.max_batch = 2;
    }
    let (mut lost, first) = open(&r1.ws_url(), &first_connect, enc).await;
    let asked = loop {
        if let Some(Msg::GetAction(g)) = recv(&mut lost).await {
            break g;
        }
    };
    let running: Vec<u32> = asked.observations.iter().map(|o| o.episode_id).collect();
    // `lost` stays open and silent on r1; the client comes back on r2.
    let mut again = connect_msg(&token, "submission", &first.submission_id);
    if let Msg::Connect(c) = &mut again {
        c.previous_session_id = first.session_id.clone();
        c.max_batch = 6;
    }
    let (mut ws, second) = open(&r2.ws_url(), &again, enc).await;
    assert_eq!(second.submission_id, first.submission_id);
    // Answer every request on r2 until the submission completes.
    let ended = tokio::time::timeout(Duration::from_secs(90), async {
        loop {
            match recv(&mut ws).await {
                Some(Msg::GetAction(g)) => {
                    let reply = Msg::Action(protocol::Action {
                        step: g.step,
                        actions: g
                            .observations
                            .iter()
                            .map(|o| protocol::EpisodeAction {
                                episode_id: o.episode_id,
                                values: vec![0.0; 29],
                            })
                            .collect(),
                    });
                    ws.send(frame(&reply, enc)).await.unwrap();
                }
                Some(Msg::Disconnect(d)) => return d,
                Some(_) => {}
                None => panic!("r2 closed without a disconnect"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the submission did not complete on r2\nr1:\n{}", r1.log_text()));
    assert_eq!(ended.reason, "submission_complete", "{ended:?}");
    assert_eq!((ended.episodes_scored, ended.episodes_failed), (6, 0), "{ended:?}");
    let (_, results) = r2.get(
        &format!("/api/v1/submissions/{}/results", first.submission_id),
        Some(ADMIN),
    );
    for e in results["episodes"].as_array().unwrap() {
        let idx = e["idx"].as_u64().unwrap() as u32;
        let expected = if running.contains(&idx) { 2 } else { 1 };
        assert_eq!(e["attempts"], expected, "episode {idx}: {e}");
    }
    drop(lost);
    std::fs::remove_dir_all(&dir).ok();
}
