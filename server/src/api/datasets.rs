//! `GET /api/v1/datasets/{benchmarks|phases}/{name}/{card|hdf5|jsonl.gz}?filters`: trajectory
//! datasets over HTTP. Access is as for results: a token is needed; the admin reads every
//! completed submission, a team its own whose results are visible now. Downloads stream: the
//! `jsonl.gz` body is compressed while episodes are read; the HDF5 file (HDF5 needs a seekable
//! file) is written once per set of episodes into the object store (`exports/`) and streamed
//! from there.

use super::{
    ApiError, ApiPath, ApiQuery, ApiResult, Caller, bad_request, benchmark_error, caller, download, internal_error,
    not_found,
};
use crate::access::{self, AccessError};
use crate::config::DATASET_STREAM_WAIT_S;
use crate::datasets::streams::{NoPlace, StreamPlace};
use crate::datasets::{self, DatasetError, DatasetFilter, ExportFormat, Scope, Selection};
use crate::state::AppState;
use crate::storage::{Submission, now_ms};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::IntoResponse;
use axum::{Json, Router, routing::get};
use std::collections::HashSet;
use std::io::Write;
use std::sync::Arc;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/datasets/benchmarks/{name}/{format}", get(benchmark_dataset))
        .route("/api/v1/datasets/phases/{id}/{format}", get(phase_dataset))
}

type Pairs = ApiQuery<Vec<(String, String)>>;

async fn benchmark_dataset(
    State(state): State<Arc<AppState>>,
    method: Method,
    headers: HeaderMap,
    ApiPath((name, format)): ApiPath<(String, String)>,
    ApiQuery(pairs): Pairs,
) -> ApiResult {
    let spec = state.catalog.spec(&name).map_err(|e| benchmark_error(&name, &e))?;
    let head = method == Method::HEAD;
    dataset(&state, &headers, Scope::Benchmark(spec.name), &format, &pairs, head).await
}

async fn phase_dataset(
    State(state): State<Arc<AppState>>,
    method: Method,
    headers: HeaderMap,
    ApiPath((id, format)): ApiPath<(String, String)>,
    ApiQuery(pairs): Pairs,
) -> ApiResult {
    let phase = state
        .storage
        .phase(&id)
        .await?
        .ok_or_else(|| not_found(format!("no phase {}", arena_sdk::protocol::quoted(&id))))?;
    dataset(
        &state,
        &headers,
        Scope::Phase {
            id: phase.id,
            benchmark: phase.benchmark,
        },
        &format,
        &pairs,
        method == Method::HEAD,
    )
    .await
}

/// Phases whose results the caller may not read now (private phases that have not ended, for
/// teams).
async fn hidden_phases(state: &AppState, who: &Caller, benchmark: &str) -> Result<HashSet<String>, ApiError> {
    if who.is_admin() {
        return Ok(HashSet::new());
    }
    let now = now_ms();
    Ok(state
        .storage
        .phases_of_benchmark(benchmark)
        .await?
        .into_iter()
        .filter(|p| access::results_hidden(p, now))
        .map(|p| p.id)
        .collect())
}

