//! Object storage for everything a server writes besides the database: trajectory files,
//! reports and dataset exports, through the `object_store` crate. The embedded default is the
//! data directory on the local filesystem (`file://`), so a single server keeps its files where
//! they always were; replicas share one S3-compatible bucket (`s3://BUCKET/PREFIX`) or one shared
//! folder.
//!
//! Keys (relative to the store's root):
//! - `trajectories/{submission}.h5`: a completed submission's trajectories, one file;
//! - `trajectories/{submission}/ep{idx:05}-a{attempt}.h5`: one episode's trajectory while the
//!   submission runs (written by whichever replica ran it, merged when it completes);
//! - `reports/{submission}.json`: the report.
//!
//! HDF5 needs a file: readers get one through [`Objects::local_copy`] (the object itself on a
//! `file://` store, else a cached download of an immutable object). Writes retry with backoff
//! for up to `object_store_retry_s`, so a store that is down for a while delays work but loses
//! nothing.

use anyhow::Context;
use futures_util::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as Key;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An object's bytes as a download streams them.
pub type Chunks = futures_util::stream::BoxStream<'static, Result<bytes::Bytes, ObjectError>>;

/// A store and the local folders that go with it.
#[derive(Debug, Clone)]
pub struct Objects {
    store: Arc<dyn ObjectStore>,
    /// The store's root folder when it is the local filesystem (objects are readable in place).
    local_root: Option<PathBuf>,
    /// Downloads of remote objects, and files on their way up.
    scratch: PathBuf,
    /// For messages: the store's URL without credentials.
    shown: String,
    /// How long a write keeps retrying before it gives up.
    retry_for: Duration,
    /// Part files bypass the page cache where the filesystem allows it
    /// (`trajectory_store::part_file`).
    direct_parts: bool,
    /// Bytes of downloads kept in the cache (0 = no limit).
    download_cache_limit: u64,
    /// Objects this process is writing now (a completed submission's merged file).
    writes_in_flight: crate::writes_in_flight::WritesInFlight,
    /// Since when this process's own writes of episode files have failed (`retrying_blocking`):
    /// every write shares the one budget, so a disk that stays full holds the commits for
    /// `retry_for`, not that for each episode of a batch one after another.
    local_writes_failing_since: Arc<std::sync::Mutex<Option<Instant>>>,
}

/// A cached download used this recently is never removed to make room: whoever asked for it
/// may not have opened it yet.
const CACHE_IN_USE: Duration = Duration::from_secs(600);

