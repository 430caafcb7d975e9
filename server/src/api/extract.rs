//! Path and query extractors whose refusals are the API's JSON error body (axum's own answer
//! with plain text), so a malformed URL gets `{"error": {"code": "bad_request", ...}}` like
//! every other bad request.

use super::{ApiError, bad_request};
use axum::extract::{FromRequestParts, Path, Query};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

/// `axum::extract::Path` with a JSON 400 naming what could not be read.
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(ApiPath(value)),
            Err(e) => Err(bad_request(format!("URL path: {}", e.body_text()))),
        }
    }
}

/// `axum::extract::Query` with a JSON 400 naming the parameter that could not be read.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(ApiQuery(value)),
            Err(e) => Err(bad_request(format!(
                "query string: {}",
                e.body_text().trim_start_matches("Failed to deserialize query string: ")
            ))),
        }
    }
}

/// An episode index from the URL: a whole number (range checks are the caller's).
pub fn episode_index(raw: &str) -> Result<i64, ApiError> {
    raw.parse()
        .map_err(|_| bad_request(format!("episode index: expected a whole number, got {raw:?}")))
}

/// The largest REST request body (axum's default limit, said here so the message can name it).
pub const MAX_BODY_BYTES: usize = 2 << 20;

/// A request body as bytes, with the JSON error body when it cannot be read: 413
/// `payload_too_large` naming the limit (axum answers plain text), 400 otherwise. Every route
/// that takes a body needs a token, and the caller is checked before the body is read: a client
/// without a valid one is answered 401 without the server holding its body (up to 2 MiB a
/// request). The handler then says what the caller may do.
pub struct ApiBody(pub axum::body::Bytes);

impl axum::extract::FromRequest<std::sync::Arc<crate::state::AppState>> for ApiBody {
    type Rejection = ApiError;

    async fn from_request(
        req: axum::extract::Request,
        state: &std::sync::Arc<crate::state::AppState>,
    ) -> Result<Self, Self::Rejection> {
        super::caller(state, req.headers()).await?;
        match axum::body::Bytes::from_request(req, state).await {
            Ok(bytes) => Ok(ApiBody(bytes)),
            Err(e) if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError(crate::access::AccessError::new(
                    axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                    "payload_too_large",
                    format!("request body: larger than the limit of {} MiB", MAX_BODY_BYTES >> 20),
                )))
            }
            Err(e) => Err(bad_request(format!("request body: {}", e.body_text()))),
        }
    }
}
