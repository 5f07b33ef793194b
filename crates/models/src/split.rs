//! Split GGUF models: shards named `PREFIX-0000K-of-0000N.gguf`, as llama.cpp's `gguf-split`
//! writes them. llama.cpp loads a split model from its first shard and finds the others beside
//! it by name, so the store keeps a split model's shards together, under their own names.

/// A shard's place in a split model, read from its file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SplitName {
    /// The name before `-0000K-of-0000N.gguf` (a repository path keeps its folders).
    pub(crate) prefix: String,
    /// This shard's number, from 1.
    pub(crate) index: u32,
    /// How many shards the model has (2 or more).
    pub(crate) count: u32,
}

impl SplitName {
    /// `file`'s place in a split model; `None` for a file that is not a shard.
    pub(crate) fn parse(file: &str) -> Option<SplitName> {
        let stem = file.strip_suffix(".gguf")?;
        let (rest, count) = stem.rsplit_once("-of-")?;
        let (prefix, index) = rest.rsplit_once('-')?;
        let number = |s: &str| {
            (s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<u32>().ok())
                .flatten()
        };
        let (index, count) = (number(index)?, number(count)?);
        (!prefix.is_empty() && count >= 2 && (1..=count).contains(&index)).then(|| SplitName {
            prefix: prefix.to_owned(),
            index,
            count,
        })
    }

    /// The name of shard `index` (from 1) of the same model.
    pub(crate) fn shard(&self, index: u32) -> String {
        format!("{}-{index:05}-of-{:05}.gguf", self.prefix, self.count)
    }
}

/// The last path segment of `file`.
pub(crate) fn base(file: &str) -> &str {
    file.rsplit('/').next().unwrap_or(file)
}

/// `url` (which ends in the first shard's name, before any query) for shard `shard`.
pub(crate) fn shard_url(url: &str, first: &str, shard: &str) -> String {
    let (first, shard) = (base(first), base(shard));
    match url.rfind(first) {
        Some(at) => format!("{}{shard}{}", &url[..at], &url[at + first.len()..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_llama_cpp_shard_names() {
        let s = SplitName::parse("dir/Model-Q4_K_M-00001-of-00003.gguf").unwrap();
        assert_eq!(s.prefix, "dir/Model-Q4_K_M");
        assert_eq!((s.index, s.count), (1, 3));
        assert_eq!(s.shard(3), "dir/Model-Q4_K_M-00003-of-00003.gguf");
        for not in [
            "model.gguf",
            "model-00001-of-00001.gguf",
            "model-00004-of-00003.gguf",
            "model-1-of-3.gguf",
            "-00001-of-00002.gguf",
            "model-00001-of-00002.bin",
        ] {
            assert_eq!(SplitName::parse(not), None, "{not}");
        }
    }

    #[test]
    fn shard_urls_replace_the_last_name_only() {
        let url = "http://h/m-00001-of-00002.gguf/resolve/main/m-00001-of-00002.gguf?x=1";
        assert_eq!(
            shard_url(url, "m-00001-of-00002.gguf", "m-00002-of-00002.gguf"),
            "http://h/m-00001-of-00002.gguf/resolve/main/m-00002-of-00002.gguf?x=1"
        );
    }
}
