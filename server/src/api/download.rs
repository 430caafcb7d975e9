//! Downloads of stored objects (a submission's trajectory file, a dataset's HDF5 export) with
//! byte ranges (RFC 9110 §14): a client that lost a multi-gigabyte download asks for the rest
//! (`Range: bytes=N-`, as `curl -C -` and `wget -c` do) instead of starting again.
//!
//! One range per request (a list of several is answered with the whole object, which the RFC
//! allows); `If-Range` with the entity tag the first response carried makes the resumption safe
//! when the object may have been replaced since: a tag that no longer matches gets the whole new
//! object, never a splice of two files. An object that changes under its name (a dataset's
//! export, when episodes are added to its selection) answers a range only with that `If-Range`
//! ([`Changes::UnderItsName`]): `curl -C -` and `wget -c` send none, and would otherwise append
//! the new file's tail to the old file's head without a word. An object without an entity tag
//! (a store that gives none) answers no ranges at all, since its partial read cannot be held to
//! the version described.

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

/// Whether a stored download's bytes can change while its name stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Changes {
    /// Written once (a completed submission's trajectories, a policy file kept by its hash).
    Never,
    /// Replaced when what it is made from changes (a dataset's export): a range is answered only
    /// when `If-Range` names the current entity tag.
    UnderItsName,
}

