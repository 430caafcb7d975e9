//! The running server's front door: the router (REST API, web pages, the WebSocket and gRPC
//! agent endpoints on one port) and the listener it serves on. The shared state is
//! [`crate::state::AppState`].

use crate::api;
use crate::gateway;
use crate::state::AppState;
use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use std::sync::Arc;

/// gRPC sessions (HTTP/2 streams) one connection carries at once: the connection caps count
/// connections, and each stream's first message is decoded before its token is checked
/// (hyper's default allows 200). A client multiplexing more waits for a stream to end.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 32;

/// Largest WebSocket frame accepted from an agent (a batch of 4096 actions is ~0.5 MB), and the
/// most the server puts in one message.
pub const MAX_FRAME_BYTES: usize = arena_sdk::protocol::MAX_MESSAGE_BYTES;

/// The routes: the web pages (`/`, `/static/...`, `/vendor/three/...`), `/api/v1/...` REST, the
/// `/api/v1/agent` WebSocket, and the gRPC services
/// (`/arena.v1.AgentGateway/...`, `/grpc.health.v1.Health/...`) on the same port over HTTP/2.
pub async fn router(state: Arc<AppState>) -> Router {
    let grpc = gateway::grpc::routes(state.clone()).await;
    let routes = Router::new()
        .route("/api/v1/agent", get(agent_socket))
        .merge(api::routes())
        .merge(crate::web::routes())
        .with_state(state)
        .merge(grpc)
        .fallback(no_route);
    // Around the whole router, not each route: a route's method router adds `Allow` to its 405
    // after the route's layers have run, and the JSON error names the methods from it.
    Router::new()
        .fallback_service(routes)
        .layer(axum::middleware::from_fn(method_not_allowed_as_json))
}

/// A known path asked with a method it does not take: axum answers 405 with no body; the REST
/// API's clients (`arena admin`, the pages) get the same JSON error as for any refusal, naming
/// the method and path, with axum's `Allow` header kept.
async fn method_not_allowed_as_json(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_string());
    let response = next.run(request).await;
    if response.status() != axum::http::StatusCode::METHOD_NOT_ALLOWED {
        return response;
    }
    let allowed = response
        .headers()
        .get(axum::http::header::ALLOW)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let message = match &allowed {
        Some(allowed) => format!("{} does not take {method}; it takes {allowed}", clip_path(&path)),
        None => format!("{} does not take {method}", clip_path(&path)),
    };
    let error = crate::access::AccessError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        message,
    );
    let mut json = axum::response::IntoResponse::into_response(api::ApiError(error));
    if let Some(allow) = response.headers().get(axum::http::header::ALLOW) {
        json.headers_mut().insert(axum::http::header::ALLOW, allow.clone());
    }
    json
}

/// A request's path as a message names it: at most 100 characters (a client's text, as every
/// refusal quotes it), unquoted when short.
fn clip_path(path: &str) -> String {
    match path.chars().count() {
        0..=100 => path.to_string(),
        _ => arena_sdk::protocol::quoted(path),
    }
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
        "no route for {} {}; the REST API lives under /api/v1 (docs/server.md)",
        request.method(),
        clip_path(&path)
    );
    axum::response::IntoResponse::into_response(api::ApiError(crate::access::AccessError::not_found(message)))
}

async fn agent_socket(
    State(state): State<Arc<AppState>>,
    connection: Option<axum::Extension<Arc<crate::connections::Activity>>>,
    place: Option<axum::Extension<Arc<crate::connections::Admission>>>,
    mut request: axum::extract::Request,
) -> Response {
    let (switched, upgrade) = match gateway::ws_handshake::accept(&mut request) {
        Ok(accepted) => accepted,
        Err(refused) => {
            let upgrade = refused.status == axum::http::StatusCode::UPGRADE_REQUIRED;
            let mut response = axum::response::IntoResponse::into_response(api::ApiError(refused));
            if upgrade {
                // RFC 6455 §4.4: the version this server speaks.
                response.headers_mut().insert(
                    axum::http::header::SEC_WEBSOCKET_VERSION,
                    axum::http::HeaderValue::from_static("13"),
                );
            }
            return response;
        }
    };
    let connection = connection.map(|axum::Extension(activity)| activity);
    // Counted from here: once upgraded, the connection leaves the HTTP server's graceful
    // shutdown, and a stop must not miss it before its session starts.
    let open = state.session_stop.open_connection();
    let address = place.as_ref().map(|p| p.address());
    tokio::spawn(async move {
        match gateway::ws_handshake::socket(upgrade, MAX_FRAME_BYTES).await {
            Ok((socket, refused)) => gateway::ws::session(socket, refused, state, connection, address, open).await,
            Err(e) => tracing::debug!("an agent WebSocket did not switch: {e}"),
        }
        // An agent session counts as an open connection until it ends.
        drop(place);
    });
    switched
}

