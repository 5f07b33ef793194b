//! Images and sounds in requests, as each API sends them: data URLs (OpenAI's `image_url`,
//! Responses' `input_image`), plain base64 (Anthropic's `image` source, Ollama's `images`,
//! OpenAI's `input_audio`, llama-server's `multimodal_data`). Whether the model takes them is
//! the projector's call when the prompt is rendered; here only the wire form is checked.

use base64::Engine as _;
use wick::{Media, MediaKind};

use crate::error::ApiError;

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

/// An image given by URL: a `data:` URL (`data:image/png;base64,…`). Fetching `http(s)` URLs
/// is not done: the client sends the image itself.
pub(crate) fn image_url(url: &str, param: &str) -> Result<Media, ApiError> {
    let Some(rest) = url.strip_prefix("data:") else {
        let scheme = url.split(':').next().unwrap_or_default();
        return Err(ApiError::bad(
            param,
            if scheme == "http" || scheme == "https" {
                format!(
                    "{param}: wick does not fetch image URLs; send the image in the request as a \
                     data URL (data:image/png;base64,…)"
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
