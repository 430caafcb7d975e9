//! Pieces of a multi-replica deployment on loopback for end-to-end tests: a real S3-compatible
//! server (s3s-fs, built by scripts/bootstrap-s3.sh) and a TCP proxy that stands in for the
//! load balancer in front of the replicas.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const S3_KEY: &str = "arena-test-key";
pub const S3_SECRET: &str = "arena-test-secret";
pub const S3_BUCKET: &str = "arena";

/// The s3s-fs binary: `ARENA_S3S_BIN`, else `third_party/s3s/bin/s3s-fs`. None (with the
/// reason printed) when missing, unless `ARENA_REQUIRE_S3=1`, which makes it a failure.
pub fn s3s_binary(test: &str) -> Option<PathBuf> {
    let path = std::env::var_os("ARENA_S3S_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../third_party/s3s/bin/s3s-fs"));
    if path.is_file() {
        return Some(path);
    }
    if std::env::var("ARENA_REQUIRE_S3").is_ok_and(|v| v == "1") {
        panic!(
            "ARENA_REQUIRE_S3=1 but there is no S3 server at {} ({test}; bash scripts/bootstrap-s3.sh builds it)",
            path.display()
        );
    }
    eprintln!(
        "skipping {test}: no S3 server at {} (bash scripts/bootstrap-s3.sh builds it)",
        path.display()
    );
    None
}

/// A free loopback port (bound and released; the caller binds it next).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A running s3s-fs with one bucket ([`S3_BUCKET`]) under `root`.
pub struct S3Server {
    child: Option<Child>,
    binary: PathBuf,
    pub root: PathBuf,
    pub port: u16,
}

impl S3Server {
    pub fn start(binary: &Path, root: &Path) -> Self {
        std::fs::create_dir_all(root.join(S3_BUCKET)).unwrap();
        let mut s = Self {
            child: None,
            binary: binary.to_path_buf(),
            root: root.to_path_buf(),
            port: free_port(),
        };
        s.restart();
        s
    }

    /// Starts (again) on the same port and folder; waits until it accepts connections.
    pub fn restart(&mut self) {
        let log = std::fs::File::create(self.root.with_extension("log")).unwrap();
        let child = Command::new(&self.binary)
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--access-key", S3_KEY, "--secret-key", S3_SECRET])
            .arg(&self.root)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("s3s-fs starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "s3s-fs did not listen on {}", self.port);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().ok();
            c.wait().ok();
        }
    }

    /// The `AWS_*` variables a server needs to use this store.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT", format!("http://127.0.0.1:{}", self.port)),
            ("AWS_ACCESS_KEY_ID", S3_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", S3_SECRET.into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
    }

    /// Where s3s-fs keeps an object: `<root>/<bucket>/<key>`.
    pub fn object_path(&self, key: &str) -> PathBuf {
        self.root.join(S3_BUCKET).join(key)
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A TCP proxy on loopback: each new connection goes to the next backend that accepts it
/// (round robin), bytes are copied both ways, and when either side closes or fails, both do.
/// Like a load balancer in front of replicas, it sends a reconnecting agent to a live one.
pub struct Proxy {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Connections per backend index.
    pub routed: Arc<Mutex<Vec<usize>>>,
}

impl Proxy {
    pub fn start(backends: Vec<SocketAddr>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let routed = Arc::new(Mutex::new(vec![0; backends.len()]));
        let next = Arc::new(AtomicUsize::new(0));
        let (stop2, routed2) = (stop.clone(), routed.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let first = next.fetch_add(1, Ordering::SeqCst);
                let backend = (0..backends.len()).find_map(|i| {
                    let which = (first + i) % backends.len();
                    TcpStream::connect_timeout(&backends[which], Duration::from_millis(500))
                        .ok()
                        .map(|s| (which, s))
                });
                let Some((which, server)) = backend else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                routed2.lock().unwrap()[which] += 1;
                pipe(client, server);
            }
        });
        Self { addr, stop, routed }
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}/api/v1/agent", self.addr)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

fn pipe(a: TcpStream, b: TcpStream) {
    let copy = |mut from: TcpStream, mut to: TcpStream| {
        std::thread::spawn(move || {
            let mut buf = [0u8; 64 << 10];
            loop {
                match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                }
            }
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
        });
    };
    copy(a.try_clone().unwrap(), b.try_clone().unwrap());
    copy(b, a);
}

/// A PostgreSQL server of one test's own (scripts/postgres.sh with its own port and data
/// directory), so that the test can restart it. Stopped and deleted when dropped.
pub struct PrivatePg {
    pub url: String,
    port: u16,
    data: PathBuf,
}

impl PrivatePg {
    /// None (with the reason printed) where the suite has no PostgreSQL
    /// (`ARENA_TEST_DATABASE_URL` unset), unless `ARENA_REQUIRE_POSTGRES=1`.
    pub fn start(test: &str) -> Option<Self> {
        if std::env::var("ARENA_TEST_DATABASE_URL").map_or(true, |u| u.is_empty()) {
            if std::env::var("ARENA_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") {
                panic!("ARENA_REQUIRE_POSTGRES=1 but ARENA_TEST_DATABASE_URL is not set ({test})");
            }
            eprintln!("skipping {test}: no PostgreSQL (ARENA_TEST_DATABASE_URL not set)");
            return None;
        }
        let port = free_port();
        let data = std::env::temp_dir().join(format!("arena-pg-{}-{port}", std::process::id()));
        let mut pg = Self {
            url: String::new(),
            port,
            data,
        };
        pg.url = pg.script("start").trim().to_string();
        Some(pg)
    }

    /// Stops the server for `down`, then starts it again on the same data.
    /// Stops the server (`postgres.sh halt`) until [`PrivatePg::resume`].
    pub fn halt(&self) {
        self.script("halt");
    }

    pub fn resume(&self) {
        self.script("resume");
    }

    fn script(&self, verb: &str) -> String {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/postgres.sh");
        let out = Command::new("bash")
            .arg(script)
            .arg(verb)
            .env("ARENA_PG_PORT", self.port.to_string())
            .env("PGDATA_DIR", &self.data)
            .output()
            .expect("bash runs scripts/postgres.sh");
        assert!(
            out.status.success(),
            "postgres.sh {verb}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/postgres.sh");
        let _ = Command::new("bash")
            .arg(script)
            .arg("stop")
            .env("ARENA_PG_PORT", self.port.to_string())
            .env("PGDATA_DIR", &self.data)
            .output();
    }
}