/// Keeps the files under `dir` within `limit` bytes: the least recently used first (a read
/// refreshes a file's modification time), never `keep` and never a file used within `recent`.
/// Returns how many were removed.
fn prune_download_cache(dir: &Path, limit: u64, keep: &Path, recent: Duration) -> usize {
    fn walk(dir: &Path, out: &mut Vec<(std::time::SystemTime, u64, PathBuf)>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            match entry.metadata() {
                Ok(m) if m.is_dir() => walk(&path, out),
                Ok(m) => out.push((m.modified().unwrap_or(std::time::UNIX_EPOCH), m.len(), path)),
                Err(_) => {}
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, &mut files);
    let mut total: u64 = files.iter().map(|(_, size, _)| size).sum();
    files.sort();
    let now = std::time::SystemTime::now();
    let mut removed = 0;
    for (used, size, path) in files {
        if total <= limit {
            break;
        }
        let in_use = now.duration_since(used).map_or(true, |age| age < recent);
        if path == keep || in_use {
            continue;
        }
        if std::fs::remove_file(&path).is_ok() {
            total -= size;
            removed += 1;
        }
    }
    removed
}

/// A fresh staging name beside `target` in a `file://` store: `target#N` (N a random number),
/// which listings skip and a starting server sweeps once nothing has written to it for a while.
pub fn staging_name(target: &Path) -> PathBuf {
    let mut staged = target.as_os_str().to_owned();
    staged.push(format!("#{}", uuid::Uuid::new_v4().as_u128() % 1_000_000_000_000));
    PathBuf::from(staged)
}

/// Puts `file` at `target` on a `file://` store without streaming it through the store: a hard
/// link (or, across filesystems, a kernel copy) under the store's staging name `target#N`
/// (which its listings skip), renamed into place, so readers see the whole file or none. The
/// streamed path costs a blocking-pool round trip per 8 KiB read, and a whole benchmark's
/// trajectories pass through here twice (each episode's file, then the merged one). Durable
/// when it returns: the file's bytes and the folder's entry are synced, since what it replaces
/// (a submission's per-episode files) is deleted next; a power loss must leave one or the other.
fn place_local_file(file: &Path, target: &Path) -> std::io::Result<()> {
    if let Some(dir) = target.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let staged = staging_name(target);
    // A staged file that fails half-way (a full disk, a failed sync) must not stay: listings
    // skip staged names, so nothing else would ever remove it.
    let placed = match std::fs::hard_link(file, &staged) {
        Ok(()) => std::fs::File::open(&staged).and_then(|f| f.sync_all()),
        Err(_) => std::fs::copy(file, &staged).and_then(|_| std::fs::File::open(&staged)?.sync_all()),
    }
    .and_then(|()| std::fs::rename(&staged, target));
    placed.inspect_err(|_| {
        let _ = std::fs::remove_file(&staged);
    })?;
    target.parent().map_or(Ok(()), sync_dir)
}

/// Syncs a folder's entries (names created, renamed or removed in it) to disk; a no-op where
/// folders cannot be opened as files (not Unix).
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    std::fs::File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// A failed store operation: what was being done, and why (after the retries).
#[derive(Debug, thiserror::Error)]
#[error("object store {store}: {context}: {cause}")]
pub struct ObjectError {
    pub store: String,
    pub context: String,
    pub cause: String,
}

impl Objects {
    /// Opens the store named by `url`: empty or `file:///ABS/PATH` (created if missing), or
    /// `s3://BUCKET[/PREFIX]` with credentials, region and endpoint from the usual `AWS_*`
    /// variables (`AWS_ENDPOINT` for MinIO or another S3-compatible server, `AWS_ALLOW_HTTP=true`
    /// for plain HTTP). `data_dir` holds the scratch folder (and is the store when `url` is empty).
    pub fn open(url: &str, data_dir: &Path, retry_for: Duration) -> anyhow::Result<Self> {
        crate::state::create_private_dir(data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
        let scratch = data_dir.join("scratch");
        std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
        if url.is_empty() || url.starts_with("file://") {
            let root = if url.is_empty() {
                data_dir.to_path_buf()
            } else {
                PathBuf::from(url.trim_start_matches("file://"))
            };
            if !root.is_absolute() && !url.is_empty() {
                anyhow::bail!("object_store: expected file:///ABSOLUTE/PATH, got {url:?}");
            }
            crate::state::create_private_dir(&root)
                .with_context(|| format!("creating the object store folder {}", root.display()))?;
            let root = std::fs::canonicalize(&root).with_context(|| format!("resolving {}", root.display()))?;
            let store = LocalFileSystem::new_with_prefix(&root)
                .with_context(|| format!("opening the object store folder {}", root.display()))?
                .with_automatic_cleanup(true)
                // Reports and other small objects are on disk before their write returns (a
                // power loss must not leave a COMPLETED submission without its report).
                .with_fsync(true);
            return Ok(Self {
                store: Arc::new(store),
                shown: format!("file://{}", root.display()),
                local_root: Some(root),
                scratch,
                retry_for,
                direct_parts: true,
                download_cache_limit: 0,
                writes_in_flight: Default::default(),
                local_writes_failing_since: Default::default(),
            });
        }
        let Some(rest) = url.strip_prefix("s3://") else {
            anyhow::bail!("object_store: expected file:///PATH or s3://BUCKET[/PREFIX], got {url:?}");
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            anyhow::bail!("object_store: no bucket in {url:?}");
        }
        // The store's own retries cover short blips; `retry_for` (here) covers outages.
        let retry = RetryConfig {
            max_retries: 3,
            retry_timeout: Duration::from_secs(10),
            ..RetryConfig::default()
        };
        let s3 = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_retry(retry)
            .build()
            .with_context(|| format!("object_store: configuring {url}"))?;
        let store: Arc<dyn ObjectStore> = if prefix.trim_matches('/').is_empty() {
            Arc::new(s3)
        } else {
            Arc::new(PrefixStore::new(s3, prefix.trim_matches('/')))
        };
        Ok(Self {
            store,
            local_root: None,
            scratch,
            shown: format!("s3://{bucket}/{}", prefix.trim_matches('/')),
            retry_for,
            direct_parts: true,
            download_cache_limit: 0,
            writes_in_flight: Default::default(),
            local_writes_failing_since: Default::default(),
        })
    }

    /// The store's URL, for messages.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    fn error(&self, context: String, cause: impl std::fmt::Display) -> ObjectError {
        ObjectError {
            store: self.shown.clone(),
            context,
            cause: cause.to_string(),
        }
    }

    /// Removes the files a killed process left in the scratch folder (partial trajectory files,
    /// exports, downloads): those not written to for `idle` (a live writer keeps its file's
    /// modification time fresh). The download cache below it is kept. Returns how many went.
    pub fn remove_abandoned_scratch(&self, idle: std::time::Duration) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.scratch) else {
            return 0;
        };
        let now = std::time::SystemTime::now();
        entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter(|e| {
                e.metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age >= idle))
            })
            .filter(|e| std::fs::remove_file(e.path()).is_ok())
            .count()
    }

    /// Removes the staged copies (`KEY#N`, which listings skip) that a killed process left in a
    /// `file://` store's folders (`trajectories/`, `reports/`, `policies/`, `exports/`): those not written
    /// to for `idle`, since on a folder shared by several servers another one may be writing
    /// its own right now. Nothing to do for another store. Returns how many went.
    pub fn remove_abandoned_staged(&self, idle: std::time::Duration) -> usize {
        fn walk(dir: &Path, idle: std::time::Duration, now: std::time::SystemTime) -> usize {
            let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
            let mut removed = 0;
            for entry in entries.flatten() {
                let Ok(kind) = entry.file_type() else { continue };
                if kind.is_dir() {
                    removed += walk(&entry.path(), idle, now);
                    continue;
                }
                let staged = kind.is_file() && entry.file_name().to_string_lossy().contains('#');
                let stale = || {
                    entry
                        .metadata()
                        .and_then(|m| m.modified())
                        .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age >= idle))
                };
                if staged && stale() && std::fs::remove_file(entry.path()).is_ok() {
                    removed += 1;
                }
            }
            removed
        }
        let Some(root) = &self.local_root else { return 0 };
        let now = std::time::SystemTime::now();
        ["trajectories", "reports", "policies", "exports"]
            .iter()
            .map(|folder| walk(&root.join(folder), idle, now))
            .sum()
    }

    /// The same store, its part files written through the page cache (`direct = false`) or
    /// past it where the filesystem allows (`true`, the default).
    pub fn with_direct_parts(mut self, direct: bool) -> Self {
        self.direct_parts = direct;
        self
    }

    /// Keeps the download cache of a remote store within `mb` MB (0 = no limit).
    pub fn with_download_cache_mb(mut self, mb: u64) -> Self {
        self.download_cache_limit = mb.saturating_mul(1 << 20);
        self
    }

    /// Whether part files bypass the page cache where the filesystem allows it.
    pub fn direct_parts(&self) -> bool {
        self.direct_parts
    }

    /// A fresh path in the scratch folder (the caller removes it).
    pub fn scratch_file(&self, suffix: &str) -> PathBuf {
        self.scratch.join(format!("{}{suffix}", uuid::Uuid::new_v4().simple()))
    }

    /// Writes `bytes` under `key`, retrying with backoff for up to the configured time.
    pub async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), ObjectError> {
        let location = Key::from(key);
        let payload = PutPayload::from(bytes);
        self.retrying(format!("writing {key}"), || async {
            self.store.put(&location, payload.clone()).await.map(|_| ())
        })
        .await
    }

    /// Writes a local file under `key`, streaming it (multipart uploads for large files on S3),
    /// retrying with backoff for up to the configured time.
    pub async fn put_file(&self, key: &str, file: &Path) -> Result<(), ObjectError> {
        self.retrying(format!("writing {key} from {}", file.display()), || {
            self.upload(key, file)
        })
        .await
    }

    /// Runs a write until it succeeds, waiting as [`Backoff`] says, for up to `retry_for`; the
    /// error then says for how long it was tried.
    async fn retrying<F, Fut, E>(&self, what: String, write: F) -> Result<(), ObjectError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<(), E>>,
        E: std::fmt::Display,
    {
        let mut backoff = Backoff::new(self.retry_for);
        loop {
            match write().await {
                Ok(()) => return Ok(()),
                Err(e) => match backoff.next_wait() {
                    Some(wait) => {
                        tracing::warn!("object store {}: {what} failed, retrying in {wait:?}: {e}", self.shown);
                        tokio::time::sleep(wait).await;
                    }
                    None => {
                        let gave_up = format!("{what} (gave up after {:.0} s)", backoff.tried_s());
                        return Err(self.error(gave_up, e));
                    }
                },
            }
        }
    }

    /// [`Objects::retrying`] for a blocking write of this process's own (a part file written
    /// on the store pool's threads): the same waits, for file system errors only (another
    /// error would come again), and within one budget of `retry_for` shared by every such
    /// write since they began to fail.
    pub fn retrying_blocking<T>(&self, what: &str, mut write: impl FnMut() -> anyhow::Result<T>) -> anyhow::Result<T> {
        let failing_since = || {
            *self
                .local_writes_failing_since
                .lock()
                .unwrap_or_else(|e| e.into_inner())
        };
        let mut backoff = Backoff::new(self.retry_for);
        loop {
            let e = match write() {
                Ok(done) => {
                    *self
                        .local_writes_failing_since
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = None;
                    return Ok(done);
                }
                Err(e) => e,
            };
            if !e.chain().any(|c| c.is::<std::io::Error>()) {
                return Err(e);
            }
            let since = *self
                .local_writes_failing_since
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert_with(Instant::now);
            backoff.started = backoff.started.min(since);
            match backoff.next_wait() {
                Some(wait) => {
                    tracing::warn!("{what} failed, retrying in {wait:?}: {e:#}");
                    std::thread::sleep(wait);
                }
                None => {
                    let tried = failing_since().map_or(0.0, |t| t.elapsed().as_secs_f64());
                    return Err(e.context(format!("{what} (writes have failed for {tried:.0} s: gave up)")));
                }
            }
        }
    }

    async fn upload(&self, key: &str, file: &Path) -> std::io::Result<()> {
        use tokio::io::AsyncWriteExt;
        if let Some(root) = &self.local_root {
            let (target, file) = (root.join(key), file.to_path_buf());
            return tokio::task::spawn_blocking(move || place_local_file(&file, &target)).await?;
        }
        let mut source = tokio::fs::File::open(file).await?;
        let mut sink = object_store::buffered::BufWriter::new(self.store.clone(), Key::from(key));
        let copied = tokio::io::copy(&mut source, &mut sink).await;
        match copied {
            Ok(_) => sink.shutdown().await,
            Err(e) => {
                let _ = sink.abort().await;
                Err(e)
            }
        }
    }

    /// The object's bytes, or None if there is no such object.
    pub async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, ObjectError> {
        match self.store.get(&Key::from(key)).await {
            Ok(found) => {
                let bytes = found
                    .bytes()
                    .await
                    .map_err(|e| self.error(format!("reading {key}"), e))?;
                Ok(Some(bytes.to_vec()))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error(format!("reading {key}"), e)),
        }
    }

    /// The object as a stream of chunks and its size, for downloads; None if there is none.
    pub async fn stream(
        &self,
        key: &str,
    ) -> Result<
        Option<(
            u64,
            futures_util::stream::BoxStream<'static, Result<bytes::Bytes, ObjectError>>,
        )>,
        ObjectError,
    > {
        Ok(self.stream_tagged(key).await?.map(|(size, _, chunks)| (size, chunks)))
    }

    /// [`Objects::stream`] with the entity tag of the object streamed (None where the store
    /// gives none).
    pub async fn stream_tagged(&self, key: &str) -> Result<Option<(u64, Option<String>, Chunks)>, ObjectError> {
        match self.store.get(&Key::from(key)).await {
            Ok(found) => {
                let (size, e_tag) = (found.meta.size, found.meta.e_tag.clone());
                let this = self.clone();
                let key = key.to_string();
                let chunks = found
                    .into_stream()
                    .map(move |chunk| chunk.map_err(|e| this.error(format!("streaming {key}"), e)))
                    .boxed();
                Ok(Some((size, e_tag, chunks)))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error(format!("opening {key}"), e)),
        }
    }

    /// The object's size and entity tag (None where the store gives none), or None if there is
    /// no such object: what a download needs to answer a byte range.
    pub async fn describe(&self, key: &str) -> Result<Option<(u64, Option<String>)>, ObjectError> {
        match self.store.head(&Key::from(key)).await {
            Ok(meta) => Ok(Some((meta.size, meta.e_tag))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error(format!("looking up {key}"), e)),
        }
    }

    /// The bytes `range` of the object as a stream of chunks, provided the object is still the
    /// one whose entity tag is `e_tag` (where given); None if there is no such object, or it
    /// was replaced since (a resumed download must not splice two files).
    pub async fn stream_range(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
        e_tag: Option<&str>,
    ) -> Result<Option<Chunks>, ObjectError> {
        let options = object_store::GetOptions {
            range: Some(object_store::GetRange::Bounded(range.clone())),
            if_match: e_tag.map(str::to_string),
            ..Default::default()
        };
        match self.store.get_opts(&Key::from(key), options).await {
            Ok(found) => {
                let this = self.clone();
                let what = format!("streaming bytes {}..{} of {key}", range.start, range.end);
                Ok(Some(
                    found
                        .into_stream()
                        .map(move |chunk| chunk.map_err(|e| this.error(what.clone(), e)))
                        .boxed(),
                ))
            }
            Err(object_store::Error::NotFound { .. } | object_store::Error::Precondition { .. }) => Ok(None),
            Err(e) => Err(self.error(format!("opening {key}"), e)),
        }
    }

    /// Whether the object exists.
    pub async fn exists(&self, key: &str) -> Result<bool, ObjectError> {
        match self.store.head(&Key::from(key)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.error(format!("looking up {key}"), e)),
        }
    }

    /// Deletes an object (absent is fine).
    pub async fn delete(&self, key: &str) -> Result<(), ObjectError> {
        match self.store.delete(&Key::from(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error(format!("deleting {key}"), e)),
        }
    }

    /// The keys under `prefix` (a folder: `trajectories/sub-1`).
    /// Whether a remote store answers (one listing request, bounded by `within`): a wrong
    /// endpoint, bucket or credentials found at start, not after every episode of the first
    /// submission has run and failed to store. Nothing to do for a `file://` store.
    pub async fn check_reachable(&self, within: Duration) -> anyhow::Result<()> {
        if self.local_root.is_some() {
            return Ok(());
        }
        let listed = async {
            let mut listing = self.store.list(Some(&Key::from("reports")));
            listing.next().await.transpose().map(|_| ())
        };
        let hint = "check the bucket and the AWS_* variables (AWS_ENDPOINT, AWS_ACCESS_KEY_ID, \
                    AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ALLOW_HTTP)";
        match tokio::time::timeout(within, listed).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => anyhow::bail!("object_store {}: cannot list it: {e} ({hint})", self.shown),
            Err(_) => anyhow::bail!(
                "object_store {}: no answer within {} s ({hint})",
                self.shown,
                within.as_secs()
            ),
        }
    }

    pub async fn list(&self, prefix: &str) -> Result<Vec<String>, ObjectError> {
        let mut keys = Vec::new();
        let mut listing = self.store.list(Some(&Key::from(prefix)));
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(|e| self.error(format!("listing {prefix}/"), e))?;
            keys.push(meta.location.to_string());
        }
        keys.sort();
        Ok(keys)
    }

    /// The objects under `prefix` with their size in bytes and when they were last written
    /// (unix milliseconds), in key order.
    pub async fn list_sized(&self, prefix: &str) -> Result<Vec<(String, u64, i64)>, ObjectError> {
        let mut objects = Vec::new();
        let mut listing = self.store.list(Some(&Key::from(prefix)));
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(|e| self.error(format!("listing {prefix}/"), e))?;
            objects.push((
                meta.location.to_string(),
                meta.size,
                meta.last_modified.timestamp_millis(),
            ));
        }
        objects.sort();
        Ok(objects)
    }

    /// A local file with the object's contents, or None if there is no such object: the object
    /// itself on a `file://` store, else a download into the scratch cache. Only for objects that
    /// never change once written (completed trajectories, episode parts): a cached copy is
    /// reused.
    pub async fn local_copy(&self, key: &str) -> Result<Option<PathBuf>, ObjectError> {
        if let Some(root) = &self.local_root {
            let path = root.join(key);
            return Ok(path.is_file().then_some(path));
        }
        let cached = self.scratch.join("cache").join(key);
        if cached.is_file() {
            // Used now: the last to go when the cache is pruned.
            if let Ok(f) = std::fs::File::options().append(true).open(&cached) {
                let _ = f.set_modified(std::time::SystemTime::now());
            }
            return Ok(Some(cached));
        }
        let found = match self.store.get(&Key::from(key)).await {
            Ok(found) => found,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.error(format!("reading {key}"), e)),
        };
        let dir = cached.parent().expect("a key has a folder");
        let partial = self.scratch_file(".part");
        let written = async {
            use tokio::io::AsyncWriteExt;
            tokio::fs::create_dir_all(dir).await?;
            let mut out = tokio::fs::File::create(&partial).await?;
            let mut chunks = found.into_stream();
            while let Some(chunk) = chunks.next().await {
                out.write_all(&chunk.map_err(std::io::Error::other)?).await?;
            }
            out.sync_all().await?;
            tokio::fs::rename(&partial, &cached).await
        }
        .await;
        if let Err(e) = written {
            let _ = tokio::fs::remove_file(&partial).await;
            return Err(self.error(format!("caching {key} in {}", cached.display()), e));
        }
        if self.download_cache_limit > 0 {
            let (dir, limit, keep) = (self.scratch.join("cache"), self.download_cache_limit, cached.clone());
            let removed =
                tokio::task::spawn_blocking(move || prune_download_cache(&dir, limit, &keep, CACHE_IN_USE)).await;
            if let Ok(n @ 1..) = removed {
                tracing::info!("removed {n} cached download(s) to keep the cache within {limit} bytes");
            }
        }
        Ok(Some(cached))
    }

    /// Drops the cached downloads under `prefix` (a folder of keys whose objects were deleted).
    pub async fn forget_cached(&self, prefix: &str) {
        if self.local_root.is_none() {
            let _ = tokio::fs::remove_dir_all(self.scratch.join("cache").join(prefix)).await;
        }
    }

    /// Whether this is a `file://` store (objects kept on this machine's disk).
    pub fn is_local(&self) -> bool {
        self.local_root.is_some()
    }

    /// Where the object lives on disk, for a `file://` store (None for a remote store).
    pub fn local_path(&self, key: &str) -> Option<PathBuf> {
        self.local_root.as_ref().map(|root| root.join(key))
    }

    /// The objects this process is writing now (shared by every clone of this store).
    pub fn writes_in_flight(&self) -> &crate::writes_in_flight::WritesInFlight {
        &self.writes_in_flight
    }
}

