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

/// What a worker imports and initialises as soon as it starts (`--preload`, `--device`): the
/// implementation and device of the init it will be sent (its `wire` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Preload {
    pub(super) implementation: &'static str,
    pub(super) device: &'static str,
}

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
    /// Where its start-up went, once it is ready ([`super::Handler::worker_startup`]).
    pub(super) startup: serde_json::Map<String, serde_json::Value>,
}

impl Worker {
    /// Starts `python script --preload IMPL --device DEVICE` with piped stdin, stdout and
    /// stderr: the worker imports `preload`'s libraries (and initialises the device) at once,
    /// before it reads its init line; a thread hands stdout's lines over as answers, another
    /// keeps stderr's last lines (and logs them at debug level) for error messages. The init
    /// line and its answer are the caller's.
    pub(super) fn start(python: &Path, script: &Path, preload: Preload) -> std::io::Result<Worker> {
        let mut command = Command::new(python);
        // JAX keeps compiled steps on disk, so a restarted worker (or the next lane of the same
        // size) loads them instead of compiling again.
        if std::env::var_os("JAX_COMPILATION_CACHE_DIR").is_none()
            && let Some(dir) = compilation_cache_dir()
        {
            command.env("JAX_COMPILATION_CACHE_DIR", dir);
        }
        let mut child = command
            .arg(script)
            .args(["--preload", preload.implementation, "--device", preload.device])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let (tx, replies) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for_each_line(stdout, |line| tx.send(line).is_ok());
        });
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let tail = stderr_tail.clone();
        let (stderr_done, stderr_read) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            let _done = stderr_done; // dropped at the end of the stream
            for_each_line(stderr, |line| {
                tracing::debug!(target: "arena_sim::gpu_worker", "{line}");
                if let Ok(mut t) = tail.lock() {
                    if t.len() == STDERR_TAIL {
                        t.pop_front();
                    }
                    t.push_back(line);
                }
                true
            });
        });
        Ok(Worker {
            child,
            stdin,
            replies: Mutex::new(replies),
            stderr_tail,
            stderr_read: Mutex::new(stderr_read),
            device: String::new(),
            startup: serde_json::Map::new(),
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
        self.await_answer(line, timeout).map_err(NoAnswer::into_message)
    }

    /// [`Worker::answer`], telling a worker that did not answer in time from one that ended.
    pub(super) fn await_answer(&mut self, line: &str, timeout: Duration) -> Result<String, NoAnswer> {
        let replies = self
            .replies
            .get_mut()
            .map_err(|_| NoAnswer::Ended("the answer channel was poisoned".to_string()))?;
        match replies.recv_timeout(timeout) {
            Ok(reply) => Ok(reply),
            Err(RecvTimeoutError::Timeout) => Err(NoAnswer::TimedOut(format!(
                "no answer to `{line}` within {:.0} s",
                timeout.as_secs_f64()
            ))),
            Err(RecvTimeoutError::Disconnected) => {
                // Its stdout closed: it exits, or (a worker that closed its stdout and lives on)
                // it is made to, so this never waits past a bound.
                let status = self.wait_or_kill(Duration::from_secs(2));
                // Its stdout closed first: the error it printed may still be in the pipe.
                if let Ok(read) = self.stderr_read.get_mut() {
                    let _ = read.recv_timeout(Duration::from_secs(2));
                }
                Err(NoAnswer::Ended(format!(
                    "the worker exited ({status}): {}",
                    self.stderr_tail()
                )))
            }
        }
    }
}

/// Why [`check_worker`] found that no worker can start.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkerCheckError {
    /// The Python is fine but the device asked for is not there.
    Device(String),
    /// The interpreter cannot start, or the worker's imports fail in it.
    Python(String),
}

/// What [`check_worker`] found: the worker's device and libraries, and its seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerCheck {
    pub implementation: &'static str,
    pub device: String,
    pub library: String,
    pub seconds: f64,
}

