//! docs/protocol.md is enough to write a client: the complete Python client printed in its §13
//! is extracted from the page and run, unchanged, against a real server; it must complete a
//! submission. The page's copy of the schema must list the same messages and fields as
//! sdk/proto/arena.proto.

mod common;

use common::server::{ADMIN, ServerProc};
use common::tmp;
use std::path::Path;
use std::process::Command;

fn page() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/protocol.md")).unwrap()
}

/// The body of the first fenced block of `lang` after `heading`.
fn block_after(text: &str, heading: &str, lang: &str) -> String {
    let from = text
        .find(heading)
        .unwrap_or_else(|| panic!("docs/protocol.md lacks {heading:?}"));
    let rest = &text[from..];
    let open = format!("```{lang}\n");
    let start = rest
        .find(&open)
        .unwrap_or_else(|| panic!("no ```{lang} block after {heading:?}"))
        + open.len();
    let end = rest[start..].find("\n```").unwrap() + start;
    rest[start..end].to_string()
}

#[test]
fn the_documented_python_client_completes_a_submission() {
    let Ok(python) = std::env::var("ARENA_PYTHON") else {
        eprintln!("skipped: ARENA_PYTHON is not set (run through `make test`, which installs .venv)");
        return;
    };
    let dir = tmp("protocol-doc");
    let script = dir.join("client.py");
    std::fs::write(
        &script,
        block_after(&page(), "## 13. A complete client in Python", "python"),
    )
    .unwrap();
    let server = ServerProc::start(&dir, &[]);
    let token = server.team("from-the-docs");
    let out = Command::new(python)
        .arg(&script)
        .args([server.ws_url().as_str(), token.as_str(), "g1-smoke"])
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("end: submission_complete COMPLETED"), "{stdout}");
    let (_, list) = server.get("/api/v1/submissions", Some(ADMIN));
    let subs = list["submissions"].as_array().unwrap();
    assert_eq!(subs.len(), 1);
    assert_eq!(subs[0]["status"], "COMPLETED");
    let id = subs[0]["id"].as_str().unwrap();
    let (_, results) = server.get(&format!("/api/v1/submissions/{id}/results"), Some(ADMIN));
    let episodes = results["episodes"].as_array().unwrap();
    assert_eq!(episodes.len(), 6);
    assert!(episodes.iter().all(|e| e["status"] == "COMPLETED"), "{results}");
    drop(server);
    std::fs::remove_dir_all(&dir).ok();
}

/// Declarations without comments and blank lines.
fn declarations(proto: &str) -> Vec<String> {
    proto
        .lines()
        .map(|l| l.split("//").next().unwrap().trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn the_documented_schema_matches_arena_proto() {
    let doc = block_after(&page(), "## Appendix: arena.proto", "proto");
    let proto =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk/proto/arena.proto")).unwrap();
    assert_eq!(
        declarations(&doc),
        declarations(&proto),
        "docs/protocol.md's appendix is stale"
    );
}
