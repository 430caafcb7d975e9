//! Issue 39: connections that send nothing, half a header or nothing after a response are
//! closed, and one address cannot take every connection, on a real `arena serve` listener.
//! (Deadlines of 1-2 s here; each wait below is an upper bound for a close, not a timing claim.)

mod common;

use common::server::ServerProc;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A TCP connection to `to` from the loopback address `from` (127.0.0.x: another client).
fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = socket2_like::bind(from);
    socket.connect(to)
}

/// What the server sends until it closes the connection, or `None` if it stays open `within`.
fn read_until_closed(stream: &mut TcpStream, within: Duration) -> Option<String> {
    stream.set_read_timeout(Some(within)).unwrap();
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Some(String::from_utf8_lossy(&got).into_owned()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Some(String::from_utf8_lossy(&got).into_owned());
            }
            Err(_) if started.elapsed() >= within => return None,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return None;
            }
            Err(e) => panic!("reading: {e}"),
        }
    }
}

/// A keep-alive connection from `from` that the server has admitted and answered (200), so
/// that it holds one of the address's places for the idle timeout.
fn hold_a_place(from: &str, to: SocketAddr) -> TcpStream {
    for _ in 0..50 {
        let mut stream = connect_from(from, to);
        stream
            .write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf) {
                Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        if got.starts_with(b"HTTP/1.1 200") {
            return stream;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no connection from {from} was admitted and answered");
}

/// Binding a client socket to a chosen loopback address before connecting, with std only.
mod socket2_like {
    use std::net::{SocketAddr, TcpStream};
    use std::os::fd::FromRawFd;

    pub struct Bound(i32);

    pub fn bind(from: &str) -> Bound {
        let ip: std::net::Ipv4Addr = from.parse().unwrap();
        // SAFETY: plain socket/bind calls on a fresh descriptor owned by `Bound`.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
            assert!(fd >= 0, "socket");
            let addr = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from(ip).to_be(),
                },
                sin_zero: [0; 8],
            };
            let r = libc::bind(
                fd,
                &addr as *const libc::sockaddr_in as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            );
            assert_eq!(r, 0, "bind {from}: {}", std::io::Error::last_os_error());
            Bound(fd)
        }
    }

    impl Bound {
        pub fn connect(self, to: SocketAddr) -> TcpStream {
            let SocketAddr::V4(to) = to else { panic!("IPv4 only") };
            let addr = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: to.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*to.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: connect on the descriptor we own, then handed to TcpStream, which closes it.
            unsafe {
                let r = libc::connect(
                    self.0,
                    &addr as *const libc::sockaddr_in as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                );
                assert_eq!(r, 0, "connect: {}", std::io::Error::last_os_error());
                TcpStream::from_raw_fd(self.0)
            }
        }
    }
}

#[test]
fn idle_and_half_open_connections_are_closed_and_one_address_cannot_take_them_all() {
    let dir = common::tmp("connection-limits");
    let server = ServerProc::start(
        &dir,
        &[
            "--max-connections-per-address",
            "4",
            "--header-timeout-s",
            "1",
            "--idle-timeout-s",
            "2",
        ],
    );
    let bound = Duration::from_secs(20);

    // A connection that sends nothing is closed at the header deadline.
    let mut silent = connect_from("127.0.0.2", server.addr);
    assert!(
        read_until_closed(&mut silent, bound).is_some(),
        "a silent connection stays open"
    );

    // Half a request header, then nothing: closed by the header read timeout.
    let mut half = connect_from("127.0.0.2", server.addr);
    half.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n").unwrap();
    assert!(
        read_until_closed(&mut half, bound).is_some(),
        "half a header keeps a connection open"
    );

    // A keep-alive connection answered once, then idle: closed at the idle timeout.
    let mut idle = connect_from("127.0.0.2", server.addr);
    idle.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let answered = read_until_closed(&mut idle, bound).expect("an idle keep-alive connection stays open");
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");

    // One address holds at most 4 connections; the 5th is told 503 and closed, while another
    // address is served.
    let mut held: Vec<TcpStream> = (0..4).map(|_| connect_from("127.0.0.3", server.addr)).collect();
    // The server counts a connection once it accepts it: wait until the 5th is refused.
    let refused = (0..50)
        .find_map(|_| {
            let mut fifth = connect_from("127.0.0.3", server.addr);
            let text = read_until_closed(&mut fifth, Duration::from_millis(500))?;
            text.contains("too_many_connections").then_some(text)
        })
        .expect("the 5th connection from one address is refused");
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    let (status, _, _) = server.call("GET", "/api/v1/health", None, None);
    assert_eq!(status, 200, "another address is served while one is at its cap");
    // The held connections send nothing, so they are closed in turn, and the address is served
    // again.
    for stream in &mut held {
        assert!(read_until_closed(stream, bound).is_some());
    }
    let mut again = connect_from("127.0.0.3", server.addr);
    again
        .write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let text = read_until_closed(&mut again, bound).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}