/// Sets TCP_NODELAY on an accepted connection. An agent's session is a stream of small
/// messages each answered by the other side: with Nagle's algorithm a small write that follows
/// another unacknowledged one (HTTP/2 sends frames such as WINDOW_UPDATE beside each gRPC
/// message) waits for the peer's delayed ACK, about 40 ms a control step (issue 30).
fn no_delay(stream: &tokio::net::TcpStream) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::warn!("cannot set TCP_NODELAY on an accepted connection: {e}");
    }
}

/// How long a stopping server waits for its open requests and agent sessions to end (each
/// session's `disconnect {shutdown}` delivered) before it exits anyway: a dataset download or an
/// agent that does not read must not hold a deploy (`docker stop` kills after 10 s).
pub const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// Serves until `shutdown` resolves, then stops accepting, tells the agent sessions to end
/// ([`crate::session_stop`]) and lets the open requests finish, for at most [`STOP_GRACE`].
/// Each connection is admitted under the configured caps and watched for its deadlines
/// ([`crate::connections`]).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    use crate::connections::{Gate, RefusalLog};
    use crate::refusal::Refuser;
    use hyper_util::rt::{TokioExecutor, TokioTimer};
    let limits = state.config.connection_limits();
    let stopping = state.clone();
    let app = router(state).await;
    let gate = Gate::new(limits);
    let proxies = stopping.config.trusted_proxies();
    let refusals = Arc::new(std::sync::Mutex::new(RefusalLog::default()));
    let refuser = Refuser::default();
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder.http2().max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors or a connection reset before accept: the listener
                    // itself is fine; pause a little rather than spin.
                    tracing::warn!("accept error: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let serving = Serving {
            app: app.clone(),
            gate: gate.clone(),
            refusals: refusals.clone(),
            refuser: refuser.clone(),
            builder: builder.clone(),
            graceful: graceful.watcher(),
            limits,
        };
        if proxies.trusts(peer.ip()) {
            // A load balancer's connection: the client's address is in its PROXY header, read
            // off in the connection's own task (a slow one must not hold the accept loop),
            // counted under the balancer's address meanwhile (not outside the caps), and within
            // a deadline of its own: a balancer sends it at once.
            let Some((reading, stream)) = serving.admit(peer, stream) else {
                continue;
            };
            let wait = limits.header_timeout.min(crate::proxy_protocol::HEADER_WAIT);
            tokio::spawn(async move {
                let mut stream = stream;
                let read = crate::proxy_protocol::read_header(&mut stream, wait).await;
                drop(reading);
                match read {
                    Ok(client) => serving.connection(stream, client.unwrap_or(peer)),
                    Err(why) => tracing::debug!("closing the connection from {peer}: its PROXY header: {why}"),
                }
            });
        } else {
            serving.connection(stream, peer);
        }
    }
    // Refused from now on rather than left in the backlog until the process exits: an agent
    // reconnecting finds another replica (or waits for the restart) sooner.
    drop(listener);
    stopping.session_stop.tell();
    let deadline = tokio::time::Instant::now() + STOP_GRACE;
    if tokio::time::timeout_at(deadline, graceful.shutdown()).await.is_err() {
        tracing::warn!("requests still open {STOP_GRACE:?} after the stop; closing them");
    }
    let left = stopping
        .session_stop
        .closed_within(deadline.saturating_duration_since(tokio::time::Instant::now()))
        .await;
    if left > 0 {
        tracing::warn!("{left} agent connection(s) still open {STOP_GRACE:?} after the stop; closing them");
    }
    Ok(())
}