async fn dataset(
    state: &Arc<AppState>,
    headers: &HeaderMap,
    scope: Scope,
    format: &str,
    pairs: &[(String, String)],
    head: bool,
) -> ApiResult {
    let who = caller(state, headers).await?;
    let format = match format {
        "card" => None,
        other => Some(ExportFormat::parse(other).map_err(|e| not_found(format!("{e} (or card)")))?),
    };
    let filter = DatasetFilter::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))).map_err(bad_request)?;
    let spec = state
        .catalog
        .spec(scope.benchmark())
        .map_err(|e| benchmark_error(scope.benchmark(), &e))?;
    let hidden = hidden_phases(state, &who, &spec.name).await?;
    // As every other endpoint of a private phase says: hidden until it ends (not an empty set).
    if let Scope::Phase { id, .. } = &scope
        && hidden.contains(id)
    {
        return Err(ApiError(access::AccessError::hidden(format!(
            "the datasets of private phase {id} are hidden until the phase ends"
        ))));
    }
    // A hidden test set: its trajectories carry the reference motions.
    if !who.is_admin()
        && let Some(why) = access::motions_hidden(&state.storage, &spec, now_ms()).await?
    {
        return Err(ApiError(access::AccessError::hidden(format!(
            "the datasets of benchmark {} are hidden: {why}",
            spec.name
        ))));
    }
    let readable = |s: &Submission| match &who {
        Caller::Admin => true,
        Caller::Team(t) => s.team_id == t.id && s.phase_id.as_ref().is_none_or(|p| !hidden.contains(p)),
    };
    let mut selection = datasets::select(&state.storage, &spec, scope, filter, readable)
        .await
        .map_err(|e| match e {
            DatasetError::BadFilter(m) => bad_request(m),
            DatasetError::Storage(e) => ApiError::from(e),
        })?;
    // The card too, and a HEAD as its GET (the export's key is made from the selection).
    datasets::leave_out_missing_runs(&state.objects, &mut selection)
        .await
        .map_err(|e| internal_error("looking for the dataset's stored runs", e))?;
    let card = datasets::card(&selection, &spec, now_ms());
    let Some(format) = format else {
        return Ok(Json(card).into_response());
    };
    let filename = format!("{}.{}", dataset_name(&selection), format.extension());
    let disposition = format!("attachment; filename=\"{filename}\"");
    if head {
        // The headers a GET sends, without the export: a HEAD (`curl -I`) must not write or
        // compress gigabytes. The length is known only for an HDF5 export already stored.
        let content_type = match format {
            ExportFormat::JsonlGz => "application/gzip",
            ExportFormat::Hdf5 => "application/x-hdf5",
        };
        // A body of unknown length, as a GET's is before the export exists (an empty one
        // would be sent as `content-length: 0`).
        let unknown_length = Body::from_stream(futures_util::stream::empty::<Result<Bytes, std::io::Error>>());
        let mut response = (
            [
                (header::CONTENT_TYPE, content_type.to_string()),
                (header::CONTENT_DISPOSITION, disposition),
            ],
            unknown_length,
        )
            .into_response();
        if format == ExportFormat::Hdf5
            && let Ok(Some((len, e_tag))) = state.objects.describe(&export_key(&selection)).await
        {
            // As a GET of the stored export would answer.
            download::whole_object_headers(response.headers_mut(), len, e_tag.as_deref());
        }
        return Ok(response);
    }
    match format {
        ExportFormat::JsonlGz => {
            let place = stream_place(state, &who).await?;
            Ok((
                [
                    (header::CONTENT_TYPE, "application/gzip".to_string()),
                    (header::CONTENT_DISPOSITION, disposition),
                ],
                stream_jsonl(state.clone(), selection, place),
            )
                .into_response())
        }
        ExportFormat::Hdf5 => {
            // The same episodes give the same file: kept in the object store under a key made
            // from them, written once (by whichever replica is asked first) and streamed from
            // there.
            let key = export_key(&selection);
            let store_error = |e: crate::objects::ObjectError| internal_error("reading the dataset export", e);
            // Opened before anything is pruned: another request's pruning may remove a file
            // between its check and its opening, and it is then written again (once).
            let mut to_write = Some((selection, card));
            let mut wrote = false;
            let vanished = || {
                internal_error(
                    "reading the dataset export",
                    format!("the export {key} vanished as soon as it was written"),
                )
            };
            let response = loop {
                let download = download::object(
                    state,
                    headers,
                    download::Download {
                        key: &key,
                        what: "dataset export",
                        content_type: "application/x-hdf5",
                        file_name: &filename,
                        // Made again when submissions are added to what it selects.
                        changes: download::Changes::UnderItsName,
                        content_tag: None,
                    },
                );
                if let Some(response) = download.await? {
                    break response;
                }
                if wrote {
                    return Err(vanished());
                }
                let writer = state.export_writers.claim(&key).await;
                if !state.objects.exists(&key).await.map_err(store_error)? {
                    let (selection, card) = to_write.take().ok_or_else(vanished)?;
                    write_hdf5(state.clone(), selection, card, key.clone(), writer).await?;
                    wrote = true;
                }
            };
            if wrote {
                prune_exports(state, &key).await;
            }
            Ok(response)
        }
    }
}

/// `g1-smoke` or `phase-<id>`, for file names.
fn dataset_name(selection: &Selection) -> String {
    match &selection.scope {
        Scope::Benchmark(b) => b.clone(),
        Scope::Phase { id, .. } => format!("phase-{id}"),
    }
}

/// Compressed bytes go to the response as they are made; an error mid-way (a panic included)
/// aborts the body (the client sees a truncated download, never a complete-looking wrong one)
/// and is logged. A client that takes nothing for the idle timeout ends the export and frees its
/// thread (before, an HTTP/2 stream that never opened its window held it for good).
fn stream_jsonl(state: Arc<AppState>, selection: Selection, place: StreamPlace) -> Body {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    let stall_limit = std::time::Duration::from_secs_f64(state.config.idle_timeout_s);
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        // Held until the export ends, however it ends.
        let _place = place;
        let writer = ChannelWriter::new(tx.clone(), runtime.clone(), stall_limit);
        let exported = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let stored = crate::trajectory_store::StoredEpisodes::new(&state.objects)?;
            datasets::export_jsonl_gz(&selection, &|s, row| stored.read(s, row), writer)
        }));
        let failure = match exported {
            Ok(Ok(_)) => return,
            Ok(Err(e)) => format!("{e:#}"),
            Err(_) => "the export panicked".to_string(),
        };
        tracing::warn!("dataset export ({}) failed: {failure}", dataset_name(&selection));
        let _ = runtime.block_on(tx.send_timeout(Err(std::io::Error::other(failure)), stall_limit));
    });
    Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }))
}

