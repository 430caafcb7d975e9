//! A Rust participant builds `arena-sdk` alone: it must not pull the simulator (MuJoCo) or the
//! trajectory files (HDF5) in. `cargo tree` answers from the lock file, as a participant's build
//! would resolve it.

use std::process::Command;

#[test]
fn arena_sdk_depends_on_neither_mujoco_nor_hdf5() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "-p",
            "arena-sdk",
            "-e",
            "normal,build",
            "--prefix",
            "none",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    let crates: Vec<&str> = tree.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(
        crates.contains(&"tonic"),
        "the tree lists the SDK's own dependencies:\n{tree}"
    );
    for banned in [
        "mujoco-rs",
        "hdf5-metno",
        "hdf5-metno-sys",
        "arena-sim",
        "arena-data",
        "arena-bench",
    ] {
        assert!(!crates.contains(&banned), "arena-sdk pulls in {banned}:\n{tree}");
    }
}