/// Reads the `Range` header for an object of `size` bytes whose entity tag is `e_tag` (quoted,
/// as sent in `ETag`); without a tag no range is answered.
pub(super) fn asked(headers: &HeaderMap, size: u64, e_tag: Option<&str>, changes: Changes) -> Asked {
    let Some(range) = headers.get(header::RANGE).and_then(|v| v.to_str().ok()) else {
        return Asked::Whole;
    };
    let Some(current) = e_tag else {
        return Asked::Whole;
    };
    match headers.get(header::IF_RANGE) {
        // A strong comparison with the current tag; a date (no Last-Modified is sent) or a weak
        // tag never matches.
        Some(condition) if condition.as_bytes() != current.as_bytes() => return Asked::Whole,
        None if changes == Changes::UnderItsName => return Asked::Whole,
        _ => {}
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
    // Digits only; a position past u64 is as good as u64::MAX (past any object's end).
    let number = |s: &str| -> Option<u64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().unwrap_or(u64::MAX))
    };
    match (first.is_empty(), last.is_empty()) {
        // bytes=-N: the last N bytes.
        (true, false) => match number(last) {
            None => Asked::Whole,
            Some(0) => Asked::Unsatisfiable,
            // Satisfiable (RFC 9110 §14.1.1) but empty: the whole empty object.
            Some(_) if size == 0 => Asked::Whole,
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

/// `Content-Disposition` of a download named `file_name`: its last path component (names
/// stored before uploads were reduced to theirs may hold a path), as printable ASCII in
/// `filename` and, when it is not all ASCII, whole in `filename*` (RFC 6266, UTF-8).
fn disposition(file_name: &str) -> String {
    let base = file_name.rsplit(['/', '\\']).next().unwrap_or(file_name);
    let ascii: String = base
        .chars()
        .filter(|c| c.is_ascii_graphic() && *c != '"' && *c != '\\')
        .collect();
    let ascii = match ascii.trim_matches('.') {
        "" => "download".to_string(),
        _ => ascii,
    };
    let mut value = format!("attachment; filename=\"{ascii}\"");
    if !base.is_ascii() {
        let encoded: String = base
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z'
                | b'a'..=b'z'
                | b'0'..=b'9'
                | b'!'
                | b'#'
                | b'$'
                | b'&'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        value += &format!("; filename*=UTF-8''{encoded}");
    }
    value
}

/// How a stored object is offered for download: `what` names it in errors, the response carries
/// `content_type` and `file_name`, and `changes` says whether its bytes can change under its key.
pub(super) struct Download<'a> {
    pub key: &'a str,
    pub what: &'a str,
    pub content_type: &'a str,
    pub file_name: &'a str,
    pub changes: Changes,
    /// The entity tag to show instead of the store's, for an object whose key names its content
    /// (a hash): the store's tag of a local file is its inode and modification time, which tell
    /// when it was written.
    pub content_tag: Option<&'a str>,
}

/// The stored object as a download: whole (200, `Accept-Ranges: bytes` and its `ETag`), the
/// byte range the request asks for (206 with `Content-Range`), or 416 for a range past its end;
/// None when there is no such object.
pub(super) async fn object(
    state: &AppState,
    headers: &HeaderMap,
    download: Download<'_>,
) -> Result<Option<Response>, ApiError> {
    let Download {
        key,
        what,
        content_type,
        file_name,
        changes,
        content_tag,
    } = download;
    let store_error = |e: crate::objects::ObjectError| internal_error(&format!("reading the {what}"), e);
    let Some((size, e_tag)) = state.objects.describe(key).await.map_err(store_error)? else {
        return Ok(None);
    };
    let shown = |store_tag: Option<String>| match (content_tag, store_tag) {
        (Some(tag), Some(_)) => Some(tag.to_string()),
        (_, store_tag) => store_tag,
    };
    let mut response = match asked(
        headers,
        size,
        shown(e_tag.clone()).as_deref().map(quoted).as_deref(),
        changes,
    ) {
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
    let mut tag = shown(e_tag);
    if response.is_none() {
        // The tag sent is the one of the bytes streamed (the object may be a new one by now).
        let Some((size, e_tag, chunks)) = state.objects.stream_tagged(key).await.map_err(store_error)? else {
            return Ok(None);
        };
        let mut whole = body_of(chunks).into_response();
        let h = whole.headers_mut();
        h.insert(header::CONTENT_LENGTH, size.into());
        h.insert(header::CONTENT_TYPE, header_value(content_type));
        tag = shown(e_tag);
        response = Some(whole);
    }
    let mut response = response.expect("set above");
    let h = response.headers_mut();
    tag_headers(h, tag.as_deref());
    h.insert(header::CONTENT_DISPOSITION, header_value(&disposition(file_name)));
    Ok(Some(response))
}

/// `Accept-Ranges` (`bytes`, or `none` for an object without a tag) and the `ETag`.
fn tag_headers(h: &mut HeaderMap, e_tag: Option<&str>) {
    let ranges = if e_tag.is_some() { "bytes" } else { "none" };
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static(ranges));
    if let Some(tag) = e_tag.and_then(|t| HeaderValue::from_str(&quoted(t)).ok()) {
        h.insert(header::ETAG, tag);
    }
}

/// The headers a whole download of an object of `size` bytes tagged `e_tag` carries beside its
/// type and name: for a HEAD, which sends them without the object.
pub(super) fn whole_object_headers(h: &mut HeaderMap, size: u64, e_tag: Option<&str>) {
    h.insert(header::CONTENT_LENGTH, size.into());
    tag_headers(h, e_tag);
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

    fn ask_of(range: &str, if_range: Option<&str>, size: u64, e_tag: Option<&str>, changes: Changes) -> Asked {
        let mut headers = HeaderMap::new();
        headers.insert(header::RANGE, HeaderValue::from_str(range).unwrap());
        if let Some(tag) = if_range {
            headers.insert(header::IF_RANGE, HeaderValue::from_str(tag).unwrap());
        }
        asked(&headers, size, e_tag, changes)
    }

    fn ask(range: &str, if_range: Option<&str>, size: u64) -> Asked {
        ask_of(range, if_range, size, Some("\"v1\""), Changes::Never)
    }

    #[test]
    fn ranges_read_as_rfc_9110_says() {
        assert_eq!(asked(&HeaderMap::new(), 10, None, Changes::Never), Asked::Whole);
        assert_eq!(ask("bytes=0-3", None, 10), Asked::Part(0..4));
        assert_eq!(ask("bytes=4-", None, 10), Asked::Part(4..10));
        assert_eq!(ask("bytes=4-99", None, 10), Asked::Part(4..10), "clamped to the end");
        assert_eq!(ask("bytes=-3", None, 10), Asked::Part(7..10));
        assert_eq!(ask("bytes=-30", None, 10), Asked::Part(0..10));
        assert_eq!(ask(" bytes= 9-9 ", None, 10), Asked::Part(9..10));
        assert_eq!(ask("bytes=10-", None, 10), Asked::Unsatisfiable);
        assert_eq!(ask("bytes=12-20", None, 10), Asked::Unsatisfiable);
        assert_eq!(ask("bytes=-0", None, 10), Asked::Unsatisfiable);
        assert_eq!(ask("bytes=-5", None, 0), Asked::Whole, "satisfiable, and empty");
        assert_eq!(ask("bytes=0-", None, 0), Asked::Unsatisfiable);
        assert_eq!(
            ask("bytes=2-99999999999999999999", None, 10),
            Asked::Part(2..10),
            "a last position past u64 is clamped too"
        );
        assert_eq!(ask("bytes=99999999999999999999-", None, 10), Asked::Unsatisfiable);
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

    #[test]
    fn an_object_that_changes_under_its_name_resumes_only_with_if_range() {
        let export = |if_range| ask_of("bytes=4-", if_range, 10, Some("\"v1\""), Changes::UnderItsName);
        assert_eq!(export(None), Asked::Whole, "curl -C - sends no If-Range");
        assert_eq!(export(Some("\"v1\"")), Asked::Part(4..10));
        assert_eq!(export(Some("\"v0\"")), Asked::Whole);
    }

    #[test]
    fn an_object_without_a_tag_answers_no_range() {
        for changes in [Changes::Never, Changes::UnderItsName] {
            assert_eq!(ask_of("bytes=4-", None, 10, None, changes), Asked::Whole);
            assert_eq!(ask_of("bytes=40-", None, 10, None, changes), Asked::Whole);
        }
    }
}

#[cfg(test)]
mod disposition_tests {
    #[test]
    fn a_download_is_named_by_its_files_base_name() {
        assert_eq!(
            super::disposition("policy.onnx"),
            "attachment; filename=\"policy.onnx\""
        );
        assert_eq!(
            super::disposition("../../etc/passwd"),
            "attachment; filename=\"passwd\""
        );
        assert_eq!(super::disposition("runs\\a\\p.onnx"), "attachment; filename=\"p.onnx\"");
        assert_eq!(super::disposition(".."), "attachment; filename=\"download\"");
        assert_eq!(
            super::disposition("ünï€ode.onnx"),
            "attachment; filename=\"node.onnx\"; filename*=UTF-8''%C3%BCn%C3%AF%E2%82%ACode.onnx"
        );
    }
}
