//! The joint-position action mode over a raw protocol client against a real `arena serve`:
//! gains declared in `connect` are checked (refused ones cost no submission), the session
//! announces the gains it applies, actions of 29 targets or 58 values (targets and feed-forward
//! torques) are applied, an out-of-range target fails its episode with the joint named, the
//! submission keeps the gains of its first session (a resume with others is refused), and
//! `arena audit` re-runs its episodes bit-exactly with them.

mod common;

use arena_sdk::protocol::{self, Action, Connect, Encoding, EpisodeAction, Frame, Msg, PROTOCOL_VERSION, codes};
use common::server::ServerProc;
use common::{arena, ok, tmp};
use futures_util::{SinkExt, StreamExt};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

fn frame(msg: &Msg) -> Message {
    match protocol::encode(msg, Encoding::Binary) {
        Frame::Text(t) => Message::Text(t.into()),
        Frame::Binary(b) => Message::Binary(b.into()),
    }
}

async fn recv(ws: &mut Socket) -> Option<Msg> {
    loop {
        match tokio::time::timeout(Duration::from_secs(60), ws.next())
            .await
            .expect("server answers")
        {
            Some(Ok(Message::Binary(b))) => return Some(protocol::decode_binary(&b).unwrap()),
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
            Some(Ok(_)) => {}
        }
    }
}

