//! The Python the oracle tests run (PyTorch from `third_party/pytorch`, installed by
//! `make deps-torch`): found, or the reason it is not, so a test can skip with it (or fail when
//! ARENA_REQUIRE_TORCH_ORACLE is set, as `make test` sets it).

use std::path::Path;
use std::process::Command;

/// (python, PYTHONPATH) of a Python that imports torch, safetensors and numpy.
pub fn python_with_torch(repo_root: &Path) -> Result<(String, String), String> {
    let python = std::env::var("ARENA_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let pythonpath = repo_root.join("third_party/pytorch").display().to_string();
    let probe = Command::new(&python)
        .args(["-c", "import torch, safetensors, numpy"])
        .env("PYTHONPATH", &pythonpath)
        .output()
        .map_err(|e| format!("cannot run {python}: {e}"))?;
    if !probe.status.success() {
        return Err(format!(
            "{python} cannot import torch/safetensors/numpy: {}",
            String::from_utf8_lossy(&probe.stderr)
        ));
    }
    Ok((python, pythonpath))
}

/// [`python_with_torch`], or `None` after printing why the test skips; panics instead when
/// ARENA_REQUIRE_TORCH_ORACLE is set.
pub fn oracle_python_or_skip(repo_root: &Path) -> Option<(String, String)> {
    match python_with_torch(repo_root) {
        Ok(p) => Some(p),
        Err(why) if std::env::var("ARENA_REQUIRE_TORCH_ORACLE").is_err() => {
            eprintln!("skipped: {why} (run `make test`, which installs it)");
            None
        }
        Err(why) => panic!("{why}"),
    }
}
