//! arena-tools: the `arena` command's tools that need no server, each a clap subcommand with
//! its `run`: `sim` (model export, one rollout, throughput), `motion` (generate, inspect,
//! export), `bench` (list, validate, show benchmark files), `metrics` (EMD and the tracking
//! metrics on files), `eval` (a whole benchmark in process with a built-in policy, on
//! `evaluation`), and `backend` (the `--backend` / `--gpu-*` flags, which the server's `serve`,
//! `demo` and `audit` take too). The `arena` binary (crate `arena-server`) dispatches to them;
//! they touch no database, no network and no server state.

pub mod backend;
pub mod bench;
pub mod eval;
pub mod evaluation;
pub mod metrics;
pub mod motion;
pub mod sim;

/// Fails now if `path` cannot be written later (its folder is missing or read-only), so long
/// work does not end with its results lost. Leaves nothing behind.
pub fn check_writable(path: &std::path::Path) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    if path.is_dir() {
        anyhow::bail!("{} is a folder, not a file", path.display());
    }
    if path.exists() && !path.is_file() {
        // A device or pipe: it must open for writing; nothing is created beside it.
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        return Ok(());
    }
    let probe = dir.join(format!(".arena-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e} (in {})", path.display(), dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Writes `path` through `write`: beside it under a temporary name that keeps its extension
/// (so `write` may go by it, `.gz` say), then renamed into place, so that a reader never sees
/// a half-written file and an existing one is replaced only by a complete one. A device or
/// pipe (`/dev/null`, `/dev/stdout`) is written in place, never replaced.
pub fn write_replacing(
    path: &std::path::Path,
    write: impl FnOnce(&std::path::Path) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    if path.exists() && !path.is_file() {
        return write(path);
    }
    let name = path.file_name().map_or("out".into(), |n| n.to_string_lossy());
    remove_partials_of_dead_writers(path, &name);
    let tmp = path.with_file_name(format!(".{}.partial.{name}", std::process::id()));
    write(&tmp)
        .and_then(|()| std::fs::rename(&tmp, path).with_context(|| format!("moving the file to {}", path.display())))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
}

/// Removes `.PID.partial.NAME` files beside `path` whose writer is gone (a command interrupted
/// by Ctrl-C or killed leaves its hidden partial file, possibly gigabytes): a writer is alive
/// while `/proc/PID` exists, so a running one's file stays. Nothing where there is no `/proc`.
fn remove_partials_of_dead_writers(path: &std::path::Path, name: &str) {
    if !std::path::Path::new("/proc/self").exists() {
        return;
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let suffix = format!(".partial.{name}");
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(pid) = file
            .to_str()
            .and_then(|f| f.strip_prefix('.'))
            .and_then(|f| f.strip_suffix(suffix.as_str()))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let gone = !std::path::Path::new(&format!("/proc/{pid}")).exists();
        if gone && entry.file_type().is_ok_and(|t| t.is_file()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Whether two paths name the same file (an output must never overwrite an input).
pub fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// A G1 motion file as benchmarks accept them: NPZ (mjlab / BeyondMimic layout, or holosoma's,
/// which carries its frame rate; a `--fps` given for it is noted and ignored) or G1 CSV (which
/// does not: `fps` is required).
pub fn read_motion_file(path: &std::path::Path, fps: Option<f64>) -> anyhow::Result<arena_data::MotionClip> {
    use anyhow::Context;
    // Said first: a folder was called "a CSV file" that needs --fps.
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => anyhow::bail!("{} is a folder, not a motion file (.npz or G1 .csv)", path.display()),
        Err(e) => return Err(anyhow::Error::new(e).context(format!("reading {}", path.display()))),
        Ok(_) => {}
    }
    if arena_bench::spec::is_npz(path) {
        if let Some(fps) = fps {
            eprintln!(
                "note: {} carries its own frame rate; --fps {fps} is ignored",
                path.display()
            );
        }
        return Ok(arena_data::read_npz_motion(path)?);
    }
    let fps = fps.with_context(|| {
        format!(
            "{} is a CSV file: give its frame rate with --fps (G1 CSV files do not carry it)",
            path.display()
        )
    })?;
    Ok(arena_data::read_g1_csv(path, fps)?)
}

#[cfg(test)]
mod tests {
    /// A partial file whose writer is gone goes at the next write of the same output; one of a
    /// live writer (this process), another output's, and other files stay.
    #[test]
    fn partial_files_of_dead_writers_are_removed() {
        let dir = std::env::temp_dir().join(format!("arena-tools-partials-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("data.h5");
        // Beyond any pid the kernel hands out (pid_max is at most 2^22).
        let dead = dir.join(".99999999.partial.data.h5");
        let live = dir.join(format!(".{}.partial.data.h5", std::process::id()));
        let other = dir.join(".99999999.partial.other.h5");
        let unrelated = dir.join("notes.txt");
        for f in [&dead, &other, &unrelated] {
            std::fs::write(f, b"x").unwrap();
        }
        super::write_replacing(&out, |tmp| {
            assert_eq!(tmp, live.as_path());
            std::fs::write(tmp, b"whole")?;
            // Ours, while it is written, is not a dead writer's.
            assert!(tmp.exists());
            Ok(())
        })
        .unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"whole");
        assert!(!dead.exists(), "a dead writer's partial file stays");
        assert!(other.exists() && unrelated.exists() && !live.exists());
        std::fs::remove_dir_all(&dir).ok();
    }
}
