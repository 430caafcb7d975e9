//! The GPU worker as a process: its Python files (embedded in the binary, written once to a
//! per-user cache folder), starting it, one command line and its answer at a time with a
//! deadline, and its end. What the lines mean is [`super::gpu`]'s.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The worker's files (name, source): `gpu_worker.py` is the script, the others its modules.
const WORKER_FILES: [(&str, &str); 5] = [
    ("gpu_worker.py", include_str!("../../python/gpu_worker.py")),
    ("worker_common.py", include_str!("../../python/worker_common.py")),
    ("mjx_physics.py", include_str!("../../python/mjx_physics.py")),
    ("warp_physics.py", include_str!("../../python/warp_physics.py")),
    ("stub_physics.py", include_str!("../../python/stub_physics.py")),
];
/// Lines of the worker's stderr kept for error messages.
const STDERR_TAIL: usize = 20;

/// A running worker process.
pub(super) struct Worker {
    pub(super) child: Child,
    stdin: ChildStdin,
    /// Answer lines from the stdout reader thread (a Mutex only to make the handler `Sync`).
    replies: Mutex<Receiver<String>>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// Closed when the stderr reader has read to the end (the worker's last words are in
    /// `stderr_tail` then).
    stderr_read: Mutex<Receiver<()>>,
    /// The worker's own description, e.g. `mujoco_warp on cuda:0 (mujoco-warp 3.17.0, warp
    /// 1.18.0, mujoco 3.17.0)`.
    pub(super) device: String,
}

impl Worker {
    /// Starts `python script --shm shm_path` with piped stdin, stdout and stderr: a thread
    /// hands stdout's lines over as answers, another keeps stderr's last lines (and logs them
    /// at debug level) for error messages. The init line and its answer are the caller's.
    pub(super) fn start(python: &Path, script: &Path, shm_path: &Path) -> std::io::Result<Worker> {
        let mut command = Command::new(python);
        // JAX keeps compiled steps on disk, so a restarted worker (or the next lane of the same
        // size) loads them instead of compiling again.
        if std::env::var_os("JAX_COMPILATION_CACHE_DIR").is_none() {
            command.env("JAX_COMPILATION_CACHE_DIR", compilation_cache_dir());
        }
        let mut child = command
            .arg(script)
            .arg("--shm")
            .arg(shm_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let (tx, replies) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let tail = stderr_tail.clone();
        let (stderr_done, stderr_read) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            let _done = stderr_done; // dropped at the end of the stream
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                tracing::debug!(target: "arena_sim::gpu_worker", "{line}");
                if let Ok(mut t) = tail.lock() {
                    if t.len() == STDERR_TAIL {
                        t.pop_front();
                    }
                    t.push_back(line);
                }
            }
        });
        Ok(Worker {
            child,
            stdin,
            replies: Mutex::new(replies),
            stderr_tail,
            stderr_read: Mutex::new(stderr_read),
            device: String::new(),
        })
    }

    /// Whether the process is still there (its stderr reader ends when the process does), so
    /// that a worker that died while idle is not handed to a new env.
    pub(super) fn is_alive(&self) -> bool {
        self.stderr_read
            .lock()
            .is_ok_and(|r| matches!(r.try_recv(), Err(std::sync::mpsc::TryRecvError::Empty)))
    }

    pub(super) fn stderr_tail(&self) -> String {
        let tail = self.stderr_tail.lock().map(|t| t.iter().cloned().collect::<Vec<_>>());
        tail.map(|t| t.join(" | ")).unwrap_or_default()
    }

    /// Sends one command line and waits for its answer.
    pub(super) fn command(&mut self, line: &str, timeout: Duration) -> Result<String, String> {
        self.send(line)?;
        self.answer(line, timeout)
    }

    /// Sends one command line; [`Worker::answer`] waits for its answer.
    pub(super) fn send(&mut self, line: &str) -> Result<(), String> {
        write_line_without_sigpipe(&mut self.stdin, line).map_err(|e| format!("could not write to the worker ({e})"))
    }

    /// Waits for the answer to the command `line` sent last.
    pub(super) fn answer(&mut self, line: &str, timeout: Duration) -> Result<String, String> {
        let replies = self
            .replies
            .get_mut()
            .map_err(|_| "the answer channel was poisoned".to_string())?;
        match replies.recv_timeout(timeout) {
            Ok(reply) => Ok(reply),
            Err(RecvTimeoutError::Timeout) => {
                Err(format!("no answer to `{line}` within {:.0} s", timeout.as_secs_f64()))
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
                // Its stdout closed first: the error it printed may still be in the pipe.
                if let Ok(read) = self.stderr_read.get_mut() {
                    let _ = read.recv_timeout(Duration::from_secs(2));
                }
                Err(format!("the worker exited ({status}): {}", self.stderr_tail()))
            }
        }
    }
}

