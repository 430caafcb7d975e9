//! The WebSocket transport: each frame carries one Envelope, protobuf in binary frames and JSON
//! in text frames. The kind of the client's first frame sets the session's encoding; the server
//! answers in it.

use super::Incoming;
use crate::state::AppState;
use arena_sdk::protocol::{self, Encoding, Msg};
use axum::extract::ws::{Message as WsMessage, WebSocket};
use futures_util::{SinkExt, StreamExt};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

/// Runs one session on an upgraded socket.
pub async fn session(socket: WebSocket, state: Arc<AppState>) {
    let (sink, stream) = socket.split();
    // Set by the first data frame; replies before it (a Connect timeout) go out as JSON.
    let binary = Arc::new(AtomicBool::new(false));
    let mut seen_data = false;
    let reader_binary = binary.clone();
    let incoming = stream.map(move |frame| {
        if !seen_data && matches!(frame, Ok(WsMessage::Binary(_) | WsMessage::Text(_))) {
            seen_data = true;
            reader_binary.store(matches!(frame, Ok(WsMessage::Binary(_))), Ordering::Release);
        }
        decode(frame)
    });
    let (out_tx, out_rx) = unbounded_channel();
    // The writer owns the sink; the session sends through `out_tx`.
    let writer = tokio::spawn(write_frames(sink, out_rx, binary));
    super::session(state, Box::pin(incoming), out_tx).await;
    let _ = writer.await;
}

fn decode(frame: Result<WsMessage, axum::Error>) -> Incoming {
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
        // Pings and pongs are the library's keep-alive, not messages.
        Ok(WsMessage::Ping(_) | WsMessage::Pong(_)) => Incoming::Ignore,
    }
}

fn to_ws(msg: &Msg, encoding: Encoding) -> WsMessage {
    match protocol::encode(msg, encoding) {
        protocol::Frame::Text(t) => WsMessage::Text(t.into()),
        protocol::Frame::Binary(b) => WsMessage::Binary(b.into()),
    }
}

async fn write_frames(
    mut sink: futures_util::stream::SplitSink<WebSocket, WsMessage>,
    mut rx: UnboundedReceiver<Msg>,
    binary: Arc<AtomicBool>,
) {
    while let Some(msg) = rx.recv().await {
        let last = matches!(msg, Msg::Disconnect(_));
        let encoding = if binary.load(Ordering::Acquire) {
            Encoding::Binary
        } else {
            Encoding::Json
        };
        if sink.send(to_ws(&msg, encoding)).await.is_err() {
            break;
        }
        if last {
            break;
        }
    }
    let _ = sink.close().await;
}
