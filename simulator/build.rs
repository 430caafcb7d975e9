//! Embeds the run-time search path of the repo-local MuJoCo library (fetched by
//! `scripts/bootstrap-mujoco.sh`) so binaries and tests run without LD_LIBRARY_PATH; the path
//! is relative to the binary (build_rpath.rs), so an installed or moved binary with
//! `libmujoco.so.3.17.0` beside it or in `../lib` runs too.
include!("build_rpath.rs");

fn main() {
    println!("cargo::rerun-if-env-changed=MUJOCO_DYNAMIC_LINK_DIR");
    match std::env::var("MUJOCO_DYNAMIC_LINK_DIR") {
        Ok(dir) => emit_rpath(&dir),
        Err(_) => println!(
            "cargo::warning=MUJOCO_DYNAMIC_LINK_DIR is not set; run `make` (scripts/bootstrap-mujoco.sh) first"
        ),
    }
}
