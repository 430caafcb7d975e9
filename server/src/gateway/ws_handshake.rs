//! The agent WebSocket's opening handshake (RFC 6455 §4.2), done here rather than by axum's
//! extractor so that the upgraded connection is read through the opening limit
//! ([`super::ws_opening`]) before tungstenite sees a frame: axum hands over a socket whose IO
//! cannot be wrapped.

use super::ws_opening::{OpeningLimit, OverOpening};
use crate::access::AccessError;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Version, header};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use std::sync::{Arc, OnceLock};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

/// An agent's upgraded connection, read through the opening limit.
pub type AgentSocket = WebSocketStream<OpeningLimit<TokioIo<Upgraded>>>;

/// The switch's answer and the upgrade it promises, or why `request` is not a WebSocket
/// opening (a `400` that says what is missing, or `426` where the connection cannot switch).
pub fn accept<B>(request: &mut Request<B>) -> Result<(Response<Body>, OnUpgrade), AccessError> {
    let not_an_opening = |what: &str| {
        AccessError::bad_request(format!(
            "not a WebSocket opening: {what}; agents open /api/v1/agent with a WebSocket client, or use gRPC (docs/protocol.md §1)"
        ))
    };
    if request.version() != Version::HTTP_11 {
        return Err(not_an_opening(
            "the request is not HTTP/1.1 (WebSocket over HTTP/2 is not offered)",
        ));
    }
    if request.method() != Method::GET {
        return Err(not_an_opening("the method is not GET"));
    }
    let headers = request.headers();
    if !has_token(headers, header::CONNECTION, "upgrade") {
        return Err(not_an_opening("no `Connection: upgrade` header"));
    }
    if !has_token(headers, header::UPGRADE, "websocket") {
        return Err(not_an_opening("no `Upgrade: websocket` header"));
    }
    if headers.get(header::SEC_WEBSOCKET_VERSION).map(HeaderValue::as_bytes) != Some(b"13") {
        // RFC 6455 §4.4: 426, with the version this server speaks (the caller adds the header).
        return Err(AccessError::new(
            StatusCode::UPGRADE_REQUIRED,
            "bad_request",
            "not a WebSocket opening: `Sec-WebSocket-Version` is not 13, the version this server speaks",
        ));
    }
    let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY) else {
        return Err(not_an_opening("no `Sec-WebSocket-Key` header"));
    };
    let accept = derive_accept_key(key.as_bytes());
    let Some(upgrade) = request.extensions_mut().remove::<OnUpgrade>() else {
        return Err(AccessError::new(
            StatusCode::UPGRADE_REQUIRED,
            "bad_request",
            "this connection cannot switch to a WebSocket",
        ));
    };
    let response = Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, "websocket")
        .header(header::SEC_WEBSOCKET_ACCEPT, accept)
        .body(Body::empty())
        .map_err(|e| AccessError::internal(format!("the WebSocket switch's answer: {e}")))?;
    Ok((response, upgrade))
}

/// The socket once the connection has switched, with messages of at most `max_message_bytes`
/// (the first one held to the opening limit), and where a refusal of the first is told.
pub async fn socket(
    upgrade: OnUpgrade,
    max_message_bytes: usize,
) -> Result<(AgentSocket, Arc<OnceLock<OverOpening>>), hyper::Error> {
    let (io, refused) = OpeningLimit::new(TokioIo::new(upgrade.await?));
    let config = WebSocketConfig::default()
        .max_message_size(Some(max_message_bytes))
        .max_frame_size(Some(max_message_bytes));
    let socket = WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await;
    Ok((socket, refused))
}

/// Whether the comma-separated header `name` lists `token` (case aside).
fn has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opening() -> Request<()> {
        Request::get("/api/v1/agent")
            .header("connection", "keep-alive, Upgrade")
            .header("upgrade", "WebSocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
            .body(())
            .unwrap()
    }

    #[test]
    fn a_request_that_is_not_an_opening_is_told_what_it_lacks() {
        let mut plain = Request::get("/api/v1/agent").body(()).unwrap();
        let refused = accept(&mut plain).unwrap_err();
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        assert!(refused.message.contains("`Connection: upgrade`"), "{}", refused.message);
        let mut old = opening();
        old.headers_mut()
            .insert("sec-websocket-version", HeaderValue::from_static("8"));
        let refused = accept(&mut old).unwrap_err();
        assert!(refused.message.contains("not 13"), "{}", refused.message);
        assert_eq!(refused.status, StatusCode::UPGRADE_REQUIRED);
        // Everything in order but the connection, which a test's request cannot switch.
        let refused = accept(&mut opening()).unwrap_err();
        assert_eq!(refused.status, StatusCode::UPGRADE_REQUIRED);
        // RFC 6455 §1.3's example key and its answer.
        assert_eq!(
            derive_accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }
}
