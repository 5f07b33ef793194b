//! One syntax for naming a model, wherever a model is named: CLI flags, the library, the server.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::error::ModelError;

/// The forms a model reference takes, quoted in every "bad reference" error.
pub const ACCEPTED_FORMS: &str = "Accepted forms: a GGUF file path (./model.gguf, /models/x.gguf); \
an http(s):// URL; hf:owner/repo/file.gguf; owner/repo or owner/repo:QUANT \
(a Hugging Face repository, Q4_K_M by default); a name from `wick ls` (set by `wick pull … --as NAME`); \
or nothing, for the default model";

/// The quantization picked from a repository when none is named (as `llama-server -hf` does).
pub const DEFAULT_QUANT: &str = "Q4_K_M";

/// A Hugging Face model repository at a revision.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HfRepo {
    /// The user or organisation.
    pub owner: String,
    /// The repository name.
    pub name: String,
    /// Branch, tag or commit (`main` unless set).
    pub revision: String,
}

impl HfRepo {
    /// `owner/name` at `main`.
    ///
    /// # Errors
    ///
    /// [`ModelError::BadReference`] when either part has characters a repository name cannot.
    pub fn new(owner: &str, name: &str) -> Result<Self, ModelError> {
        for part in [owner, name] {
            if !is_repo_part(part) {
                return Err(bad(
                    &format!("{owner}/{name}"),
                    &format!("`{part}` is not a Hugging Face user or repository name"),
                ));
            }
        }
        Ok(Self {
            owner: owner.to_owned(),
            name: name.to_owned(),
            revision: "main".to_owned(),
        })
    }

    /// `owner/name`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }
}

/// A parsed model reference.
///
/// ```
/// use wick_models::ModelRef;
///
/// let r: ModelRef = "bartowski/SmolLM2-135M-Instruct-GGUF:Q8_0".parse().unwrap();
/// assert_eq!(r.to_string(), "bartowski/SmolLM2-135M-Instruct-GGUF:Q8_0");
/// assert!(matches!("./model.gguf".parse::<ModelRef>().unwrap(), ModelRef::Path(_)));
/// assert!(matches!("my-model".parse::<ModelRef>().unwrap(), ModelRef::Name(_)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ModelRef {
    /// No model named: the default model.
    Default,
    /// A local GGUF file.
    Path(PathBuf),
    /// An `http(s)://` URL of a GGUF file.
    Url(String),
    /// One file of a Hugging Face repository (`hf:owner/repo/file.gguf`).
    HfFile {
        /// The repository.
        repo: HfRepo,
        /// The file's path in the repository.
        file: String,
    },
    /// The file of one quantization in a Hugging Face repository (`owner/repo[:QUANT]`).
    HfQuant {
        /// The repository.
        repo: HfRepo,
        /// The quantization tag; [`DEFAULT_QUANT`] when `None`.
        quant: Option<String>,
    },
    /// A name in the store (`wick pull … --as NAME`, or a file name shown by `wick ls`).
    Name(String),
}

impl ModelRef {
    /// Parses `text`; `None` or an empty string is [`ModelRef::Default`].
    ///
    /// # Errors
    ///
    /// [`ModelError::BadReference`], whose message lists the accepted forms.
    pub fn parse_opt(text: Option<&str>) -> Result<Self, ModelError> {
        match text {
            None | Some("") => Ok(Self::Default),
            Some(text) => text.parse(),
        }
    }

    /// Whether resolving this reference may need the network.
    pub fn is_remote(&self) -> bool {
        matches!(
            self,
            Self::Url(_) | Self::HfFile { .. } | Self::HfQuant { .. }
        )
    }
}

impl FromStr for ModelRef {
    type Err = ModelError;

