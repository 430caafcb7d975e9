//! The gRPC transport: `arena.v1.AgentGateway/Session` is one bidirectional stream of Envelopes
//! per session, served on the HTTP port (HTTP/2), next to the standard gRPC health service.

use super::Incoming;
use super::grpc_opening::OpeningLimit;
use crate::connections::Activity;
use crate::outbox::outbox;
use crate::state::AppState;
use arena_sdk::protocol::agent_gateway_server::{AgentGateway, AgentGatewayServer};
use arena_sdk::protocol::{DecodeError, Envelope, Msg, codes};
use futures_util::{Stream, StreamExt};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tonic::server::NamedService;
use tonic::{Code, Request, Response, Status, Streaming};

/// Largest message accepted from an agent, as on WebSocket.
const MAX_MESSAGE_BYTES: usize = arena_sdk::protocol::MAX_MESSAGE_BYTES;

/// The AgentGateway service.
pub struct GrpcGateway {
    state: Arc<AppState>,
}

type Outgoing = Pin<Box<dyn Stream<Item = Result<Envelope, Status>> + Send>>;

#[tonic::async_trait]
impl AgentGateway for GrpcGateway {
    type SessionStream = Outgoing;

    async fn session(&self, request: Request<Streaming<Envelope>>) -> Result<Response<Outgoing>, Status> {
        let connection = request.extensions().get::<Arc<Activity>>().cloned();
        // The request stream ends at its first error: tonic would go on decoding after an
        // undecodable message, but from a byte position that no longer means anything.
        let incoming = request.into_inner().scan(false, |failed, item| {
            let next = match item {
                _ if *failed => None,
                Ok(Envelope { msg: Some(m) }) => Some(Incoming::Msg(m)),
                Ok(Envelope { msg: None }) => Some(Incoming::Bad(DecodeError {
                    code: codes::UNKNOWN_MESSAGE,
                    message: "an Envelope with no message set (or one this server does not know)".into(),
                })),
                Err(status) => {
                    *failed = true;
                    Some(from_stream_error(&status))
                }
            };
            std::future::ready(next)
        });
        let (out_tx, out_rx) = outbox();
        // A client that stops reading must not hold its stream and what waits for it forever.
        // The HTTP/2 layer polls the response stream only while the client's flow-control
        // window has room, so the stream cannot notice by itself: when messages have waited
        // untaken for the silence limit (as a WebSocket frame may), the connection is closed,
        // which drops the stream and so ends the session's sends.
        if let Some(connection) = connection {
            let backlog = out_rx.backlog();
            let limit = Duration::from_secs_f64(self.state.config.heartbeat_timeout_s);
            tokio::spawn(async move {
                if backlog.stalled(limit).await {
                    tracing::info!("a gRPC agent took no message for {limit:?}; closing its connection");
                    connection.close_now("a gRPC agent stopped reading");
                }
            });
        }
        // Counted while the session runs; the HTTP/2 graceful shutdown then waits for the
        // stream to deliver what the session sent last.
        let open = self.state.session_stop.open_connection();
        let session = super::session(self.state.clone(), Box::pin(incoming), out_tx, super::Replies::Protobuf);
        tokio::spawn(async move {
            session.await;
            drop(open);
        });
        // The response stream ends after a Disconnect, or when the session drops its sender.
        let outgoing = futures_util::stream::unfold((out_rx, false), |(mut rx, done)| async move {
            if done {
                return None;
            }
            let msg = rx.recv().await?;
            let last = matches!(msg, Msg::Disconnect(_));
            Some((Ok(Envelope { msg: Some(msg) }), (rx, last)))
        });
        Ok(Response::new(Box::pin(outgoing)))
    }
}

/// The last thing the session hears from a failed request stream: an undecodable or oversized
/// message is answered with a `malformed_message` Error and a Disconnect (the agent learns why
/// its session ends); anything else (a cancelled call, a reset connection) is the connection
/// ending.
fn from_stream_error(status: &Status) -> Incoming {
    match status.code() {
        // The codec's refusal of a decodable message it will not build (an action over a batch).
        Code::InvalidArgument => Incoming::Fatal(DecodeError {
            code: codes::INVALID_MESSAGE,
            message: format!(
                "{}; the server reads no more of this stream, so the session ends",
                status.message()
            ),
        }),
        Code::Internal | Code::OutOfRange => Incoming::Fatal(DecodeError {
            code: codes::MALFORMED_MESSAGE,
            message: format!(
                "undecodable gRPC message ({}); the server reads no more of this stream, so the session ends",
                status.message()
            ),
        }),
        _ => Incoming::Closed,
    }
}

/// The gRPC services (AgentGateway and grpc.health.v1.Health) as routes for the HTTP router.
pub async fn routes(state: Arc<AppState>) -> axum::Router {
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<AgentGatewayServer<GrpcGateway>>().await;
    crate::health::follow_in_grpc::<AgentGatewayServer<GrpcGateway>>(Arc::downgrade(&state), health);
    let gateway = AgentGatewayServer::new(GrpcGateway { state })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(usize::MAX);
    // A session's first message is held to the opening limit from its prefix, before tonic
    // buffers it (`grpc_opening`): routed as tonic's `Routes` would, with the body wrapped.
    let gateway = tower::ServiceExt::map_request(gateway, |request: axum::http::Request<axum::body::Body>| {
        request.map(|body| tonic::body::Body::new(OpeningLimit::new(body)))
    });
    let path = format!("/{}/{{*rest}}", <AgentGatewayServer<GrpcGateway> as NamedService>::NAME);
    tonic::service::Routes::new(health_service)
        .into_axum_router()
        .route_service(&path, gateway)
}