/// Writes `line` and a newline to the worker. A worker that has died makes this an `EPIPE`
/// error, never a SIGPIPE: the one-shot commands (`arena eval`, `sim bench`, `audit`) restore
/// SIGPIPE's default so that `arena … | head` ends quietly, and there it would kill the process
/// before the worker's own error could be reported. SIGPIPE is blocked in this thread for the
/// write, and the one the write raised is taken off the pending set before unblocking.
fn write_line_without_sigpipe(stdin: &mut ChildStdin, line: &str) -> std::io::Result<()> {
    // SAFETY: signal-mask calls on this thread only, with sets initialised by sigemptyset.
    unsafe {
        let mut pipe: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pipe);
        libc::sigaddset(&mut pipe, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old);
        let result = writeln!(stdin, "{line}").and_then(|_| stdin.flush());
        if matches!(&result, Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe) {
            let now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            libc::sigtimedwait(&pipe, std::ptr::null_mut(), &now);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        result
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = write_line_without_sigpipe(&mut self.stdin, "close");
        // A worker that does not close promptly is killed; its reader threads end with it.
        for _ in 0..50 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the worker's JAX keeps compiled code: `$XDG_CACHE_HOME/arena/jax`, else
/// `~/.cache/arena/jax`, else the temporary folder.
fn compilation_cache_dir() -> PathBuf {
    cache_base().join("arena").join("jax")
}

/// `$XDG_CACHE_HOME`, else `~/.cache`, else the temporary folder.
fn cache_base() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
}

/// The worker script, written with its modules to `<cache>/arena/gpu-worker-<hash of the
/// sources>/`: per user, and a binary with other sources gets another folder. Checked at each
/// start (files read and compared, rewritten when missing or different), so a cleaned cache only
/// costs a rewrite. Each file is written beside its final name and renamed into place, so
/// processes starting workers at the same time never see a partial file.
pub(super) fn worker_script() -> Result<PathBuf, String> {
    // FNV-1a: stable across builds and Rust versions (std's hasher is not).
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (name, source) in WORKER_FILES {
        for byte in name.bytes().chain(source.bytes()) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    let dir = cache_base().join("arena").join(format!("gpu-worker-{hash:016x}"));
    let fail = |e: std::io::Error| format!("writing the GPU worker's files to {}: {e}", dir.display());
    std::fs::create_dir_all(&dir).map_err(fail)?;
    for (name, source) in WORKER_FILES {
        let path = dir.join(name);
        if std::fs::read_to_string(&path).is_ok_and(|existing| existing == source) {
            continue;
        }
        let partial = dir.join(format!(".{name}.{}", std::process::id()));
        std::fs::write(&partial, source).map_err(fail)?;
        std::fs::rename(&partial, &path).map_err(fail)?;
    }
    Ok(dir.join(WORKER_FILES[0].0))
}

/// Prefix of the shared files' names: `arena-gpu-<pid>-<n>.f64`.
const SHARED_FILE_PREFIX: &str = "arena-gpu-";

/// Creates a fresh shared file (read-write) of `bytes` bytes: in /dev/shm where it exists
/// (memory, not disk), named after this process and a counter it never repeats. A process
/// that ends without dropping its simulators (killed, or `arena serve` leaving its kept ones
/// to the exit) leaves its files behind: the first creation in a process removes those of
/// processes no longer running, and a file of this very name can only be one of theirs (a
/// reused process id), so it is replaced.
pub(super) fn create_shared_file(bytes: u64) -> Result<(PathBuf, std::fs::File), String> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static SWEEP: std::sync::Once = std::sync::Once::new();
    let dir = PathBuf::from("/dev/shm");
    let dir = if dir.is_dir() { dir } else { std::env::temp_dir() };
    SWEEP.call_once(|| remove_stale_shared_files(&dir));
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!("{SHARED_FILE_PREFIX}{}-{n}.f64", std::process::id()));
    let file = create_replacing(&path, bytes)?;
    Ok((path, file))
}

