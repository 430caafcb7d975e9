// Shared by the build scripts that link MuJoCo (simulator/build.rs, baseline/build.rs, ppo/build.rs): the
// run-time search path of a library folder, relative to the binary ($ORIGIN), so a binary finds
// the library wherever the checkout is, and an installed binary finds it in `../lib` or beside
// itself. No absolute build path is baked in.

/// `$ORIGIN`-relative rpath entries for `lib`, for binaries in `<target>/<profile>/` and one
/// folder deeper (`deps/`, `examples/`), plus the install layouts; `None` when `lib` and the
/// target folder share no root (then the caller falls back to the absolute path).
fn relative_rpath(lib: &std::path::Path) -> Option<String> {
    let out_dir = std::path::PathBuf::from(std::env::var_os("OUT_DIR")?);
    // OUT_DIR = <target>/<profile>/build/<package>-<hash>/out
    let profile_dir = out_dir.ancestors().nth(3)?;
    let from: Vec<_> = profile_dir.components().collect();
    let to: Vec<_> = lib.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    if common == 0 {
        return None;
    }
    let mut rel = std::path::PathBuf::new();
    for _ in common..from.len() {
        rel.push("..");
    }
    for c in &to[common..] {
        rel.push(c.as_os_str());
    }
    let rel = rel.to_str()?;
    Some(format!("$ORIGIN:$ORIGIN/../lib:$ORIGIN/{rel}:$ORIGIN/../{rel}"))
}

/// Emits the rpath link argument for `lib`.
fn emit_rpath(lib: &str) {
    match relative_rpath(std::path::Path::new(lib)) {
        Some(rpath) => println!("cargo::rustc-link-arg=-Wl,-rpath,{rpath}"),
        None => println!("cargo::rustc-link-arg=-Wl,-rpath,{lib}"),
    }
}