/// A place among the server's `dataset_streams` (a quarter of them per team; see
/// [`crate::datasets::streams`]), waiting up to [`DATASET_STREAM_WAIT_S`]; else 503 (busy) with a
/// `Retry-After`.
async fn stream_place(state: &AppState, who: &Caller) -> Result<StreamPlace, ApiError> {
    let wait = std::time::Duration::from_secs(DATASET_STREAM_WAIT_S);
    let team = match who {
        Caller::Admin => None,
        Caller::Team(t) => Some(t.id),
    };
    state
        .dataset_streams
        .place(team, wait)
        .await
        .map_err(|no| no_place(no, wait))
}

fn no_place(no: NoPlace, wait: std::time::Duration) -> ApiError {
    let (limit, message) = match no {
        NoPlace::TeamShare { share } => (
            share,
            format!(
                "your team streams {share} dataset download(s) already, the most one team streams at once (a quarter \
                 of dataset_streams): retry when one ends, or download the stored hdf5 export"
            ),
        ),
        NoPlace::Busy { limit } => (
            limit,
            format!(
                "{limit} dataset download(s) are being streamed, the most this server streams at once \
                 (dataset_streams), and none ended within {:.0} s: retry later, or download the \
                 stored hdf5 export",
                wait.as_secs_f64()
            ),
        ),
    };
    let mut e = AccessError::new(StatusCode::SERVICE_UNAVAILABLE, "busy", message);
    e.limit = Some(limit as u32);
    e.resets_at_ms = Some(now_ms() + 5_000);
    ApiError(e)
}

const CHUNK: usize = 64 << 10;

/// A `Write` that sends 64 KiB pieces down a channel (blocking: a slow client slows the export;
/// one that takes nothing for `stall_limit` ends it).
struct ChannelWriter {
    tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    buf: Vec<u8>,
    runtime: tokio::runtime::Handle,
    stall_limit: std::time::Duration,
}

impl ChannelWriter {
    fn new(
        tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
        runtime: tokio::runtime::Handle,
        stall_limit: std::time::Duration,
    ) -> Self {
        ChannelWriter {
            tx,
            buf: Vec::with_capacity(CHUNK),
            runtime,
            stall_limit,
        }
    }

    fn send(&mut self) -> std::io::Result<()> {
        use tokio::sync::mpsc::error::SendTimeoutError;
        if self.buf.is_empty() {
            return Ok(());
        }
        let piece = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        match self.runtime.block_on(self.tx.send_timeout(Ok(piece), self.stall_limit)) {
            Ok(()) => Ok(()),
            Err(SendTimeoutError::Closed(_)) => Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the client went away",
            )),
            Err(SendTimeoutError::Timeout(_)) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the download took no new piece for {:?} (the client read nothing, or too little \
                     to drain the socket's send buffer)",
                    self.stall_limit
                ),
            )),
        }
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// The object-store key of an HDF5 export: a hash of what decides its contents (the export
/// format's version, the scope, the filter, every selected episode with its stored state, and
/// the card's counts of what the requester may read: a team and the admin selecting the same
/// episodes get different cards). Completed submissions do not change, so a key names one file
/// for good.
fn export_key(selection: &Selection) -> String {
    use sha2::Digest;
    let episodes: Vec<serde_json::Value> = selection
        .parts
        .iter()
        .map(|p| {
            let rows: Vec<(i64, i64, i64)> = p.episodes.iter().map(|e| (e.idx, e.attempts, e.updated_at)).collect();
            serde_json::json!([p.submission.id, rows])
        })
        .collect();
    let what = serde_json::json!({
        "arena": env!("CARGO_PKG_VERSION"),
        "scope": dataset_name(selection),
        "filter": selection.filter,
        "success_metric": selection.success_metric,
        "episodes": episodes,
        "in_scope": selection.in_scope,
    });
    let digest = sha2::Sha256::digest(what.to_string().as_bytes());
    format!("exports/{}-{}.h5", dataset_name(selection), &hex::encode(digest)[..32])
}

