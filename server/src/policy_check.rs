//! An uploaded policy file is first read, optimised and run once by a child process of its own,
//! within a memory, CPU and time budget, before this server loads it.
//!
//! tract is not hardened against hostile graphs, and a hosted walkthrough crashed the server
//! with three small uploads, all past `arena_onnx::checks` (which reads the decoded file):
//! 10 MiB of empty protobuf entries decoded into gigabytes before any check (an allocation
//! failure aborts the process: no `catch_unwind` stops it); a `Transpose` whose `perm` is not a
//! permutation sent tract's axis changes allocating without end (abort in seconds); one
//! `Concat` of 300,000 copies of one input kept the optimiser busy for 24 minutes while the
//! memory grew to 23.7 GB (the OOM killer ended the server). In a child each is a refusal that
//! says which budget it broke; the server loads only a file the child has read whole, and the
//! same load then takes the same path.
//!
//! The child is this binary (`arena check-policy-file`, hidden): it lowers its own limits
//! (`setrlimit`: address space and CPU seconds) and prints `{"problems": [...]}`.

use arena_onnx::config::{PolicyOverrides, Supply};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The child's address space (bytes): a published tracker (a few MB) loads in well under
/// 30 MB; a 40 MB file of 200 chained 3072² products (within the file checks) in 140 MB.
pub const MEMORY_BYTES: u64 = 2 << 30;

/// The child's CPU time (seconds).
pub const CPU_SECONDS: u64 = 60;

/// The child's wall time, after which it is killed (a loaded machine gives it less CPU).
pub const WALL: Duration = Duration::from_secs(120);

/// The hidden subcommand the child runs.
pub const SUBCOMMAND: &str = "check-policy-file";

/// The binary that runs the check: `ARENA_POLICY_CHECKER` when set (tests and embedders whose
/// executable is not `arena`), else this executable.
fn checker() -> Result<PathBuf, String> {
    match std::env::var_os("ARENA_POLICY_CHECKER") {
        Some(path) => Ok(PathBuf::from(path)),
        None => std::env::current_exe().map_err(|e| format!("finding this executable: {e}")),
    }
}

/// Every problem that kept the file at `path` from being read, optimised and run once within
/// the child's budget; empty when it passed (its metadata and the session are checked after).
/// Blocking.
pub fn check_in_child(path: &Path, overrides: &PolicyOverrides) -> Vec<String> {
    let overrides = match serde_json::to_string(overrides) {
        Ok(json) => json,
        Err(e) => return vec![format!("the overrides cannot be written for the checker: {e}")],
    };
    let not_started = |e: String| {
        tracing::error!("cannot start the policy checker: {e}");
        vec!["the server could not check the file (its log says why)".to_string()]
    };
    let binary = match checker() {
        Ok(binary) => binary,
        Err(e) => return not_started(e),
    };
    let child = Command::new(&binary)
        .arg(SUBCOMMAND)
        .arg("--overrides")
        .arg(&overrides)
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("RUST_BACKTRACE", "0")
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => return not_started(format!("{}: {e}", binary.display())),
    };
    // Read both pipes on threads of their own: a child that fills one must not stall.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut pipe) = pipe {
                // Bounded: a child that writes without end is not kept whole.
                pipe.by_ref().take(1 << 20).read_to_end(&mut text).ok();
                std::io::copy(&mut pipe, &mut std::io::sink()).ok();
            }
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() >= WALL => {
                child.kill().ok();
                child.wait().ok();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                tracing::error!("waiting for the policy checker: {e}");
                child.kill().ok();
                child.wait().ok();
                break None;
            }
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    let Some(status) = status else {
        return vec![format!(
            "reading and preparing the model took longer than {} s (a graph the runtime cannot prepare in time)",
            WALL.as_secs()
        )];
    };
    if status.success()
        && let Some(last) = stdout.lines().last()
        && let Ok(answer) = serde_json::from_str::<serde_json::Value>(last)
        && let Some(problems) = answer["problems"].as_array()
    {
        return problems.iter().filter_map(|p| p.as_str().map(str::to_string)).collect();
    }
    vec![failure(status, &stderr)]
}

/// What a child that gave no answer broke, for the uploader; the details go to the log.
fn failure(status: std::process::ExitStatus, stderr: &str) -> String {
    use std::os::unix::process::ExitStatusExt;
    let tail: String = stderr
        .lines()
        .rev()
        .take(8)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join(" | ");
    tracing::warn!("the policy checker gave no answer ({status}): {tail}");
    let gib = MEMORY_BYTES as f64 / f64::from(1u32 << 30);
    if stderr.contains("memory allocation of") || stderr.contains("out of memory") {
        return format!("reading and preparing the model needed more than {gib:.0} GiB of memory");
    }
    match status.signal() {
        Some(libc::SIGXCPU) | Some(libc::SIGKILL) => {
            format!("reading and preparing the model took more than {CPU_SECONDS} s of CPU")
        }
        Some(libc::SIGSEGV) => format!(
            "reading and preparing the model crashed the checker (its memory, {gib:.0} GiB, ran out, or the runtime failed)"
        ),
        Some(signal) => format!("reading and preparing the model crashed the checker (signal {signal})"),
        None => "the checker could not read the model (the server's log has its output)".to_string(),
    }
}

/// The child's side (`arena check-policy-file`): lowers its limits, loads the file as an upload
/// is loaded, prints the problems as JSON and exits 0 (any other end is the parent's to read).
pub fn run_child(path: &Path, overrides: &str) -> anyhow::Result<()> {
    limit(libc::RLIMIT_AS, MEMORY_BYTES, MEMORY_BYTES)?;
    // SIGXCPU at the soft limit; the hard one, a few seconds on, kills.
    limit(libc::RLIMIT_CPU, CPU_SECONDS, CPU_SECONDS + 5)?;
    let problems = match serde_json::from_str::<PolicyOverrides>(overrides) {
        Err(e) => vec![format!("overrides: {e}")],
        Ok(overrides) => match arena_onnx::agent::OnnxPolicy::load(path, &overrides, Supply::UploadOverrides) {
            Ok(_) => Vec::new(),
            Err(e) => e.problems,
        },
    };
    println!("{}", serde_json::json!({ "problems": problems }));
    Ok(())
}

/// Lowers one resource limit of this process.
fn limit(resource: libc::__rlimit_resource_t, soft: u64, hard: u64) -> anyhow::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the struct given; it only lowers this process's own limits.
    if unsafe { libc::setrlimit(resource, &limit) } != 0 {
        anyhow::bail!("setrlimit: {}", std::io::Error::last_os_error());
    }
    Ok(())
}
