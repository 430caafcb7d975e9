//! Helpers shared by the `arena` binary's end-to-end tests.
#![allow(dead_code)]
pub mod cluster;
pub mod server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn arena(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arena"))
        .args(args)
        .output()
        .expect("arena runs")
}

pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "arena failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A test's own scratch folder (`<temp>/arena-cli-<pid>-<name>`), emptied first: a folder
/// left by an earlier process with the same id (ids are reused) would otherwise hand this test
/// another run's server data. Removed when the test ends well; kept, and its path printed, when
/// the test panics, for a look at what the server left there. Bind it to a name for the whole
/// test: a temporary dropped at once removes the folder.
pub fn tmp(name: &str) -> TestDir {
    let dir = std::env::temp_dir().join(format!("arena-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    TestDir(dir)
}

/// See [`tmp`].
#[must_use = "the folder is removed when this is dropped"]
pub struct TestDir(PathBuf);

impl TestDir {
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl std::ops::Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TestDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for TestDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept {} (the test failed)", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

pub fn shared_moves() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/motions/g1-moves");
    if p.is_dir() {
        Some(p)
    } else {
        eprintln!("skipped: ../shared/motions/g1-moves is not present beside the checkout");
        None
    }
}

/// A Python that can run the GPU backend's worker (`ARENA_GPU_PYTHON` with jax and
/// mujoco-mjx), or `None` with the reason printed; `ARENA_REQUIRE_GPU_BACKEND=1` (make test)
/// turns its absence into a failure.
pub fn gpu_python() -> Option<String> {
    let required = std::env::var("ARENA_REQUIRE_GPU_BACKEND").is_ok_and(|v| v == "1");
    let python = std::env::var("ARENA_GPU_PYTHON").ok();
    let usable = python.as_ref().is_some_and(|p| {
        Command::new(p)
            .args(["-c", "import jax, mujoco.mjx, warp, mujoco_warp"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if usable {
        return python;
    }
    let why = "skipped the GPU backend part: ARENA_GPU_PYTHON does not name a Python with python/requirements-gpu.txt (make deps-gpu)";
    assert!(!required, "ARENA_REQUIRE_GPU_BACKEND=1 but {why}");
    eprintln!("{why}");
    None
}
