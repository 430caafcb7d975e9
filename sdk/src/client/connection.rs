//! One open session's transport: WebSocket (JSON or protobuf frames), gRPC (a bidirectional
//! stream of Envelopes) or an in-process channel (the server's hosted runs). It opens the
//! connection with its `connect` and moves protocol messages; the session logic (`super`) is
//! the same on all three.

use super::{ClientConfig, LocalConnector};
use crate::protocol::agent_gateway_client::AgentGatewayClient;
use crate::protocol::{self, Encoding, Msg};
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

fn to_ws(msg: &Msg, encoding: Encoding) -> WsMessage {
    match protocol::encode(msg, encoding) {
        protocol::Frame::Text(t) => WsMessage::Text(t.into()),
        protocol::Frame::Binary(b) => WsMessage::Binary(b.into()),
    }
}

/// One open session's transport: sends and receives protocol messages.
pub(super) enum Connection {
    WebSocket {
        socket: Box<WebSocketStream<MaybeTlsStream<TcpStream>>>,
        encoding: Encoding,
    },
    Grpc {
        requests: tokio::sync::mpsc::UnboundedSender<protocol::Envelope>,
        responses: Box<tonic::Streaming<protocol::Envelope>>,
    },
    /// In the server's process ([`ClientConfig::local`]).
    Local {
        requests: tokio::sync::mpsc::UnboundedSender<Msg>,
        responses: tokio::sync::mpsc::UnboundedReceiver<Msg>,
    },
}

/// The gRPC target of a `grpc://host:port` URL (tonic dials `http://host:port`).
pub(super) fn grpc_endpoint(url: &str) -> Option<String> {
    url.strip_prefix("grpc://")
        .map(|rest| format!("http://{}", rest.trim_end_matches('/')))
}

/// How the gRPC client dials: TCP_NODELAY set explicitly (tonic's default today), since a
/// session is a stream of small messages each waiting for an answer, and Nagle's algorithm
/// against the peer's delayed ACK costs about 40 ms a step (issue 30).
pub(super) fn grpc_channel(target: String) -> Result<tonic::transport::Endpoint, String> {
    tonic::transport::Endpoint::from_shared(target.clone())
        .map(|e| e.tcp_nodelay(true))
        .map_err(|e| format!("not a gRPC address: {target}: {e}"))
}

/// Why a connection could not be opened.
pub(super) struct OpenError {
    pub(super) message: String,
    /// The server was reached (it answered, if only with an HTTP status): worth retrying even
    /// on a run's first connection.
    pub(super) server_answered: bool,
    /// Accepted, then reset or closed before any answer (`server_answered` is set too):
    /// something listens there, but a run's first connection tries this only a few times
    /// ([`super::FIRST_CONNECTION_CUTS`]), since a `ws://` URL at a TLS port looks the same.
    pub(super) cut_before_answer: bool,
    /// The server refused the connection at its connection caps ("too many open connections;
    /// retry shortly"; `server_answered` is set too): waited out like a busy submission, for up
    /// to [`super::BUSY_WAIT`], rather than counted against `max_reconnects`.
    pub(super) at_capacity: bool,
}

impl From<String> for OpenError {
    fn from(message: String) -> Self {
        OpenError {
            message,
            server_answered: false,
            cut_before_answer: false,
            at_capacity: false,
        }
    }
}

/// The code of the server's refusal at its connection caps, in its 503's JSON body.
const AT_CAPACITY: &str = "too_many_connections";

/// What an HTTP answer in place of the upgrade says: its status, and the API's JSON error
/// (`{"error": {"code", "message"}}`) when it carries one, which the status alone hid (a
/// participant saw "HTTP error: 503 Service Unavailable" at the server's connection cap).
fn http_refusal(response: &tokio_tungstenite::tungstenite::http::Response<Option<Vec<u8>>>) -> (String, bool) {
    let error = response
        .body()
        .as_deref()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
        .map(|v| v["error"].clone());
    let code = error.as_ref().and_then(|e| e["code"].as_str()).unwrap_or_default();
    let message = error.as_ref().and_then(|e| e["message"].as_str()).unwrap_or_default();
    let words = match (code, message) {
        ("", "") => String::new(),
        (code, message) => format!(": {}", protocol::quoted(&format!("{code}: {message}"))),
    };
    (
        format!("the server answered HTTP {}{words}", response.status()),
        response.status().as_u16() == 503 && code == AT_CAPACITY,
    )
}

