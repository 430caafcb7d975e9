//! The `arena` binary carries no build path: installed as `<prefix>/bin/arena` with MuJoCo in
//! `<prefix>/lib` and the shipped benchmarks in `<prefix>/share/mimicarena/benchmarks`, run
//! from another folder, it finds both.

mod common;

use std::path::Path;
use std::process::Command;

#[test]
fn an_installed_binary_finds_mujoco_and_the_benchmarks_beside_it() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let prefix = common::tmp("install");
    let _ = std::fs::remove_dir_all(&prefix);
    for d in ["bin", "lib", "share/mimicarena/benchmarks"] {
        std::fs::create_dir_all(prefix.join(d)).unwrap();
    }
    std::fs::copy(env!("CARGO_BIN_EXE_arena"), prefix.join("bin/arena")).unwrap();
    for entry in std::fs::read_dir(repo.join("third_party/mujoco/lib")).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_string_lossy().starts_with("libmujoco.so") {
            std::fs::copy(&path, prefix.join("lib").join(path.file_name().unwrap())).unwrap();
        }
    }
    for entry in std::fs::read_dir(repo.join("benchmarks")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") && path.file_name().unwrap() != "Cargo.toml" {
            std::fs::copy(
                &path,
                prefix
                    .join("share/mimicarena/benchmarks")
                    .join(path.file_name().unwrap()),
            )
            .unwrap();
        }
    }
    // No path into the checkout is recorded for the dynamic linker.
    let runpath = Command::new("readelf")
        .args(["-d"])
        .arg(prefix.join("bin/arena"))
        .output();
    if let Ok(out) = runpath {
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().find(|l| l.contains("RUNPATH")).unwrap_or_default();
        assert!(!line.contains(repo.canonicalize().unwrap().to_str().unwrap()), "{line}");
        assert!(line.contains("$ORIGIN/../lib"), "{line}");
    }
    let run = |args: &[&str]| {
        let out = Command::new(prefix.join("bin/arena"))
            .args(args)
            .current_dir(std::env::temp_dir())
            .env_remove("LD_LIBRARY_PATH")
            .env_remove("ARENA_BENCHMARKS_DIR")
            .output()
            .unwrap();
        common::ok(&out)
    };
    let listed = run(&["bench", "list"]);
    assert!(listed.contains("g1-smoke"), "{listed}");
    let shipped = prefix.join("share/mimicarena/benchmarks");
    assert!(
        listed.starts_with(&format!("Benchmarks in {}:", shipped.display())),
        "{listed}"
    );
    let eval = run(&["eval", "--benchmark", "g1-smoke", "--policy", "zero", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&eval).unwrap();
    assert_eq!(report["episodes"].as_array().map(Vec::len), Some(6), "{eval}");
}
