//! Requests no route serves: a JSON 404 for HTTP clients (a browser opening the server's URL, a
//! mistyped REST path), gRPC's `unimplemented` for gRPC callers; known routes are unaffected.

mod common;

use common::server::ServerProc;

#[test]
fn unknown_paths_are_json_404s_and_unknown_grpc_methods_stay_grpc() {
    let dir = common::tmp("routes");
    // A web folder of our own, so the test does not depend on the shipped pages.
    let web = dir.join("web");
    std::fs::create_dir_all(web.join("static/sub")).unwrap();
    std::fs::write(web.join("index.html"), "<!doctype html><title>t</title>").unwrap();
    std::fs::write(web.join("static/app.js"), "export {};").unwrap();
    std::fs::write(dir.join("secret.txt"), "no").unwrap();
    let server = ServerProc::start(&dir.join("data"), &["--web-dir", web.to_str().unwrap()]);
    for (path, kind) in [("/", "text/html"), ("/static/app.js", "text/javascript")] {
        let (status, head, _) = server.call("GET", path, None, None);
        assert_eq!(status, 200, "{path}: {head}");
        let head = head.to_ascii_lowercase();
        assert!(head.contains(&format!("content-type: {kind}")), "{path}: {head}");
        assert!(head.contains("x-content-type-options: nosniff"), "{path}: {head}");
        // Every file may not be framed; the page itself runs its own origin's scripts only.
        assert!(
            head.contains("content-security-policy: ") && head.contains("frame-ancestors 'none'"),
            "{path}: {head}"
        );
        if path == "/" {
            assert!(
                head.contains("script-src 'self'") && head.contains("object-src 'none'"),
                "{head}"
            );
        }
    }
    let long_name = format!("/static/{}", "a".repeat(300));
    let long_vendor = format!("/vendor/three/{}", "b".repeat(300));
    for (method, path) in [
        ("GET", "/no-such-page"),
        ("GET", "/static/missing.js"),
        // Longer than a file name can be (ENAMETOOLONG answered 500, with an ERROR line each).
        ("GET", long_name.as_str()),
        ("GET", long_vendor.as_str()),
        ("GET", "/static/app.js/below-a-file"),
        // A folder, and a name no file can have: not files (they answered 500).
        ("GET", "/static/sub"),
        ("GET", "/static/a%00b"),
        ("GET", "/static/../../secret.txt"),
        ("GET", "/vendor/three/build/three.module.js"),
        ("GET", "/api/v1/nothing"),
        ("POST", "/api/v2/teams"),
    ] {
        let (status, head, body) = server.call(method, path, None, None);
        assert_eq!(status, 404, "{method} {path}: {head}");
        assert!(
            head.to_ascii_lowercase().contains("content-type: application/json"),
            "{method} {path}: {head}"
        );
        assert!(
            !head.to_ascii_lowercase().contains("grpc-status"),
            "{method} {path}: {head}"
        );
        assert_eq!(body["error"]["code"], "not_found", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        let decoded = path.replace("%00", "\0");
        assert!(
            message.contains(&decoded)
                || message.contains("not installed on this server")
                || message.contains("no asset"),
            "{body}"
        );
        assert!(!message.contains("no\n"), "{body}");
        // No server path: a missing asset is named by its URL.
        assert!(!message.contains(dir.to_str().unwrap()), "{body}");
    }
    let (status, _, body) = server.call("GET", "/api/v1/health", None, None);
    assert_eq!(status, 200, "{body}");
    // A known path with a method it does not take: a JSON error too (no body before), with Allow.
    let (status, head, body) = server.call("PUT", "/api/v1/teams", None, None);
    assert_eq!(status, 405, "{head}");
    assert_eq!(body["error"]["code"], "method_not_allowed", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("/api/v1/teams does not take PUT; it takes "),
        "{message}"
    );
    assert!(head.to_ascii_lowercase().contains("allow: "), "{head}");

    // A gRPC client calling a method that does not exist still gets a gRPC answer.
    let out = std::process::Command::new(std::env::var("ARENA_PYTHON").unwrap_or_else(|_| "python3".into()))
        .args([
            "-c",
            "import grpc,sys\n\
             ch = grpc.insecure_channel(sys.argv[1])\n\
             f = ch.unary_unary('/arena.v1.Nope/Missing', request_serializer=lambda x: x, response_deserializer=lambda x: x)\n\
             try:\n    f(b'', timeout=10)\nexcept grpc.RpcError as e:\n    print(e.code().name)\n",
            &server.addr.to_string(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if String::from_utf8_lossy(&out.stderr).contains("No module named 'grpc'") {
        eprintln!("skipped the gRPC half: no grpcio in ARENA_PYTHON");
        return;
    }
    assert_eq!(
        stdout.trim(),
        "UNIMPLEMENTED",
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_second_server_on_the_same_data_directory_is_refused() {
    let dir = common::tmp("two-servers");
    let first = ServerProc::start(&dir, &[]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_arena"))
        .args(["serve", "--data-dir", dir.to_str().unwrap(), "--bind", "127.0.0.1:0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("is in use by another arena server"), "{stderr}");
    // The first one is untouched and still serves.
    let (status, _, _) = first.call("GET", "/api/v1/health", None, None);
    assert_eq!(status, 200);
    drop(first);
    // Once it is gone (even killed), the folder can be served again.
    let again = ServerProc::start(&dir, &[]);
    assert_eq!(again.call("GET", "/api/v1/health", None, None).0, 200);
}

/// A server without an admin token says so to whoever calls an admin endpoint (the operator
/// walkthrough: "401 unknown token" sent them retyping a token the server has none of).
#[test]
fn admin_endpoints_without_an_admin_token_say_they_are_disabled() {
    let dir = common::tmp("no-admin");
    let server = ServerProc::start(&dir, &["--admin-token", ""]);
    let (status, body) = server.get("/api/v1/teams", Some("whatever-was-typed"));
    assert_eq!(status, 403, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("has no admin token") && message.contains("disabled"),
        "{body}"
    );
    // The health check, public, refuses a token it does not know as every public endpoint does.
    let (status, body) = server.get("/api/v1/health", Some("whatever-was-typed"));
    assert_eq!(status, 401, "{body}");
    assert_eq!(server.get("/api/v1/health", None).0, 200);
}

#[test]
fn names_are_checked_where_they_come_in() {
    use common::server::ADMIN;
    let dir = common::tmp("names");
    let server = ServerProc::start(&dir, &[]);
    let refused = |(status, body): (u16, serde_json::Value), part: &str| {
        assert_eq!(status, 400, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(part), "{message:?} lacks {part:?}");
    };
    let team = |name: &str| {
        server.post(
            "/api/v1/teams",
            Some(ADMIN),
            &serde_json::json!({ "name": name }).to_string(),
        )
    };
    // A body from a client without a valid token is not read: 401, not the 413 of a body over
    // the limit (the server held up to 2 MiB of each such request first).
    // Sent as a client would that writes on while the server has answered and closed (a plain
    // `write_all` of the whole body could then fail with a broken pipe, on a loaded machine).
    let post_big = |token: Option<&str>| {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(server.addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let head = format!(
            "POST /api/v1/teams HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{{\"name\": \"",
            (3 << 20) + 12
        );
        let _ = s.write_all(head.as_bytes());
        let chunk = vec![b'x'; 64 << 10];
        for _ in 0..(3 << 20) / chunk.len() {
            if s.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = s.write_all(b"\"}");
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        let text = String::from_utf8_lossy(&raw).into_owned();
        let status: u16 = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .and_then(|(_, b)| serde_json::from_str(b).ok())
            .unwrap_or(serde_json::Value::Null);
        (status, body)
    };
    for token in [None, Some("not-a-token")] {
        let (status, body) = post_big(token);
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (401, Some("unauthorized")),
            "{token:?}: {body}"
        );
    }
    let (status, body) = post_big(Some(ADMIN));
    assert_eq!(status, 413, "{body}");
    // Characters, not bytes: 64 two-byte characters fit, 65 do not.
    refused(team(&"é".repeat(65)), "name: expected at most 64 characters, got 65");
    let (status, created) = team(&"é".repeat(64));
    assert_eq!(status, 201, "{created}");
    // A NUL (PostgreSQL refuses it: a 500 before) and other control characters.
    refused(
        team("x\u{0}y"),
        "name: control characters are not allowed (found U+0000)",
    );
    refused(team("line1\nline2"), "found U+000A");
    // A right-to-left override makes "gamma \u{202E}evil" read "gamma live".
    refused(
        team("gamma \u{202E}evil\u{202C}"),
        "name: bidirectional formatting characters are not allowed (found U+202E)",
    );
    refused(team("   "), "name: expected 1-64 characters of text, got nothing");
    // Digits alone read as a team id in `arena admin` and in paths.
    refused(team("2"), "reads as a team id");
    let (id, token) = (
        created["team"]["id"].as_i64().unwrap(),
        created["token"].as_str().unwrap(),
    );
    let label = |label: &str| {
        server.post(
            &format!("/api/v1/teams/{id}/tokens"),
            Some(ADMIN),
            &serde_json::json!({ "label": label }).to_string(),
        )
    };
    assert_eq!(label(&"é".repeat(33)).0, 201);
    refused(label("a\u{7}b"), "label: control characters");
    let member = serde_json::json!({"name": "x\u{0}", "email": "a@b.org"}).to_string();
    refused(
        server.post(&format!("/api/v1/teams/{id}/members"), Some(ADMIN), &member),
        "name: control characters",
    );
    let challenge = |title: &str, description: &str| {
        let body = serde_json::json!({"id": "cup", "title": title, "description": description});
        server.post("/api/v1/challenges", Some(ADMIN), &body.to_string())
    };
    refused(challenge("a\u{0}b", ""), "title: control characters");
    refused(challenge("Cup", "a\u{0}b"), "description: control characters");
    assert_eq!(challenge("Cup", "Two lines,\nand a tab\there.").0, 201);
    // Agent names: over REST, in a hosted upload's query and in `connect`.
    let submission = |agent: &str| {
        let body = serde_json::json!({"benchmark": "g1-smoke", "agent_name": agent});
        server.post("/api/v1/submissions", Some(token), &body.to_string())
    };
    refused(
        submission(&"a".repeat(129)),
        "agent_name: expected at most 128 characters, got 129",
    );
    refused(submission("bell\u{7}"), "agent_name: control characters");
    assert_eq!(submission("  my agent  ").0, 201);
    let (status, _, body) = server.call(
        "POST",
        "/api/v1/submissions/hosted?benchmark=g1-smoke&file_name=pol%00icy.onnx",
        Some(token),
        Some("not an onnx file"),
    );
    refused((status, body), "file_name: control characters");
    let (_, listed) = server.get("/api/v1/submissions", Some(token));
    let names: Vec<&str> = listed["submissions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["agent_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["my agent"], "{listed}");
}

#[test]
fn database_urls_without_a_database_fail_at_once_with_a_clear_error() {
    let dir = common::tmp("bad-db");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_arena"))
        .args([
            "serve",
            "--data-dir",
            dir.to_str().unwrap(),
            "--bind",
            "127.0.0.1:0",
            "--database-url",
            "sqlite://",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("sqlite://") && stderr.contains("no file path"),
        "{stderr}"
    );
    assert!(!stderr.contains("no such table"), "{stderr}");

    // A SQLite file whose folder cannot exist (a file stands in the way): a clear error at once.
    // A folder that is merely missing is created.
    std::fs::write(dir.join("a-file"), "").unwrap();
    let url = format!("sqlite://{}", dir.join("a-file/sub/x.db").display());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_arena"))
        .args([
            "serve",
            "--data-dir",
            dir.join("d").to_str().unwrap(),
            "--bind",
            "127.0.0.1:0",
        ])
        .args(["--database-url", &url])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("creating the directory")
            && stderr.contains("a-file/sub")
            && stderr.contains("Not a directory"),
        "{stderr}"
    );
}

/// Issue 30 §7: a second server on another data directory but the first one's SQLite database
/// started, re-queued the live server's running episodes and ran them twice. The lock covers the
/// database file too (for PostgreSQL, replicas share the database under leases).
#[test]
fn a_second_server_on_the_same_sqlite_database_is_refused() {
    let dir = common::tmp("two-servers-one-db");
    let first = ServerProc::start(&dir.join("first"), &[]);
    let url = format!("sqlite://{}", dir.join("first").join("arena.db").display());
    let other = dir.join("other");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_arena"))
        .args(["serve", "--data-dir", other.to_str().unwrap(), "--bind", "127.0.0.1:0"])
        .args(["--database-url", &url])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("the SQLite database") && stderr.contains("is in use by another arena server"),
        "{stderr}"
    );
    assert!(stderr.contains("PostgreSQL"), "says what to do instead: {stderr}");
    // Issue 39: the lock follows the file, not the path's spelling: a symbolic link and a hard
    // link to the first server's database are refused too.
    let links = dir.join("links");
    std::fs::create_dir_all(&links).unwrap();
    std::os::unix::fs::symlink(dir.join("first").join("arena.db"), links.join("symlink.db")).unwrap();
    std::fs::hard_link(dir.join("first").join("arena.db"), links.join("hardlink.db")).unwrap();
    for (name, how) in [("symlink.db", "pid"), ("hardlink.db", "hard link")] {
        let url = format!("sqlite://{}", links.join(name).display());
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_arena"))
            .args([
                "serve",
                "--data-dir",
                dir.join(format!("other-{name}")).to_str().unwrap(),
            ])
            .args(["--bind", "127.0.0.1:0", "--database-url", &url])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: {stderr}");
        assert!(
            stderr.contains("is in use by another arena server") && stderr.contains(how),
            "{name}: {stderr}"
        );
    }
    std::fs::remove_file(links.join("hardlink.db")).unwrap();
    assert_eq!(first.call("GET", "/api/v1/health", None, None).0, 200);
    drop(first);
    // Once the first is gone, the database can be served from the other folder.
    let again = ServerProc::start(&other, &["--database-url", &url]);
    assert_eq!(again.call("GET", "/api/v1/health", None, None).0, 200);
}

/// A replica started beside its PostgreSQL database, which does not answer yet, waits for it
/// (a refused connection is tried again for 30 s, as documented) rather than stopping at once:
/// the replica lock's own connection was made first, without a retry, and the server exited
/// with "taking the lock of replica_id …: Connection refused" (a replicas walkthrough).
#[test]
fn a_server_waits_for_a_postgresql_database_that_refuses_at_first() {
    use std::io::BufRead;
    let dir = common::tmp("pg-not-yet");
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_arena"))
        .args(["serve", "--data-dir", dir.to_str().unwrap(), "--bind", "127.0.0.1:0"])
        .args(["--database-url", &format!("postgres://postgres@127.0.0.1:{port}/arena")])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let mut seen = Vec::new();
    let waiting = loop {
        match lines.recv_timeout(std::time::Duration::from_secs(20)) {
            Ok(line) if line.contains("waiting up to") => break true,
            Ok(line) => seen.push(line),
            Err(_) => break false,
        }
    };
    let exited = child.try_wait().unwrap();
    child.kill().ok();
    child.wait().ok();
    assert!(waiting, "no wait for the database: {seen:?}");
    assert!(exited.is_none(), "the server stopped at once: {seen:?}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `GET /api/v1/submissions` in pages: `limit` and the `next` cursor walk the listing in its
/// order, each submission once; a bad `limit` or an unknown cursor is a 400 that says so. (The
/// listing of an organiser with hundreds of submissions was computed whole at every call.)
#[test]
fn the_submissions_listing_comes_in_pages() {
    let dir = common::tmp("routes-pages");
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("paged");
    // In two phases: each page's quotas list both (a page of one listed its own phase's).
    let admin = common::server::ADMIN;
    let (status, v) = server.post("/api/v1/challenges", Some(admin), r#"{"id": "cup", "title": "Cup"}"#);
    assert_eq!(status, 201, "{v}");
    let now = arena_server::storage::now_ms();
    for phase in ["first", "second"] {
        let body = serde_json::json!({
            "id": phase, "benchmark": "g1-smoke",
            "starts_at": arena_server::access::rfc3339(now - 3_600_000),
            "ends_at": arena_server::access::rfc3339(now + 3_600_000),
        });
        let (status, v) = server.post("/api/v1/challenges/cup/phases", Some(admin), &body.to_string());
        assert_eq!(status, 201, "{v}");
    }
    for i in 0..5 {
        let phase = if i < 3 { "first" } else { "second" };
        let body = serde_json::json!({"phase": phase, "agent_name": format!("agent-{i}")});
        assert_eq!(
            server.post("/api/v1/submissions", Some(&token), &body.to_string()).0,
            201
        );
    }
    let (_, whole) = server.get("/api/v1/submissions", Some(&token));
    let all: Vec<String> = whole["submissions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!((all.len(), &whole["next"]), (5, &serde_json::Value::Null), "{whole}");
    let quota_phases: Vec<&str> = whole["quotas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["phase"].as_str().unwrap())
        .collect();
    assert_eq!(quota_phases, ["first", "second"], "{whole}");
    let mut paged = Vec::new();
    let mut path = "/api/v1/submissions?limit=2".to_string();
    loop {
        let (status, page) = server.get(&path, Some(&token));
        assert_eq!(status, 200, "{page}");
        let ids = page["submissions"].as_array().unwrap();
        assert!(ids.len() <= 2, "{page}");
        paged.extend(ids.iter().map(|s| s["id"].as_str().unwrap().to_string()));
        assert_eq!(page["quotas"], whole["quotas"], "the quotas count every submission");
        match page["next"].as_str() {
            Some(next) => path = format!("/api/v1/submissions?limit=2&after={next}"),
            None => break,
        }
    }
    assert_eq!(paged, all);
    for (query, words) in [
        ("limit=0", "limit must be a whole number from 1 to 1000"),
        ("limit=1001", "limit must be a whole number from 1 to 1000"),
        ("limit=two", "got \"two\""),
        ("after=sub-nope", "no submission \"sub-nope\" in this listing"),
    ] {
        let (status, v) = server.get(&format!("/api/v1/submissions?{query}"), Some(&token));
        assert_eq!(status, 400, "{query}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap_or_default().contains(words),
            "{query}: {v}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
