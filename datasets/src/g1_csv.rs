//! G1 motion CSV: no header, one row per frame, 36 columns (root xyz, root quaternion **xyzw**,
//! 29 joint angles in G1 order). The frame rate is not in the file; callers pass it.

use crate::clip::{MotionClip, NUM_COLUMNS, name_and_category};
use crate::{DataError, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Allowed deviation of a root quaternion's norm from 1 before the file is rejected.
pub(crate) const QUAT_NORM_TOLERANCE: f64 = 1e-2;

/// Reads and validates one G1 CSV file. Errors name `file:line:column` and what was expected.
/// Quaternions are normalised (files carry ~6 significant digits) and reordered to wxyz.
pub fn read_g1_csv(path: &Path, fps: f64) -> Result<MotionClip> {
    let text = std::fs::read_to_string(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        cause: source,
    })?;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("motion");
    let (name, category) = name_and_category(stem);
    parse_g1_csv(&text, path, &name, &category, fps)
}

/// Parses G1 CSV text; `path` is used only in error messages.
pub fn parse_g1_csv(text: &str, path: &Path, name: &str, category: &str, fps: f64) -> Result<MotionClip> {
    if !(fps.is_finite() && fps > 0.0) {
        return Err(DataError::Invalid {
            path: path.to_path_buf(),
            message: format!("frame rate must be a positive number, got {fps}"),
        });
    }
    let parse_err = |line: usize, column: usize, message: String| DataError::Parse {
        path: path.to_path_buf(),
        line,
        column,
        message,
    };
    let mut qpos = Vec::with_capacity(text.len() / 8);
    let mut row = [0.0f64; NUM_COLUMNS];
    for (line_idx, line) in text.lines().enumerate() {
        let line_no = line_idx + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let mut count = 0;
        for (col, field) in line.split(',').enumerate() {
            if col >= NUM_COLUMNS {
                count = col + 1;
                continue;
            }
            let field = field.trim();
            let v: f64 = field
                .parse()
                .map_err(|_| parse_err(line_no, col + 1, format!("expected a number, found {field:?}")))?;
            if !v.is_finite() {
                return Err(parse_err(
                    line_no,
                    col + 1,
                    format!("expected a finite number, found {field}"),
                ));
            }
            row[col] = v;
            count = col + 1;
        }
        if count != NUM_COLUMNS {
            return Err(parse_err(
                line_no,
                count.min(NUM_COLUMNS) + 1,
                format!("expected {NUM_COLUMNS} columns (root xyz, quaternion xyzw, 29 joint angles), found {count}"),
            ));
        }
        let (x, y, z, w) = (row[3], row[4], row[5], row[6]);
        let norm = (x * x + y * y + z * z + w * w).sqrt();
        if (norm - 1.0).abs() > QUAT_NORM_TOLERANCE {
            return Err(parse_err(
                line_no,
                4,
                format!("root quaternion (columns 4-7, xyzw) must have unit norm, found norm {norm:.6}"),
            ));
        }
        qpos.extend_from_slice(&row[..3]);
        qpos.extend_from_slice(&[w / norm, x / norm, y / norm, z / norm]);
        qpos.extend_from_slice(&row[7..]);
    }
    let clip = MotionClip {
        name: name.to_string(),
        category: category.to_string(),
        fps,
        qpos,
        witness: None,
    };
    if clip.num_frames() < 2 {
        return Err(DataError::Invalid {
            path: path.to_path_buf(),
            message: format!("a motion needs at least 2 frames, found {}", clip.num_frames()),
        });
    }
    Ok(clip)
}

/// Writes a clip as G1 CSV (quaternion reordered to xyzw), full f64 precision.
pub fn write_g1_csv(path: &Path, clip: &MotionClip) -> Result<()> {
    let io_err = |source| DataError::Io {
        path: path.to_path_buf(),
        cause: source,
    };
    let file = std::fs::File::create(path).map_err(io_err)?;
    let mut out = std::io::BufWriter::new(file);
    for i in 0..clip.num_frames() {
        let f = clip.frame(i);
        let quat_xyzw = [f[4], f[5], f[6], f[3]];
        let reordered = f[..3].iter().chain(quat_xyzw.iter()).chain(f[7..].iter());
        let line: Vec<String> = reordered.map(|v| format!("{v}")).collect();
        writeln!(out, "{}", line.join(",")).map_err(io_err)?;
    }
    out.flush().map_err(io_err)
}