/// A request whose body stops coming holds its connection no longer than the idle timeout (a
/// request in flight kept it open for ever: a team pinned connections with a header and a few
/// bytes of a 2 MB body), whether it stalls at once or after a while; a body that keeps coming
/// is served whole.
#[test]
fn a_stalled_request_body_does_not_hold_its_connection() {
    let dir = common::tmp("connection-limits-body");
    let server = ServerProc::start(&dir, &["--idle-timeout-s", "2"]);
    let token = server.team("uploader");
    let bound = Duration::from_secs(20);
    // (A gRPC content type does not exempt a REST route: only the gRPC services' HTTP/2 streams
    // are left to their heartbeats.)
    for (route, content_type) in [
        ("/api/v1/submissions", "application/json"),
        (
            "/api/v1/submissions/hosted?benchmark=g1-smoke",
            "application/octet-stream",
        ),
        ("/api/v1/submissions", "application/grpc"),
    ] {
        let mut stream = connect_from("127.0.0.7", server.addr);
        let head = format!(
            "POST {route} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: {content_type}\r\nContent-Length: 2000000\r\n\r\n{{\"benchmark\": \"g1-"
        );
        stream.write_all(head.as_bytes()).unwrap();
        let started = Instant::now();
        assert!(
            read_until_closed(&mut stream, bound).is_some(),
            "{route} ({content_type}): a stalled body kept its connection open {bound:?}"
        );
        assert!(
            started.elapsed() >= Duration::from_millis(1800),
            "{route} ({content_type}): closed before the idle timeout"
        );
    }
    // A body sent in pieces a second apart (under the idle timeout) is read whole and answered.
    let mut stream = connect_from("127.0.0.7", server.addr);
    let body = br#"{"benchmark": "no-such-benchmark"}"#;
    let head = format!(
        "POST /api/v1/submissions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    for piece in body.chunks(12) {
        std::thread::sleep(Duration::from_millis(1000));
        stream.write_all(piece).unwrap();
    }
    let answer = read_until_closed(&mut stream, bound).expect("answered");
    assert!(answer.starts_with("HTTP/1.1 4"), "a whole body is judged: {answer}");
    assert!(!answer.contains("stalled"), "{answer}");
}