impl Connection {
    /// Opens the transport the URL names and sends `connect` as the first message, within
    /// `config.connect_timeout`.
    pub(super) async fn open(config: &ClientConfig, connect: Msg) -> Result<Self, OpenError> {
        match tokio::time::timeout(config.connect_timeout, Self::open_now(config, connect)).await {
            Ok(opened) => opened,
            Err(_) => Err(OpenError {
                message: format!(
                    "connecting to {}: no answer within {:?} (connect_timeout)",
                    config.url, config.connect_timeout
                ),
                server_answered: false,
                cut_before_answer: false,
                at_capacity: false,
            }),
        }
    }

    async fn open_now(config: &ClientConfig, connect: Msg) -> Result<Self, OpenError> {
        if let Some(LocalConnector(open)) = &config.local {
            let (requests, responses) = open();
            requests
                .send(connect)
                .map_err(|_| OpenError::from("the in-process session closed at once".to_string()))?;
            return Ok(Connection::Local { requests, responses });
        }
        let url = config.url.as_str();
        if let Some(endpoint) = grpc_endpoint(url) {
            let channel = grpc_channel(endpoint)?
                .connect()
                .await
                .map_err(|e| OpenError::from(format!("connecting to {url}: {}", error_chain(&e))))?;
            let mut client = AgentGatewayClient::new(channel).max_decoding_message_size(usize::MAX);
            let (requests, rx) = tokio::sync::mpsc::unbounded_channel();
            let _ = requests.send(protocol::Envelope { msg: Some(connect) });
            let outbound = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
            let responses = client
                .session(outbound)
                .await
                .map_err(|e| {
                    // The server's refusal at its connection caps ("retry shortly", the 503 of a
                    // WebSocket): a server is there, so the run waits for a place.
                    let refused = e.metadata().contains_key(protocol::REFUSAL_METADATA);
                    OpenError {
                        server_answered: refused,
                        cut_before_answer: false,
                        at_capacity: refused,
                        message: format!("opening a gRPC session at {url}: {}", e.message()),
                    }
                })?
                .into_inner();
            return Ok(Connection::Grpc {
                requests,
                responses: Box::new(responses),
            });
        }
        // The address `arena serve` prints (`http://HOST:PORT`): its agent endpoint, over
        // WebSocket (a path given with it is kept).
        let ws_url;
        let url = match url.strip_prefix("http://") {
            Some(rest) => {
                let rest = rest.trim_end_matches('/');
                ws_url = match rest.contains('/') {
                    true => format!("ws://{rest}"),
                    false => format!("ws://{rest}/api/v1/agent"),
                };
                ws_url.as_str()
            }
            None => url,
        };
        // TCP_NODELAY for the same reason as gRPC's (the last argument).
        let (socket, _) = tokio_tungstenite::connect_async_with_config(url, None, true)
            .await
            .map_err(|e| {
                // A 5xx instead of the upgrade (503 over the server's connection caps, "retry
                // shortly"; a proxy's 502 while the server restarts): a server is there, so the
                // run retries as after a lost connection instead of stopping as unreachable. A
                // 4xx (a wrong path, a plain web server) is a wrong address: no retry.
                // Accepted, then reset or closed mid-handshake: something listens there (a flaky
                // first packet, a proxy whose backend restarts), so the run retries too; refused
                // (nothing listening) or an unknown name is a wrong address.
                let cut = match &e {
                    tokio_tungstenite::tungstenite::Error::Io(io) => matches!(
                        io.kind(),
                        std::io::ErrorKind::ConnectionReset
                            | std::io::ErrorKind::ConnectionAborted
                            | std::io::ErrorKind::BrokenPipe
                            | std::io::ErrorKind::UnexpectedEof
                    ),
                    tokio_tungstenite::tungstenite::Error::Protocol(
                        tokio_tungstenite::tungstenite::error::ProtocolError::HandshakeIncomplete,
                    ) => true,
                    _ => false,
                };
                let (message, server_error, at_capacity) = match &e {
                    tokio_tungstenite::tungstenite::Error::Http(r) => {
                        let (said, at_capacity) = http_refusal(r);
                        (
                            format!("connecting to {url}: {said}"),
                            r.status().is_server_error(),
                            at_capacity,
                        )
                    }
                    _ => (format!("connecting to {url}: {e}"), false, false),
                };
                OpenError {
                    server_answered: cut || server_error,
                    cut_before_answer: cut,
                    at_capacity,
                    message,
                }
            })?;
        let mut connection = Connection::WebSocket {
            socket: Box::new(socket),
            encoding: config.encoding,
        };
        connection.send(connect).await.map_err(|e| OpenError {
            message: format!("sending Connect: {e}"),
            server_answered: true,
            cut_before_answer: false,
            at_capacity: false,
        })?;
        Ok(connection)
    }

