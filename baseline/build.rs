//! Embeds the run-time search paths of libtorch (torch-sys exports its folder as
//! DEP_TCH_LIBTORCH_LIB) and of the repo-local MuJoCo, so `arena-bfm` and its tests run without
//! LD_LIBRARY_PATH (shared/notes/DEPENDENCIES.md).
include!("../simulator/build_rpath.rs");

/// With ARENA_BFM_CUDA=1 the binary also links libtorch_cuda (the linker drops it otherwise, as
/// nothing references it by name): the build for the GPU machine, run there against its own
/// torch 2.11.0 libraries (LD_LIBRARY_PATH=<site-packages>/torch/lib).
fn main() {
    println!("cargo::rerun-if-env-changed=MUJOCO_DYNAMIC_LINK_DIR");
    println!("cargo::rerun-if-env-changed=ARENA_BFM_CUDA");
    if std::env::var("ARENA_BFM_CUDA").is_ok_and(|v| v == "1") {
        for arg in ["-Wl,--no-as-needed", "-ltorch_cuda", "-Wl,--as-needed"] {
            println!("cargo::rustc-link-arg={arg}");
        }
    }
    for var in ["DEP_TCH_LIBTORCH_LIB", "MUJOCO_DYNAMIC_LINK_DIR"] {
        if let Ok(dir) = std::env::var(var) {
            emit_rpath(&dir);
        }
    }
}
