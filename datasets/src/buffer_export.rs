//! Trajectory-dataset exports in BFM-Zero's replay-buffer layout (HDF5), written one episode at a
//! time so an export of any size needs memory for one episode only.
//!
//! BFM-Zero saves a buffer as one HDF5 dataset per key, nested keys joined with `-`, every
//! dataset with one row per transition. An export is exactly that at the top level, so
//! `{k: f[k][()] for k in f if isinstance(f[k], h5py.Dataset)}` is a buffer-shaped dict:
//!
//! ```text
//! /                                attributes: format = "mimicarena-buffer", version = 1 (u32),
//!                                              card (the dataset card, JSON text)
//! observation-state                f32 (N, 64)    the `state` observation the agent saw
//! observation-privileged_state     f32 (N, 463)   `privileged_state` of the simulated robot
//! action                           f32 (N, 29)    the normalised action that produced the row
//!                                                 (zeros on an episode's first row)
//! qpos                             f32 (N, 36)    root xyz, root quat wxyz, 29 joints
//! qvel                             f32 (N, 35)    root linear (world), root angular (body), joints
//! terminated                       bool (N)       true on the last row of a FELL episode (the fall
//!                                                 rule ended it, or a scored fall)
//! truncated                        bool (N)       true on the last row of every other episode
//! /episodes/                       one row per episode, in export order
//!     start, stop                  i64 (E)        rows [start, stop) of the episode
//!     id                           str (E)        "<submission>/<episode index>"
//!     submission, team, motion, status   str (E)
//! ```
//!
//! Datasets are chunked (at most 1024 rows), byte-shuffled and deflate-compressed, and grow as
//! episodes are appended. The file is complete only after [`BufferExportWriter::finish`];
//! callers write it beside its final name and rename it.

use std::path::{Path, PathBuf};

use hdf5::types::VarLenUnicode;
use hdf5::{Dataset, File};
use ndarray::{ArrayView1, ArrayView2, s};

/// Value of the root attribute `format`.
pub const BUFFER_FORMAT_NAME: &str = "mimicarena-buffer";
/// Value of the root attribute `version`.
pub const BUFFER_FORMAT_VERSION: u32 = 1;

pub use arena_g1::{PRIVILEGED_STATE_DIM, STATE_DIM};
pub const ACTION_DIM: usize = crate::NUM_JOINTS;
pub const QPOS_DIM: usize = crate::NUM_COLUMNS;
pub const QVEL_DIM: usize = 35;

/// The per-transition datasets in file order, with their widths (1 = a 1-D dataset).
pub const BUFFER_KEYS: [(&str, usize); 7] = [
    ("observation-state", STATE_DIM),
    ("observation-privileged_state", PRIVILEGED_STATE_DIM),
    ("action", ACTION_DIM),
    ("qpos", QPOS_DIM),
    ("qvel", QVEL_DIM),
    ("terminated", 1),
    ("truncated", 1),
];

/// The per-episode index datasets under `/episodes`.
pub const EPISODE_KEYS: [&str; 7] = ["start", "stop", "id", "submission", "team", "motion", "status"];

const CHUNK_ROWS: usize = 1024;
const DEFLATE_LEVEL: u8 = 1;

/// Errors of an export; each names the file and what was being done.
#[derive(Debug, thiserror::Error)]
pub enum BufferExportError {
    #[error("{path}: {context}: {message}")]
    Hdf5 {
        path: PathBuf,
        context: String,
        message: String,
    },
    /// An episode's arrays disagree with its row count; nothing of it was written.
    #[error("{path}: episode {episode}: {key}: expected {rows}×{width} values, got {got}")]
    WrongLength {
        path: PathBuf,
        episode: String,
        key: &'static str,
        rows: usize,
        width: usize,
        got: usize,
    },
    #[error("{path}: episode {episode}: {message}")]
    InvalidText {
        path: PathBuf,
        episode: String,
        message: String,
    },
}

type Result<T> = std::result::Result<T, BufferExportError>;

/// Who and what an exported episode is.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ExportedEpisode {
    /// `<submission>/<episode index>`.
    pub id: String,
    pub submission: String,
    pub team: String,
    pub motion: String,
    /// `completed`, `fell`, `failed` or `timeout`.
    pub status: String,
}

/// One episode's rows, row-major, `rows` rows each.
#[derive(Debug, Clone, Copy)]
pub struct EpisodeRows<'a> {
    pub rows: usize,
    pub state: &'a [f32],
    pub privileged_state: &'a [f32],
    pub action: &'a [f32],
    pub qpos: &'a [f32],
    pub qvel: &'a [f32],
    /// Whether the episode ended by a fall (its last row is `terminated`, else `truncated`).
    pub terminated: bool,
}

/// Reads one text column of the episode index.
type TextColumn = fn(&ExportedEpisode) -> &str;

/// Counts of a finished export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExportCounts {
    pub episodes: usize,
    pub rows: usize,
}