/// Reads every `*.csv` in a directory (sorted by file name, so clip order is stable); clip name
/// and category come from `<category>__<clip>.csv`.
pub fn read_clip_dir(dir: &Path, fps: f64) -> Result<Vec<MotionClip>> {
    let entries = std::fs::read_dir(dir).map_err(|source| DataError::Io {
        path: dir.to_path_buf(),
        cause: source,
    })?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv")))
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(DataError::Invalid {
            path: dir.to_path_buf(),
            message: "no .csv motion files in this directory".into(),
        });
    }
    paths.iter().map(|p| read_g1_csv(p, fps)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(extra: &str) -> String {
        let mut v = vec!["0".to_string(); NUM_COLUMNS];
        v[2] = "0.8".into();
        v[6] = "1".into();
        let mut s = v.join(",");
        s.push_str(extra);
        s
    }

    fn parse(text: &str) -> Result<MotionClip> {
        parse_g1_csv(text, Path::new("m.csv"), "m", "test", 30.0)
    }

    #[test]
    fn reads_and_reorders_quaternion() {
        let clip = parse(&format!("{}\n{}\n", row(""), row(""))).unwrap();
        assert_eq!(clip.num_frames(), 2);
        assert_eq!(&clip.frame(0)[3..7], &[1.0, 0.0, 0.0, 0.0]);
        assert!((clip.duration_s() - 1.0 / 30.0).abs() < 1e-15);
    }

    #[test]
    fn wrong_column_count_names_line_and_column() {
        let err = parse(&format!("{}\n{}\n", row(""), row(",1"))).unwrap_err().to_string();
        assert!(err.contains("m.csv:2:37"), "{err}");
        assert!(err.contains("expected 36 columns"), "{err}");
        let short = "1,2,3\n";
        let err = parse(short).unwrap_err().to_string();
        assert!(err.contains("m.csv:1:4") && err.contains("found 3"), "{err}");
    }

    #[test]
    fn non_numeric_and_non_finite_values_rejected() {
        let bad = row("").replacen("0.8", "abc", 1);
        let err = parse(&format!("{}\n{bad}\n", row(""))).unwrap_err().to_string();
        assert!(err.contains("m.csv:2:3") && err.contains("\"abc\""), "{err}");
        let nan = row("").replacen("0.8", "NaN", 1);
        let err = parse(&format!("{nan}\n{}\n", row(""))).unwrap_err().to_string();
        assert!(err.contains("m.csv:1:3") && err.contains("finite"), "{err}");
    }

    #[test]
    fn quaternion_norm_and_length_checked() {
        let mut v = vec!["0".to_string(); NUM_COLUMNS];
        v[6] = "2".into();
        let err = parse(&format!("{}\n{}\n", v.join(","), row("")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("m.csv:1:4") && err.contains("unit norm"), "{err}");
        let err = parse(&format!("{}\n", row(""))).unwrap_err().to_string();
        assert!(err.contains("at least 2 frames"), "{err}");
        let err = parse_g1_csv("", Path::new("m.csv"), "m", "t", -1.0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("frame rate"), "{err}");
    }

    #[test]
    fn write_then_read_round_trips() {
        let dir = std::env::temp_dir().join(format!("arena-data-rt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut qpos = Vec::new();
        for i in 0..3 {
            let mut f = vec![0.1 * i as f64; NUM_COLUMNS];
            f[3..7].copy_from_slice(&[0.5f64.sqrt(), 0.0, 0.0, 0.5f64.sqrt()]);
            qpos.extend(f);
        }
        let clip = MotionClip {
            name: "x".into(),
            category: "cat".into(),
            fps: 50.0,
            qpos,
            witness: None,
        };
        let path = dir.join("cat__x.csv");
        write_g1_csv(&path, &clip).unwrap();
        let back = read_g1_csv(&path, 50.0).unwrap();
        assert_eq!(back.name, "x");
        assert_eq!(back.category, "cat");
        for (a, b) in back.qpos.iter().zip(&clip.qpos) {
            assert!((a - b).abs() < 1e-15);
        }
        let all = read_clip_dir(&dir, 50.0).unwrap();
        assert_eq!(all.len(), 1);
        std::fs::remove_dir_all(&dir).ok();
    }
}
