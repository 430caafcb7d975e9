//! arena-data: motion file formats and data sets.
//!
//! One responsibility: turn motion files on disk into validated in-memory clips and back
//! (G1 CSV, NPZ in the mjlab / BeyondMimic / holosoma layouts, clip directories, TOML
//! manifests), and generate the project's built-in motions.
//! Nothing here knows about physics; kinematics needed by the generator is passed in.

pub mod buffer_export;
pub mod clip;
pub mod episode_part;
pub mod g1_csv;
pub mod generate;
pub mod manifest;
pub mod motion_npz;
pub mod npz;
pub mod trajectory;
pub mod trajectory_chunks;
pub mod trajectory_file;

pub use clip::{BodyWitness, G1_BODY_NAMES, MotionClip, NUM_COLUMNS, NUM_JOINTS, Split};
pub use g1_csv::{read_clip_dir, read_g1_csv, write_g1_csv};
pub use generate::{FeetPlacement, FootKinematics, G1_JOINT_NAMES, builtin_motion_names, generate_builtin_motions};
pub use manifest::{Manifest, ManifestEntry};
pub use motion_npz::{NpzMotionOut, read_npz_motion, write_npz_motion};
pub use trajectory::TrajectoryRows;
pub use trajectory_file::{EpisodeRecord, TrajectoryFile, TrajectoryFileError};

use std::path::PathBuf;

/// Errors from reading or writing motion data. Every variant names the file and, where it
/// applies, the 1-based line and column that was wrong.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    // The cause is part of the message, not a `source`: error chains would print it twice.
    #[error("{path}: {cause}")]
    Io { path: PathBuf, cause: std::io::Error },
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("{path}: invalid manifest: {message}")]
    Manifest { path: PathBuf, message: String },
}

pub type Result<T> = std::result::Result<T, DataError>;
