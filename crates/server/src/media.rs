//! Images and sounds in requests, as each API sends them: data URLs (OpenAI's `image_url`,
//! Responses' `input_image`), plain base64 (Anthropic's `image` source, Ollama's `images`,
//! OpenAI's `input_audio`, llama-server's `multimodal_data`). Whether the model takes them is
//! the projector's call when the prompt is rendered; here only the wire form is checked.

use base64::Engine as _;
use serde_json::Value;
use wick::{Media, MediaKind};

use crate::error::ApiError;
use crate::state::MediaUrls;

/// The most bytes one image or sound may decode to.
pub(crate) const MAX_MEDIA_BYTES: usize = 20 << 20;

/// `data` (base64, standard alphabet, padding optional, whitespace ignored) as a medium of
/// `kind`, for the request field `param`.
pub(crate) fn from_base64(kind: MediaKind, data: &str, param: &str) -> Result<Media, ApiError> {
    let compact: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    if compact.is_empty() {
        return Err(ApiError::bad(
            param,
            format!("{param}: the {} is empty", kind.as_str()),
        ));
    }
    if compact.len() / 4 * 3 > MAX_MEDIA_BYTES + 3 {
        return Err(too_large(kind, param));
    }
    let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(compact.trim_end_matches('='))
        .map_err(|e| {
            ApiError::bad(
                param,
                format!("{param}: the {} is not valid base64 ({e})", kind.as_str()),
            )
        })?;
    if bytes.len() > MAX_MEDIA_BYTES {
        return Err(too_large(kind, param));
    }
    Ok(match kind {
        MediaKind::Image => Media::image(bytes),
        MediaKind::Audio => Media::audio(bytes),
    })
}

fn too_large(kind: MediaKind, param: &str) -> ApiError {
    ApiError::bad(
        param,
        format!(
            "{param}: the {} is larger than {} MiB",
            kind.as_str(),
            MAX_MEDIA_BYTES >> 20
        ),
    )
}

/// Whether a request body may name an image by `http(s)` URL (a cheap test before parsing it
/// for [`fetch_urls`]).
pub(crate) fn mentions_url(body: &[u8]) -> bool {
    body.windows(7).any(|w| w == b"http://" || w == b"https:/")
}

/// The most images one request may have fetched.
const MAX_FETCHES: usize = 16;

/// Fetches every image a request body names by `http(s)` URL and puts it in as data: OpenAI's
/// `image_url` (`{"url": …}` or the URL alone) and the Responses API's `input_image` become
/// data URLs, an Anthropic `{"type": "url", "url": …}` source becomes a base64 source.
///
/// # Errors
///
/// A 400 naming the URL when it cannot be fetched, answers an error, is larger than
/// `urls.max_bytes` or takes longer than `urls.timeout`.
pub(crate) async fn fetch_urls(body: &mut Value, urls: &MediaUrls) -> Result<(), ApiError> {
    let mut found = Vec::new();
    collect(body, &mut Vec::new(), &mut found);
    if found.len() > MAX_FETCHES {
        return Err(ApiError::bad(
            "messages",
            format!("at most {MAX_FETCHES} images are fetched by URL for one request"),
        ));
    }
    for (path, url, anthropic) in found {
        let (bytes, mime) = fetch(&url, urls).await?;
        let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
        let Some(slot) = pointer_mut(body, &path) else {
            continue;
        };
        *slot = if anthropic {
            serde_json::json!({"type": "base64", "media_type": mime, "data": data})
        } else {
            Value::String(format!("data:{mime};base64,{data}"))
        };
    }
    Ok(())
}

/// A step into a JSON value: a key or an index.
#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Index(usize),
}

fn pointer_mut<'a>(mut value: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    for step in path {
        value = match step {
            Step::Key(k) => value.get_mut(k.as_str())?,
            Step::Index(i) => value.get_mut(*i)?,
        };
    }
    Some(value)
}

