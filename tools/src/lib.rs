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
