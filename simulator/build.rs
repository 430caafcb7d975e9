//! Embeds the run-time search path of the repo-local MuJoCo library (fetched by
//! `scripts/bootstrap-mujoco.sh`) so binaries and tests run without LD_LIBRARY_PATH.
fn main() {
    println!("cargo::rerun-if-env-changed=MUJOCO_DYNAMIC_LINK_DIR");
    match std::env::var("MUJOCO_DYNAMIC_LINK_DIR") {
        Ok(dir) => println!("cargo::rustc-link-arg=-Wl,-rpath,{dir}"),
        Err(_) => println!(
            "cargo::warning=MUJOCO_DYNAMIC_LINK_DIR is not set; run `make` (scripts/bootstrap-mujoco.sh) first"
        ),
    }
}