/// The key of a completed submission's trajectory file.
pub fn trajectory_key(submission: &str) -> String {
    format!("trajectories/{submission}.h5")
}

/// The folder of a running submission's per-episode trajectory files.
pub fn episode_parts_prefix(submission: &str) -> String {
    format!("trajectories/{submission}")
}

/// The key of one run (attempt) of one episode's trajectory (an [`arena_data::episode_part`]).
pub fn episode_part_key(submission: &str, idx: i64, attempt: i64) -> String {
    format!("trajectories/{submission}/ep{idx:05}-a{attempt}.part")
}

/// Where servers before the part format stored the same run, as a one-episode HDF5 file: a
/// submission running across an upgrade has its earlier runs there.
pub fn hdf5_episode_part_key(submission: &str, idx: i64, attempt: i64) -> String {
    format!("trajectories/{submission}/ep{idx:05}-a{attempt}.h5")
}

/// The key of a submission's report.
pub fn report_key(submission: &str) -> String {
    format!("reports/{submission}.json")
}

/// The waits between tries of a write: 0.25 s, 0.5 s, … (at most 5 s), while the next try
/// still starts within the limit.
struct Backoff {
    started: Instant,
    wait: Duration,
    limit: Duration,
}

impl Backoff {
    fn new(limit: Duration) -> Self {
        Backoff {
            started: Instant::now(),
            wait: Duration::from_millis(250),
            limit,
        }
    }

