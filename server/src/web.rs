//! The web pages: static files from the web folder (`config.web_dir`), served at `/` on the API's
//! port. The pages are a small front end (`web/index.html`, `web/static/*.js`) that reads the REST
//! API; three.js comes from the npm registry into `web/node_modules/three` (installed by `make`)
//! and is served from here too, so a page never asks another host for anything.

use crate::access::AccessError;
use crate::api::ApiError;
use crate::state::AppState;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::path::{Component, PathBuf};
use std::sync::Arc;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(index))
        .route("/index.html", get(index))
        .route("/static/{*path}", get(static_file))
        .route("/vendor/three/{*path}", get(three_file))
}

async fn index(State(state): State<Arc<AppState>>) -> Response {
    let web = state.config.web_dir();
    serve(web.join("index.html"), "/", &web, "the web pages").await
}

async fn static_file(State(state): State<Arc<AppState>>, Path(path): Path<String>) -> Response {
    let root = state.config.web_dir().join("static");
    match safe_join(&root, &path) {
        Some(file) => serve(file, &format!("/static/{path}"), &root, "the web pages").await,
        None => not_found(format!("no asset /static/{path}")),
    }
}

async fn three_file(State(state): State<Arc<AppState>>, Path(path): Path<String>) -> Response {
    let root = state.config.web_dir().join("node_modules/three");
    match safe_join(&root, &path) {
        Some(file) => serve(file, &format!("/vendor/three/{path}"), &root, "three.js").await,
        None => not_found(format!("no file /vendor/three/{path}")),
    }
}

/// `base/rel` when `rel` only descends (no `..`, no root, no prefix).
fn safe_join(base: &std::path::Path, rel: &str) -> Option<PathBuf> {
    let rel = std::path::Path::new(rel);
    rel.components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then(|| base.join(rel))
}

fn not_found(message: String) -> Response {
    ApiError(AccessError::not_found(message)).into_response()
}

/// What a page may load and run: its own origin's scripts, styles, images and API only, the
/// import map of `index.html` by its hash (an inline script; nothing else inline runs), no
/// plug-ins, no `<base>`, and no framing by another site (the pages act with a token). Should
/// text ever reach a page as markup, it could neither run a script nor send data elsewhere.
/// Other files get the framing rule only.
fn content_security_policy(content_type: &str, body: &[u8]) -> String {
    if !content_type.starts_with("text/html") {
        return "frame-ancestors 'none'".into();
    }
    let hashes: String = inline_scripts(&String::from_utf8_lossy(body))
        .map(|script| {
            use base64::Engine as _;
            use sha2::Digest;
            // The browser hashes the text as its parser reads it: line breaks as \n (a file
            // checked out with CRLF endings kept its pages blank).
            let text = script.replace("\r\n", "\n").replace('\r', "\n");
            let digest = sha2::Sha256::digest(text.as_bytes());
            format!(" 'sha256-{}'", base64::engine::general_purpose::STANDARD.encode(digest))
        })
        .collect();
    format!(
        "default-src 'self'; script-src 'self'{hashes}; style-src 'self'; img-src 'self' data: blob:; \
         connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )
}

/// The text of each inline `<script>` (one with no `src`) of an HTML page, as the browser hashes
/// it: everything between the opening tag's `>` and `</script>`.
fn inline_scripts(html: &str) -> impl Iterator<Item = &str> {
    html.split("<script").skip(1).filter_map(|rest| {
        let (tag, after) = rest.split_once('>')?;
        let (body, _) = after.split_once("</script>")?;
        (!tag.contains("src=")).then_some(body)
    })
}

fn content_type(path: &std::path::Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        _ => "application/octet-stream",
    }
}

/// Serves `file`, asked for as `url`. Answers name the URL, never a server path: a missing file
/// is "no file URL", or, when its whole `root` folder is missing, "`what`: not installed" (the
/// log says where it was looked for).
async fn serve(file: PathBuf, url: &str, root: &std::path::Path, what: &str) -> Response {
    match tokio::fs::read(&file).await {
        Ok(bytes) => {
            let policy = content_security_policy(content_type(&file), &bytes);
            (
                [
                    (header::CONTENT_TYPE, content_type(&file).to_string()),
                    (header::CACHE_CONTROL, "no-cache".to_string()),
                    // The type above is the one to use (an upload never lands here, but a file
                    // the browser sniffed as HTML would run as this origin's page).
                    (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_string()),
                    (header::CONTENT_SECURITY_POLICY, policy),
                ],
                bytes,
            )
                .into_response()
        }
        // A folder, or a name no file can have (a NUL, a name longer than the file system
        // takes): there is no such file to serve.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::IsADirectory
                    | std::io::ErrorKind::InvalidInput
                    | std::io::ErrorKind::InvalidFilename
                    | std::io::ErrorKind::NotADirectory
            ) || (e.kind() != std::io::ErrorKind::NotFound && file.is_dir()) =>
        {
            not_found(format!("no file {url}"))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if root.is_dir() {
                not_found(format!("no file {url}"))
            } else {
                tracing::warn!(
                    "{what}: not installed, {} is missing (run `make`, which runs `npm ci` in web/)",
                    root.display()
                );
                not_found(format!(
                    "{what}: not installed on this server (the organisers have the details in the server log)"
                ))
            }
        }
        Err(e) => {
            tracing::error!("reading {}: {e}", file.display());
            ApiError(AccessError::internal(format!(
                "cannot read {url} (details in the server log)"
            )))
            .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_may_run_its_own_scripts_and_its_inline_ones_by_hash_only() {
        let page = "<head><script type=\"importmap\"></script>\n<script type=\"module\" src=\"/static/app.js\"></script></head>";
        let policy = content_security_policy("text/html; charset=utf-8", page.as_bytes());
        // SHA-256 of the empty text, as CSP writes it: the import map's body, hashed exactly.
        assert!(
            policy.contains("script-src 'self' 'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=';"),
            "{policy}"
        );
        assert!(policy.contains("frame-ancestors 'none'") && policy.contains("connect-src 'self'"));
        assert!(!policy.contains("unsafe"), "{policy}");
        // A script file, a style sheet: the framing rule only.
        assert_eq!(
            content_security_policy("text/javascript; charset=utf-8", b"x"),
            "frame-ancestors 'none'"
        );
        // CRLF line endings hash as the browser reads them (\n).
        let lf = content_security_policy("text/html", b"<script type=\"importmap\">{\n}</script>");
        let crlf = content_security_policy("text/html", b"<script type=\"importmap\">{\r\n}</script>");
        assert_eq!(lf, crlf);
    }

    #[test]
    fn the_pages_import_map_is_the_one_inline_script_of_the_index() {
        let index = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../web/index.html")).unwrap();
        let scripts: Vec<&str> = inline_scripts(&index).collect();
        assert_eq!(scripts.len(), 1, "{scripts:?}");
        assert!(scripts[0].contains("\"imports\""), "{}", scripts[0]);
    }
}
