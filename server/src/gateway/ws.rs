//! The WebSocket transport: each frame carries one Envelope, protobuf in binary frames and JSON
//! in text frames. The kind of the client's first frame sets the session's encoding; the server
//! answers in it.

use super::Incoming;
use super::ws_handshake::AgentSocket;
use super::ws_opening::OverOpening;
use crate::connections::Activity;
use crate::outbox::{OutboxReceiver, outbox};
use crate::session_stop::OpenConnection;
use crate::state::AppState;
use arena_sdk::protocol::{self, Encoding, Msg};
use futures_util::{SinkExt, StreamExt};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Message as WsMessage, Utf8Bytes};

/// The close code of a message over the size limit (RFC 6455 §7.4.1: "Message Too Big").
pub const CLOSE_MESSAGE_TOO_BIG: u16 = 1009;
/// Close code "try again later" (IANA's registry): no place to read the connect in time.
const CLOSE_TRY_AGAIN_LATER: u16 = 1013;

/// The close code after `disconnect {shutdown}` (RFC 6455 §7.4.1: "Going Away", a server going
/// down), for clients and proxies that read close codes rather than the protocol's message.
pub const CLOSE_GOING_AWAY: u16 = 1001;

/// How long a session the server's stop ended reads on for the client's close frame, which
/// answers the server's: closing with the client's frames unread would reset the connection,
/// and a reset can discard the `disconnect {shutdown}` before the client reads it.
const READ_ON_AT_STOP: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs one session on an upgraded socket, whose first message `refused` tells of when the
/// opening limit stopped it (`ws_opening`). `connection` is the listener's record of the TCP
/// connection (absent when the router is served by something else). `open` counts the
/// connection for a stopping server (taken before the upgrade), until the client has been told.
pub async fn session(
    mut socket: AgentSocket,
    refused: Arc<OnceLock<OverOpening>>,
    state: Arc<AppState>,
    connection: Option<Arc<Activity>>,
    address: Option<std::net::IpAddr>,
    open: OpenConnection,
) {
    // Nothing is read before there is a place for the first frame (its bytes wait in the
    // kernel meanwhile); the place is given back once that frame has arrived. A connection
    // waits at most the connect deadline for one; a close frame says why when it runs out.
    let mut opening = match address {
        None => None,
        Some(address) => {
            let (code, reason) = tokio::select! {
                place = state.openings.enter(address) => (0, Some(place)),
                () = state.session_stop.told() => (CLOSE_GOING_AWAY, None),
                () = tokio::time::sleep(super::CONNECT_TIMEOUT) => (CLOSE_TRY_AGAIN_LATER, None),
            };
            if code != 0 {
                let reason = match code {
                    CLOSE_GOING_AWAY => "the server is stopping".to_string(),
                    _ => format!(
                        "no connect read within {:?}: {} other connections from your address were opening",
                        super::CONNECT_TIMEOUT,
                        crate::connections::Openings::PER_ADDRESS
                    ),
                };
                tracing::info!("closing an agent connection before its connect: {reason}");
                let close = CloseFrame {
                    code: code.into(),
                    reason: reason.into(),
                };
                let _ = tokio::time::timeout(READ_ON_AT_STOP, socket.send(WsMessage::Close(Some(close)))).await;
                return;
            }
            reason
        }
    };

    let (sink, stream) = socket.split();
    // Set by the first data frame; replies before it (a Connect timeout) go out as JSON.
    let binary = Arc::new(AtomicBool::new(false));
    // Why the reader gave up, when the client is owed a close frame that says so.
    let close_reason: Arc<Mutex<Option<CloseFrame>>> = Arc::default();
    let mut seen_data = false;
    let reader_binary = binary.clone();
    let reader_close = close_reason.clone();
    let incoming = stream.map(move |frame| {
        // The first frame is in (or failed): its place goes back.
        if matches!(frame, Ok(WsMessage::Binary(_) | WsMessage::Text(_)) | Err(_)) {
            opening.take();
        }
        if !seen_data && matches!(frame, Ok(WsMessage::Binary(_) | WsMessage::Text(_))) {
            seen_data = true;
            reader_binary.store(matches!(frame, Ok(WsMessage::Binary(_))), Ordering::Release);
        }
        // The session's connect, whose token is not checked yet, announced more than the
        // opening limit: the read stopped before its bytes (`ws_opening`).
        let over_opening = refused.get().filter(|_| frame.is_err());
        if frame.is_err() && (over_opening.is_some() || too_big_close(&frame).is_some()) {
            // The rest of the frame is still on its way: drain it before closing, or the
            // reset that follows would discard what the server wrote last at the client.
            if let Some(connection) = &connection {
                connection.linger_on_close();
            }
        }
        if let Some(over) = over_opening {
            return Incoming::Fatal(protocol::DecodeError {
                code: protocol::codes::MALFORMED_MESSAGE,
                message: over.message(),
            });
        }
        if let Some(close) = too_big_close(&frame) {
            tracing::info!("closing an agent connection: {}", close.reason);
            *reader_close.lock().unwrap_or_else(|p| p.into_inner()) = Some(close);
        }
        decode(frame)
    });
    let (out_tx, out_rx) = outbox();
    // A client that stops reading must not hold the connection and its queue forever: a frame
    // it does not take within the silence limit ends the writer (and so the session, whose
    // sends then fail), and once the session is over the writer gets as long to deliver the
    // rest (its last results, the disconnect), then the connection is dropped.
    let deadline = std::time::Duration::from_secs_f64(state.config.heartbeat_timeout_s);
    // The writer owns the sink; the session sends through `out_tx`.
    let mut writer = tokio::spawn(write_frames(sink, out_rx, binary.clone(), close_reason, deadline));
    let replies = super::Replies::LikeTheClient(binary.clone());
    let mut incoming = Box::pin(incoming);
    super::session(state.clone(), &mut incoming, out_tx, replies).await;
    if tokio::time::timeout(deadline, &mut writer).await.is_err() {
        tracing::info!("an agent read nothing for {deadline:?} after its session ended; closing the connection");
        writer.abort();
    }
    if state.session_stop.is_told() {
        let _ = tokio::time::timeout(READ_ON_AT_STOP, async {
            while let Some(frame) = incoming.next().await {
                if matches!(frame, Incoming::Closed) {
                    break;
                }
            }
        })
        .await;
    }
    drop(open);
}

