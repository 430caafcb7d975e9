//! What a connection refused at the listener's caps ([`crate::connections`]) is told before it
//! closes. An HTTP client reads a 503 "retry shortly". A gRPC client, whose first bytes are
//! HTTP/2's preface, gets the gRPC status UNAVAILABLE with the same words and the
//! [`REFUSAL_METADATA`] key, which the SDKs retry like the 503: the 503's HTTP/1.1 bytes read as
//! a broken connection at an HTTP/2 client, which the SDKs took for an unreachable server.
//!
//! A refused connection holds no place under the caps, only a task for at most
//! [`ANSWER_TIMEOUT`]; beyond [`MAX_ANSWERING`] such tasks at once, refusals get the 503 at once
//! without a look at their first bytes.

use arena_sdk::protocol::REFUSAL_METADATA;
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// The HTTP answer (`Connection: close`; a JSON error body as the API's).
pub const REFUSED_RESPONSE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 5\r\nConnection: close\r\nContent-Length: 95\r\n\r\n{\"error\":{\"code\":\"too_many_connections\",\"message\":\"too many open connections; retry shortly\"}}\n";

/// The gRPC status message of a refusal.
pub const REFUSAL_MESSAGE: &str = "too many open connections; retry shortly";

/// How long a refused connection may stay silent before it gets the HTTP answer.
const PEEK_TIMEOUT: Duration = Duration::from_millis(300);

/// How long a refused connection is answered at most.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// Refused connections answered at once.
const MAX_ANSWERING: usize = 64;

/// Answers refused connections in the background.
#[derive(Debug, Clone)]
pub struct Refuser {
    answering: Arc<Semaphore>,
}

impl Default for Refuser {
    fn default() -> Self {
        Refuser {
            answering: Arc::new(Semaphore::new(MAX_ANSWERING)),
        }
    }
}

impl Refuser {
    /// Answers `stream` and closes it, on a task of its own (the HTTP answer at once where
    /// [`MAX_ANSWERING`] refusals are being answered).
    pub fn refuse(&self, stream: TcpStream) {
        match self.answering.clone().try_acquire_owned() {
            Ok(permit) => {
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(ANSWER_TIMEOUT, answer(stream)).await;
                    drop(permit);
                });
            }
            Err(_) => {
                let _ = stream.try_write(REFUSED_RESPONSE);
            }
        }
    }
}

/// The gRPC refusal to an HTTP/2 client, the HTTP answer to anything else.
async fn answer(stream: TcpStream) {
    let mut first = [0u8; 3];
    let peeked = tokio::time::timeout(PEEK_TIMEOUT, stream.peek(&mut first)).await;
    if matches!(peeked, Ok(Ok(3))) && &first == b"PRI" {
        let service = hyper::service::service_fn(|_request| async { Ok::<_, Infallible>(grpc_refusal()) });
        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(stream), service)
            .await;
        return;
    }
    let mut stream = stream;
    if stream.write_all(REFUSED_RESPONSE).await.is_err() {
        return;
    }
    // Closing with the request unread would reset the connection, and a reset can reach the
    // client before it has read the answer: end the writing side and read until it closes.
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 4096];
    while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
}

/// A trailers-only gRPC response: UNAVAILABLE, the refusal's words, and [`REFUSAL_METADATA`].
fn grpc_refusal() -> hyper::Response<Empty<Bytes>> {
    hyper::Response::builder()
        .header("content-type", "application/grpc")
        .header("grpc-status", "14")
        .header("grpc-message", REFUSAL_MESSAGE)
        .header(REFUSAL_METADATA, "too_many_connections")
        .header("retry-after", "5")
        .body(Empty::new())
        .expect("constant headers")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_body_is_as_long_as_it_says() {
        let text = std::str::from_utf8(REFUSED_RESPONSE).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("Content-Length: {}", body.len())),
            "{}",
            body.len()
        );
        assert!(body.contains(REFUSAL_MESSAGE));
    }
}
