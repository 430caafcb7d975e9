//! Trajectory files: one HDF5 file per submission holding one group per episode.
//!
//! The server writes these off the simulation thread, one episode at a time. Every
//! [`TrajectoryFile::write_episode`] call opens the file, writes the episode's group, flushes and
//! closes the file again, so a process killed (even with SIGKILL) between episodes leaves a file
//! that opens and reads every episode completed before the crash.
//! HDF5 file locking is off (see `builder`); use one [`TrajectoryFile`] per path.
//!
//! Layout:
//!
//! ```text
//! /                      attributes: format = "mimicarena-trajectories", version = 1 (u32),
//!                                    submission, benchmark
//! /episode_00007/        attributes: motion, category, seed (u64), dr_level (u32), status, reason,
//!                                    start_s, duration_s (f64), steps (u64, = T - 1, 0 when T = 0),
//!                                    scored_until_s (f64, optional: where scoring stopped, seconds
//!                                    from the episode's start, when before its end), attempt
//!                                    (u32, optional: which run of the episode the group holds,
//!                                    written by the server's merge; files before it lack it)
//! /                      runs_recorded (u32, optional: the groups say which run they hold; a
//!                                    group without `attempt` holds none)
//!     times              f64 (T)
//!     qpos               f64 (T, 36)   root xyz, root quat wxyz, 29 joints
//!     qvel               f64 (T, 35)
//!     body_pos           f64 (T, 93)   31 bodies × xyz
//!     actions            f64 (T, 29)
//!     ref_qpos           f64 (T, 36)
//!     ref_body_pos       f64 (T, 93)
//!     state              f64 (T, 64)   the observation the agent saw
//!     ref_state          f64 (T, 64)
//!     targets            f64 (T, 29)   optional: the PD targets tracked to reach each row (rad)
//!     torques            f64 (T, 29)   optional: the last substep's applied torques (N·m)
//!     feedforward        f64 (T, 29)   optional: joint-position actions' feed-forward torques
//! ```
//!
//! The optional datasets are written when recorded (files of earlier versions lack them; a
//! reader gets them empty).
//!
//! The datasets in [`COMPRESSED_DATASETS`] (`times`, `actions`, `state`, `ref_state`,
//! `feedforward`) are chunked by `min(T, 512)` rows, byte-shuffled and deflate-compressed at
//! level 1; the others are stored raw and contiguous. A whole benchmark's trajectories are
//! written while it runs, on the cores that simulate it, and simulated doubles barely compress.
//! Measured on g1-moves-dance (one submission, 201 MB raw; `remote_vs_local` under `perf`):
//! - everything deflated with stock zlib: 146 MB, 5.5 s of CPU;
//! - everything deflated with zlib-ng (level 1 is its fast `deflate_quick`): 159 MB, 2.1 s;
//! - only these five deflated (zlib-ng), the rest raw and contiguous: 172 MB, about 0.5 s;
//! - per dataset, raw → deflated: `actions` 2.0×, `state` and `ref_state` 1.9×, `times` 6.5×;
//!   `body_pos` 1.17×, `ref_body_pos` 1.11×, `qpos` 1.10×, `ref_qpos` 1.08×, `targets` 1.08×,
//!   `torques` 1.05×, `qvel` 1.03×, hence the split.
//!
//! zlib is zlib-ng (the `libz-sys` features in Cargo.toml); the stream is standard deflate, which
//! every HDF5 reader opens.
//! Zero-row datasets (an episode given up on with no stored run) are chunked by one row and
//! uncompressed: HDF5 refuses a contiguous dataset of size zero, and chunks larger than a
//! fixed dimension of size zero.

use std::path::{Path, PathBuf};

use hdf5::file::FileBuilder;
use hdf5::types::VarLenUnicode;
use hdf5::{File, Group, MinorErrorCode};

pub use crate::trajectory_chunks::PreparedEpisode;

/// Value of the root attribute `format`.
pub const FORMAT_NAME: &str = "mimicarena-trajectories";
/// Value of the root attribute `version`; files with a larger version are refused.
pub const FORMAT_VERSION: u32 = 1;

pub use crate::trajectory::{
    ACTION_WIDTH, BODY_WIDTH, DATASETS, OPTIONAL_DATASETS, QPOS_WIDTH, QVEL_WIDTH, STATE_WIDTH, TrajectoryRows,
};

/// Largest number of rows per chunk.
pub(crate) const MAX_CHUNK_ROWS: usize = 512;
/// Deflate (gzip) level of the compressed datasets.
pub(crate) const DEFLATE_LEVEL: u8 = 1;
/// The datasets worth compressing: values that were 32-bit floats (the agent's actions, the
/// observations) or regular (`times`), about 2× smaller deflated (`times` 6.5×). The simulated
/// doubles (positions, velocities, PD targets, torques) deflate by 3–17 % only, so they are
/// stored as they are: that saves three quarters of the compression work for a file 8 % larger
/// (measurements in the module comment).
pub const COMPRESSED_DATASETS: [&str; 5] = ["times", "actions", "state", "ref_state", "feedforward"];
/// Prefix of episode group names; the full name is `episode_{:05}`.
const EPISODE_PREFIX: &str = "episode_";

