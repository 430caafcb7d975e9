//! Embeds libtorch's folder as an rpath so `arena-bfm` runs without LD_LIBRARY_PATH
//! (shared/notes/DEPENDENCIES.md: torch-sys exports it as DEP_TCH_LIBTORCH_LIB).
fn main() {
    if let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo::rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
