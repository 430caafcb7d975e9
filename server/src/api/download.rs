//! Downloads of stored objects (a submission's trajectory file, a dataset's HDF5 export) with
//! byte ranges (RFC 9110 §14): a client that lost a multi-gigabyte download asks for the rest
//! (`Range: bytes=N-`, as `curl -C -` and `wget -c` do) instead of starting again.
//!
//! One range per request (a list of several is answered with the whole object, which the RFC
//! allows); `If-Range` with the entity tag the first response carried makes the resumption safe
//! when the object may have been replaced since (a dataset's export changes when episodes are
//! added): a tag that no longer matches gets the whole new object, never a splice of two files.

use super::{ApiError, internal_error};
use crate::state::AppState;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::ops::Range;

/// What a request's `Range` (and `If-Range`) ask of an object of `size` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Asked {
    /// No range, one this server ignores (several, another unit, bad syntax), or an `If-Range`
    /// that no longer matches: the whole object, 200.
    Whole,
    /// These bytes (end exclusive, never empty), 206.
    Part(Range<u64>),
    /// A range wholly past the end, 416.
    Unsatisfiable,
}

/// Reads the `Range` header for an object of `size` bytes whose entity tag is `e_tag` (quoted,
/// as sent in `ETag`).
pub(super) fn asked(headers: &HeaderMap, size: u64, e_tag: Option<&str>) -> Asked {
    let Some(range) = headers.get(header::RANGE).and_then(|v| v.to_str().ok()) else {
        return Asked::Whole;
    };
    if let Some(condition) = headers.get(header::IF_RANGE) {
        // A strong comparison with the current tag; a date (no Last-Modified is sent) or a weak
        // tag never matches.
        let current = e_tag.map(|t| t.as_bytes());
        if current.is_none_or(|t| t != condition.as_bytes()) {
            return Asked::Whole;
        }
    }
    let Some(spec) = range.trim().strip_prefix("bytes=") else {
        return Asked::Whole;
    };
    let Some((first, last)) = spec.split_once('-') else {
        return Asked::Whole;
    };
    if spec.contains(',') {
        return Asked::Whole;
    }
    let (first, last) = (first.trim(), last.trim());
    let number = |s: &str| -> Option<u64> { s.bytes().all(|b| b.is_ascii_digit()).then(|| s.parse().ok())? };
    match (first.is_empty(), last.is_empty()) {
        // bytes=-N: the last N bytes.
        (true, false) => match number(last) {
            None => Asked::Whole,
            Some(0) => Asked::Unsatisfiable,
            Some(_) if size == 0 => Asked::Unsatisfiable,
            Some(n) => Asked::Part(size.saturating_sub(n)..size),
        },
        // bytes=A- and bytes=A-B (B clamped to the last byte).
        (false, _) => {
            let Some(a) = number(first) else {
                return Asked::Whole;
            };
            let b = match last.is_empty() {
                true => None,
                false => match number(last) {
                    Some(b) if b >= a => Some(b),
                    _ => return Asked::Whole, // invalid: ignored
                },
            };
            if a >= size {
                return Asked::Unsatisfiable;
            }
            Asked::Part(a..b.map_or(size, |b| b.saturating_add(1).min(size)))
        }
        (true, true) => Asked::Whole,
    }
}

/// An object's entity tag as `ETag` sends it (quoted), from the store's (which may or may not
/// be quoted already).
fn quoted(e_tag: &str) -> String {
    format!("\"{}\"", e_tag.trim_matches('"'))
}

/// `filename` without the characters that would end a quoted header parameter early.
fn safe_name(file_name: &str) -> String {
    file_name
        .chars()
        .filter(|c| c.is_ascii_graphic() && *c != '"' && *c != '\\')
        .collect()
}