/// One recorded episode. Every array is row-major with `times.len()` rows.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EpisodeRecord {
    /// Index in the submission; the group is named `episode_00007`.
    pub episode: u32,
    pub motion: String,
    pub category: String,
    pub seed: u64,
    pub dr_level: u32,
    /// `completed`, `fell`, `failed` or `timeout`.
    pub status: String,
    /// Empty unless failed/timeout.
    pub reason: String,
    pub start_s: f64,
    pub duration_s: f64,
    /// Where scoring stopped (seconds from the episode's start) when that was before the
    /// episode's end: the break of the benchmark's success rule. Files written before it have
    /// none.
    pub scored_until_s: Option<f64>,
    /// The arrays, one dataset each.
    pub rows: TrajectoryRows,
}

impl EpisodeRecord {
    /// Number of rows (T).
    pub fn num_rows(&self) -> usize {
        self.rows.len()
    }

    /// Values in all its arrays (8 bytes each as stored).
    pub fn values_len(&self) -> usize {
        self.written().map(|(_, values)| values.len()).sum()
    }

    /// Every dataset to write: the required ones, then the recorded optional ones.
    pub(crate) fn written(&self) -> impl Iterator<Item = (&(&'static str, usize), &[f64])> {
        let optional = OPTIONAL_DATASETS
            .iter()
            .zip(self.rows.optional_arrays())
            .filter(|(_, v)| !v.is_empty());
        DATASETS.iter().zip(self.rows.arrays()).chain(optional)
    }
}

/// Group name of an episode index: `episode_00007`.
pub fn episode_group_name(episode: u32) -> String {
    format!("{EPISODE_PREFIX}{episode:05}")
}

/// Errors from reading or writing trajectory files. Every message starts with the file path and,
/// where it applies, names the episode group and dataset.
#[derive(Debug, thiserror::Error)]
pub enum TrajectoryFileError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The HDF5 library failed; `context` says what was being done (e.g. `episode_00003/qpos: write`).
    #[error("{path}: {context}: {message}")]
    Hdf5 {
        path: PathBuf,
        context: String,
        message: String,
    },
    #[error("{path}: not a {FORMAT_NAME} file: {detail}")]
    NotTrajectoryFile { path: PathBuf, detail: String },
    #[error("{path}: {FORMAT_NAME} version {found} is newer than the supported version {FORMAT_VERSION}")]
    UnsupportedVersion { path: PathBuf, found: u32 },
    /// An array of an [`EpisodeRecord`] has the wrong number of values; nothing was written.
    #[error("{path}: {dataset}: expected {rows}×{width} values, got {got}")]
    WrongLength {
        path: PathBuf,
        /// `episode_00003/qpos`
        dataset: String,
        rows: usize,
        width: usize,
        got: usize,
    },
    #[error("{path}: no episode named {episode}")]
    MissingEpisode { path: PathBuf, episode: String },
    /// An episode's contents are unusable (bad name, string attribute, or dataset shape).
    #[error("{path}: {episode}: {message}")]
    InvalidEpisode {
        path: PathBuf,
        episode: String,
        message: String,
    },
}

type Result<T> = std::result::Result<T, TrajectoryFileError>;

/// Builds the `map_err` closure turning an HDF5 error into [`TrajectoryFileError::Hdf5`].
fn h5err(path: &Path, context: impl Into<String>) -> impl FnOnce(hdf5::Error) -> TrajectoryFileError {
    let path = path.to_path_buf();
    let context = context.into();
    move |err| TrajectoryFileError::Hdf5 {
        path,
        context,
        message: err.to_string(),
    }
}

/// A trajectory file open for appending episodes. Holds only the path: every write opens and
/// closes the HDF5 file so the file on disk is complete between writes.
#[derive(Debug)]
pub struct TrajectoryFile {
    path: PathBuf,
}

