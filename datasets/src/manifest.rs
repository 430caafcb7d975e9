//! Motion manifests (TOML): a list of clips with frame rate and split.
//!
//! ```toml
//! fps = 60                    # default frame rate for every clip
//! [[clip]]
//! file = "dance__J_Dance0_StepTouch.csv"   # relative to the manifest's folder
//! split = "val"               # train (default) | val | test
//! fps = 30                    # optional per-clip override
//! ```

use crate::clip::{MotionClip, Split};
use crate::g1_csv::read_g1_csv;
use crate::{DataError, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Default frame rate of the clips.
    pub fps: Option<f64>,
    #[serde(rename = "clip", default)]
    pub clips: Vec<ManifestEntry>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestEntry {
    pub file: PathBuf,
    pub fps: Option<f64>,
    #[serde(default)]
    pub split: Split,
}

impl Manifest {
    pub fn read(path: &Path) -> Result<Manifest> {
        let text = std::fs::read_to_string(path).map_err(|source| DataError::Io {
            path: path.to_path_buf(),
            cause: source,
        })?;
        Self::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Manifest> {
        let manifest: Manifest = toml::from_str(text).map_err(|e| DataError::Manifest {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        if manifest.clips.is_empty() {
            return Err(DataError::Manifest {
                path: path.to_path_buf(),
                message: "no [[clip]] entries".into(),
            });
        }
        for (i, c) in manifest.clips.iter().enumerate() {
            let npz = c
                .file
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| e.eq_ignore_ascii_case("npz"));
            if npz {
                return Err(DataError::Manifest {
                    path: path.to_path_buf(),
                    message: format!(
                        "clip[{i}] ({}): a manifest lists G1 CSV files; name NPZ motions with a benchmark's `files` or `dir`",
                        c.file.display()
                    ),
                });
            }
            match c.fps.or(manifest.fps) {
                Some(f) if f.is_finite() && f > 0.0 => {}
                Some(f) => {
                    return Err(DataError::Manifest {
                        path: path.to_path_buf(),
                        message: format!("clip[{i}] ({}): fps must be positive, got {f}", c.file.display()),
                    });
                }
                None => {
                    return Err(DataError::Manifest {
                        path: path.to_path_buf(),
                        message: format!(
                            "clip[{i}] ({}): no fps (set `fps` on the clip or at the top level)",
                            c.file.display()
                        ),
                    });
                }
            }
        }
        Ok(manifest)
    }

    /// Loads the clips of the given split (all splits when `split` is None); files resolve
    /// against `base` (normally the manifest's folder).
    pub fn load_clips(&self, base: &Path, split: Option<Split>) -> Result<Vec<(MotionClip, Split)>> {
        self.clips
            .iter()
            .filter(|c| split.is_none_or(|s| s == c.split))
            .map(|c| {
                let fps = c.fps.or(self.fps).expect("validated at parse");
                Ok((read_g1_csv(&base.join(&c.file), fps)?, c.split))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_validates() {
        let m = Manifest::parse(
            "fps = 60\n[[clip]]\nfile = \"a.csv\"\nsplit = \"val\"\n[[clip]]\nfile = \"b.csv\"\nfps = 30\n",
            Path::new("m.toml"),
        )
        .unwrap();
        assert_eq!(m.clips.len(), 2);
        assert_eq!(m.clips[0].split, Split::Val);
        assert_eq!(m.clips[1].split, Split::Train);
        let err = Manifest::parse("[[clip]]\nfile = \"a.csv\"\n", Path::new("m.toml")).unwrap_err();
        assert!(err.to_string().contains("no fps"), "{err}");
        let err = Manifest::parse(
            "fps = 60\n[[clip]]\nfile = \"a.csv\"\nsplit = \"dev\"\n",
            Path::new("m.toml"),
        )
        .unwrap_err();
        assert!(err.to_string().contains("m.toml"), "{err}");
        let err = Manifest::parse("fps = 60\n", Path::new("m.toml")).unwrap_err();
        assert!(err.to_string().contains("no [[clip]]"), "{err}");
    }
}
