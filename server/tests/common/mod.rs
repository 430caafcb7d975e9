//! Helpers shared by the `arena` binary's end-to-end tests.
#![allow(dead_code)]
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

pub fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("arena-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
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