impl TrajectoryFile {
    /// Opens for appending, creating the file (and parent directories) if missing. New files get
    /// root attributes `format`, `version`, `submission`, `benchmark`. An existing file must carry
    /// this format (else error); its `submission` and `benchmark` are not compared.
    pub fn open_or_create(path: &Path, submission: &str, benchmark: &str) -> Result<Self> {
        if path.exists() {
            // Read-write, so a file we could not append to is reported now rather than later.
            let file = builder().open_rw(path).map_err(|err| open_error(path, err))?;
            check_header(path, &file)?;
            file.close().map_err(h5err(path, "close"))?;
            return Ok(Self {
                path: path.to_path_buf(),
            });
        }
        let submission = to_varlen(path, "/", "submission", submission)?;
        let benchmark = to_varlen(path, "/", "benchmark", benchmark)?;
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|source| TrajectoryFileError::Io {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        // Build the header under a temporary name and rename it into place, so a crash during
        // creation never leaves a file at `path` without its format attributes.
        let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
        tmp_name.push(format!(".creating-{}", std::process::id()));
        let tmp = path.with_file_name(tmp_name);
        let created = create_header(path, &tmp, &submission, &benchmark);
        if created.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        created?;
        Ok(Self {
            path: path.to_path_buf(),
        })
    }

    /// Writes one episode as group `episode_{:05}`, replacing a group of that name if present (a
    /// re-run after a crash). Validates every array length first (error, nothing written). Opens,
    /// flushes and closes the file before returning.
    ///
    /// Space of a replaced group is not reclaimed (HDF5 does not shrink files); `h5repack` does.
    pub fn write_episode(&mut self, record: &EpisodeRecord) -> Result<()> {
        let path = self.path.as_path();
        let name = episode_group_name(record.episode);
        check_lengths(path, &name, record)?;
        let strings = group_strings(path, &name, record)?;
        // Filtered before the file is opened, outside HDF5's lock.
        let chunks = crate::trajectory_chunks::filter_record(record);
        let file = builder().open_rw(path).map_err(|err| open_error(path, err))?;
        let written = write_group(
            path,
            &file,
            &name,
            record,
            &chunks,
            &strings,
            &mut DatasetMaker::Builder,
        );
        // Flush and close even after a failed write, so the file stays consistent on disk.
        let flushed = file.flush().map_err(h5err(path, "flush"));
        let closed = file.close().map_err(h5err(path, "close"));
        written.and(flushed).and(closed)
    }

    /// [`Self::write_episode`] for an episode whose compressed datasets are already filtered.
    pub fn write_prepared(&mut self, prepared: &PreparedEpisode) -> Result<()> {
        let (path, record) = (self.path.as_path(), &prepared.record);
        let name = episode_group_name(record.episode);
        check_lengths(path, &name, record)?;
        let strings = group_strings(path, &name, record)?;
        let file = builder().open_rw(path).map_err(|err| open_error(path, err))?;
        let written = write_group(
            path,
            &file,
            &name,
            record,
            &prepared.chunks,
            &strings,
            &mut DatasetMaker::Builder,
        );
        let flushed = file.flush().map_err(h5err(path, "flush"));
        let closed = file.close().map_err(h5err(path, "close"));
        written.and(flushed).and(closed)
    }

    /// [`Self::write_prepared`] for many episodes in one opening of the file (flushed and
    /// closed once, after the last): for a file that is complete only when the call returns,
    /// such as a merge into a scratch file. Stops at the first error (the file is still
    /// flushed and closed).
    pub fn write_prepared_all<P: std::borrow::Borrow<PreparedEpisode>>(
        &mut self,
        episodes: impl IntoIterator<Item = P>,
    ) -> Result<()> {
        let mut batch = self.open_batch()?;
        let written = episodes
            .into_iter()
            .try_for_each(|prepared| batch.write(prepared.borrow()));
        let closed = batch.close();
        written.and(closed)
    }

    /// Opens the file once for many [`EpisodeBatch::write`]s, as long as the caller needs
    /// (a merge that goes on while a submission runs): the file on disk is complete only after
    /// [`EpisodeBatch::close`].
    pub fn open_batch(&mut self) -> Result<EpisodeBatch> {
        let path = self.path.clone();
        let file = batch_builder().open_rw(&path).map_err(|err| open_error(&path, err))?;
        let plists = DatasetPlists::new().map_err(h5err(&path, "make property lists"))?;
        Ok(EpisodeBatch {
            path,
            file,
            datasets: DatasetMaker::Cached(Box::new(plists)),
        })
    }

    /// Copies episode group `name` of the trajectory file `source` into this file, replacing a
    /// group of that name if present. The group's shapes are checked first (metadata only). HDF5's
    /// object copy moves numeric chunks as stored, without decompressing them, so merging
    /// episode files costs no compression: the server compresses each episode once.
    pub fn copy_episode_from(&mut self, source: &Path, name: &str) -> Result<()> {
        let path = self.path.as_path();
        let from = open_checked(source)?;
        let group = open_episode_group(source, &from, name)?;
        check_episode_shapes(source, &group, name)?;
        let file = builder().open_rw(path).map_err(|err| open_error(path, err))?;
        let copied = (|| {
            if file.link_exists(name) {
                file.unlink(name)
                    .map_err(h5err(path, format!("{name}: remove old group")))?;
            }
            group
                .copy_to(&file, name)
                .map_err(h5err(path, format!("{name}: copy from {}", source.display())))
        })();
        let flushed = file.flush().map_err(h5err(path, "flush"));
        let closed = file.close().map_err(h5err(path, "close"));
        copied.and(flushed).and(closed)
    }

    /// Records which run of each episode its group holds: the attribute `attempt` of group
    /// `episode_{idx}` for each `(idx, attempt)` in `runs` (groups that must exist), and the
    /// file's `runs_recorded` (a group without `attempt` then holds no run), in one opening of
    /// the file. A restored database that counts other runs than a file holds is then told
    /// apart from one that counts the same ([`episode_attempts`]).
    pub fn set_attempts(&mut self, runs: &[(u32, u32)]) -> Result<()> {
        let path = self.path.as_path();
        let file = builder().open_rw(path).map_err(|err| open_error(path, err))?;
        let marked = match file.attr(RUNS_RECORDED_ATTR) {
            Ok(_) => Ok(()),
            Err(_) => write_scalar_attr(path, &file, "/", RUNS_RECORDED_ATTR, &1u32),
        };
        let written = marked.and_then(|()| {
            runs.iter().try_for_each(|&(idx, attempt)| {
                let name = episode_group_name(idx);
                let group = open_episode_group(path, &file, &name)?;
                // Written over where there is one (a copied group's, a merge redone).
                match group.attr(ATTEMPT_ATTR) {
                    Ok(existing) => existing
                        .write_scalar(&attempt)
                        .map_err(h5err(path, format!("{name}: attribute {ATTEMPT_ATTR}: write"))),
                    Err(_) => write_scalar_attr(path, &group, &name, ATTEMPT_ATTR, &attempt),
                }
            })
        });
        let flushed = file.flush().map_err(h5err(path, "flush"));
        let closed = file.close().map_err(h5err(path, "close"));
        written.and(flushed).and(closed)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The group attribute naming the run (attempt number) of the episode a group holds.
const ATTEMPT_ATTR: &str = "attempt";
/// The root attribute of a file whose groups say which run they hold ([`TrajectoryFile::set_attempts`]).
const RUNS_RECORDED_ATTR: &str = "runs_recorded";

/// Each episode group of the file at `path` and the run it holds: its `attempt` attribute;
/// `Some(0)` (no run played) for a group without one in a file that records runs; `None` for a
/// group of a file written before runs were recorded. Sorted by name.
pub fn episode_attempts(path: &Path) -> Result<Vec<(String, Option<u32>)>> {
    let file = open_checked(path)?;
    let recorded = file.attr(RUNS_RECORDED_ATTR).is_ok();
    let unrecorded = if recorded { Some(0) } else { None };
    episode_names(path)?
        .into_iter()
        .map(|name| {
            let group = open_episode_group(path, &file, &name)?;
            let has = group
                .attr_names()
                .map_err(h5err(path, format!("{name}: attributes")))?
                .iter()
                .any(|a| a == ATTEMPT_ATTR);
            let attempt = if has {
                Some(read_scalar_attr::<u32>(path, &group, &name, ATTEMPT_ATTR)?)
            } else {
                unrecorded
            };
            Ok((name, attempt))
        })
        .collect()
}

/// A trajectory file held open by [`TrajectoryFile::open_batch`].
pub struct EpisodeBatch {
    path: PathBuf,
    file: File,
    datasets: DatasetMaker,
}

impl std::fmt::Debug for EpisodeBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpisodeBatch")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl EpisodeBatch {
    /// [`TrajectoryFile::write_prepared`] without opening, flushing or closing the file.
    pub fn write(&mut self, prepared: &PreparedEpisode) -> Result<()> {
        let (path, record) = (self.path.as_path(), &prepared.record);
        let name = episode_group_name(record.episode);
        check_lengths(path, &name, record)?;
        let strings = group_strings(path, &name, record)?;
        let (file, datasets) = (&self.file, &mut self.datasets);
        write_group(path, file, &name, record, &prepared.chunks, &strings, datasets)
    }

    /// Flushes and closes the file.
    pub fn close(self) -> Result<()> {
        let path = self.path.as_path();
        let flushed = self.file.flush().map_err(h5err(path, "flush"));
        let closed = self.file.close().map_err(h5err(path, "close"));
        flushed.and(closed)
    }
}

/// Checks every array's length against the record's rows (nothing is written otherwise).
fn check_lengths(path: &Path, name: &str, record: &EpisodeRecord) -> Result<()> {
    let rows = record.num_rows();
    for ((dataset, width), values) in record.written() {
        if values.len() != rows * width {
            return Err(TrajectoryFileError::WrongLength {
                path: path.to_path_buf(),
                dataset: format!("{name}/{dataset}"),
                rows,
                width: *width,
                got: values.len(),
            });
        }
    }
    Ok(())
}

/// The group's string attributes, converted before the file is opened.
fn group_strings(path: &Path, name: &str, record: &EpisodeRecord) -> Result<Vec<(&'static str, VarLenUnicode)>> {
    [
        ("motion", &record.motion),
        ("category", &record.category),
        ("status", &record.status),
        ("reason", &record.reason),
    ]
    .map(|(attr, value)| to_varlen(path, name, attr, value).map(|v| (attr, v)))
    .into_iter()
    .collect()
}

fn write_root_attrs(path: &Path, file: &File, submission: &VarLenUnicode, benchmark: &VarLenUnicode) -> Result<()> {
    let format = to_varlen(path, "/", "format", FORMAT_NAME)?;
    write_str_attr(path, file, "/", "format", &format)?;
    write_scalar_attr(path, file, "/", "version", &FORMAT_VERSION)?;
    write_str_attr(path, file, "/", "submission", submission)?;
    write_str_attr(path, file, "/", "benchmark", benchmark)
}

/// Writes a new file holding only the root attributes at `tmp`, then renames it to `path`.
fn create_header(path: &Path, tmp: &Path, submission: &VarLenUnicode, benchmark: &VarLenUnicode) -> Result<()> {
    let file = builder().create(tmp).map_err(h5err(path, "create"))?;
    write_root_attrs(path, &file, submission, benchmark)?;
    file.flush().map_err(h5err(path, "flush"))?;
    file.close().map_err(h5err(path, "close"))?;
    std::fs::rename(tmp, path).map_err(|source| TrajectoryFileError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Creates group `name` (replacing an existing one) with its attributes and datasets.
fn write_group(
    path: &Path,
    file: &File,
    name: &str,
    record: &EpisodeRecord,
    chunks: &[crate::trajectory_chunks::Chunks],
    strings: &[(&str, VarLenUnicode)],
    datasets: &mut DatasetMaker,
) -> Result<()> {
    if file.link_exists(name) {
        file.unlink(name)
            .map_err(h5err(path, format!("{name}: remove old group")))?;
    }
    let group = file
        .create_group(name)
        .map_err(h5err(path, format!("{name}: create group")))?;
    for (attr, value) in strings {
        datasets.attr(path, &group, name, attr, value)?;
    }
    datasets.attr(path, &group, name, "seed", &record.seed)?;
    datasets.attr(path, &group, name, "dr_level", &record.dr_level)?;
    datasets.attr(path, &group, name, "start_s", &record.start_s)?;
    datasets.attr(path, &group, name, "duration_s", &record.duration_s)?;
    let steps = record.num_rows().saturating_sub(1) as u64;
    datasets.attr(path, &group, name, "steps", &steps)?;
    if let Some(t) = &record.scored_until_s {
        datasets.attr(path, &group, name, "scored_until_s", t)?;
    }

    let rows = record.num_rows();
    for (((dataset, width), values), chunks) in record.written().zip(chunks) {
        let context = || format!("{name}/{dataset}: create");
        let chunk_rows = crate::trajectory_chunks::chunk_rows(rows);
        // Raw datasets are contiguous: a chunked one would fill its last chunk whole (512 rows).
        // Zero-row datasets have no chunks either (see the module comment).
        let shape: &[usize] = match *width {
            1 => &[rows],
            w => &[rows, w],
        };
        let filtered = (!chunks.is_empty()).then_some(chunk_rows);
        let ds = datasets
            .create(&group, dataset, shape, filtered)
            .map_err(h5err(path, context()))?;
        let written = match chunks.is_empty() {
            true if rows > 0 => ds.write_raw(values),
            true => Ok(()),
            false => write_filtered_chunks(&ds, chunk_rows, chunks),
        };
        written.map_err(h5err(path, format!("{name}/{dataset}: write")))?;
    }
    Ok(())
}

/// How [`write_group`] creates an episode's f64 datasets and scalar attributes. The `hdf5`
/// crate's builder makes a datatype and four property lists for every dataset (about a third
/// of the time a batch spent creating datasets, `perf`), and a type, a space, a property list
/// and a conversion check for every attribute; a batch makes them once per opening of the
/// file, with the same properties (checked by a test against the builder's). 1024 two-second
/// episodes in one batch: 0.52 s → 0.40 s on 2 cores.
enum DatasetMaker {
    Builder,
    Cached(Box<DatasetPlists>),
}

impl DatasetMaker {
    /// Dataset `name` of `shape` in `group`: with `filtered = Some(chunk_rows)` chunked by
    /// `chunk_rows` rows, shuffled and deflated; else contiguous, or for no rows chunked by 1
    /// (HDF5 refuses a contiguous dataset of size zero).
    fn create(
        &mut self,
        group: &Group,
        name: &str,
        shape: &[usize],
        filtered: Option<usize>,
    ) -> hdf5::Result<hdf5::Dataset> {
        match self {
            DatasetMaker::Builder => {
                let builder = group.new_dataset::<f64>();
                match filtered {
                    None => builder.shape(shape).create(name),
                    Some(rows) => builder
                        .chunk(chunk_shape(shape, rows))
                        .shuffle()
                        .deflate(DEFLATE_LEVEL)
                        .shape(shape)
                        .create(name),
                }
            }
            DatasetMaker::Cached(plists) => plists.create(group, name, shape, filtered),
        }
    }

    /// Scalar attribute `attr` of group `group_name` (a string one in UTF-8), written.
    fn attr<T: hdf5::H5Type + 'static>(
        &mut self,
        path: &Path,
        group: &Group,
        group_name: &str,
        attr: &str,
        value: &T,
    ) -> Result<()> {
        match self {
            DatasetMaker::Builder => write_scalar_attr(path, group, group_name, attr, value),
            DatasetMaker::Cached(plists) => plists
                .attr(group, attr, value)
                .map_err(h5err(path, format!("{group_name}: attribute {attr}: write"))),
        }
    }
}

/// The chunk of a dataset of `shape` chunked by `rows` rows.
fn chunk_shape(shape: &[usize], rows: usize) -> Vec<usize> {
    std::iter::once(rows).chain(shape[1..].iter().copied()).collect()
}

/// The types and property lists the builder would make for our datasets and attributes, made
/// once.
struct DatasetPlists {
    dtype: hdf5::Datatype,
    lcpl: hdf5::plist::LinkCreate,
    dapl: hdf5::plist::DatasetAccess,
    contiguous: hdf5::plist::DatasetCreate,
    /// Chunked ones by (chunk shape, filtered).
    chunked: std::collections::HashMap<(Vec<usize>, bool), hdf5::plist::DatasetCreate>,
    /// For attributes: their types, a scalar space, UTF-8 names (the builder's encoding).
    attr_types: std::collections::HashMap<std::any::TypeId, hdf5::Datatype>,
    scalar: hdf5::Dataspace,
    acpl: hdf5::plist::AttributeCreate,
}

impl DatasetPlists {
    fn new() -> hdf5::Result<Self> {
        Ok(Self {
            dtype: hdf5::Datatype::from_type::<f64>()?,
            lcpl: hdf5::plist::LinkCreate::build()
                .create_intermediate_group(true)
                .finish()?,
            dapl: hdf5::plist::DatasetAccess::build().finish()?,
            contiguous: hdf5::plist::DatasetCreate::build()
                .obj_track_times(false)
                .no_chunk()
                .finish()?,
            chunked: Default::default(),
            attr_types: Default::default(),
            scalar: hdf5::Dataspace::try_new(())?,
            acpl: hdf5::plist::AttributeCreate::build()
                .char_encoding(hdf5::plist::CharEncoding::Utf8)
                .finish()?,
        })
    }

    /// What the builder does for a scalar attribute (the same type in the file and in memory),
    /// without making the type, space and property list again.
    fn attr<T: hdf5::H5Type + 'static>(&mut self, group: &Group, name: &str, value: &T) -> hdf5::Result<()> {
        let dtype = match self.attr_types.entry(std::any::TypeId::of::<T>()) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(hdf5::Datatype::from_type::<T>()?),
        };
        let name = std::ffi::CString::new(name).map_err(|e| hdf5::Error::from(e.to_string()))?;
        hdf5::sync::sync(|| {
            // SAFETY: open group, type, space and property list ids held by `self` or the
            // caller; `name` is NUL-terminated; `value` is one `T` in the layout `dtype`
            // describes (the type made from `T`), read by H5Awrite only.
            let id = unsafe {
                hdf5_sys::h5a::H5Acreate2(
                    group.id(),
                    name.as_ptr(),
                    dtype.id(),
                    self.scalar.id(),
                    self.acpl.id(),
                    hdf5_sys::h5p::H5P_DEFAULT,
                )
            };
            if id < 0 {
                return Err(hdf5::Error::query().unwrap_or_else(|e| e));
            }
            let written = unsafe { hdf5_sys::h5a::H5Awrite(id, dtype.id(), (value as *const T).cast()) };
            let error = (written < 0).then(|| hdf5::Error::query().unwrap_or_else(|e| e));
            // SAFETY: `id` was opened above and is closed once.
            unsafe { hdf5_sys::h5a::H5Aclose(id) };
            error.map_or(Ok(()), Err)
        })
    }

    fn create(
        &mut self,
        group: &Group,
        name: &str,
        shape: &[usize],
        filtered: Option<usize>,
    ) -> hdf5::Result<hdf5::Dataset> {
        let size: usize = shape.iter().product();
        let chunk = match filtered {
            Some(rows) => Some((chunk_shape(shape, rows), true)),
            None if size == 0 => Some((vec![1; shape.len()], false)),
            None => None,
        };
        let dcpl = match chunk {
            None => &self.contiguous,
            Some(key) => match self.chunked.entry(key) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let (chunk, filtered) = e.key();
                    let mut builder = hdf5::plist::DatasetCreate::build();
                    builder.obj_track_times(false).chunk(chunk.as_slice());
                    if *filtered {
                        builder.shuffle().deflate(DEFLATE_LEVEL);
                    }
                    let dcpl = builder
                        .fill_time(hdf5::plist::dataset_create::FillTime::Alloc)
                        .finish()?;
                    e.insert(dcpl)
                }
            },
        };
        let space = hdf5::Dataspace::try_new(shape)?;
        let name = std::ffi::CString::new(name).map_err(|e| hdf5::Error::from(e.to_string()))?;
        // SAFETY: every id is of an open object of the right class (the group, this file's
        // datatype, a dataspace and property lists held by `self`) and `name` is a
        // NUL-terminated string; the call runs under the library's lock.
        let id = hdf5::sync::sync(|| unsafe {
            hdf5_sys::h5d::H5Dcreate2(
                group.id(),
                name.as_ptr(),
                self.dtype.id(),
                space.id(),
                self.lcpl.id(),
                dcpl.id(),
                self.dapl.id(),
            )
        });
        if id < 0 {
            return Err(hdf5::Error::query().unwrap_or_else(|e| e));
        }
        // SAFETY: `id` is a dataset just created, owned from here by the returned handle.
        unsafe { hdf5::from_id(id) }
    }
}

