//! CORS, answered as llama-server answers it when `--cors-origin` is given: the request's
//! `Origin` reflected when it is allowed, credentials allowed, the methods named, and every
//! preflight answered 200 (without `Access-Control-Allow-Origin` for an origin not allowed).
//!
//! One difference, on purpose: `Access-Control-Allow-Headers` mirrors the headers the
//! preflight asks for instead of llama-server's `*`, because a `*` never covers
//! `Authorization` (the Fetch standard), so a browser page could not send the API key.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The methods a preflight is told, as llama-server names them.
const METHODS: &str = "GET, POST, DELETE, OPTIONS";

/// Which origins may call the API from a browser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cors {
    /// `*`: any origin.
    Any,
    /// `localhost`: pages served from `localhost`, `127.0.0.1` or `[::1]` (any port).
    Localhost,
    /// A comma-separated list of origins (`https://app.example`), matched exactly.
    List(Vec<String>),
}

impl Cors {
    /// The `--cors-origin` value: `*`, `localhost`, or origins separated by commas.
    pub(crate) fn parse(spec: &str) -> Cors {
        match spec.trim() {
            "*" => Cors::Any,
            "localhost" => Cors::Localhost,
            list => Cors::List(
                list.split(',')
                    .map(|o| o.trim().trim_end_matches('/').to_owned())
                    .filter(|o| !o.is_empty())
                    .collect(),
            ),
        }
    }

    fn allows(&self, origin: &str) -> bool {
        match self {
            Cors::Any => true,
            Cors::Localhost => is_localhost(origin),
            Cors::List(list) => list.iter().any(|o| o.eq_ignore_ascii_case(origin)),
        }
    }
}

/// Whether `origin` (`scheme://host[:port]`) names a loopback host.
fn is_localhost(origin: &str) -> bool {
    let Some((_, rest)) = origin.split_once("://") else {
        return false;
    };
    let (host, port) = match rest.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, port)) => (host, port),
            None => return false,
        },
        None => rest.split_at(rest.find(':').unwrap_or(rest.len())),
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    port_ok && matches!(host, "localhost" | "127.0.0.1" | "::1")
}

/// Answers preflights and adds the CORS headers to every other answer.
pub(crate) async fn layer(State(cors): State<Arc<Cors>>, req: Request, next: Next) -> Response {
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .filter(|o| o.to_str().is_ok_and(|o| cors.allows(o)))
        .cloned();
    let preflight = req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if preflight {
        let mut response = StatusCode::OK.into_response();
        let headers = response.headers_mut();
        allow(headers, origin);
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(METHODS),
        );
        if let Some(asked) = req.headers().get(header::ACCESS_CONTROL_REQUEST_HEADERS) {
            headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked.clone());
        }
        headers.append(
            header::VARY,
            HeaderValue::from_static("Access-Control-Request-Headers"),
        );
        return response;
    }
    let mut response = next.run(req).await;
    let headers = response.headers_mut();
    allow(headers, origin);
    headers.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("retry-after"),
    );
    response
}

/// The allowed origin, reflected, with credentials.
fn allow(headers: &mut HeaderMap, origin: Option<HeaderValue>) {
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
    if let Some(origin) = origin {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn localhost_origins_are_loopback_hosts_with_any_port() {
        for ok in [
            "http://localhost",
            "http://localhost:8080",
            "http://127.0.0.1",
            "https://127.0.0.1:3000",
            "http://[::1]",
            "http://[::1]:3000",
        ] {
            assert!(is_localhost(ok), "{ok}");
        }
        for bad in [
            "http://web.mydomain.fr",
            "http://notlocalhost",
            "http://localhost.evil.com",
            "http://localhost:80x",
            "http://localhost:",
            "localhost",
            "http://[::1",
        ] {
            assert!(!is_localhost(bad), "{bad}");
        }
    }

    #[test]
    fn the_spec_is_any_localhost_or_a_list() {
        assert_eq!(Cors::parse("*"), Cors::Any);
        assert_eq!(Cors::parse("localhost"), Cors::Localhost);
        let list = Cors::parse("https://a.example, https://b.example/");
        assert!(list.allows("https://b.example"));
        assert!(!list.allows("https://c.example"));
    }
}
