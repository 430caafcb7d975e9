// Shared by the build scripts of the crates that link libtorch and MuJoCo (baseline/build.rs,
// ppo/build.rs); include it after simulator/build_rpath.rs.

/// Embeds the run-time search paths of libtorch (torch-sys exports its folder as
/// DEP_TCH_LIBTORCH_LIB) and of the repo-local MuJoCo. With `<cuda_var>=1` the binary also links
/// libtorch_cuda (the linker drops it otherwise, as nothing references it by name): the build
/// for the GPU machine, run there against its own torch libraries
/// (LD_LIBRARY_PATH=<site-packages>/torch/lib).
fn link_torch_and_mujoco(cuda_var: &str) {
    // arena_torch::mkl_kernels's answer to oneMKL's vendor check: linked in (named as undefined,
    // so that the linker takes it from arena-torch, which comes before libtorch) and in the
    // dynamic symbol table, where libtorch's calls find it before its own.
    for arg in [
        "-Wl,--undefined=mkl_serv_intel_cpu_true",
        "-Wl,--export-dynamic-symbol=mkl_serv_intel_cpu_true",
    ] {
        println!("cargo::rustc-link-arg={arg}");
    }
    println!("cargo::rerun-if-env-changed=MUJOCO_DYNAMIC_LINK_DIR");
    println!("cargo::rerun-if-env-changed={cuda_var}");
    if std::env::var(cuda_var).is_ok_and(|v| v == "1") {
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