    pub(super) async fn send(&mut self, msg: Msg) -> Result<(), String> {
        match self {
            Connection::WebSocket { socket, encoding } => {
                socket.send(to_ws(&msg, *encoding)).await.map_err(|e| e.to_string())
            }
            Connection::Grpc { requests, .. } => requests
                .send(protocol::Envelope { msg: Some(msg) })
                .map_err(|_| "the gRPC request stream is closed".to_string()),
            Connection::Local { requests, .. } => requests
                .send(msg)
                .map_err(|_| "the in-process session is closed".to_string()),
        }
    }

    /// The next message; `Err` when the connection is lost or a frame cannot be decoded
    /// (`Ok(Err)` is an undecodable frame, which is the server's bug).
    ///
    /// A message of a type this version does not know (a newer server's) is skipped with a
    /// warning: protocol.md §11 lets a version gain messages, and clients ignore what they do
    /// not know, as the Python SDK does.
    pub(super) async fn recv(&mut self) -> Result<Result<Msg, String>, String> {
        match self {
            Connection::WebSocket { socket, .. } => loop {
                let frame = match socket.next().await {
                    None | Some(Ok(WsMessage::Close(_))) => return Err("server closed the connection".into()),
                    Some(Err(e)) => return Err(format!("reading from the server: {e}")),
                    Some(Ok(WsMessage::Text(t))) => protocol::decode_json(&t),
                    Some(Ok(WsMessage::Binary(b))) => protocol::decode_binary(&b),
                    Some(Ok(_)) => continue,
                };
                match frame {
                    Err(e) if e.code == protocol::codes::UNKNOWN_MESSAGE => {
                        tracing::warn!("skipping a message this SDK does not know: {}", e.message);
                        continue;
                    }
                    frame => return Ok(frame.map_err(|e| e.to_string())),
                }
            },
            Connection::Grpc { responses, .. } => loop {
                return match responses.message().await {
                    Ok(Some(protocol::Envelope { msg: Some(m) })) => Ok(Ok(m)),
                    Ok(Some(protocol::Envelope { msg: None })) => {
                        tracing::warn!("skipping an Envelope whose message this SDK does not know");
                        continue;
                    }
                    Ok(None) => Err("server closed the connection".into()),
                    Err(status) => Err(format!("reading from the server: {}", status.message())),
                };
            },
            Connection::Local { responses, .. } => match responses.recv().await {
                Some(m) => Ok(Ok(m)),
                None => Err("the in-process session ended".into()),
            },
        }
    }

    /// Whether a NaN or infinite action reaches the server as such (the server then fails that
    /// episode): not over JSON, which writes it as `null`, and the server refuses the whole
    /// frame.
    pub(super) fn carries_non_finite(&self) -> bool {
        !matches!(
            self,
            Connection::WebSocket {
                encoding: Encoding::Json,
                ..
            }
        )
    }

    /// Closes after a Disconnect (WebSocket close frame; gRPC: ends the request stream). A
    /// WebSocket waits for the server's close frame (up to [`CLOSE_WAIT`]): a socket closed with
    /// the server's heartbeat unread is reset, and a reset can reach the server before it has
    /// read the Disconnect (a long `agent_cannot_serve` reason was lost so, and its submission
    /// stayed RUNNING until its idle expiry).
    pub(super) async fn close(self) {
        match self {
            Connection::WebSocket { mut socket, .. } => {
                let _ = SinkExt::close(&mut socket).await;
                let _ =
                    tokio::time::timeout(CLOSE_WAIT, async { while let Some(Ok(_)) = socket.next().await {} }).await;
            }
            Connection::Grpc { requests, .. } => drop(requests),
            Connection::Local { requests, .. } => drop(requests),
        }
    }
}

/// How long a closing WebSocket waits for the server's close frame.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// An error with its causes (`transport error: tcp connect error: Connection refused`): tonic's
/// own message alone says only "transport error".
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let next = c.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The guard of issue 30's 44 ms gRPC steps: the client dials with TCP_NODELAY (the
    /// server's half is `arena_server::app::no_delay_listener`, tested there).
    #[test]
    fn grpc_dials_without_nagle() {
        let target = grpc_endpoint("grpc://127.0.0.1:8080/").unwrap();
        assert_eq!(target, "http://127.0.0.1:8080");
        assert!(grpc_channel(target).unwrap().get_tcp_nodelay());
        assert!(
            grpc_channel("not a url".into())
                .unwrap_err()
                .contains("not a gRPC address")
        );
    }
}
