//! `wick ps` and `wick stop`: what a running `wick serve` has loaded, and unloading a model,
//! over its HTTP API (`GET /v1/models`, `POST /models/unload`).

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Args;
use reqwest::blocking::{Client, RequestBuilder};
use serde_json::Value;

/// Where the server is.
#[derive(Debug, Args)]
pub(crate) struct ServerArgs {
    /// The server's URL.
    #[arg(
        long,
        env = "WICK_URL",
        default_value = "http://127.0.0.1:8080",
        value_name = "URL"
    )]
    url: String,
    /// The server's API key, sent as a bearer token.
    #[arg(long, value_name = "KEY", env = "WICK_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
}

/// Arguments of `wick ps`.
#[derive(Debug, Args)]
pub(crate) struct PsArgs {
    /// Every served model, loaded or not, with its state.
    #[arg(long, short)]
    all: bool,
    #[command(flatten)]
    server: ServerArgs,
}

/// Arguments of `wick stop`.
#[derive(Debug, Args)]
pub(crate) struct StopArgs {
    /// The model to unload (a name or alias the server knows).
    #[arg(value_name = "NAME")]
    model: String,
    #[command(flatten)]
    server: ServerArgs,
}

impl ServerArgs {
    fn client() -> Result<Client> {
        Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            .build()
            .context("starting the HTTP client")
    }

    fn url(&self, path: &str) -> String {
        let base = self.url.trim_end_matches('/');
        format!("{}{path}", base.strip_suffix("/v1").unwrap_or(base))
    }

    fn send(&self, request: RequestBuilder) -> Result<Value> {
        let request = match &self.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        };
        let response = request.send().with_context(|| {
            format!(
                "cannot reach a wick server at {} (start one with `wick serve`, or give --url)",
                self.url
            )
        })?;
        let status = response.status();
        let body: Value = response.json().unwrap_or(Value::Null);
        if !status.is_success() {
            let message = body["error"]["message"]
                .as_str()
                .or_else(|| body["error"].as_str())
                .map_or_else(|| body.to_string(), str::to_owned);
            bail!("the server answered {status}: {message}");
        }
        Ok(body)
    }
}

/// `wick ps`.
pub(crate) fn ps(args: &PsArgs) -> Result<()> {
    let client = ServerArgs::client()?;
    let body = args
        .server
        .send(client.get(args.server.url("/v1/models")))?;
    let models = body["data"].as_array().cloned().unwrap_or_default();
    print!("{}", table(&models, args.all, SystemTime::now()));
    Ok(())
}

/// `wick stop NAME`.
pub(crate) fn stop(args: &StopArgs) -> Result<()> {
    let client = ServerArgs::client()?;
    let body = serde_json::json!({ "model": args.model });
    args.server
        .send(client.post(args.server.url("/models/unload")).json(&body))?;
    println!("unloaded {}", args.model);
    Ok(())
}

/// The table `wick ps` prints: name, state, memory estimate and when each model unloads.
fn table(models: &[Value], all: bool, now: SystemTime) -> String {
    let rows: Vec<[String; 4]> = models
        .iter()
        .filter(|m| all || m["status"]["value"] == "loaded")
        .map(|m| {
            let state = m["status"]["value"].as_str().unwrap_or("?").to_owned();
            let size = m["size"]
                .as_u64()
                .map_or_else(|| "-".to_owned(), human_size);
            let until = if m["status"]["value"] != "loaded" {
                "-".to_owned()
            } else if m["pinned"] == true {
                "Forever (pinned)".to_owned()
            } else {
                match m["expires_at"].as_u64() {
                    None => "Forever".to_owned(),
                    Some(at) => until(UNIX_EPOCH + Duration::from_secs(at), now),
                }
            };
            [
                m["id"].as_str().unwrap_or("?").to_owned(),
                state,
                size,
                until,
            ]
        })
        .collect();
    let header = ["NAME", "STATE", "SIZE", "UNTIL"].map(str::to_owned);
    let mut out = crate::models::aligned(&[vec![header], rows].concat(), "   ");
    for m in models.iter().filter(|_| all) {
        if let Some(reason) = m["status"]["reason"].as_str() {
            let id = m["id"].as_str().unwrap_or("?");
            let _ = writeln!(out, "{id} failed to load: {reason}");
        }
    }
    out
}

/// `4 minutes from now`, `30 seconds from now`, `now`.
fn until(at: SystemTime, now: SystemTime) -> String {
    let Ok(left) = at.duration_since(now) else {
        return "now".to_owned();
    };
    let secs = left.as_secs();
    let (n, unit) = match secs {
        0 => return "now".to_owned(),
        s if s < 120 => (s, "second"),
        s if s < 7200 => (s / 60, "minute"),
        s if s < 2 * 86_400 => (s / 3600, "hour"),
        s => (s / 86_400, "day"),
    };
    format!("{n} {unit}{} from now", if n == 1 { "" } else { "s" })
}

/// `144 MB`, `1.2 GB` (as `ollama ps` shows sizes).
fn human_size(bytes: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let x = bytes as f64;
    if x >= 1e9 {
        format!("{:.1} GB", x / 1e9)
    } else {
        format!("{:.0} MB", (x / 1e6).max(1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_table_shows_loaded_models_and_when_they_unload() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let models = [
            json!({"id": "a", "status": {"value": "loaded"}, "size": 616_670_272,
                   "expires_at": 1_000_240, "pinned": false}),
            json!({"id": "b", "status": {"value": "unloaded"}, "size": 2_000_000_000u64}),
            json!({"id": "pinned-one", "status": {"value": "loaded"}, "pinned": true,
                   "expires_at": null}),
            json!({"id": "c", "status": {"value": "failed", "reason": "bad file"}}),
        ];
        let loaded = table(&models, false, now);
        assert_eq!(
            loaded,
            "NAME         STATE    SIZE     UNTIL\n\
             a            loaded   617 MB   4 minutes from now\n\
             pinned-one   loaded   -        Forever (pinned)\n"
        );
        let all = table(&models, true, now);
        assert!(
            all.contains("\nb            unloaded   2.0 GB   -\n"),
            "{all}"
        );
        assert!(all.ends_with("\nc failed to load: bad file\n"), "{all}");
    }

    #[test]
    fn times_left_read_as_people_say_them() {
        let now = UNIX_EPOCH + Duration::from_secs(100);
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(100 + s);
        assert_eq!(until(at(0), now), "now");
        assert_eq!(until(at(1), now), "1 second from now");
        assert_eq!(until(at(300), now), "5 minutes from now");
        assert_eq!(until(at(3 * 3600), now), "3 hours from now");
        assert_eq!(until(UNIX_EPOCH, now), "now");
    }
}