/// Whether a worker of `preload` can start with `python` here: runs the worker's `--check`
/// (its imports and its device, JAX's backend included) and reads its one answer line. A
/// server asks before it serves, so that a Python without the libraries, or a `gpu` device on
/// a machine without one, stops the start rather than failing every session. Waits up to
/// `timeout` (a first JAX import on a cold machine takes seconds), then kills it.
pub(super) fn check_worker(
    python: &Path,
    preload: Preload,
    timeout: Duration,
) -> Result<WorkerCheck, WorkerCheckError> {
    let python_error = WorkerCheckError::Python;
    let script = worker_script().map_err(python_error)?;
    let mut child = Command::new(python)
        .arg(&script)
        .args([
            "--check",
            "--preload",
            preload.implementation,
            "--device",
            preload.device,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| python_error(format!("could not start {} ({e})", python.display())))?;
    let (stdout, stderr) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let answer = std::thread::spawn(move || {
        let mut last = String::new();
        for_each_line(stdout, |line| {
            last = line;
            true
        });
        last
    });
    let tail = std::thread::spawn(move || {
        let mut tail = VecDeque::new();
        for_each_line(stderr, |line| {
            if tail.len() == STDERR_TAIL {
                tail.pop_front();
            }
            tail.push_back(line);
            true
        });
        Vec::from(tail).join(" | ")
    });
    let until = std::time::Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(python_error(format!(
                    "{} did not answer within {:.0} s: {}",
                    python.display(),
                    timeout.as_secs_f64(),
                    tail.join().unwrap_or_default()
                )));
            }
            Err(e) => return Err(python_error(format!("waiting for {}: {e}", python.display()))),
        }
    };
    let (answer, tail) = (answer.join().unwrap_or_default(), tail.join().unwrap_or_default());
    let parsed: Option<serde_json::Value> = serde_json::from_str(&answer).ok();
    match parsed {
        Some(v) if v["ok"] == true => Ok(WorkerCheck {
            implementation: preload.implementation,
            device: v["device"].as_str().unwrap_or_default().to_string(),
            library: v["library"].as_str().unwrap_or_default().to_string(),
            seconds: v["seconds"].as_f64().unwrap_or_default(),
        }),
        Some(v) if v["error"].is_string() => {
            let error = v["error"].as_str().unwrap_or_default().to_string();
            Err(match v["cause"].as_str() {
                Some("device") => WorkerCheckError::Device(error),
                _ => WorkerCheckError::Python(error),
            })
        }
        // No answer line: the interpreter or the worker's own imports failed first.
        _ => Err(python_error(format!(
            "{} exited ({status}) without an answer: {tail}",
            python.display()
        ))),
    }
}

/// Why a command got no answer, in words.
pub(super) enum NoAnswer {
    /// The worker runs on but did not answer within the time given.
    TimedOut(String),
    /// The worker ended (or could not be written to) before it answered.
    Ended(String),
}

impl NoAnswer {
    pub(super) fn into_message(self) -> String {
        match self {
            NoAnswer::TimedOut(m) | NoAnswer::Ended(m) => m,
        }
    }
}

impl Worker {
    /// The process's exit status, waiting up to `grace` for it to exit and killing it then.
    fn wait_or_kill(&mut self, grace: Duration) -> String {
        let until = std::time::Instant::now() + grace;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return status.to_string(),
                Ok(None) if std::time::Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
                Ok(None) => {
                    let _ = self.child.kill();
                    let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
                    return format!("{status}, killed after its output had closed");
                }
                Err(e) => return format!("its status unknown: {e}"),
            }
        }
    }
}