    /// How long to wait before the next try; `None` once it would start past the limit.
    fn next_wait(&mut self) -> Option<Duration> {
        let wait = self.wait;
        if self.started.elapsed() + wait >= self.limit {
            return None;
        }
        self.wait = (wait * 2).min(Duration::from_secs(5));
        Some(wait)
    }

    fn tried_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_starting_server_removes_only_abandoned_scratch_files() {
        let dir = tempfile::tempdir().unwrap();
        let objects = Objects::open("", dir.path(), Duration::from_secs(1)).unwrap();
        let scratch = dir.path().join("scratch");
        let write = |name: &str, age_s: u64| {
            let path = scratch.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let file = std::fs::File::create(&path).unwrap();
            file.set_modified(std::time::SystemTime::now() - Duration::from_secs(age_s))
                .unwrap();
            path
        };
        let abandoned = write("a.h5", 3600);
        let live = write("b.h5", 0);
        let cached = write("cache/trajectories/s.h5", 3600);
        assert_eq!(objects.remove_abandoned_scratch(Duration::from_secs(600)), 1);
        assert!(!abandoned.exists() && live.exists() && cached.exists());
    }

    /// Staged copies a killed server left in the store's folders go at the next start once
    /// nothing has written them for a while; stored objects and fresh staged copies stay.
    #[test]
    fn a_starting_server_removes_only_abandoned_staged_copies() {
        let dir = tempfile::tempdir().unwrap();
        let objects = Objects::open("", dir.path(), Duration::from_secs(1)).unwrap();
        let write = |name: &str, age_s: u64| {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let file = std::fs::File::create(&path).unwrap();
            file.set_modified(std::time::SystemTime::now() - Duration::from_secs(age_s))
                .unwrap();
            path
        };
        let abandoned = [
            write("trajectories/sub-1.h5#123", 3600),
            write("trajectories/sub-1/ep00001-a1.part#9", 3600),
            write("reports/sub-1.json#77", 3600),
            write("exports/abc.h5#3", 3600),
        ];
        let kept = [
            write("trajectories/sub-2.h5#5", 0),
            write("trajectories/sub-1.h5", 3600),
            write("reports/sub-1.json", 3600),
            write("scratch/cache/x#1", 3600),
        ];
        assert_eq!(objects.remove_abandoned_staged(Duration::from_secs(600)), 4);
        assert!(abandoned.iter().all(|p| !p.exists()));
        assert!(kept.iter().all(|p| p.exists()));
    }

