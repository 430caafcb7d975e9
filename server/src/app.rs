//! The running server's front door: the router (REST API, web pages, the WebSocket and gRPC
//! agent endpoints on one port) and the listener it serves on. The shared state is
//! [`crate::state::AppState`].

use crate::api;
use crate::gateway;
use crate::state::AppState;
use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::extract::ws::WebSocketUpgrade;
use axum::response::Response;
use axum::routing::get;
use std::sync::Arc;

/// Largest WebSocket frame accepted from an agent (a batch of 4096 actions is ~0.5 MB).
const MAX_FRAME_BYTES: usize = 16 << 20;

/// The routes: the web pages (`/`, `/static/...`, `/vendor/three/...`), `/api/v1/...` REST, the
/// `/api/v1/agent` WebSocket, and the gRPC services
/// (`/arena.v1.AgentGateway/...`, `/grpc.health.v1.Health/...`) on the same port over HTTP/2.
pub async fn router(state: Arc<AppState>) -> Router {
    let grpc = gateway::grpc::routes(state.clone()).await;
    Router::new()
        .route("/api/v1/agent", get(agent_socket))
        .merge(api::routes())
        .merge(crate::web::routes())
        .with_state(state)
        .merge(grpc)
        .fallback(no_route)
}

/// A path no route serves: a gRPC call (content type `application/grpc…`) gets gRPC's
/// `unimplemented`; any other request a JSON 404 naming the method and path.
async fn no_route(request: axum::extract::Request) -> Response {
    let path = request.uri().path().to_string();
    let grpc = request
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if grpc {
        return tonic::Status::unimplemented(format!("no gRPC method {path}")).into_http::<axum::body::Body>();
    }
    let message = format!(
        "no route for {} {path}; the REST API lives under /api/v1 (docs/server.md)",
        request.method()
    );
    axum::response::IntoResponse::into_response(api::ApiError(crate::access::AccessError::not_found(message)))
}

async fn agent_socket(ws: WebSocketUpgrade, State(state): State<Arc<AppState>>) -> Response {
    ws.max_message_size(MAX_FRAME_BYTES)
        .max_frame_size(MAX_FRAME_BYTES)
        .on_upgrade(move |socket| gateway::ws::session(socket, state))
}

/// The accepted connections of `listener` with TCP_NODELAY set. An agent's session is a
/// stream of small messages each answered by the other side: with Nagle's algorithm a small write
/// that follows another unacknowledged one (HTTP/2 sends frames such as WINDOW_UPDATE beside each
/// gRPC message) waits for the peer's delayed ACK, about 40 ms a control step (issue 30).
pub fn no_delay_listener(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    axum::serve::ListenerExt::tap_io(listener, |stream: &mut tokio::net::TcpStream| {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::warn!("cannot set TCP_NODELAY on an accepted connection: {e}");
        }
    })
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    axum::serve(no_delay_listener(listener), router(state).await)
        .with_graceful_shutdown(shutdown)
        .await
        .context("serving HTTP")
}

#[cfg(test)]
mod tests {
    use axum::serve::Listener;

    /// The server half of the guard against issue 30's 44 ms gRPC steps: every connection the
    /// server accepts has TCP_NODELAY set (the client half is in `arena_sdk::client`).
    #[tokio::test]
    async fn accepted_connections_have_nagle_off() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut listener = super::no_delay_listener(listener);
        let client = tokio::net::TcpStream::connect(addr);
        let ((accepted, _), client) = tokio::join!(listener.accept(), client);
        client.unwrap();
        assert!(accepted.nodelay().unwrap(), "the server must set TCP_NODELAY");
    }
}
