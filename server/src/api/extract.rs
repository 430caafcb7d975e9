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