/// Creates `path` afresh, `bytes` long and zero, replacing a file left there (see
/// [`create_shared_file`]: a name no live process can hold).
fn create_replacing(path: &Path, bytes: u64) -> Result<std::fs::File, String> {
    let create = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
    };
    let file = match create() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            tracing::warn!(
                "{} was left by an earlier process with this id; replacing it",
                path.display()
            );
            let _ = std::fs::remove_file(path);
            create()
        }
        other => other,
    }
    .map_err(|e| format!("creating the shared file {}: {e}", path.display()))?;
    if let Err(e) = file.set_len(bytes) {
        let _ = std::fs::remove_file(path);
        return Err(format!("sizing the shared file {}: {e}", path.display()));
    }
    Ok(file)
}

/// Removes the shared files in `dir` whose process is not running (its `/proc` entry is gone).
/// Without `/proc` nothing is removed: whether a process runs is then not known. (Processes of
/// another PID namespace are not seen; containers have a /dev/shm of their own.)
fn remove_stale_shared_files(dir: &Path) {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(SHARED_FILE_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .filter(|(_, tail)| tail.ends_with(".f64"))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !proc.join(pid.to_string()).exists() && std::fs::remove_file(entry.path()).is_ok() {
            tracing::info!(
                "removed {}, left by process {pid}, which is gone",
                entry.path().display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("arena-shm-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Files of processes that are gone are removed; a live process's, and anything not named
    /// like a shared file, stay.
    #[test]
    fn stale_shared_files_of_gone_processes_are_removed() {
        let dir = scratch_dir("sweep");
        // Above Linux's largest process id (2^22): never a running process.
        let gone = format!("{SHARED_FILE_PREFIX}4194999-0.f64");
        let live = format!("{SHARED_FILE_PREFIX}{}-3.f64", std::process::id());
        let others = ["arena-gpu-notapid-0.f64", "arena-gpu-4194999-0.xml", "PostgreSQL.1"];
        for name in [gone.as_str(), live.as_str()].into_iter().chain(others) {
            std::fs::write(dir.join(name), b"x").unwrap();
        }
        remove_stale_shared_files(&dir);
        assert!(!dir.join(&gone).exists(), "{gone} was left by a process that is gone");
        for kept in [live.as_str()].into_iter().chain(others) {
            assert!(dir.join(kept).exists(), "{kept} is not a stale shared file");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file already at the name (a reused process id's leftover) is replaced by a fresh,
    /// zeroed one of the size asked for.
    #[test]
    fn a_leftover_at_the_name_is_replaced() {
        let dir = scratch_dir("replace");
        let path = dir.join(format!("{SHARED_FILE_PREFIX}{}-0.f64", std::process::id()));
        std::fs::write(&path, vec![7u8; 100]).unwrap();
        let file = create_replacing(&path, 64).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 64);
        assert_eq!(std::fs::read(&path).unwrap(), vec![0u8; 64]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
