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
    let tmp = path.with_file_name(format!(".{}.partial.{name}", std::process::id()));
    write(&tmp)
        .and_then(|()| std::fs::rename(&tmp, path).with_context(|| format!("moving the file to {}", path.display())))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
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
