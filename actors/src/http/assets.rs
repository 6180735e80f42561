//! The web UI's files (`frontend/dist`, built by `scripts/build-ui.sh`),
//! served from a directory so that rebuilding the UI needs no rebuild of
//! Kiln. Only the directory's own files are served: one path segment of
//! plain characters, never a subdirectory or a dot file.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use actix_web::http::header;
use actix_web::{HttpResponse, web};

/// Where the UI's files are, when set by [`set_ui_dir`].
static UI_DIR: OnceLock<PathBuf> = OnceLock::new();

/// The UI directory of a source checkout: `scripts/build-ui.sh` writes it.
const CHECKOUT_UI_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../frontend/dist");

/// Serves the UI from `dir` instead of the checkout's `frontend/dist`.
/// Call once, before the server starts; later calls are ignored (returns
/// false).
pub fn set_ui_dir(dir: PathBuf) -> bool {
    UI_DIR.set(dir).is_ok()
}

/// The directory the UI is served from.
pub fn ui_dir() -> &'static Path {
    UI_DIR.get_or_init(|| PathBuf::from(CHECKOUT_UI_DIR))
}

/// The UI's `index.html`, if the UI is built.
pub(crate) fn index_html() -> Option<Vec<u8>> {
    std::fs::read(ui_dir().join("index.html")).ok()
}

/// `GET /{file}`: a file of the UI directory.
pub(crate) async fn file(name: web::Path<String>) -> HttpResponse {
    let name = name.into_inner();
    let plain = !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    let Some(content_type) = plain.then(|| content_type(&name)).flatten() else {
        return not_found(&name);
    };
    match web::block(move || std::fs::read(ui_dir().join(&name))).await {
        Ok(Ok(body)) => HttpResponse::Ok()
            .content_type(content_type)
            // File names carry no hash: the browser revalidates each load.
            .insert_header((header::CACHE_CONTROL, "no-cache"))
            .body(body),
        _ => not_found(""),
    }
}

fn not_found(name: &str) -> HttpResponse {
    HttpResponse::NotFound()
        .content_type("text/plain; charset=utf-8")
        .body(format!("no such file: /{name}\n"))
}

/// Content type of the kinds of file the UI has; others are not served.
fn content_type(name: &str) -> Option<&'static str> {
    let ext = name.rsplit_once('.')?.1;
    Some(match ext {
        "html" => "text/html; charset=utf-8",
        "js" => "text/javascript; charset=utf-8",
        "wasm" => "application/wasm",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "json" => "application/json",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use actix_web::{App, test};

    use super::*;

    #[actix_rt::test]
    async fn serves_plain_files_with_their_type_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("app.wasm"), b"\0asm").unwrap();
        std::fs::write(dir.path().join("secret"), b"no").unwrap();
        assert!(set_ui_dir(dir.path().to_owned()));
        let app = test::init_service(App::new().route("/{file}", web::get().to(file))).await;
        let get = |uri: &'static str| test::TestRequest::get().uri(uri).to_request();
        let response = test::call_service(&app, get("/app.wasm")).await;
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers().get(header::CONTENT_TYPE).unwrap(),
            "application/wasm"
        );
        for uri in [
            "/secret",
            "/missing.js",
            "/..%2Fetc%2Fpasswd.js",
            "/.hidden.js",
        ] {
            assert_eq!(
                test::call_service(&app, get(uri)).await.status(),
                404,
                "{uri}"
            );
        }
    }
}
