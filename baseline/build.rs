//! Embeds the run-time search paths of libtorch (torch-sys exports its folder as
//! DEP_TCH_LIBTORCH_LIB) and of the repo-local MuJoCo, so `arena-bfm` and its tests run without
//! LD_LIBRARY_PATH (shared/notes/DEPENDENCIES.md).
fn main() {
    println!("cargo::rerun-if-env-changed=MUJOCO_DYNAMIC_LINK_DIR");
    for var in ["DEP_TCH_LIBTORCH_LIB", "MUJOCO_DYNAMIC_LINK_DIR"] {
        if let Ok(dir) = std::env::var(var) {
            println!("cargo::rustc-link-arg=-Wl,-rpath,{dir}");
        }
    }
}
