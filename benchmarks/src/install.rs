//! Where the files that ship with the binaries are found at run time, with no build path baked
//! in: the installed layout (`<prefix>/bin/arena`, `<prefix>/share/mimicarena/<what>`) or a
//! checkout (`<repo>/target/<profile>/[deps/]arena`, `<repo>/<what>`), searched upwards from the
//! running executable.

use std::path::PathBuf;

/// The shipped folder `what` (e.g. `benchmarks`, `web`) that holds `marker`, from the running
/// executable's folder upwards: `<dir>/share/mimicarena/<what>` or `<dir>/<what>`.
pub fn beside_binary(what: &str, marker: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors().skip(1).find_map(|dir| {
        [dir.join("share").join("mimicarena").join(what), dir.join(what)]
            .into_iter()
            .find(|candidate| candidate.join(marker).is_file())
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_checkout_benchmarks_are_found_from_a_test_binary() {
        let found = super::beside_binary("benchmarks", "g1-smoke.toml").expect("found");
        assert!(found.join("g1-smoke.toml").is_file());
        assert_eq!(super::beside_binary("benchmarks", "no-such-file.toml"), None);
    }
}