    /// The download cache keeps within its limit: the least recently used go first, never the
    /// file just cached nor one used within the protection window.
    #[test]
    fn the_download_cache_keeps_within_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, age_s: u64| {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, vec![0u8; 1000]).unwrap();
            let f = std::fs::File::options().append(true).open(&path).unwrap();
            f.set_modified(std::time::SystemTime::now() - Duration::from_secs(age_s))
                .unwrap();
            path
        };
        let oldest = write("trajectories/a.h5", 4000);
        let older = write("trajectories/b.h5", 3000);
        let recent = write("policies/c.onnx", 10);
        let new = write("trajectories/d.h5", 0);
        // 4000 bytes against 2500: the two oldest go; the recent one is protected.
        let removed = prune_download_cache(dir.path(), 2500, &new, Duration::from_secs(600));
        assert_eq!(removed, 2);
        assert!(!oldest.exists() && !older.exists() && recent.exists() && new.exists());
        // Nothing old enough left to remove: over the limit, but nothing goes.
        assert_eq!(
            prune_download_cache(dir.path(), 1000, &new, Duration::from_secs(600)),
            0
        );
        assert_eq!(prune_download_cache(dir.path(), 1000, &new, Duration::from_secs(1)), 1);
        assert!(!recent.exists() && new.exists());
    }

    /// A `file://` store places files in one step: readable through the store, replaced whole,
    /// independent of the caller's scratch file, no staging file left. The second store's root
    /// is on another filesystem where the machine has /dev/shm (the copy path).
    #[tokio::test]
    async fn put_file_on_a_local_store_places_the_whole_file() {
        let data = tempfile::tempdir().unwrap();
        let shm = std::path::Path::new("/dev/shm");
        let other = shm.is_dir().then(|| tempfile::tempdir_in(shm).unwrap());
        let mut urls = vec![String::new()];
        if let Some(o) = &other {
            urls.push(format!("file://{}", o.path().display()));
        }
        for url in urls {
            let objects = Objects::open(&url, data.path(), Duration::from_secs(1)).unwrap();
            for content in [b"first version".to_vec(), vec![7u8; 3 << 20]] {
                let scratch = objects.scratch_file(".h5");
                std::fs::write(&scratch, &content).unwrap();
                objects
                    .put_file("trajectories/s/ep00001-a1.h5", &scratch)
                    .await
                    .unwrap();
                std::fs::remove_file(&scratch).unwrap();
                let got = objects.get("trajectories/s/ep00001-a1.h5").await.unwrap();
                assert_eq!(got.as_deref(), Some(&content[..]), "{url:?}");
                let listed = objects.list("trajectories/s").await.unwrap();
                assert_eq!(listed, ["trajectories/s/ep00001-a1.h5"], "{url:?}");
            }
            let missing = objects.put_file("trajectories/x.h5", &data.path().join("none")).await;
            assert!(missing.is_err(), "{url:?}");
        }
    }
}