/// Behind a load balancer that sends the PROXY protocol (`--proxy-protocol-from`), a
/// connection counts under the client address its header gives, not the balancer's: one client
/// at its cap leaves the others served through the same balancer. A connection from the
/// balancer without a header (its host's health check) counts under the balancer; a header from
/// an address not named is not believed (it is not HTTP: the connection is refused as such).
#[test]
fn behind_a_proxy_each_client_counts_under_its_own_address() {
    let dir = common::tmp("connection-limits-proxy");
    let server = ServerProc::start(
        &dir,
        &[
            "--max-connections-per-address",
            "2",
            "--proxy-protocol-from",
            "127.0.0.4, 127.0.0.5",
        ],
    );
    let bound = Duration::from_secs(20);
    let through_proxy = |client: &str, version: u8| {
        let mut stream = connect_from("127.0.0.4", server.addr);
        let header = match version {
            1 => format!("PROXY TCP4 {client} 10.0.0.2 40000 8080\r\n").into_bytes(),
            _ => {
                let ip: std::net::Ipv4Addr = client.parse().unwrap();
                let mut h = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
                h.extend(ip.octets());
                h.extend([10, 0, 0, 2]);
                h.extend(40000u16.to_be_bytes());
                h.extend(8080u16.to_be_bytes());
                h
            }
        };
        stream.write_all(&header).unwrap();
        stream
    };
    let health = |stream: &mut TcpStream| {
        // A connection over its client's cap is refused as soon as its header is read: the
        // refusal may have come, and the socket closed, before the request is written.
        let _ = stream.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        read_until_closed(stream, bound).unwrap_or_default()
    };
    // Client 203.0.113.7 takes its two places (an answered keep-alive request each).
    let held: Vec<TcpStream> = (0..2)
        .map(|i| {
            let mut stream = through_proxy("203.0.113.7", 1 + i as u8);
            stream
                .write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            stream.set_read_timeout(Some(bound)).unwrap();
            let mut buf = [0u8; 512];
            let n = stream.read(&mut buf).unwrap();
            assert!(
                buf[..n].starts_with(b"HTTP/1.1 200"),
                "{}",
                String::from_utf8_lossy(&buf[..n])
            );
            stream
        })
        .collect();
    let third = health(&mut through_proxy("203.0.113.7", 2));
    assert!(third.contains("too_many_connections"), "its third connection: {third}");
    // Another client through the same balancer, and the balancer's own check, are served.
    for version in [1, 2] {
        let other = health(&mut through_proxy("198.51.100.9", version));
        assert!(
            other.starts_with("HTTP/1.1 200"),
            "another client (v{version}): {other}"
        );
    }
    let mut own = connect_from("127.0.0.5", server.addr);
    let own = health(&mut own);
    assert!(own.starts_with("HTTP/1.1 200"), "the balancer's own check: {own}");
    // From an address not named, a header is not believed.
    let mut forged = connect_from("127.0.0.6", server.addr);
    forged.write_all(b"PROXY TCP4 192.0.2.1 10.0.0.2 1 2\r\n").unwrap();
    let forged = health(&mut forged);
    assert!(
        forged.starts_with("HTTP/1.1 400"),
        "a header from an unnamed address: {forged}"
    );
    drop(held);
}

#[test]
fn bad_limits_are_refused_with_their_key() {
    let bad_dir = common::tmp("connection-limits-bad");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_arena"))
        .args(["serve", "--bind", "127.0.0.1:0", "--header-timeout-s", "0"])
        .args(["--data-dir", bad_dir.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A configuration that cannot run exits 2, as the options clap refuses.
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("header_timeout_s") && stderr.contains("expected seconds"),
        "{stderr}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_arena"))
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--proxy-protocol-from",
            "10.0.0.0/8,haproxy",
        ])
        .args(["--data-dir", bad_dir.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("proxy_protocol_from") && stderr.contains("\"haproxy\" is neither an address nor a network"),
        "{stderr}"
    );
}

/// Agent sessions count as open connections while they run (docs/server.md): one address with
/// two practice sessions at a cap of two gets 503 for a third connection, and is served again
/// once the sessions end. (An upgraded WebSocket left the count before: 40 idle practice
/// sessions from one address at a cap of 4.)
#[test]
fn agent_sessions_count_as_open_connections() {
    use arena_sdk::protocol::{self, Connect, Encoding, Frame, Msg, PROTOCOL_VERSION};
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let dir = common::tmp("connection-limits-agents");
    let server = ServerProc::start(&dir, &["--max-connections-per-address", "2"]);
    let token = server.team("two");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let connect = Msg::Connect(Connect {
        protocol_version: PROTOCOL_VERSION,
        agent_name: "idle".into(),
        token,
        mode: "practice".into(),
        benchmark: "g1-smoke".into(),
        ..Default::default()
    });
    let Frame::Binary(hello) = protocol::encode(&connect, Encoding::Binary) else {
        unreachable!()
    };
    let sessions: Vec<_> = (0..2)
        .map(|_| {
            runtime.block_on(async {
                let (mut ws, _) = tokio_tungstenite::connect_async(server.ws_url()).await.unwrap();
                ws.send(Message::Binary(hello.clone().into())).await.unwrap();
                match ws.next().await {
                    Some(Ok(Message::Binary(b))) => {
                        assert!(matches!(protocol::decode_binary(&b).unwrap(), Msg::Connected(_)));
                    }
                    other => panic!("expected connected, got {other:?}"),
                }
                ws
            })
        })
        .collect();
    let refused = (0..50).find_map(|_| {
        let mut third = connect_from("127.0.0.1", server.addr);
        let text = read_until_closed(&mut third, Duration::from_millis(500))?;
        text.contains("too_many_connections").then_some(text)
    });
    assert!(
        refused.is_some(),
        "a third connection beside two agent sessions was served"
    );
    drop(sessions);
    let served = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        server.call("GET", "/api/v1/health", None, None).0 == 200
    });
    assert!(served, "the address stayed at its cap after the sessions ended");
}