/// An export being written; append episodes, then [`finish`](Self::finish).
pub struct BufferExportWriter {
    path: PathBuf,
    file: File,
    keys: Vec<Dataset>,
    index: Vec<ExportedEpisode>,
    starts: Vec<i64>,
    rows: usize,
}

impl std::fmt::Debug for BufferExportWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferExportWriter")
            .field("path", &self.path)
            .field("episodes", &self.index.len())
            .field("rows", &self.rows)
            .finish()
    }
}

fn h5err(path: &Path, context: impl Into<String>) -> impl FnOnce(hdf5::Error) -> BufferExportError {
    let path = path.to_path_buf();
    let context = context.into();
    move |err| BufferExportError::Hdf5 {
        path,
        context,
        message: err.to_string(),
    }
}

impl BufferExportWriter {
    /// Creates (truncates) `path` with empty, growable datasets.
    pub fn create(path: &Path) -> Result<Self> {
        let mut builder = File::with_options();
        builder.with_fapl(|fapl| fapl.file_locking(false));
        let file = builder.create(path).map_err(h5err(path, "create"))?;
        let mut keys = Vec::with_capacity(BUFFER_KEYS.len());
        for (key, width) in BUFFER_KEYS {
            let context = || format!("{key}: create");
            let ds = if width == 1 {
                file.new_dataset::<bool>()
                    .chunk(CHUNK_ROWS)
                    .shuffle()
                    .deflate(DEFLATE_LEVEL)
                    .shape(0..)
                    .create(key)
            } else {
                file.new_dataset::<f32>()
                    .chunk((CHUNK_ROWS, width))
                    .shuffle()
                    .deflate(DEFLATE_LEVEL)
                    .shape((0.., width))
                    .create(key)
            }
            .map_err(h5err(path, context()))?;
            keys.push(ds);
        }
        Ok(Self {
            path: path.to_path_buf(),
            file,
            keys,
            index: Vec::new(),
            starts: Vec::new(),
            rows: 0,
        })
    }

    /// Appends one episode (checked first: a wrong length writes nothing).
    pub fn append(&mut self, episode: &ExportedEpisode, rows: &EpisodeRows<'_>) -> Result<()> {
        let n = rows.rows;
        let arrays = [rows.state, rows.privileged_state, rows.action, rows.qpos, rows.qvel];
        for ((key, width), values) in BUFFER_KEYS.iter().zip(arrays) {
            if values.len() != n * width {
                return Err(BufferExportError::WrongLength {
                    path: self.path.clone(),
                    episode: episode.id.clone(),
                    key,
                    rows: n,
                    width: *width,
                    got: values.len(),
                });
            }
        }
        for text in [
            &episode.id,
            &episode.submission,
            &episode.team,
            &episode.motion,
            &episode.status,
        ] {
            text.parse::<VarLenUnicode>()
                .map_err(|e| BufferExportError::InvalidText {
                    path: self.path.clone(),
                    episode: episode.id.clone(),
                    message: e.to_string(),
                })?;
        }
        let (from, to) = (self.rows, self.rows + n);
        if n > 0 {
            for ((key, width), (ds, values)) in BUFFER_KEYS.iter().zip(self.keys.iter().zip(arrays)) {
                let view = ArrayView2::from_shape((n, *width), values).expect("length checked");
                ds.resize((to, *width))
                    .map_err(h5err(&self.path, format!("{key}: grow")))?;
                ds.write_slice(view, s![from..to, ..])
                    .map_err(h5err(&self.path, format!("{key}: write")))?;
            }
            let mut terminated = vec![false; n];
            let mut truncated = vec![false; n];
            if rows.terminated {
                terminated[n - 1] = true;
            } else {
                truncated[n - 1] = true;
            }
            for (i, flags) in [(5, &terminated), (6, &truncated)] {
                let key = BUFFER_KEYS[i].0;
                let ds = &self.keys[i];
                ds.resize(to).map_err(h5err(&self.path, format!("{key}: grow")))?;
                ds.write_slice(ArrayView1::from(flags.as_slice()), s![from..to])
                    .map_err(h5err(&self.path, format!("{key}: write")))?;
            }
        }
        self.starts.push(from as i64);
        self.index.push(episode.clone());
        self.rows = to;
        Ok(())
    }