/// Stores chunks already shuffled and deflated ([`crate::trajectory_chunks`]) as they are.
fn write_filtered_chunks(ds: &hdf5::Dataset, chunk_rows: usize, chunks: &[Vec<u8>]) -> hdf5::Result<()> {
    for (i, chunk) in chunks.iter().enumerate() {
        // The chunk's first element: (row, column 0) for a table, row for a column.
        let offset: [hdf5_sys::h5::hsize_t; 2] = [(i * chunk_rows) as _, 0];
        // SAFETY: `ds` is an open chunked dataset of rank ≤ 2 (the offset has an entry per
        // dimension) and `chunk` holds `chunk.len()` bytes; filter mask 0 = every filter applied.
        let status = hdf5::sync::sync(|| unsafe {
            hdf5_sys::h5d::H5Dwrite_chunk(
                ds.id(),
                hdf5_sys::h5p::H5P_DEFAULT,
                0,
                offset.as_ptr(),
                chunk.len(),
                chunk.as_ptr().cast(),
            )
        });
        if status < 0 {
            return Err(hdf5::Error::query().unwrap_or_else(|e| e));
        }
    }
    Ok(())
}

fn to_varlen(path: &Path, group: &str, attr: &str, value: &str) -> Result<VarLenUnicode> {
    value
        .parse::<VarLenUnicode>()
        .map_err(|err| TrajectoryFileError::InvalidEpisode {
            path: path.to_path_buf(),
            episode: group.to_owned(),
            message: format!("attribute {attr}: {err}"),
        })
}