/// A gRPC agent over the caps is told so in gRPC's terms (UNAVAILABLE, "retry shortly", the
/// `arena-refusal` metadata) and the SDK waits for a place as it does after a WebSocket's 503
/// at the caps: before, the 503's HTTP/1.1 bytes broke the HTTP/2 connection and the run
/// stopped at once as unreachable (one attempt); later it retried, but gave up after
/// `max_reconnects` refusals.
#[test]
fn a_grpc_agent_over_the_caps_is_told_to_retry_and_waits_for_a_place() {
    use arena_sdk::client::{self, ClientConfig, Mode};
    let dir = common::tmp("connection-limits-grpc");
    let server = ServerProc::start(&dir, &["--max-connections-per-address", "1"]);
    let token = server.team("grpc-refused");
    // The address's one place, held by a keep-alive connection the server has answered: a
    // connection merely opened may itself be refused while the server still counts the team's
    // request just closed, and then the place is free again for the gRPC call below.
    let held = hold_a_place("127.0.0.1", server.addr);
    let refused = (0..50).any(|_| {
        let mut probe = connect_from("127.0.0.1", server.addr);
        read_until_closed(&mut probe, Duration::from_secs(2)).is_some_and(|t| t.contains("too_many_connections"))
    });
    assert!(refused, "a second connection from the address was served");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let status = runtime.block_on(async {
        use arena_sdk::protocol::agent_gateway_client::AgentGatewayClient;
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))
            .unwrap()
            .connect()
            .await
            .expect("the HTTP/2 connection opens; the call is refused");
        let outbound = futures_util::stream::iter(Vec::<arena_sdk::protocol::Envelope>::new());
        AgentGatewayClient::new(channel)
            .session(outbound)
            .await
            .expect_err("refused at the cap")
    });
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains("retry shortly"), "{status:?}");
    assert!(
        status.metadata().contains_key(arena_sdk::protocol::REFUSAL_METADATA),
        "{status:?}"
    );

    let mut config = ClientConfig::new(
        server.grpc_url(),
        &token,
        Mode::Practice {
            benchmark: "g1-smoke".into(),
            episodes: vec![arena_sdk::protocol::ResetEpisode {
                motion: "stand".into(),
                duration_s: 0.04,
                ..Default::default()
            }],
        },
    );
    // The run, refused, waits for a place rather than counting the refusals against
    // `max_reconnects` (none here).
    // The place is freed once the run has been told it waits (not after a fixed time, which a
    // loaded machine could outlast before the first try).
    let mut held = Some(held);
    config.max_reconnects = 0;
    config.initial_backoff = Duration::from_millis(50);
    let mut told = Vec::new();
    let outcome = client::run_blocking(&config, &mut arena_sdk::agents::ReplayAgent::new(), &mut |e| {
        if let client::ClientEvent::ServerError(e) = e {
            told.push(format!("{}: {}", e.code, e.message));
            held.take();
        }
    });
    let summary = outcome.expect("the run waits for a place and gets in");
    assert_eq!(summary.episodes.len(), 1);
    assert_eq!(told.len(), 1, "told once: {told:?}");
    assert!(told[0].contains("too many open connections"), "{told:?}");
}