/// Calls `each` with every line `stream` gives (without its line end) until the stream ends or
/// `each` returns false. Bytes that are not UTF-8 (a library's message in another locale's
/// encoding) are replaced, not the end of the stream: a reader that stopped there would leave
/// the worker's pipe undrained and its answers unread.
fn for_each_line(stream: impl std::io::Read, mut each: impl FnMut(String) -> bool) {
    let mut reader = BufReader::new(stream);
    let mut bytes = Vec::new();
    loop {
        bytes.clear();
        match reader.read_until(b'\n', &mut bytes) {
            Ok(0) => return,
            Ok(_) => {
                while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                    bytes.pop();
                }
                if !each(String::from_utf8_lossy(&bytes).into_owned()) {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
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

/// Where the worker's JAX keeps compiled code: `<cache>/jax` ([`user_cache`]) where it can be
/// made, else in this user's private temporary folder; `None` (no cache, JAX compiles at each
/// start) when neither can.
fn compilation_cache_dir() -> Option<PathBuf> {
    let writable = |dir: PathBuf| std::fs::create_dir_all(&dir).is_ok().then_some(dir);
    user_cache()
        .and_then(|cache| writable(cache.join("jax")))
        .or_else(|| private_temp_folder().ok().and_then(|dir| writable(dir.join("jax"))))
}

/// This user's cache folder for the arena: `$XDG_CACHE_HOME/arena`, else `~/.cache/arena`;
/// `None` without either variable. Never the shared temporary folder as such: a folder there
/// that another user made first would hand the worker their code ([`private_temp_folder`]).
fn user_cache() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })
        .map(|base| base.join("arena"))
}

/// The worker script, written with its modules to `<cache>/arena/gpu-worker-<hash of the
/// sources>/`: per user, and a binary with other sources gets another folder. Checked at each
/// start (files read and compared, rewritten when missing or different), so a cleaned cache only
/// costs a rewrite. Each file is written beside its final name and renamed into place, so
/// processes starting workers at the same time never see a partial file. Where the cache
/// cannot be written (a read-only `$HOME`, a service user without one), the files go to a
/// folder of this user's own in the temporary folder instead.
pub(super) fn worker_script() -> Result<PathBuf, String> {
    // FNV-1a: stable across builds and Rust versions (std's hasher is not).
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (name, source) in WORKER_FILES {
        for byte in name.bytes().chain(source.bytes()) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    let folder = format!("gpu-worker-{hash:016x}");
    let cached = user_cache()
        .ok_or_else(|| "neither XDG_CACHE_HOME nor HOME is set".to_string())
        .and_then(|cache| write_worker_files(&cache.join(&folder)));
    match cached {
        Ok(script) => Ok(script),
        Err(cache_error) => {
            let private = private_temp_folder().map_err(|e| format!("{cache_error}; and {e}"))?;
            let script = write_worker_files(&private.join(folder)).map_err(|e| format!("{cache_error}; and {e}"))?;
            tracing::debug!("{cache_error}: the GPU worker's files are in {}", private.display());
            Ok(script)
        }
    }
}

/// Writes the worker's files to `dir` (those already there as they should be are left alone);
/// returns the script's path.
fn write_worker_files(dir: &Path) -> Result<PathBuf, String> {
    let fail = |e: std::io::Error| format!("writing the GPU worker's files to {}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(fail)?;
    for (name, source) in WORKER_FILES {
        let path = dir.join(name);
        if std::fs::read_to_string(&path).is_ok_and(|existing| existing == source) {
            continue;
        }
        // Unique to this write: two threads of one process may write the same file at once.
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let write = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let partial = dir.join(format!(".{name}.{}.{write}", std::process::id()));
        std::fs::write(&partial, source).map_err(fail)?;
        std::fs::rename(&partial, &path).map_err(fail)?;
    }
    Ok(dir.join(WORKER_FILES[0].0))
}

/// `<temp>/arena-<uid>`, created readable by this user alone, and used only while it is this
/// user's and nobody else can write to it: the temporary folder is shared, and a folder there
/// that another user made could hand the worker their code.
fn private_temp_folder() -> Result<PathBuf, String> {
    private_folder_in(&std::env::temp_dir())
}

/// [`private_temp_folder`] in `base`.
fn private_folder_in(base: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let dir = base.join(format!("arena-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("creating {}: {e}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| format!("looking at {}: {e}", dir.display()))?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is not a folder of this user's that only it can write to: not used",
            dir.display()
        ));
    }
    Ok(dir)
}

/// Prefix of the shared files' names: `arena-gpu-<pid>-<n>-<nonce>.f64` (the model file the
/// worker reads at its start is the same name with `.xml`).
const SHARED_FILE_PREFIX: &str = "arena-gpu-";

/// A file the sweep leaves alone whatever its lock says, for so long after its last change: a
/// file its owner has created and not yet locked.
const SHARED_FILE_GRACE: Duration = Duration::from_secs(60);

/// A fresh shared file (read-write) of `bytes` bytes, in /dev/shm where it exists (memory, not
/// disk), and held: the returned file keeps an exclusive `flock` on it for as long as it is
/// open, which is how other processes tell a live file from a leftover. Its name is this
/// process's id, a counter and a random nonce, made with `create_new`: a /dev/shm shared by
/// containers (each with its own process ids) can hold another process's file of the same id
/// and counter, which is never replaced. A process that ends without dropping its simulators
/// (killed, or `arena serve` leaving its kept ones to the exit) leaves its files behind: the
/// first creation in a process removes those nobody holds.
pub(super) fn create_shared_file(bytes: u64) -> Result<(PathBuf, std::fs::File), String> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static SWEEP: std::sync::Once = std::sync::Once::new();
    let dir = PathBuf::from("/dev/shm");
    let dir = if dir.is_dir() { dir } else { std::env::temp_dir() };
    SWEEP.call_once(|| remove_stale_shared_files(&dir, SHARED_FILE_GRACE));
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut last_error = None;
    for _ in 0..8 {
        let nonce: u64 = rand::random();
        let path = dir.join(format!(
            "{SHARED_FILE_PREFIX}{}-{n}-{nonce:016x}.f64",
            std::process::id()
        ));
        match create_held(&path, bytes) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last_error = Some(e),
            Err(e) => return Err(format!("creating the shared file {}: {e}", path.display())),
        }
    }
    Err(format!(
        "creating a shared file in {}: every name tried was taken ({})",
        dir.display(),
        last_error.map(|e| e.to_string()).unwrap_or_default()
    ))
}