fn write_str_attr(path: &Path, group: &Group, group_name: &str, attr: &str, value: &VarLenUnicode) -> Result<()> {
    group
        .new_attr::<VarLenUnicode>()
        .create(attr)
        .and_then(|a| a.write_scalar(value))
        .map_err(h5err(path, format!("{group_name}: attribute {attr}: write")))
}

fn write_scalar_attr<T: hdf5::H5Type>(
    path: &Path,
    group: &Group,
    group_name: &str,
    attr: &str,
    value: &T,
) -> Result<()> {
    group
        .new_attr::<T>()
        .create(attr)
        .and_then(|a| a.write_scalar(value))
        .map_err(h5err(path, format!("{group_name}: attribute {attr}: write")))
}

fn read_str_attr(path: &Path, group: &Group, group_name: &str, attr: &str) -> Result<String> {
    group
        .attr(attr)
        .and_then(|a| a.read_scalar::<VarLenUnicode>())
        .map(|v| v.as_str().to_owned())
        .map_err(h5err(path, format!("{group_name}: attribute {attr}: read")))
}

fn read_scalar_attr<T: hdf5::H5Type>(path: &Path, group: &Group, group_name: &str, attr: &str) -> Result<T> {
    group
        .attr(attr)
        .and_then(|a| a.read_scalar::<T>())
        .map_err(h5err(path, format!("{group_name}: attribute {attr}: read")))
}

