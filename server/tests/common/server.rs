//! A real `arena serve` process for end-to-end tests, a minimal HTTP/1.1 client, and fresh
//! PostgreSQL databases.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub const ADMIN: &str = "test-admin-token";

pub struct ServerProc {
    child: Child,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    /// The server's stderr (its log).
    pub log: PathBuf,
}

impl ServerProc {
    /// Starts `arena serve` on a free loopback port (or `--bind` in `extra`) and waits until it
    /// listens. Its log (`ARENA_LOG=info`) goes to `<data_dir>/server-<n>.log`.
    pub fn start(data_dir: &Path, extra: &[&str]) -> Self {
        Self::start_with_env(data_dir, extra, &[])
    }

    /// [`ServerProc::start`] with extra environment variables (e.g. `ARENA_LOG=debug`).
    pub fn start_with_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Self {
        std::fs::create_dir_all(data_dir).unwrap();
        let n = std::fs::read_dir(data_dir).unwrap().count();
        let log_path = data_dir.join(format!("server-{n}.log"));
        let log = std::fs::File::create(&log_path).unwrap();
        let mut args = vec!["serve", "--data-dir", data_dir.to_str().unwrap()];
        // [`ADMIN`], unless `extra` gives its own ("" for none).
        if !extra.contains(&"--admin-token") {
            args.extend(["--admin-token", ADMIN]);
        }
        if !extra.contains(&"--bind") {
            args.extend(["--bind", "127.0.0.1:0"]);
        }
        args.extend(extra);
        let mut command = Command::new(env!("CARGO_BIN_EXE_arena"));
        // SIGHUP as a terminal's session would have it, whatever this test runs under (`nohup`
        // leaves it ignored, which the server keeps ignoring).
        // SAFETY: signal(2) between fork and exec, async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                libc::signal(libc::SIGHUP, libc::SIG_DFL);
                Ok(())
            });
        }
        let mut child = command
            .args(&args)
            .env("ARENA_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("arena serve starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let addr = loop {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("arena serve exited early; see {}", data_dir.display()))
                .unwrap();
            if let Some(rest) = line.strip_prefix("arena serve: listening on http://") {
                break rest.split_whitespace().next().unwrap().parse().unwrap();
            }
        };
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Self {
            child,
            addr,
            data_dir: data_dir.to_path_buf(),
            log: log_path,
        }
    }

    /// The server's log so far.
    /// The server process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}/api/v1/agent", self.addr)
    }

    pub fn grpc_url(&self) -> String {
        format!("grpc://{}", self.addr)
    }

    /// Its exit status once it has exited on its own, waiting up to `limit`; None if it still
    /// runs then (it is then killed).
    pub fn wait_exit(&mut self, limit: std::time::Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(exit) = self.child.try_wait().unwrap() {
                return Some(exit);
            }
            if std::time::Instant::now() >= deadline {
                self.kill9();
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// SIGTERM (what `docker stop` sends), then its exit, within a minute.
    pub fn terminate(&mut self) {
        self.signal("TERM");
    }

    /// SIGHUP (its terminal closed), then its exit, within a minute.
    pub fn hangup(&mut self) {
        self.signal("HUP");
    }

    fn signal(&mut self, name: &str) {
        let pid = self.pid().to_string();
        let sent = Command::new("kill").args([&format!("-{name}"), &pid]).status().unwrap();
        assert!(sent.success(), "kill -{name} {pid}");
        assert!(
            self.wait_exit(std::time::Duration::from_secs(60)).is_some(),
            "the server did not stop on SIG{name}"
        );
    }

    /// SIGKILL, no chance to clean up.
    pub fn kill9(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }

    pub fn get(&self, path: &str, token: Option<&str>) -> (u16, serde_json::Value) {
        let (status, body) = http(self.addr, "GET", path, token, None);
        (status, serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null))
    }

    pub fn post(&self, path: &str, token: Option<&str>, body: &str) -> (u16, serde_json::Value) {
        let (status, body) = http(self.addr, "POST", path, token, Some(body));
        (status, serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null))
    }

    /// Any method; returns (status, response head, JSON body).
    pub fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (u16, String, serde_json::Value) {
        let (status, head, body) = request(self.addr, method, path, token, body);
        (
            status,
            head,
            serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
        )
    }

    /// Runs a whole g1-smoke submission with `agent` over WebSocket (binary), in `phase` if
    /// given, checks it COMPLETED, and returns its id.
    pub fn submit(
        &self,
        token: &str,
        agent: &mut dyn arena_sdk::Agent,
        agent_name: &str,
        phase: Option<&str>,
    ) -> String {
        let mut config = arena_sdk::ClientConfig::new(
            self.ws_url(),
            token,
            arena_sdk::Mode::Submission {
                benchmark: "g1-smoke".into(),
                submission_id: None,
            },
        );
        config.encoding = arena_sdk::protocol::Encoding::Binary;
        config.agent_name = agent_name.into();
        if let Some(phase) = phase {
            config.phase = phase.into();
        }
        let summary =
            arena_sdk::client::run_blocking(&config, agent, &mut |_| {}).expect("the submission runs to its end");
        assert_eq!(summary.submission_status, "COMPLETED");
        self.wait_merged(&summary.submission_id, token, std::time::Duration::from_secs(60));
        summary.submission_id
    }

    /// Waits (at most `limit`) until submission `id`'s merged trajectory file can be
    /// downloaded: a submission's runs are merged after it is COMPLETED (the download waits for
    /// this server's merge; another replica's is polled for).
    pub fn wait_merged(&self, id: &str, token: &str, limit: std::time::Duration) {
        let started = std::time::Instant::now();
        let path = format!("/api/v1/submissions/{id}/trajectories");
        loop {
            let (status, _) = http(self.addr, "GET", &path, Some(token), None);
            if status == 200 {
                return;
            }
            assert!(
                started.elapsed() < limit,
                "{id}'s trajectories: {status}\n{}",
                self.log_text()
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// Hands in a policy file (`POST /api/v1/submissions/hosted?{query}`, the file as the
    /// body); returns (status, JSON body).
    pub fn upload_policy(&self, query: &str, token: &str, file: &[u8]) -> (u16, serde_json::Value) {
        let mut s = TcpStream::connect(self.addr).unwrap();
        let head = format!(
            "POST /api/v1/submissions/hosted?{query} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            file.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        // A server that refuses early may close before the whole body is sent.
        let _ = s.write_all(file);
        let mut response = Vec::new();
        let _ = s.read_to_end(&mut response);
        let text = String::from_utf8_lossy(&response);
        let status: u16 = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let json = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        (status, serde_json::from_str(json).unwrap_or(serde_json::Value::Null))
    }

    /// Polls submission `id` until it is COMPLETED or FAILED (at most `limit`), then for up to
    /// 10 s more until its last session's outcome is on record (the server records a session's
    /// end just after the submission's status; a session cut by a killed server has none); its
    /// JSON.
    pub fn wait_final(&self, id: &str, token: &str, limit: std::time::Duration) -> serde_json::Value {
        let started = std::time::Instant::now();
        let mut became_final = None;
        loop {
            let (_, s) = self.get(&format!("/api/v1/submissions/{id}"), Some(token));
            if s["status"] == "COMPLETED" || s["status"] == "FAILED" {
                let since = *became_final.get_or_insert_with(std::time::Instant::now);
                let recorded = s["sessions"]
                    .as_array()
                    .and_then(|all| all.last())
                    .is_none_or(|last| !last["outcome"].is_null());
                if recorded || since.elapsed() > std::time::Duration::from_secs(10) {
                    return s;
                }
            }
            assert!(started.elapsed() < limit, "still {s}\n{}", self.log_text());
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// Creates a team with the admin token; returns its token.
    pub fn team(&self, name: &str) -> String {
        let (status, v) = self.post("/api/v1/teams", Some(ADMIN), &format!("{{\"name\": \"{name}\"}}"));
        assert_eq!(status, 201, "{v}");
        v["token"].as_str().unwrap().to_string()
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// One HTTP/1.1 request with `Connection: close`; returns (status, body).
pub fn http(addr: SocketAddr, method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> (u16, Vec<u8>) {
    let (status, _, body) = request(addr, method, path, token, body);
    (status, body)
}

/// [`http`], also returning the response head (status line and headers).
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, String, Vec<u8>) {
    request_with(addr, method, path, token, body, &[])
}

/// [`request`] with extra request headers (name, value).
pub fn request_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(t) = token {
        req += &format!("Authorization: Bearer {t}\r\n");
    }
    for (name, value) in headers {
        req += &format!("{name}: {value}\r\n");
    }
    let body = body.unwrap_or("");
    if !body.is_empty() {
        req += &format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len());
    }
    req += "\r\n";
    req += body;
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("HTTP header end");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status: u16 = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut payload = raw[split + 4..].to_vec();
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        payload = dechunk(&payload);
    }
    (status, head, payload)
}

/// The value of response header `name` (any case) in a response head.
pub fn header_of(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_string())
    })
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&data[..line_end]).unwrap().trim(), 16).unwrap();
        data = &data[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// A fresh PostgreSQL database under `ARENA_TEST_DATABASE_URL`, dropped with the guard; `None`
/// (after saying why) when PostgreSQL is not configured and `ARENA_REQUIRE_POSTGRES` is not 1.
pub struct PgDb {
    pub url: String,
    admin_url: String,
    name: String,
}

impl PgDb {
    pub fn create(test: &str) -> Option<PgDb> {
        use sqlx::Connection;
        let admin_url = match std::env::var("ARENA_TEST_DATABASE_URL") {
            Ok(url) if !url.is_empty() => url,
            _ => {
                if std::env::var("ARENA_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") {
                    panic!("ARENA_REQUIRE_POSTGRES=1 but ARENA_TEST_DATABASE_URL is not set ({test})");
                }
                eprintln!("skipping PostgreSQL: ARENA_TEST_DATABASE_URL not set ({test})");
                return None;
            }
        };
        let name = format!("arena_t_{}", uuid::Uuid::new_v4().simple());
        // A runtime on a thread of its own, so async tests can call this too.
        let (url, db) = (admin_url.clone(), name.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let mut admin = sqlx::PgConnection::connect(&url)
                    .await
                    .unwrap_or_else(|e| panic!("connecting to ARENA_TEST_DATABASE_URL {url}: {e}"));
                sqlx::query(&format!("CREATE DATABASE {db}"))
                    .execute(&mut admin)
                    .await
                    .unwrap();
            });
        })
        .join()
        .expect("creating the test database");
        let (server, _) = admin_url.rsplit_once('/').unwrap();
        Some(PgDb {
            url: format!("{server}/{name}"),
            admin_url,
            name,
        })
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        use sqlx::Connection;
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(mut admin) = sqlx::PgConnection::connect(&admin_url).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut admin)
                        .await;
                }
            });
        })
        .join()
        .ok();
    }
}