/// The stored object `key` as a download named `file_name`: whole (200, `Accept-Ranges: bytes`
/// and its `ETag`), the byte range the request asks for (206 with `Content-Range`), or 416 for a
/// range past its end; None when there is no such object. `what` names it in errors.
pub(super) async fn object(
    state: &AppState,
    headers: &HeaderMap,
    key: &str,
    what: &str,
    content_type: &str,
    file_name: &str,
) -> Result<Option<Response>, ApiError> {
    let store_error = |e: crate::objects::ObjectError| internal_error(&format!("reading the {what}"), e);
    let Some((size, e_tag)) = state.objects.describe(key).await.map_err(store_error)? else {
        return Ok(None);
    };
    let mut response = match asked(headers, size, e_tag.as_deref().map(quoted).as_deref()) {
        Asked::Unsatisfiable => {
            let range = headers
                .get(header::RANGE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            let body = json!({"error": {
                "code": "range_not_satisfiable",
                "message": format!("the {what} has {size} bytes: the range {range:?} asks for none of them"),
                "size": size,
            }});
            let mut response = (StatusCode::RANGE_NOT_SATISFIABLE, axum::Json(body)).into_response();
            response
                .headers_mut()
                .insert(header::CONTENT_RANGE, header_value(&format!("bytes */{size}")));
            Some(response)
        }
        // Conditional on the tag just read: an object replaced in between goes whole.
        Asked::Part(range) => state
            .objects
            .stream_range(key, range.clone(), e_tag.as_deref())
            .await
            .map_err(store_error)?
            .map(|chunks| {
                let mut response = (StatusCode::PARTIAL_CONTENT, body_of(chunks)).into_response();
                let h = response.headers_mut();
                let last = range.end - 1;
                h.insert(
                    header::CONTENT_RANGE,
                    header_value(&format!("bytes {}-{last}/{size}", range.start)),
                );
                h.insert(header::CONTENT_LENGTH, (range.end - range.start).into());
                h.insert(header::CONTENT_TYPE, header_value(content_type));
                response
            }),
        Asked::Whole => None,
    };
    let mut tag = e_tag;
    if response.is_none() {
        // The tag sent is the one of the bytes streamed (the object may be a new one by now).
        let Some((size, e_tag, chunks)) = state.objects.stream_tagged(key).await.map_err(store_error)? else {
            return Ok(None);
        };
        let mut whole = body_of(chunks).into_response();
        let h = whole.headers_mut();
        h.insert(header::CONTENT_LENGTH, size.into());
        h.insert(header::CONTENT_TYPE, header_value(content_type));
        tag = e_tag;
        response = Some(whole);
    }
    let mut response = response.expect("set above");
    let h = response.headers_mut();
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(
        header::CONTENT_DISPOSITION,
        header_value(&format!("attachment; filename=\"{}\"", safe_name(file_name))),
    );
    if let Some(tag) = tag.as_deref().and_then(|t| HeaderValue::from_str(&quoted(t)).ok()) {
        h.insert(header::ETAG, tag);
    }
    Ok(Some(response))
}

/// A streamed body from an object's chunks.
fn body_of(chunks: crate::objects::Chunks) -> Body {
    Body::from_stream(futures_util::StreamExt::map(chunks, |c| {
        c.map_err(std::io::Error::other)
    }))
}

/// A header value from text this module built (ASCII); an empty one where it is not.
fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(range: &str, if_range: Option<&str>, size: u64) -> Asked {
        let mut headers = HeaderMap::new();
        headers.insert(header::RANGE, HeaderValue::from_str(range).unwrap());
        if let Some(tag) = if_range {
            headers.insert(header::IF_RANGE, HeaderValue::from_str(tag).unwrap());
        }
        asked(&headers, size, Some("\"v1\""))
    }

    #[test]
    fn ranges_read_as_rfc_9110_says() {
        assert_eq!(asked(&HeaderMap::new(), 10, None), Asked::Whole);
        assert_eq!(ask("bytes=0-3", None, 10), Asked::Part(0..4));
        assert_eq!(ask("bytes=4-", None, 10), Asked::Part(4..10));
        assert_eq!(ask("bytes=4-99", None, 10), Asked::Part(4..10), "clamped to the end");
        assert_eq!(ask("bytes=-3", None, 10), Asked::Part(7..10));
        assert_eq!(ask("bytes=-30", None, 10), Asked::Part(0..10));
        assert_eq!(ask(" bytes= 9-9 ", None, 10), Asked::Part(9..10));
        assert_eq!(ask("bytes=10-", None, 10), Asked::Unsatisfiable);
        assert_eq!(ask("bytes=12-20", None, 10), Asked::Unsatisfiable);
        assert_eq!(ask("bytes=-0", None, 10), Asked::Unsatisfiable);
        assert_eq!(ask("bytes=-5", None, 0), Asked::Unsatisfiable);
        // Ignored: the whole object.
        for ignored in [
            "bytes=5-2",
            "bytes=0-1,4-5",
            "items=0-1",
            "bytes=a-b",
            "bytes=-",
            "bytes=1",
            "bytes=+1-2",
        ] {
            assert_eq!(ask(ignored, None, 10), Asked::Whole, "{ignored}");
        }
    }

    #[test]
    fn if_range_resumes_only_the_same_object() {
        assert_eq!(ask("bytes=4-", Some("\"v1\""), 10), Asked::Part(4..10));
        assert_eq!(ask("bytes=4-", Some("\"v0\""), 10), Asked::Whole);
        assert_eq!(
            ask("bytes=4-", Some("W/\"v1\""), 10),
            Asked::Whole,
            "weak tags never match"
        );
        assert_eq!(ask("bytes=4-", Some("Thu, 03 Dec 2026 07:00:00 GMT"), 10), Asked::Whole);
    }
}