fn is_web(url: &str) -> bool {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

/// Where `value` names images by web URL: the path of the value to replace, the URL, and
/// whether it is an Anthropic source (replaced by a base64 source, not a data URL).
fn collect(value: &Value, path: &mut Vec<Step>, found: &mut Vec<(Vec<Step>, String, bool)>) {
    match value {
        Value::Object(object) => {
            let kind = object.get("type").and_then(Value::as_str);
            match (kind, object.get("image_url"), object.get("url")) {
                (Some("image_url" | "input_image"), Some(Value::String(url)), _) if is_web(url) => {
                    let mut at = path.clone();
                    at.push(Step::Key("image_url".into()));
                    found.push((at, url.clone(), false));
                }
                (Some("image_url"), Some(Value::Object(inner)), _) => {
                    if let Some(url) = inner
                        .get("url")
                        .and_then(Value::as_str)
                        .filter(|u| is_web(u))
                    {
                        let mut at = path.clone();
                        at.extend([Step::Key("image_url".into()), Step::Key("url".into())]);
                        found.push((at, url.to_owned(), false));
                    }
                }
                (Some("url"), _, Some(Value::String(url)))
                    if is_web(url)
                        && path
                            .last()
                            .is_some_and(|s| matches!(s, Step::Key(k) if k == "source")) =>
                {
                    found.push((path.clone(), url.clone(), true));
                }
                _ => {}
            }
            for (key, child) in object {
                path.push(Step::Key(key.clone()));
                collect(child, path, found);
                path.pop();
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                path.push(Step::Index(i));
                collect(child, path, found);
                path.pop();
            }
        }
        _ => {}
    }
}

/// GETs `url`: its bytes (at most `urls.max_bytes`) and its media type (`image/…`, else
/// empty: the bytes say what they are).
async fn fetch(url: &str, urls: &MediaUrls) -> Result<(Vec<u8>, String), ApiError> {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    let failed =
        |why: String| ApiError::bad("messages", format!("fetching the image {url}: {why}"));
    let client = CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()
            .unwrap_or_default()
    });
    let work = async {
        let mut response = client
            .get(url)
            .send()
            .await
            .map_err(|e| failed(e.without_url().to_string()))?;
        if !response.status().is_success() {
            return Err(failed(format!("the server answered {}", response.status())));
        }
        let too_large = || failed(format!("larger than {} bytes", urls.max_bytes));
        if response
            .content_length()
            .is_some_and(|n| n > urls.max_bytes as u64)
        {
            return Err(too_large());
        }
        let mime = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_ascii_lowercase()
            })
            .filter(|v| v.starts_with("image/"))
            .unwrap_or_default();
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| failed(e.without_url().to_string()))?
        {
            if bytes.len() + chunk.len() > urls.max_bytes {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok((bytes, mime))
    };
    tokio::time::timeout(urls.timeout, work)
        .await
        .map_err(|_| failed(format!("no answer within {} s", urls.timeout.as_secs_f32())))?
}

/// An image given by URL: a `data:` URL (`data:image/png;base64,…`); an `http(s)` URL only
/// reaches here when the server does not fetch them (`--media-urls` off).
pub(crate) fn image_url(url: &str, param: &str) -> Result<Media, ApiError> {
    let Some(rest) = url.strip_prefix("data:") else {
        let scheme = url.split(':').next().unwrap_or_default();
        return Err(ApiError::bad(
            param,
            if scheme == "http" || scheme == "https" {
                format!(
                    "{param}: this server does not fetch image URLs (wick serve --media-urls \
                     allows it); send the image in the request as a data URL \
                     (data:image/png;base64,…)"
                )
            } else {
                format!("{param}: an image URL is a data URL (data:image/png;base64,…)")
            },
        ));
    };
    let Some((header, data)) = rest.split_once(',') else {
        return Err(ApiError::bad(
            param,
            format!("{param}: a data URL is data:<type>;base64,<data>"),
        ));
    };
    let mut fields = header.split(';');
    let mime = fields
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if !header
        .split(';')
        .any(|f| f.trim().eq_ignore_ascii_case("base64"))
    {
        return Err(ApiError::bad(
            param,
            format!("{param}: the data URL must be base64 (data:image/png;base64,…)"),
        ));
    }
    if !(mime.is_empty() || mime.starts_with("image/") || mime == "application/octet-stream") {
        return Err(ApiError::bad(
            param,
            format!("{param}: `{mime}` is not an image type"),
        ));
    }
    from_base64(MediaKind::Image, data, param)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_urls_and_base64_are_read_and_bad_ones_named() {
        let png = image_url("data:image/png;base64,iVBORw0KGgo=", "messages[0]").unwrap();
        assert_eq!(&png.bytes[..4], b"\x89PNG");
        assert_eq!(png.kind, MediaKind::Image);
        let unpadded = from_base64(MediaKind::Audio, "UklG RkY\n", "x").unwrap();
        assert_eq!(&unpadded.bytes[..], b"RIFFF");
        for (url, says) in [
            ("https://example.org/cat.png", "does not fetch"),
            ("data:image/png,abc", "must be base64"),
            ("data:text/plain;base64,aGk=", "not an image type"),
            ("data:image/png;base64,%%%", "not valid base64"),
            ("data:image/png;base64,", "empty"),
            ("file:///etc/passwd", "data URL"),
        ] {
            let err = image_url(url, "messages[0].content[1]")
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(says) && err.contains("messages[0].content[1]"),
                "{url}: {err}"
            );
        }
    }
}