/// Keeps the stored exports within `export_cache_mb`: the least recently written go first,
/// never `keep` (the one about to be downloaded). Every filter text and every new completed
/// submission makes another file, so without a bound they filled the store. A failure is
/// logged only: the download goes on.
async fn prune_exports(state: &AppState, keep: &str) {
    let limit = state.config.export_cache_mb.saturating_mul(1 << 20);
    if limit == 0 {
        return;
    }
    let mut exports = match state.objects.list_sized("exports").await {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!("listing the dataset exports to prune them: {e}");
            return;
        }
    };
    let mut total: u64 = exports.iter().map(|(_, size, _)| size).sum();
    // Oldest first.
    exports.sort_by_key(|(key, _, written)| (*written, key.clone()));
    for (key, size, _) in exports {
        if total <= limit {
            break;
        }
        if key == keep {
            continue;
        }
        match state.objects.delete(&key).await {
            Ok(()) => {
                total -= size;
                tracing::info!("dataset export {key} removed ({size} bytes; exports kept within {limit} bytes)");
            }
            Err(e) => tracing::warn!("removing the dataset export {key}: {e}"),
        }
    }
}

/// Writes the HDF5 export in the scratch folder and stores it under `key` (claimed by `writer`,
/// held until then), in a task of its own
/// that finishes (and removes its scratch file) even when the client leaves meanwhile: the
/// export is then there for the next request, not half-written in the scratch folder for good.
async fn write_hdf5(
    state: Arc<AppState>,
    selection: Selection,
    card: serde_json::Value,
    key: String,
    writer: tokio::sync::OwnedMutexGuard<()>,
) -> Result<(), ApiError> {
    tokio::spawn(async move {
        // The key stays claimed until the file is stored, even if the request is gone.
        let _writer = writer;
        let _place = state.export_writers.places.acquire().await?;
        let started = std::time::Instant::now();
        write_hdf5_now(&state, selection, card, &key).await?;
        tracing::info!(
            "dataset export {key} written in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        Ok(())
    })
    .await
    .map_err(|e| internal_error("writing the dataset export", e))?
}

async fn write_hdf5_now(
    state: &Arc<AppState>,
    selection: Selection,
    card: serde_json::Value,
    key: &str,
) -> Result<(), ApiError> {
    let path = state.objects.scratch_file(".h5");
    let (state2, file) = (state.clone(), path.clone());
    let written = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let stored = crate::trajectory_store::StoredEpisodes::new(&state2.objects)?;
        datasets::export_hdf5(&selection, &|s, row| stored.read(s, row), &file, &card)?;
        Ok(())
    })
    .await
    .map_err(|e| internal_error("writing the dataset export", e));
    let stored = match written {
        Ok(Ok(())) => state
            .objects
            .put_file(key, &path)
            .await
            .map_err(|e| internal_error("storing the dataset export", e)),
        Ok(Err(e)) => Err(internal_error("writing the dataset export", format!("{e:#}"))),
        Err(e) => Err(e),
    };
    let _ = tokio::fs::remove_file(&path).await;
    stored
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A download the client stops taking ends the export with an error (and so frees its
    /// thread) once the stall limit passes; one that goes away ends it at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn an_export_nobody_reads_stops() {
        let limit = std::time::Duration::from_millis(200);
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let runtime = tokio::runtime::Handle::current();
        let stalled = tokio::task::spawn_blocking(move || {
            let mut writer = ChannelWriter::new(tx, runtime, limit);
            let piece = vec![0u8; CHUNK];
            (0..4).try_for_each(|_| writer.write_all(&piece))
        });
        let e = tokio::time::timeout(std::time::Duration::from_secs(30), stalled)
            .await
            .expect("the export still waits")
            .unwrap()
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
        drop(rx);
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        drop(rx);
        let runtime = tokio::runtime::Handle::current();
        let gone = tokio::task::spawn_blocking(move || ChannelWriter::new(tx, runtime, limit).write_all(&[0; CHUNK]))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(gone.kind(), std::io::ErrorKind::BrokenPipe, "{gone}");
    }
}

#[cfg(test)]
mod stream_place_tests {
    use super::*;

    /// Without a place, a download is told to come back (503, `busy`, the limit and a
    /// `Retry-After`), saying whether the team's share or the server's places are taken.
    #[tokio::test]
    async fn a_download_without_a_place_is_told_to_retry() {
        let wait = std::time::Duration::from_millis(50);
        for (no, says) in [
            (NoPlace::Busy { limit: 1 }, "dataset_streams), and none ended"),
            (
                NoPlace::TeamShare { share: 1 },
                "your team streams 1 dataset download(s) already",
            ),
        ] {
            let response = no_place(no, wait).into_response();
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
            let retry = response.headers().get(header::RETRY_AFTER).expect("a Retry-After");
            assert!(retry.to_str().unwrap().parse::<u64>().unwrap() >= 1);
            let body = axum::body::to_bytes(response.into_body(), 1 << 16).await.unwrap();
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(v["error"]["code"], "busy", "{v}");
            assert_eq!(v["error"]["limit"], 1, "{v}");
            assert!(v["error"]["message"].as_str().unwrap().contains(says), "{v}");
        }
    }
}