    fn from_str(text: &str) -> Result<Self, ModelError> {
        if text.trim().is_empty() {
            return Err(bad(text, "it is empty"));
        }
        if text != text.trim() {
            return Err(bad(text, "it has leading or trailing spaces"));
        }
        if let Some((scheme, _)) = text.split_once("://") {
            return parse_url(text, scheme);
        }
        if let Some(rest) = text.strip_prefix("hf:") {
            return parse_hf(text, rest);
        }
        if looks_like_path(text) {
            return Ok(Self::Path(expand_home(text)));
        }
        if let Some((owner, rest)) = text.split_once('/') {
            if !rest.contains('/') {
                return parse_repo_quant(text, owner, rest);
            }
            return Err(bad(
                text,
                "it is not a file that exists, and has too many `/` for owner/repo",
            ));
        }
        if is_name(text) {
            return Ok(Self::Name(text.to_owned()));
        }
        Err(bad(
            text,
            "it is not a file that exists, a URL, a repository or a name",
        ))
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Default => f.write_str("default"),
            Self::Path(path) => write!(f, "{}", path.display()),
            Self::Url(url) => f.write_str(url),
            Self::HfFile { repo, file } => write!(f, "hf:{}/{file}", repo.id()),
            Self::HfQuant { repo, quant } => match quant {
                Some(quant) => write!(f, "{}:{quant}", repo.id()),
                None => f.write_str(&repo.id()),
            },
            Self::Name(name) => f.write_str(name),
        }
    }
}

fn bad(input: &str, reason: &str) -> ModelError {
    ModelError::BadReference {
        input: input.to_owned(),
        reason: reason.to_owned(),
    }
}

fn parse_url(text: &str, scheme: &str) -> Result<ModelRef, ModelError> {
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(bad(
            text,
            &format!("`{scheme}://` is not supported, only http(s)://"),
        ));
    }
    let url = reqwest::Url::parse(text).map_err(|e| bad(text, &format!("a bad URL ({e})")))?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad(text, "the URL has no host"));
    }
    Ok(ModelRef::Url(url.to_string()))
}

fn parse_hf(text: &str, rest: &str) -> Result<ModelRef, ModelError> {
    let mut parts = rest.splitn(3, '/');
    let (Some(owner), Some(second)) = (parts.next(), parts.next()) else {
        return Err(bad(
            text,
            "hf: needs owner/repo/file.gguf or owner/repo[:QUANT]",
        ));
    };
    let Some(file) = parts.next() else {
        return parse_repo_quant(text, owner, second);
    };
    let repo = HfRepo::new(owner, second)?;
    let valid_file = has_gguf_ext(file)
        && file
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..");
    if !valid_file {
        return Err(bad(
            text,
            "the file must be a path in the repository ending in .gguf",
        ));
    }
    Ok(ModelRef::HfFile {
        repo,
        file: file.to_owned(),
    })
}

fn parse_repo_quant(text: &str, owner: &str, rest: &str) -> Result<ModelRef, ModelError> {
    let (name, quant) = match rest.split_once(':') {
        Some((name, quant)) => (name, Some(quant)),
        None => (rest, None),
    };
    let repo = HfRepo::new(owner, name).map_err(|_| {
        bad(
            text,
            "it is not a file that exists, and not a Hugging Face owner/repo",
        )
    })?;
    if let Some(quant) = quant {
        let valid =
            !quant.is_empty() && quant.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(bad(
                text,
                &format!("`{quant}` is not a quantization tag (like Q4_K_M)"),
            ));
        }
    }
    Ok(ModelRef::HfQuant {
        repo,
        quant: quant.map(str::to_owned),
    })
}

fn looks_like_path(text: &str) -> bool {
    let path = Path::new(text);
    text.starts_with("./")
        || text.starts_with("../")
        || text.starts_with("~/")
        || text.starts_with(".\\")
        || text == "."
        || text == ".."
        || path.is_absolute()
        || text.starts_with('/')
        || has_gguf_ext(text)
        || path.exists()
}

fn expand_home(text: &str) -> PathBuf {
    match (text.strip_prefix("~/"), dirs::home_dir()) {
        (Some(rest), Some(home)) => home.join(rest),
        _ => PathBuf::from(text),
    }
}