    /// Rows written so far.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Writes the episode index and the root attributes (`card`: the dataset card's JSON), and
    /// closes the file.
    pub fn finish(self, card_json: &str) -> Result<ExportCounts> {
        let path = self.path.clone();
        let group = self
            .file
            .create_group("episodes")
            .map_err(h5err(&path, "episodes: create group"))?;
        // Each episode ends where the next starts; the last at the end. No episode: no stop.
        let mut stops: Vec<i64> = self.starts.iter().skip(1).copied().collect();
        if !self.starts.is_empty() {
            stops.push(self.rows as i64);
        }
        for (key, values) in [("start", &self.starts), ("stop", &stops)] {
            group
                .new_dataset_builder()
                .with_data(values.as_slice())
                .create(key)
                .map_err(h5err(&path, format!("episodes/{key}: write")))?;
        }
        let columns: [(&str, TextColumn); 5] = [
            ("id", |e| &e.id),
            ("submission", |e| &e.submission),
            ("team", |e| &e.team),
            ("motion", |e| &e.motion),
            ("status", |e| &e.status),
        ];
        for (key, get) in columns {
            let values: Vec<VarLenUnicode> = self
                .index
                .iter()
                .map(|e| get(e).parse().expect("checked in append"))
                .collect();
            group
                .new_dataset_builder()
                .with_data(values.as_slice())
                .create(key)
                .map_err(h5err(&path, format!("episodes/{key}: write")))?;
        }
        let attr = |name: &str, value: &str| -> Result<()> {
            let v: VarLenUnicode = value
                .parse()
                .map_err(|e: hdf5::types::StringError| BufferExportError::Hdf5 {
                    path: path.clone(),
                    context: format!("attribute {name}"),
                    message: e.to_string(),
                })?;
            self.file
                .new_attr::<VarLenUnicode>()
                .create(name)
                .and_then(|a| a.write_scalar(&v))
                .map_err(h5err(&path, format!("attribute {name}: write")))
        };
        attr("format", BUFFER_FORMAT_NAME)?;
        attr("card", card_json)?;
        self.file
            .new_attr::<u32>()
            .create("version")
            .and_then(|a| a.write_scalar(&BUFFER_FORMAT_VERSION))
            .map_err(h5err(&path, "attribute version: write"))?;
        let counts = ExportCounts {
            episodes: self.index.len(),
            rows: self.rows,
        };
        self.file.flush().map_err(h5err(&path, "flush"))?;
        self.file.close().map_err(h5err(&path, "close"))?;
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: usize, v: f32) -> [Vec<f32>; 5] {
        [STATE_DIM, PRIVILEGED_STATE_DIM, ACTION_DIM, QPOS_DIM, QVEL_DIM].map(|w| vec![v; n * w])
    }

    #[test]
    fn episodes_append_and_index() {
        let dir = std::env::temp_dir().join(format!("arena-buffer-export-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.h5");
        let mut w = BufferExportWriter::create(&path).unwrap();
        for (i, (n, fell)) in [(3usize, false), (0, false), (2, true)].into_iter().enumerate() {
            let a = rows(n, i as f32);
            let ep = ExportedEpisode {
                id: format!("s/{i}"),
                submission: "s".into(),
                team: "t".into(),
                motion: "stand".into(),
                status: if fell { "fell" } else { "completed" }.into(),
            };
            let r = EpisodeRows {
                rows: n,
                state: &a[0],
                privileged_state: &a[1],
                action: &a[2],
                qpos: &a[3],
                qvel: &a[4],
                terminated: fell,
            };
            w.append(&ep, &r).unwrap();
        }
        let bad = rows(2, 0.0);
        let err = w
            .append(
                &ExportedEpisode::default(),
                &EpisodeRows {
                    rows: 3,
                    state: &bad[0],
                    privileged_state: &bad[1],
                    action: &bad[2],
                    qpos: &bad[3],
                    qvel: &bad[4],
                    terminated: false,
                },
            )
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("observation-state: expected 3×64 values, got 128"),
            "{err}"
        );
        let counts = w.finish("{}").unwrap();
        assert_eq!(counts, ExportCounts { episodes: 3, rows: 5 });

        let f = File::open(&path).unwrap();
        let state = f.dataset("observation-state").unwrap().read_2d::<f32>().unwrap();
        assert_eq!(state.shape(), [5, 64]);
        assert_eq!(state[[4, 0]], 2.0);
        let term = f.dataset("terminated").unwrap().read_raw::<bool>().unwrap();
        let trunc = f.dataset("truncated").unwrap().read_raw::<bool>().unwrap();
        assert_eq!(term, [false, false, false, false, true]);
        assert_eq!(trunc, [false, false, true, false, false]);
        assert_eq!(
            f.dataset("episodes/start").unwrap().read_raw::<i64>().unwrap(),
            [0, 3, 3]
        );
        assert_eq!(
            f.dataset("episodes/stop").unwrap().read_raw::<i64>().unwrap(),
            [3, 3, 5]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An export with no episode has empty `episodes/start` and `episodes/stop` (issue 30: stop
    /// was [0] against an empty start).
    #[test]
    fn an_empty_export_has_no_episode_bounds() {
        let dir = std::env::temp_dir().join(format!("arena-buffer-export-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("empty.h5");
        let counts = BufferExportWriter::create(&path).unwrap().finish("{}").unwrap();
        assert_eq!(counts, ExportCounts { episodes: 0, rows: 0 });
        let f = File::open(&path).unwrap();
        for key in ["episodes/start", "episodes/stop"] {
            assert!(f.dataset(key).unwrap().read_raw::<i64>().unwrap().is_empty(), "{key}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