/// Creates `path` (never an existing file), locks it and makes it `bytes` long and zero; a file
/// that cannot be locked or sized is removed again.
fn create_held(path: &Path, bytes: u64) -> std::io::Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)?;
    let held = lock_exclusive(&file).and_then(|()| file.set_len(bytes));
    if let Err(e) = held {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    Ok(file)
}

/// An exclusive `flock` on `file` without waiting: an error if another open file holds one.
fn lock_exclusive(file: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a file descriptor this `File` owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Removes the shared files (and model files) in `dir` that nobody holds: their owner's lock is
/// gone with it, whichever PID namespace it ran in. A file changed within `grace` stays (its
/// owner may not have locked it yet), and so does anything not named like one.
fn remove_stale_shared_files(dir: &Path, grace: Duration) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let parts: Option<Vec<String>> = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix(SHARED_FILE_PREFIX))
            .and_then(|rest| rest.strip_suffix(".f64"))
            .map(|rest| rest.split('-').map(str::to_string).collect())
            .filter(|parts: &Vec<String>| {
                (2..=3).contains(&parts.len())
                    && parts
                        .iter()
                        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_hexdigit()))
            });
        let Some(parts) = parts else { continue };
        // A name without a nonce is an earlier version's, which holds no lock: it also needs
        // its process gone (as that version decided), so a live one of this namespace stays.
        if parts.len() == 2 && Path::new("/proc").join(&parts[0]).exists() {
            continue;
        }
        let fresh = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|changed| changed.elapsed().is_ok_and(|age| age < grace));
        if fresh {
            continue;
        }
        let Ok(file) = std::fs::OpenOptions::new().read(true).open(&path) else {
            continue;
        };
        if lock_exclusive(&file).is_err() {
            continue; // held: a live simulator's
        }
        if std::fs::remove_file(&path).is_ok() {
            let _ = std::fs::remove_file(path.with_extension("xml"));
            tracing::info!("removed {}, which no running process holds", path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_private_temp_folder_is_used_only_while_it_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!("arena-private-test-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        let dir = private_folder_in(&base).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
        assert_eq!(private_folder_in(&base).unwrap(), dir, "found again");
        write_worker_files(&dir.join("w")).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let refused = private_folder_in(&base).unwrap_err();
        assert!(refused.contains("not used"), "{refused}");
        std::fs::remove_dir_all(&base).ok();
    }

    fn scratch_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("arena-shm-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Files nobody holds are removed, with their model files; a held one (this process's,
    /// or any other's, whatever its process id says), a fresh one and anything not named like
    /// a shared file stay.
    #[test]
    fn shared_files_nobody_holds_are_removed() {
        let dir = scratch_dir("sweep");
        let left = format!("{SHARED_FILE_PREFIX}4194999-0-00ff.f64");
        let legacy = format!("{SHARED_FILE_PREFIX}4194999-1.f64");
        // An earlier version's file of a live process (this one) holds no lock, and stays.
        let legacy_live = format!("{SHARED_FILE_PREFIX}{}-1.f64", std::process::id());
        // Another namespace's process with an id that is not running here: held, so kept.
        let held_name = format!("{SHARED_FILE_PREFIX}4194998-0-abcd.f64");
        let others = ["arena-gpu-notapid-0.f64", "arena-gpu-4194999-0.xml", "PostgreSQL.1"];
        for name in [left.as_str(), legacy.as_str(), legacy_live.as_str(), held_name.as_str()]
            .into_iter()
            .chain(others)
        {
            std::fs::write(dir.join(name), b"x").unwrap();
        }
        std::fs::write(dir.join(&left).with_extension("xml"), b"<mujoco/>").unwrap();
        let held = std::fs::File::open(dir.join(&held_name)).unwrap();
        lock_exclusive(&held).unwrap();
        // Just written, they are all within the grace period: nothing goes.
        remove_stale_shared_files(&dir, Duration::from_secs(3600));
        assert!(dir.join(&left).exists(), "a fresh file was removed");
        remove_stale_shared_files(&dir, Duration::ZERO);
        assert!(!dir.join(&left).exists(), "{left} is held by nobody");
        assert!(!dir.join(&left).with_extension("xml").exists(), "its model file stayed");
        assert!(!dir.join(&legacy).exists(), "{legacy} is held by nobody");
        for kept in [held_name.as_str(), legacy_live.as_str()].into_iter().chain(others) {
            assert!(dir.join(kept).exists(), "{kept} was removed");
        }
        drop(held);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A created file is held from the start, sized and zeroed, and its name is taken by no
    /// other creation.
    #[test]
    fn a_created_shared_file_is_held_and_unique() {
        let (path, file) = create_shared_file(64).unwrap();
        let (other, _other_file) = create_shared_file(64).unwrap();
        assert_ne!(path, other);
        assert_eq!(file.metadata().unwrap().len(), 64);
        assert_eq!(std::fs::read(&path).unwrap(), vec![0u8; 64]);
        let again = std::fs::File::open(&path).unwrap();
        assert!(lock_exclusive(&again).is_err(), "a second lock was granted");
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(&other);
    }

    /// A stand-in worker: `/bin/sh` running `body` (the preload arguments unused).
    fn shell_worker(name: &str, body: &str) -> (Worker, PathBuf) {
        let dir = scratch_dir(name);
        let script = dir.join("worker.sh");
        std::fs::write(&script, body).unwrap();
        let preload = Preload {
            implementation: "stub",
            device: "cpu",
        };
        let worker = Worker::start(Path::new("/bin/sh"), &script, preload).unwrap();
        (worker, dir)
    }

    /// Output that is not UTF-8 is read on (replaced), on stdout as on stderr: the reader
    /// used to stop there, leaving a live worker "dead" and its pipe undrained.
    #[test]
    fn output_that_is_not_utf8_is_read_on() {
        let (mut worker, dir) = shell_worker(
            "not-utf8",
            "printf 'caf\\351\\n' >&2; printf 'caf\\351\\nok\\n'; exec sleep 100\n",
        );
        let first = worker.answer("init", Duration::from_secs(10)).unwrap();
        assert_eq!(first, "caf\u{fffd}");
        assert_eq!(worker.answer("next", Duration::from_secs(10)).unwrap(), "ok");
        std::thread::sleep(Duration::from_millis(200));
        assert!(worker.is_alive(), "a line of stderr that is not UTF-8 ended its reader");
        assert!(worker.stderr_tail().contains("caf\u{fffd}"), "{}", worker.stderr_tail());
        drop(worker);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A worker that closes its stdout and lives on: the answer is an error within a bound,
    /// not a wait for its exit that never comes.
    #[test]
    fn a_worker_that_closes_its_output_and_lives_on_is_not_waited_for() {
        let (mut worker, dir) = shell_worker("closed-stdout", "exec 1>&-; exec sleep 100\n");
        let err = worker.answer("init", Duration::from_secs(30)).unwrap_err();
        assert!(err.contains("killed after its output had closed"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