pub(crate) fn has_gguf_ext(text: &str) -> bool {
    text.len() > 5
        && text
            .get(text.len() - 5..)
            .is_some_and(|ext| ext.eq_ignore_ascii_case(".gguf"))
}

fn is_repo_part(part: &str) -> bool {
    !part.is_empty()
        && part != "."
        && part != ".."
        && part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Whether `name` can name a model in the store.
pub(crate) fn is_name(name: &str) -> bool {
    is_repo_part(name) && !has_gguf_ext(name) && !name.starts_with('.') && !name.starts_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> ModelRef {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn repo(owner: &str, name: &str) -> HfRepo {
        HfRepo::new(owner, name).unwrap()
    }

    #[test]
    fn every_form_parses() {
        assert_eq!(parse("./m.gguf"), ModelRef::Path("./m.gguf".into()));
        assert_eq!(parse("/abs/m.gguf"), ModelRef::Path("/abs/m.gguf".into()));
        assert_eq!(parse("m.GGUF"), ModelRef::Path("m.GGUF".into()));
        assert_eq!(
            parse("dir/sub/m.gguf"),
            ModelRef::Path("dir/sub/m.gguf".into())
        );
        assert_eq!(
            parse("https://example.invalid/a/m.gguf"),
            ModelRef::Url("https://example.invalid/a/m.gguf".into())
        );
        assert_eq!(
            parse("hf:own/rep/sub/m.gguf"),
            ModelRef::HfFile {
                repo: repo("own", "rep"),
                file: "sub/m.gguf".into()
            }
        );
        assert_eq!(
            parse("own/rep"),
            ModelRef::HfQuant {
                repo: repo("own", "rep"),
                quant: None
            }
        );
        assert_eq!(
            parse("hf:own/rep:q8_0"),
            ModelRef::HfQuant {
                repo: repo("own", "rep"),
                quant: Some("q8_0".into())
            }
        );
        assert_eq!(parse("my-model.v2"), ModelRef::Name("my-model.v2".into()));
        assert_eq!(ModelRef::parse_opt(None).unwrap(), ModelRef::Default);
        assert_eq!(ModelRef::parse_opt(Some("")).unwrap(), ModelRef::Default);
    }

    #[test]
    fn an_existing_directory_pair_is_a_path_not_a_repository() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("own/rep")).unwrap();
        let text = dir.path().join("own/rep");
        let text = text.to_str().unwrap();
        assert_eq!(parse(text), ModelRef::Path(text.into()));
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "/abs/m.gguf",
            "https://example.invalid/m.gguf",
            "hf:own/rep/m.gguf",
            "own/rep:Q4_K_M",
            "own/rep",
            "name",
        ] {
            assert_eq!(parse(text).to_string(), text);
            assert_eq!(parse(&parse(text).to_string()), parse(text));
        }
    }

    #[test]
    fn bad_references_list_the_accepted_forms() {
        for text in [
            "",
            " model",
            "ftp://host/m.gguf",
            "https://",
            "hf:own",
            "hf:own/rep/readme.md",
            "hf:own/rep/../m.gguf",
            "own/re p",
            "own/rep:Q4 K",
            "own/rep:",
            "a/b/c",
            "what?",
            "-name",
        ] {
            let err = text.parse::<ModelRef>().unwrap_err();
            let msg = err.to_string();
            assert!(
                matches!(err, ModelError::BadReference { .. }),
                "{text}: {msg}"
            );
            assert!(msg.contains("Accepted forms"), "{text}: {msg}");
            assert!(msg.contains("hf:owner/repo/file.gguf"), "{text}: {msg}");
        }
    }

    #[test]
    fn names_exclude_gguf_files_and_odd_characters() {
        assert!(is_name("SmolLM2-135M-Instruct.Q4_1"));
        assert!(!is_name("model.gguf"));
        assert!(!is_name(".hidden"));
        assert!(!is_name("a b"));
        assert!(!is_name(""));
    }
}