/// What serving one accepted connection needs (the accept loop's, shared with the tasks that
/// read a load balancer's PROXY header first).
struct Serving {
    app: axum::Router,
    gate: crate::connections::Gate,
    refusals: Arc<std::sync::Mutex<crate::connections::RefusalLog>>,
    refuser: crate::refusal::Refuser,
    builder: hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>,
    graceful: hyper_util::server::graceful::Watcher,
    limits: crate::connections::ConnectionLimits,
}

impl Serving {
    /// A place under the caps for a connection counted under `address`, or None after the
    /// connection was answered 503 and the refusal logged.
    fn admit(
        &self,
        address: std::net::SocketAddr,
        stream: tokio::net::TcpStream,
    ) -> Option<(crate::connections::Admission, tokio::net::TcpStream)> {
        match self.gate.admit(address.ip()) {
            Ok(admission) => Some((admission, stream)),
            Err(refusal) => {
                self.refusals
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .record(refusal, address, &self.gate);
                self.refuser.refuse(stream);
                None
            }
        }
    }

    /// Admits the connection of `client` under the caps (or refuses it) and serves it in a task
    /// of its own, watched for its deadlines.
    fn connection(self, stream: tokio::net::TcpStream, client: std::net::SocketAddr) {
        use crate::connections::Watched;
        use hyper_util::rt::TokioIo;
        // Shared with an upgraded agent WebSocket: the place is freed when both are gone.
        let Some((admission, stream)) = self.admit(client, stream) else {
            return;
        };
        let admission = Arc::new(admission);
        let Serving {
            app,
            builder,
            graceful,
            limits,
            ..
        } = self;
        no_delay(&stream);
        let (io, activity) = Watched::new(stream);
        let served = activity.clone();
        let place = admission.clone();
        let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let guard = served.request();
            // A body its handler waits for in vain does not hold the connection for ever. The
            // gRPC services' streams wait between messages by design (heartbeats watch them):
            // told by their route over HTTP/2, never by a header the client chose.
            let path = request.uri().path();
            let grpc = request.version() == hyper::Version::HTTP_2
                && (path.starts_with("/arena.v1.AgentGateway/") || path.starts_with("/grpc.health.v1.Health/"));
            let mut request = match grpc {
                true => request.map(axum::body::Body::new),
                false => {
                    let watched = served.clone();
                    request.map(|body| axum::body::Body::new(crate::connections::WatchedBody::new(body, watched)))
                }
            };
            // The agent WebSocket asks for a lingering close through it (`gateway::ws`), and
            // keeps the connection's place under the caps while its session runs.
            request.extensions_mut().insert(served.clone());
            request.extensions_mut().insert(place.clone());
            let app = app.clone();
            async move {
                let response = tower::ServiceExt::oneshot(app, request).await;
                drop(guard);
                response
            }
        });
        let connection = graceful.watch(
            builder
                .serve_connection_with_upgrades(TokioIo::new(io), service)
                .into_owned(),
        );
        tokio::spawn(async move {
            tokio::select! {
                result = connection => {
                    if let Err(e) = result {
                        tracing::debug!("connection from {client}: {e}");
                    }
                }
                why = activity.expired(limits) => tracing::debug!("closing the connection from {client}: {why}"),
            }
            // The place is freed with the HTTP connection, or after an upgraded WebSocket's session.
            drop(admission);
        });
    }
}

#[cfg(test)]
mod tests {
    /// The server half of the guard against issue 30's 44 ms gRPC steps: every connection the
    /// server accepts has TCP_NODELAY set (the client half is in `arena_sdk::client`).
    #[tokio::test]
    async fn accepted_connections_have_nagle_off() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::net::TcpStream::connect(addr);
        let (accepted, client) = tokio::join!(listener.accept(), client);
        client.unwrap();
        let (accepted, _) = accepted.unwrap();
        super::no_delay(&accepted);
        assert!(accepted.nodelay().unwrap(), "the server must set TCP_NODELAY");
    }
}