/// The close frame owed for a read error that is an over-size message: code 1009 and the sizes.
fn too_big_close(frame: &Result<WsMessage, WsError>) -> Option<CloseFrame> {
    match frame {
        Err(WsError::Capacity(CapacityError::MessageTooLong { size, max_size })) => Some(CloseFrame {
            code: CLOSE_MESSAGE_TOO_BIG.into(),
            reason: Utf8Bytes::from(format!("message of {size} bytes is over the limit of {max_size} bytes")),
        }),
        _ => None,
    }
}

fn decode(frame: Result<WsMessage, WsError>) -> Incoming {
    match frame {
        Err(_) | Ok(WsMessage::Close(_)) => Incoming::Closed,
        Ok(WsMessage::Text(t)) => match protocol::decode_json(&t) {
            Ok(m) => Incoming::Msg(m),
            Err(e) => Incoming::Bad(e),
        },
        Ok(WsMessage::Binary(b)) => match protocol::decode_binary(&b) {
            Ok(m) => Incoming::Msg(m),
            Err(e) => Incoming::Bad(e),
        },
        // Pings and pongs are the library's keep-alive, not messages (and a raw frame is
        // only ever produced by a writer).
        Ok(WsMessage::Ping(_) | WsMessage::Pong(_) | WsMessage::Frame(_)) => Incoming::Ignore,
    }
}

fn to_ws(msg: &Msg, encoding: Encoding) -> WsMessage {
    match protocol::encode(msg, encoding) {
        protocol::Frame::Text(t) => WsMessage::Text(t.into()),
        protocol::Frame::Binary(b) => WsMessage::Binary(b.into()),
    }
}

async fn write_frames(
    mut sink: futures_util::stream::SplitSink<AgentSocket, WsMessage>,
    mut rx: OutboxReceiver,
    binary: Arc<AtomicBool>,
    close_reason: Arc<Mutex<Option<CloseFrame>>>,
    deadline: std::time::Duration,
) {
    // Whether the session ended because the server is stopping.
    let mut stopping = false;
    while let Some(msg) = rx.recv().await {
        let last = matches!(msg, Msg::Disconnect(_));
        stopping = matches!(&msg, Msg::Disconnect(d) if d.reason == super::SHUTDOWN);
        let encoding = if binary.load(Ordering::Acquire) {
            Encoding::Binary
        } else {
            Encoding::Json
        };
        match tokio::time::timeout(deadline, sink.send(to_ws(&msg, encoding))).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => break,
            Err(_) => {
                tracing::info!("an agent took no frame for {deadline:?}; closing its connection");
                return;
            }
        }
        if last {
            break;
        }
    }
    let mut owed = close_reason.lock().unwrap_or_else(|p| p.into_inner()).take();
    if owed.is_none() && stopping {
        owed = Some(CloseFrame {
            code: CLOSE_GOING_AWAY.into(),
            reason: "the server is stopping".into(),
        });
    }
    if let Some(frame) = owed {
        let _ = sink.send(WsMessage::Close(Some(frame))).await;
    }
    let _ = sink.close().await;
}