fn connect(token: &str, kp: Vec<f64>, kd: Vec<f64>, preset: &str) -> Msg {
    Msg::Connect(Connect {
        protocol_version: PROTOCOL_VERSION,
        agent_name: "lowcmd".into(),
        token: token.into(),
        mode: "submission".into(),
        benchmark: "g1-smoke-robot".into(),
        max_batch: 1,
        joint_stiffness: kp,
        joint_damping: kd,
        gain_preset: preset.into(),
        ..Default::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joint_position_sessions_apply_declared_gains_and_lowcmd_actions() {
    let dir = tmp("joint-position");
    let server = ServerProc::start(&dir, &["--lanes", "1"]);
    let token = server.team("lowcmd");
    let url = server.ws_url();
    let armature = arena_sim::RobotConfig::new(arena_sim::GainSet::Armature);

    // Gains above the benchmark's bounds: refused before anything is created.
    let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    let mut stiff = armature.kp.to_vec();
    stiff[9] = 900.0;
    ws.send(frame(&connect(&token, stiff, armature.kd.to_vec(), "")))
        .await
        .unwrap();
    match recv(&mut ws).await {
        Some(Msg::Error(e)) => {
            assert_eq!(e.code, codes::INVALID_GAINS);
            assert!(
                e.message.contains("right_knee_joint") && e.message.contains("kp_max 500"),
                "{}",
                e.message
            );
        }
        other => panic!("expected invalid_gains, got {other:?}"),
    }
    let (_, list) = server.get("/api/v1/submissions", Some(&token));
    assert_eq!(
        list["submissions"].as_array().unwrap().len(),
        0,
        "a refused connect creates nothing"
    );

    // Own gains within the bounds: announced back as applied.
    let kp: Vec<f64> = armature.kp.iter().map(|k| k * 1.2).collect();
    let kd: Vec<f64> = armature.kd.iter().map(|k| k * 0.9).collect();
    let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    ws.send(frame(&connect(&token, kp.clone(), kd.clone(), "")))
        .await
        .unwrap();
    let Some(Msg::Connected(connected)) = recv(&mut ws).await else {
        panic!("expected connected");
    };
    let id = connected.submission_id.clone();
    let spec = connected.spec.unwrap();
    assert_eq!(spec.action_mode, "joint_position");
    assert_eq!((spec.joint_stiffness.clone(), spec.joint_damping.clone()), (kp, kd));
    assert_eq!((spec.effort_limit[3], spec.anchor_body.as_str()), (139.0, "torso_link"));
    let command = spec
        .observations
        .iter()
        .scan(0usize, |at, g| {
            let start = *at;
            *at += g.size as usize;
            Some((g.name.clone(), start))
        })
        .find(|(n, _)| n == "motion_command")
        .map(|(_, start)| start)
        .unwrap();
    let mut ends = Vec::new();
    while let Some(msg) = recv(&mut ws).await {
        match msg {
            Msg::GetAction(g) => {
                let o = &g.observations[0];
                // Track the command's joint positions; episode 0 adds feed-forward torques,
                // episode 2 sends a target far outside the left knee's range at its step 3.
                let mut values: Vec<f32> = o.values[command..command + 29].to_vec();
                match (o.episode_id, o.episode_step) {
                    (0, _) => values.extend(std::iter::repeat_n(1.5f32, 29)),
                    (2, 3) => values[3] = 9.0,
                    _ => {}
                }
                let reply = Msg::Action(Action {
                    step: g.step,
                    actions: vec![EpisodeAction {
                        episode_id: o.episode_id,
                        values,
                    }],
                });
                ws.send(frame(&reply)).await.unwrap();
            }
            Msg::EpisodeEnd(e) => ends.push((e.episode_id, e.status.clone(), e.reason.clone(), e.steps)),
            Msg::Disconnect(d) => {
                assert_eq!(d.submission_status, "COMPLETED");
                break;
            }
            Msg::Heartbeat(_) | Msg::EpisodeStart(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    ends.sort_by_key(|e| e.0);
    assert_eq!(ends.len(), 6, "{ends:?}");
    assert_eq!(
        ends[0].1, "completed",
        "58 values (targets + feed-forward) are applied: {ends:?}"
    );
    let (_, status, reason, steps) = &ends[2];
    assert_eq!((status.as_str(), *steps), ("failed", 3), "{ends:?}");
    // In the protocol's form (docs/protocol.md §8): the request's step, then the episode's.
    assert!(reason.starts_with("step "), "{reason}");
    assert!(
        reason.contains("action out of range for episode 2 (at its step 3; left_knee_joint target 9 rad is outside"),
        "{reason}"
    );
    for e in [&ends[1], &ends[3], &ends[4], &ends[5]] {
        assert_eq!(e.1, "completed", "{ends:?}");
    }

    // The stored episodes re-run bit-exactly with the submission's stored gains, feed-forward
    // torques included.
    let data = server.data_dir.to_str().unwrap().to_string();
    let audit: serde_json::Value = serde_json::from_str(&ok(&arena(&[
        "audit",
        &id,
        "--data-dir",
        &data,
        "--json",
        "--require-exact",
    ])))
    .unwrap();
    assert_eq!(audit["bit_exact"], 6, "{audit}");

    // A submission keeps the gains of its first session: a resume declaring others is refused.
    let (_, created) = server.post(
        "/api/v1/submissions",
        Some(&token),
        r#"{"benchmark": "g1-smoke-robot", "agent_name": "rest"}"#,
    );
    let fresh = created["id"].as_str().expect("created over REST").to_string();
    let resume = |kp: Vec<f64>| {
        let mut m = connect(&token, kp, armature.kd.to_vec(), "");
        if let Msg::Connect(c) = &mut m {
            c.submission_id = fresh.clone();
        }
        m
    };
    let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    ws.send(frame(&resume(armature.kp.to_vec()))).await.unwrap();
    assert!(matches!(recv(&mut ws).await, Some(Msg::Connected(_))));
    ws.send(frame(&Msg::Disconnect(protocol::Disconnect {
        reason: "client_done".into(),
        ..Default::default()
    })))
    .await
    .unwrap();
    drop(ws);
    let other: Vec<f64> = armature.kp.iter().map(|k| k * 1.1).collect();
    for _ in 0..100 {
        let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
        ws.send(frame(&resume(other.clone()))).await.unwrap();
        match recv(&mut ws).await {
            Some(Msg::Error(e)) if e.code == codes::SUBMISSION_BUSY => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Some(Msg::Error(e)) => {
                assert_eq!(e.code, codes::INVALID_GAINS, "{}", e.message);
                assert!(e.message.contains("preset armature"), "{}", e.message);
                return;
            }
            other => panic!("expected invalid_gains, got {other:?}"),
        }
    }
    panic!("the submission stayed busy");
}
