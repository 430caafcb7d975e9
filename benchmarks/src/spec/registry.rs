//! Finding benchmark files: the shipped folder, listing a folder, resolving a name or a path.

use super::*;

/// The folder of the shipped benchmark files, found beside the running binary
/// ([`crate::install::beside_binary`]: `share/mimicarena/benchmarks` when installed, the
/// checkout's `benchmarks/` otherwise); `benchmarks` in the working folder when neither is
/// there (a missing folder is then reported by whoever lists it). `ARENA_BENCHMARKS_DIR` and
/// `--benchmarks-dir` name another folder.
pub fn shipped_dir() -> PathBuf {
    crate::install::beside_binary("benchmarks", "g1-smoke.toml").unwrap_or_else(|| PathBuf::from("benchmarks"))
}

/// Every `*.toml` in `dir` (sorted by path) with its parse result. The crate's own
/// `Cargo.toml` shares the shipped folder and is skipped. An unreadable folder is reported as
/// one entry carrying the error.
pub fn list_benchmarks(dir: &Path, known: &[&str]) -> Vec<(PathBuf, Result<BenchmarkSpec, SpecError>)> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(cause) => {
            return vec![(
                dir.to_path_buf(),
                Err(SpecError::Io {
                    path: dir.to_path_buf(),
                    cause,
                }),
            )];
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.extension().is_some_and(|e| e == "toml")
                && p.file_name().is_some_and(|n| n != "Cargo.toml")
        })
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let spec = BenchmarkSpec::read(&p, known);
            (p, spec)
        })
        .collect()
}

/// A benchmark by file path, or by the `name` field of a file in `dir`. A file in `dir` whose
/// stem is the name but which fails to parse yields its own error rather than "unknown name".
pub fn find_benchmark(name_or_path: &str, dir: &Path, known: &[&str]) -> Result<(PathBuf, BenchmarkSpec), SpecError> {
    let as_path = Path::new(name_or_path);
    if as_path.is_file() {
        return BenchmarkSpec::read(as_path, known).map(|spec| (as_path.to_path_buf(), spec));
    }
    if name_or_path.ends_with(".toml") || name_or_path.contains(['/', '\\']) {
        return Err(SpecError::Io {
            path: as_path.to_path_buf(),
            cause: std::io::Error::new(std::io::ErrorKind::NotFound, "no such benchmark file"),
        });
    }
    find_benchmark_by_name(name_or_path, dir, known)
}

/// A benchmark by the `name` field of a file in `dir`, never a path: what a server looks up
/// for its clients (a name that is also a file beside the server must not be read).
pub fn find_benchmark_by_name(name: &str, dir: &Path, known: &[&str]) -> Result<(PathBuf, BenchmarkSpec), SpecError> {
    let mut found: Option<(PathBuf, BenchmarkSpec)> = None;
    let mut broken: Option<SpecError> = None;
    let mut available = Vec::new();
    let mut unreadable = Vec::new();
    for (path, result) in list_benchmarks(dir, known) {
        match result {
            Ok(spec) if spec.name == name => {
                if let Some((first, _)) = &found {
                    return Err(SpecError::Invalid {
                        key: "name".into(),
                        message: format!("benchmark name {name:?} is also used by {}", first.display()),
                        path,
                    });
                }
                found = Some((path, spec));
            }
            Ok(spec) => available.push(spec.name),
            Err(e) if path.file_stem().is_some_and(|s| s == name) => broken = Some(e),
            Err(e) => unreadable.push(e.to_string()),
        }
    }
    if let Some(found) = found {
        return Ok(found);
    }
    if let Some(e) = broken {
        return Err(e);
    }
    available.sort();
    Err(SpecError::UnknownBenchmark {
        name: name.to_string(),
        dir: dir.to_path_buf(),
        available,
        unreadable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::metric_names;

    /// A name is looked up in the folder only: a file of that name beside the process (tests
    /// run in the crate's folder, which holds Cargo.toml) is read as a path by `find_benchmark`
    /// (the command line's lookup), never by `find_benchmark_by_name` (the server's).
    #[test]
    fn a_name_is_never_a_path_for_the_server() {
        let names = metric_names();
        let dir = shipped_dir();
        assert!(Path::new("Cargo.toml").is_file(), "tests run in the crate's folder");
        assert!(matches!(
            find_benchmark("Cargo.toml", &dir, &names),
            Err(SpecError::Parse { .. } | SpecError::Invalid { .. })
        ));
        assert!(matches!(
            find_benchmark_by_name("Cargo.toml", &dir, &names),
            Err(SpecError::UnknownBenchmark { .. })
        ));
        assert_eq!(
            find_benchmark_by_name("g1-smoke", &dir, &names).unwrap().1.name,
            "g1-smoke"
        );
    }
}