/// File options for every open. HDF5's `flock` is disabled: HDF5 opens files without
/// `O_CLOEXEC`, so a child process the server spawns while a write is in progress inherits the
/// descriptor and its lock, and every later open would fail until that child exits. Writers are
/// serialised by [`TrajectoryFile`] (`&mut self`), and each write leaves a consistent file.
fn builder() -> FileBuilder {
    let mut builder = File::with_options();
    builder.with_fapl(|fapl| fapl.file_locking(false));
    builder
}

/// Metadata and small raw data gathered into blocks of this size while a batch is written:
/// fewer, larger writes (1024 two-second episodes in one opening: 0.65 s → 0.57 s on 2 cores,
/// the file 0.3 % larger). Only for a batch: each opening may leave part of a block unused.
const BATCH_BLOCK_BYTES: u64 = 1 << 20;

/// [`builder`] for [`TrajectoryFile::write_prepared_all`].
fn batch_builder() -> FileBuilder {
    let mut builder = File::with_options();
    builder.with_fapl(|fapl| {
        fapl.file_locking(false)
            .meta_block_size(BATCH_BLOCK_BYTES)
            .small_data_block_size(BATCH_BLOCK_BYTES)
    });
    builder
}

/// Maps a failure to open `path` to a clear error: "not an HDF5 file" where that is the cause.
fn open_error(path: &Path, err: hdf5::Error) -> TrajectoryFileError {
    if err.contains_minor(MinorErrorCode::NotHdf5) {
        TrajectoryFileError::NotTrajectoryFile {
            path: path.to_path_buf(),
            detail: "not an HDF5 file".to_owned(),
        }
    } else {
        h5err(path, "open")(err)
    }
}

