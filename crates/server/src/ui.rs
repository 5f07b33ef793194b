//! The chat page: `GET /` from a browser (a request that accepts HTML) and its files under
//! `/ui/`, embedded in the binary at build time from the repository's `ui/` directory (the
//! page's source and the Markdown renderer and sanitizer `scripts/build-ui` vendors from the
//! npm registry). Nothing is fetched at run time. Any other `GET /` gets Ollama's
//! `Ollama is running`, which its clients probe for.

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::AppState;

const INDEX: &str = include_str!("../../../ui/src/index.html");
const APP: &str = include_str!("../../../ui/src/app.js");
const STYLE: &str = include_str!("../../../ui/src/style.css");
const MARKED: &str = include_str!("../../../ui/vendor/marked.js");
const PURIFY: &str = include_str!("../../../ui/vendor/purify.js");
const ICON: &str = include_str!("../../../ui/src/favicon.svg");

/// Only the page's own files run, connect and style: a model answer that slipped past the
/// sanitizer still could not run a script, fetch an image (`data:` images only: the page's own
/// thumbnails, which reach no server) or send data anywhere.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                      connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
                      frame-ancestors 'none'";

/// `GET /`: the page for a browser when the page is on, else Ollama's probe answer.
pub(crate) async fn root(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let wants_html = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/html"));
    if state.config().ui && wants_html {
        file("text/html; charset=utf-8", INDEX)
    } else {
        crate::ollama::root().await.into_response()
    }
}

/// `GET /ui/{name}`: the page's scripts and style.
pub(crate) async fn asset(State(state): State<AppState>, Path(name): Path<String>) -> Response {
    let found = match name.as_str() {
        "app.js" => Some(("text/javascript; charset=utf-8", APP)),
        "marked.js" => Some(("text/javascript; charset=utf-8", MARKED)),
        "purify.js" => Some(("text/javascript; charset=utf-8", PURIFY)),
        "style.css" => Some(("text/css; charset=utf-8", STYLE)),
        "favicon.svg" => Some(("image/svg+xml", ICON)),
        _ => None,
    };
    match found.filter(|_| state.config().ui) {
        Some((kind, body)) => file(kind, body),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Whether `path` is one of the page's (served without the API key: the page asks for it).
pub(crate) fn is_page(path: &str) -> bool {
    path == "/" || path.starts_with("/ui/")
}

fn file(kind: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_its_own_files() {
        for file in [
            "/ui/style.css",
            "/ui/marked.js",
            "/ui/purify.js",
            "/ui/app.js",
            "/ui/favicon.svg",
        ] {
            assert!(INDEX.contains(file), "{file}");
            assert!(is_page(file));
        }
        assert!(
            !INDEX.contains("http://") && !INDEX.contains("https://"),
            "no CDN"
        );
        assert!(!APP.contains("innerHTML =") || APP.contains("DOMPurify.sanitize("));
        assert!(!is_page("/v1/models"));
    }
}
