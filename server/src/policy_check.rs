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

/// The child's CPU time (seconds): a legitimate file prepares in about a second.
pub const CPU_SECONDS: u64 = 20;

/// The child's wall time, after which it is killed (a loaded machine gives it less CPU).
pub const WALL: Duration = Duration::from_secs(60);

/// The hidden subcommand the child runs.
pub const SUBCOMMAND: &str = "check-policy-file";

/// The binary that runs the check: `ARENA_POLICY_CHECKER` when set (embedders, whose executable
/// is not `arena`), else this executable, by `/proc/self/exe` on Linux (which still runs after
/// a deploy replaced the file on disk).
fn checker() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("ARENA_POLICY_CHECKER") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?;
    let name = exe.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    // A replaced binary shows as `arena (deleted)`.
    if !(name == "arena" || name.starts_with("arena ")) {
        return Err(format!(
            "this executable ({}) is not `arena`: set ARENA_POLICY_CHECKER to the arena binary, which checks uploads",
            exe.display()
        ));
    }
    let proc_exe = Path::new("/proc/self/exe");
    Ok(match proc_exe.exists() {
        true => proc_exe.to_path_buf(),
        false => exe,
    })
}

/// Why the server could not check an upload: its fault, not the file's (logged).
#[derive(Debug)]
pub struct CheckerFault(pub String);

/// Every problem that kept the file at `path` from being read, optimised and run once within
/// the child's budget; empty when it passed (its metadata and the session are checked after).
/// Blocking.
pub fn check_in_child(path: &Path, overrides: &PolicyOverrides) -> Result<Vec<String>, CheckerFault> {
    let fault = |e: String| {
        tracing::error!("the policy checker: {e}");
        CheckerFault(e)
    };
    let overrides = serde_json::to_string(overrides).map_err(|e| fault(format!("writing the overrides: {e}")))?;
    let binary = checker().map_err(fault)?;
    let mut command = Command::new(&binary);
    command
        .arg(SUBCOMMAND)
        .arg("--overrides")
        .arg(&overrides)
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Nothing of the server's environment (its tokens, the database's password, the
        // store's keys) but where its libraries are.
        .env_clear()
        .env("RUST_BACKTRACE", "0")
        .env("ARENA_LOG", "error");
    if let Some(libraries) = std::env::var_os("LD_LIBRARY_PATH") {
        command.env("LD_LIBRARY_PATH", libraries);
    }
    let mut child = command
        .spawn()
        .map_err(|e| fault(format!("starting {}: {e}", binary.display())))?;
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
                child.kill().ok();
                child.wait().ok();
                return Err(fault(format!("waiting for the checker: {e}")));
            }
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    let Some(status) = status else {
        return Ok(vec![format!(
            "reading and preparing the model took longer than {} s (a graph the runtime cannot prepare in time)",
            WALL.as_secs()
        )]);
    };
    if status.success()
        && let Some(last) = stdout.lines().last()
        && let Ok(answer) = serde_json::from_str::<serde_json::Value>(last)
        && let Some(problems) = answer["problems"].as_array()
    {
        return Ok(problems.iter().filter_map(|p| p.as_str().map(str::to_string)).collect());
    }
    failure(status, &stderr)
        .map(|problem| vec![problem])
        .map_err(|e| fault(e.0))
}

/// What a child that gave no answer broke, for the uploader; `Err` when it is not the file's
/// doing (a signal from outside: the server's stop, an operator, the OOM killer of a machine
/// short of memory; an exit without an answer: its limits could not be set).
fn failure(status: std::process::ExitStatus, stderr: &str) -> Result<String, CheckerFault> {
    use std::os::unix::process::ExitStatusExt;
    let tail: Vec<&str> = stderr.lines().rev().take(8).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    tracing::warn!("the policy checker gave no answer ({status}): {}", tail.join(" | "));
    let gib = MEMORY_BYTES as f64 / f64::from(1u32 << 30);
    if stderr.contains("memory allocation of") || stderr.contains("out of memory") {
        return Ok(format!(
            "reading and preparing the model needed more than {gib:.0} GiB of memory"
        ));
    }
    match status.signal() {
        Some(libc::SIGXCPU) => Ok(format!(
            "reading and preparing the model took more than {CPU_SECONDS} s of CPU"
        )),
        Some(libc::SIGSEGV | libc::SIGABRT | libc::SIGBUS) => Ok(format!(
            "reading and preparing the model crashed the checker (its memory, {gib:.0} GiB, ran out, or the runtime failed)"
        )),
        Some(signal) => Err(CheckerFault(format!("the checker was killed (signal {signal})"))),
        None => Err(CheckerFault(format!("the checker ended without an answer ({status})"))),
    }
}

/// At most this many problems, each cut to this many characters, leave the child: names and
/// attributes in the file are the uploader's and may be long.
const MAX_PROBLEMS: usize = 50;
const MAX_PROBLEM_CHARS: usize = 2_000;

/// The child's side (`arena check-policy-file`): lowers its limits, loads the file as an upload
/// is loaded, prints the problems as JSON and exits 0 (any other end is the parent's to read).
pub fn run_child(path: &Path, overrides: &str) -> anyhow::Result<()> {
    limit(libc::RLIMIT_AS, MEMORY_BYTES, MEMORY_BYTES)?;
    // SIGXCPU at the soft limit; the hard one, a few seconds on, kills.
    limit(libc::RLIMIT_CPU, CPU_SECONDS, CPU_SECONDS + 5)?;
    // An abort leaves no core file (as large as its address space, in the server's folder,
    // holding what the process held).
    limit(libc::RLIMIT_CORE, 0, 0)?;
    // SAFETY: PR_SET_PDEATHSIG takes a signal number and affects this process alone: the child
    // ends with the server that started it.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let problems = match serde_json::from_str::<PolicyOverrides>(overrides) {
        Err(e) => vec![format!("overrides: {e}")],
        Ok(overrides) => match arena_onnx::agent::OnnxPolicy::load(path, &overrides, Supply::UploadOverrides) {
            Ok(_) => Vec::new(),
            Err(e) => e.problems,
        },
    };
    let problems: Vec<String> = problems
        .into_iter()
        .take(MAX_PROBLEMS)
        .map(|p| match p.char_indices().nth(MAX_PROBLEM_CHARS) {
            Some((cut, _)) => format!("{}…", &p[..cut]),
            None => p,
        })
        .collect();
    println!("{}", serde_json::json!({ "problems": problems }));
    Ok(())
}

/// Lowers one resource limit of this process (never above the hard limit it runs under).
fn limit(resource: libc::__rlimit_resource_t, soft: u64, hard: u64) -> anyhow::Result<()> {
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct given.
    if unsafe { libc::getrlimit(resource, &mut current) } != 0 {
        anyhow::bail!("getrlimit: {}", std::io::Error::last_os_error());
    }
    let limit = libc::rlimit {
        rlim_cur: soft.min(current.rlim_max),
        rlim_max: hard.min(current.rlim_max),
    };
    // SAFETY: setrlimit reads the struct given; it only lowers this process's own limits.
    if unsafe { libc::setrlimit(resource, &limit) } != 0 {
        anyhow::bail!("setrlimit: {}", std::io::Error::last_os_error());
    }
    Ok(())
}