/// Checks the root attributes `format` and `version`.
fn check_header(path: &Path, file: &File) -> Result<()> {
    let not_ours = |detail: String| TrajectoryFileError::NotTrajectoryFile {
        path: path.to_path_buf(),
        detail,
    };
    if !file
        .attr_names()
        .map_err(h5err(path, "list root attributes"))?
        .iter()
        .any(|a| a == "format")
    {
        return Err(not_ours("no root attribute `format`".to_owned()));
    }
    let format = file
        .attr("format")
        .and_then(|a| a.read_scalar::<VarLenUnicode>())
        .map_err(|err| not_ours(format!("unreadable root attribute `format`: {err}")))?;
    if format.as_str() != FORMAT_NAME {
        return Err(not_ours(format!("root attribute `format` is {:?}", format.as_str())));
    }
    let version: u32 = read_scalar_attr(path, file, "/", "version")?;
    if version > FORMAT_VERSION {
        return Err(TrajectoryFileError::UnsupportedVersion {
            path: path.to_path_buf(),
            found: version,
        });
    }
    Ok(())
}

/// Opens an existing trajectory file read-only and checks its header.
fn open_checked(path: &Path) -> Result<File> {
    if !path.exists() {
        return Err(TrajectoryFileError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
    }
    let file = builder().open(path).map_err(|err| open_error(path, err))?;
    check_header(path, &file)?;
    Ok(file)
}

/// Reads the root attributes `(submission, benchmark)`.
pub fn read_header(path: &Path) -> Result<(String, String)> {
    let file = open_checked(path)?;
    let submission = read_str_attr(path, &file, "/", "submission")?;
    let benchmark = read_str_attr(path, &file, "/", "benchmark")?;
    Ok((submission, benchmark))
}

/// Names of the episode groups (`episode_00007`, ...), sorted.
pub fn episode_names(path: &Path) -> Result<Vec<String>> {
    let file = open_checked(path)?;
    let mut names: Vec<String> = file
        .member_names()
        .map_err(h5err(path, "list groups"))?
        .into_iter()
        .filter(|n| parse_episode_name(n).is_some())
        .collect();
    names.sort();
    Ok(names)
}

fn parse_episode_name(name: &str) -> Option<u32> {
    let digits = name.strip_prefix(EPISODE_PREFIX)?;
    if digits.len() < 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Opens episode group `name` of an opened trajectory file.
fn open_episode_group(path: &Path, file: &File, name: &str) -> Result<Group> {
    if parse_episode_name(name).is_none() {
        return Err(TrajectoryFileError::InvalidEpisode {
            path: path.to_path_buf(),
            episode: name.to_owned(),
            message: "not an episode group name".to_owned(),
        });
    }
    if !file.link_exists(name) {
        return Err(TrajectoryFileError::MissingEpisode {
            path: path.to_path_buf(),
            episode: name.to_owned(),
        });
    }
    file.group(name).map_err(h5err(path, format!("{name}: open group")))
}

/// Checks that every dataset of episode group `name` has its width and that all have the same
/// number of rows (optional ones may be absent), reading no data. Returns the rows.
fn check_episode_shapes(path: &Path, group: &Group, name: &str) -> Result<usize> {
    let mut rows = None;
    let required = DATASETS.iter().map(|d| (d, true));
    let optional = OPTIONAL_DATASETS.iter().map(|d| (d, false));
    for ((dataset, width), needed) in required.chain(optional) {
        if !needed && !group.link_exists(dataset) {
            continue;
        }
        let ds = group
            .dataset(dataset)
            .map_err(h5err(path, format!("{name}/{dataset}: open")))?;
        let shape = ds.shape();
        let t = *rows.get_or_insert(shape.first().copied().unwrap_or(0));
        let expected = if *width == 1 { vec![t] } else { vec![t, *width] };
        if shape != expected {
            return Err(TrajectoryFileError::InvalidEpisode {
                path: path.to_path_buf(),
                episode: name.to_owned(),
                message: format!("{dataset}: shape {shape:?}, expected {expected:?}"),
            });
        }
    }
    Ok(rows.unwrap_or(0))
}

/// Reads episode group `name` (as listed by [`episode_names`]).
pub fn read_episode(path: &Path, name: &str) -> Result<EpisodeRecord> {
    let episode = parse_episode_name(name).ok_or_else(|| TrajectoryFileError::InvalidEpisode {
        path: path.to_path_buf(),
        episode: name.to_owned(),
        message: "not an episode group name".to_owned(),
    })?;
    let file = open_checked(path)?;
    let group = open_episode_group(path, &file, name)?;
    let mut record = EpisodeRecord {
        episode,
        motion: read_str_attr(path, &group, name, "motion")?,
        category: read_str_attr(path, &group, name, "category")?,
        seed: read_scalar_attr(path, &group, name, "seed")?,
        dr_level: read_scalar_attr(path, &group, name, "dr_level")?,
        status: read_str_attr(path, &group, name, "status")?,
        reason: read_str_attr(path, &group, name, "reason")?,
        start_s: read_scalar_attr(path, &group, name, "start_s")?,
        duration_s: read_scalar_attr(path, &group, name, "duration_s")?,
        scored_until_s: match group.attr_names() {
            Ok(names) if names.iter().any(|n| n == "scored_until_s") => {
                Some(read_scalar_attr(path, &group, name, "scored_until_s")?)
            }
            Ok(_) => None,
            Err(e) => return Err(h5err(path, format!("{name}: list attributes"))(e)),
        },
        ..EpisodeRecord::default()
    };
    let rows = check_episode_shapes(path, &group, name)?;
    let read = |dataset: &str, values: &mut Vec<f64>| {
        if rows > 0 && group.link_exists(dataset) {
            *values = group
                .dataset(dataset)
                .and_then(|ds| ds.read_raw::<f64>())
                .map_err(h5err(path, format!("{name}/{dataset}: read")))?;
        }
        Ok(())
    };
    for ((dataset, _), values) in DATASETS.iter().zip(record.rows.arrays_mut()) {
        read(dataset, values)?;
    }
    for ((dataset, _), values) in OPTIONAL_DATASETS.iter().zip(record.rows.optional_arrays_mut()) {
        read(dataset, values)?;
    }
    Ok(record)
}
