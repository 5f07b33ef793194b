//! The GGUF header reader: metadata and the tensor list, read without loading the weights.
//!
//! Every count and length in the file is checked against the file's size before anything is
//! allocated, so a text file, a truncated download or a hostile file is a clear [`GgufError`],
//! never a panic or a huge allocation. Long arrays (token scores, merges) are skipped, keeping
//! only their length, except the vocabulary, which names the special tokens.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use crate::error::GgufError;
use crate::ggml_types::{file_type_name, tensor_bytes, type_name};

/// Arrays longer than this keep only their length (except the vocabulary).
const KEEP_ARRAY: u64 = 1024;
/// No string in a GGUF header is longer (chat templates are a few KB).
const MAX_STRING: u64 = 64 << 20;
/// No vocabulary is larger.
const MAX_VOCAB: u64 = 16 << 20;
const VOCAB_KEY: &str = "tokenizer.ggml.tokens";

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum GgufValue {
    /// Any unsigned integer type.
    Uint(u64),
    /// Any signed integer type.
    Int(i64),
    /// `f32` or `f64`.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A string (invalid UTF-8 replaced).
    String(String),
    /// An array: its length, and its values when it is short (`None` when skipped).
    Array {
        /// The number of elements.
        len: u64,
        /// The elements, for arrays of up to 1,024.
        values: Option<Vec<GgufValue>>,
    },
}

impl GgufValue {
    /// The value as an unsigned integer, when it is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::Uint(v) => Some(v),
            Self::Int(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }
}

/// A special token: its id and, when the vocabulary has it, its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecialToken {
    /// What the token is for: `bos`, `eos`, `eot`, `eom`, `pad`, `unk`, `sep`.
    pub role: &'static str,
    /// The token id.
    pub id: u64,
    /// The token's text from the vocabulary.
    pub text: Option<String>,
}

/// What a GGUF file's header says: metadata, the vocabulary and a summary of the tensors.
///
/// ```no_run
/// let header = wick_models::GgufHeader::read("model.gguf".as_ref()).unwrap();
/// println!("{:?} {:?}", header.architecture(), header.quantization());
/// ```
#[derive(Debug, Clone)]
pub struct GgufHeader {
    version: u32,
    tensor_count: u64,
    metadata: BTreeMap<String, GgufValue>,
    tokens: Vec<String>,
    /// Elements per ggml tensor type, to name the quantization when `general.file_type` is absent.
    type_elements: BTreeMap<u32, u64>,
    file_size: u64,
}

impl GgufHeader {
    /// Reads the header of the file at `path` and checks that the file is long enough to hold
    /// every tensor the header lists.
    ///
    /// # Errors
    ///
    /// [`GgufError`] saying why the file is not a complete GGUF file.
    pub fn read(path: &Path) -> Result<Self, GgufError> {
        let meta = std::fs::metadata(path).map_err(|cause| GgufError::Io { cause })?;
        if !meta.is_file() {
            return Err(GgufError::NotAFile);
        }
        let file = File::open(path).map_err(|cause| GgufError::Io { cause })?;
        let mut reader = Reader {
            inner: Box::new(BufReader::with_capacity(1 << 16, file)),
            pos: 0,
            len: meta.len(),
        };
        parse(&mut reader)
    }

    /// [`GgufHeader::read`] on a whole file's bytes (tests and fuzzing).
    ///
    /// # Errors
    ///
    /// As [`GgufHeader::read`].
    pub fn parse_bytes(bytes: &[u8]) -> Result<Self, GgufError> {
        let mut reader = Reader {
            inner: Box::new(std::io::Cursor::new(bytes.to_vec())),
            pos: 0,
            len: bytes.len() as u64,
        };
        parse(&mut reader)
    }

    /// The GGUF format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// How many tensors the file holds.
    pub fn tensor_count(&self) -> u64 {
        self.tensor_count
    }

    /// The file's size in bytes.
    pub fn file_size(&self) -> u64 {
        self.file_size
    }

    /// Every metadata key and value (long arrays without their values).
    pub fn metadata(&self) -> &BTreeMap<String, GgufValue> {
        &self.metadata
    }

    /// The metadata value under `key`.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.get(key)
    }

    /// The string values of the keys starting with `prefix`, in key order; an array of
    /// strings gives one pair per element (its key repeated). Other values are skipped.
    ///
    /// ```no_run
    /// let header = wick_models::GgufHeader::read("model.gguf".as_ref()).unwrap();
    /// for (key, value) in header.strings_with_prefix("chat_template.") {
    ///     println!("{key} = {value:?}");
    /// }
    /// ```
    pub fn strings_with_prefix(&self, prefix: &str) -> Vec<(&str, &str)> {
        let mut out = Vec::new();
        for (key, value) in self.metadata.range(prefix.to_owned()..) {
            if !key.starts_with(prefix) {
                break;
            }
            match value {
                GgufValue::String(s) => out.push((key.as_str(), s.as_str())),
                GgufValue::Array {
                    values: Some(values),
                    ..
                } => out.extend(
                    values
                        .iter()
                        .filter_map(|v| Some((key.as_str(), v.as_str()?))),
                ),
                _ => {}
            }
        }
        out
    }

    /// `general.architecture`, e.g. `llama`.
    pub fn architecture(&self) -> Option<&str> {
        self.get("general.architecture")?.as_str()
    }

    /// `general.name`.
    pub fn name(&self) -> Option<&str> {
        self.get("general.name")?.as_str()
    }

    /// The context length the model was trained for (`<arch>.context_length`).
    pub fn context_length(&self) -> Option<u64> {
        let arch = self.architecture()?;
        self.get(&format!("{arch}.context_length"))?.as_u64()
    }

    /// The quantization: the name of `general.file_type`, else the type holding most weights.
    pub fn quantization(&self) -> Option<String> {
        let code = self.get("general.file_type").and_then(GgufValue::as_u64);
        if let Some(name) = code
            .and_then(|c| u32::try_from(c).ok())
            .and_then(file_type_name)
        {
            return Some(name.to_owned());
        }
        let dominant = self
            .type_elements
            .iter()
            .filter(|(ty, _)| **ty != 0)
            .max_by_key(|(_, n)| **n)
            .or_else(|| self.type_elements.iter().max_by_key(|(_, n)| **n))?;
        type_name(*dominant.0).map(str::to_owned)
    }

    /// The ggml types of the file's tensors (`Q4_K`, `F32`, …; ggml's ids for types this
    /// reader does not name), each once, with the elements each holds.
    pub fn tensor_types(&self) -> Vec<(String, u64)> {
        self.type_elements
            .iter()
            .map(|(&ty, &n)| {
                (
                    type_name(ty).map_or_else(|| format!("type {ty}"), str::to_owned),
                    n,
                )
            })
            .collect()
    }

    /// The model's parameters: the elements of all its tensors.
    pub fn parameter_count(&self) -> u64 {
        self.type_elements.values().sum()
    }

    /// Bytes one token takes in an F16 KV cache (a key and a value per KV head in every
    /// layer), from the attention hyperparameters; `None` when the header lacks them.
    pub fn kv_bytes_per_token(&self) -> Option<u64> {
        let arch = self.architecture()?;
        let key = |name: &str| {
            self.get(&format!("{arch}.{name}"))
                .and_then(GgufValue::as_u64)
        };
        let layers = key("block_count")?;
        let width = key("embedding_length")?;
        let heads = key("attention.head_count")?.max(1);
        let kv_heads = key("attention.head_count_kv").unwrap_or(heads);
        let k = key("attention.key_length").unwrap_or(width / heads);
        let v = key("attention.value_length").unwrap_or(width / heads);
        Some(layers * kv_heads * (k + v) * 2)
    }

    /// Bytes the model takes loaded with `context_tokens` of KV cache: its file (the weights)
    /// and the cache ([`GgufHeader::kv_bytes_per_token`]; when the header lacks the
    /// hyperparameters, an F16 cache as wide as the file's largest guess: 4096 values per
    /// token per layer pair). An estimate for a memory budget, not a measurement.
    pub fn memory_estimate(&self, context_tokens: u64) -> u64 {
        let per_token = self.kv_bytes_per_token().unwrap_or(4096 * 2 * 2);
        self.file_size
            .saturating_add(per_token.saturating_mul(context_tokens))
    }

    /// The chat template (`tokenizer.chat_template`).
    pub fn chat_template(&self) -> Option<&str> {
        self.get("tokenizer.chat_template")?.as_str()
    }

    /// The vocabulary size, when the file has one.
    pub fn vocab_size(&self) -> Option<usize> {
        (!self.tokens.is_empty()).then_some(self.tokens.len())
    }

    /// The text of token `id`.
    pub fn token(&self, id: u64) -> Option<&str> {
        self.tokens
            .get(usize::try_from(id).ok()?)
            .map(String::as_str)
    }

    /// The special tokens the metadata names (`tokenizer.ggml.*_token_id`), in a fixed order.
    pub fn special_tokens(&self) -> Vec<SpecialToken> {
        const ROLES: [(&str, &str); 7] = [
            ("bos", "tokenizer.ggml.bos_token_id"),
            ("eos", "tokenizer.ggml.eos_token_id"),
            ("eot", "tokenizer.ggml.eot_token_id"),
            ("eom", "tokenizer.ggml.eom_token_id"),
            ("pad", "tokenizer.ggml.padding_token_id"),
            ("unk", "tokenizer.ggml.unknown_token_id"),
            // GGUF spells it so.
            ("sep", "tokenizer.ggml.seperator_token_id"),
        ];
        ROLES
            .iter()
            .filter_map(|&(role, key)| {
                let id = self.get(key)?.as_u64()?;
                Some(SpecialToken {
                    role,
                    id,
                    text: self.token(id).map(str::to_owned),
                })
            })
            .collect()
    }
}

/// What the header is read from: a file, or bytes in memory.
trait Source: Read {
    /// Skips `n` bytes forward.
    fn skip(&mut self, n: i64) -> std::io::Result<()>;
}

impl Source for BufReader<File> {
    fn skip(&mut self, n: i64) -> std::io::Result<()> {
        self.seek_relative(n)
    }
}

impl Source for std::io::Cursor<Vec<u8>> {
    fn skip(&mut self, n: i64) -> std::io::Result<()> {
        std::io::Seek::seek(self, std::io::SeekFrom::Current(n)).map(|_| ())
    }
}

struct Reader {
    inner: Box<dyn Source>,
    pos: u64,
    len: u64,
}

impl Reader {
    fn need(&self, n: u64, part: &'static str) -> Result<(), GgufError> {
        let needed = self.pos.saturating_add(n);
        if needed > self.len {
            return Err(GgufError::Truncated {
                part,
                needed,
                actual: self.len,
            });
        }
        Ok(())
    }

    fn malformed(&self, reason: impl Into<String>) -> GgufError {
        GgufError::Malformed {
            offset: self.pos,
            reason: reason.into(),
        }
    }

    fn array<const N: usize>(&mut self, part: &'static str) -> Result<[u8; N], GgufError> {
        self.need(N as u64, part)?;
        let mut buf = [0u8; N];
        self.inner
            .read_exact(&mut buf)
            .map_err(|cause| GgufError::Io { cause })?;
        self.pos += N as u64;
        Ok(buf)
    }

    fn u32(&mut self, part: &'static str) -> Result<u32, GgufError> {
        self.array(part).map(u32::from_le_bytes)
    }

    fn u64(&mut self, part: &'static str) -> Result<u64, GgufError> {
        self.array(part).map(u64::from_le_bytes)
    }

    fn skip(&mut self, n: u64, part: &'static str) -> Result<(), GgufError> {
        self.need(n, part)?;
        let n_i64 = i64::try_from(n).map_err(|_| self.malformed("length overflows"))?;
        self.inner
            .skip(n_i64)
            .map_err(|cause| GgufError::Io { cause })?;
        self.pos += n;
        Ok(())
    }

    fn string(&mut self, part: &'static str) -> Result<String, GgufError> {
        let len = self.u64(part)?;
        if len > MAX_STRING {
            return Err(self.malformed(format!("a string of {len} bytes")));
        }
        self.need(len, part)?;
        let mut buf = vec![0u8; usize::try_from(len).expect("invariant: len <= MAX_STRING")];
        self.inner
            .read_exact(&mut buf)
            .map_err(|cause| GgufError::Io { cause })?;
        self.pos += len;
        Ok(String::from_utf8(buf)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }
}

/// Bytes of one element of GGUF value type `ty`, for fixed-size types.
fn fixed_size(ty: u32) -> Option<u64> {
    match ty {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    }
}

fn scalar(r: &mut Reader, ty: u32) -> Result<GgufValue, GgufError> {
    const P: &str = "metadata";
    Ok(match ty {
        0 => GgufValue::Uint(r.array::<1>(P)?[0].into()),
        1 => GgufValue::Int(i8::from_le_bytes(r.array(P)?).into()),
        2 => GgufValue::Uint(u16::from_le_bytes(r.array(P)?).into()),
        3 => GgufValue::Int(i16::from_le_bytes(r.array(P)?).into()),
        4 => GgufValue::Uint(u32::from_le_bytes(r.array(P)?).into()),
        5 => GgufValue::Int(i32::from_le_bytes(r.array(P)?).into()),
        6 => GgufValue::Float(f32::from_le_bytes(r.array(P)?).into()),
        7 => GgufValue::Bool(r.array::<1>(P)?[0] != 0),
        8 => GgufValue::String(r.string(P)?),
        10 => GgufValue::Uint(r.u64(P)?),
        11 => GgufValue::Int(i64::from_le_bytes(r.array(P)?)),
        12 => GgufValue::Float(f64::from_le_bytes(r.array(P)?)),
        _ => return Err(r.malformed(format!("unknown value type {ty}"))),
    })
}

fn value(r: &mut Reader, ty: u32, keep: bool, depth: u8) -> Result<GgufValue, GgufError> {
    if ty != 9 {
        return scalar(r, ty);
    }
    if depth > 3 {
        return Err(r.malformed("arrays nested too deep"));
    }
    let elem = r.u32("metadata")?;
    let len = r.u64("metadata")?;
    // Every element takes at least one byte: a longer count is a truncated or bad file.
    r.need(
        len.saturating_mul(fixed_size(elem).unwrap_or(8)),
        "metadata",
    )?;
    if !keep && len > KEEP_ARRAY {
        if let Some(size) = fixed_size(elem) {
            r.skip(len * size, "metadata")?;
        } else {
            for _ in 0..len {
                skip_value(r, elem, depth + 1)?;
            }
        }
        return Ok(GgufValue::Array { len, values: None });
    }
    let mut values = Vec::new();
    for _ in 0..len {
        values.push(value(r, elem, false, depth + 1)?);
    }
    Ok(GgufValue::Array {
        len,
        values: Some(values),
    })
}

fn skip_value(r: &mut Reader, ty: u32, depth: u8) -> Result<(), GgufError> {
    match ty {
        8 => {
            let len = r.u64("metadata")?;
            r.skip(len, "metadata")
        }
        9 => value(r, ty, false, depth).map(drop),
        _ => {
            let size =
                fixed_size(ty).ok_or_else(|| r.malformed(format!("unknown value type {ty}")))?;
            r.skip(size, "metadata")
        }
    }
}

fn parse(r: &mut Reader) -> Result<GgufHeader, GgufError> {
    let magic = r.array::<4>("header")?;
    if &magic != b"GGUF" {
        return Err(GgufError::BadMagic);
    }
    let version = r.u32("header")?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::Version { version });
    }
    let tensor_count = r.u64("header")?;
    let kv_count = r.u64("header")?;
    // A key-value pair takes at least 13 bytes, a tensor entry at least 24.
    r.need(kv_count.saturating_mul(13), "metadata")?;
    let mut metadata = BTreeMap::new();
    let mut tokens = Vec::new();
    for _ in 0..kv_count {
        let key = r.string("metadata")?;
        let ty = r.u32("metadata")?;
        let is_vocab = key == VOCAB_KEY && ty == 9;
        let mut v = value(r, ty, is_vocab, 0)?;
        if is_vocab {
            v = take_vocab(r, v, &mut tokens)?;
        }
        metadata.insert(key, v);
    }
    r.need(tensor_count.saturating_mul(24), "tensor list")?;
    let alignment = match metadata.get("general.alignment").map(GgufValue::as_u64) {
        None => 32,
        Some(Some(a)) if a.is_power_of_two() => a,
        Some(_) => return Err(r.malformed("general.alignment is not a power of two")),
    };
    let (type_elements, data_size) = tensors(r, tensor_count)?;
    let data_start = r.pos.div_ceil(alignment) * alignment;
    if tensor_count > 0 && data_start.saturating_add(data_size) > r.len {
        return Err(GgufError::Truncated {
            part: "tensor data",
            needed: data_start.saturating_add(data_size),
            actual: r.len,
        });
    }
    Ok(GgufHeader {
        version,
        tensor_count,
        metadata,
        tokens,
        type_elements,
        file_size: r.len,
    })
}

fn take_vocab(r: &Reader, v: GgufValue, tokens: &mut Vec<String>) -> Result<GgufValue, GgufError> {
    let GgufValue::Array { len, values } = v else {
        return Ok(v);
    };
    if len > MAX_VOCAB {
        return Err(r.malformed(format!("a vocabulary of {len} tokens")));
    }
    *tokens = values
        .unwrap_or_default()
        .into_iter()
        .map(|t| match t {
            GgufValue::String(s) => s,
            _ => String::new(),
        })
        .collect();
    Ok(GgufValue::Array { len, values: None })
}

/// Reads the tensor list: elements per type, and the bytes the data section needs.
fn tensors(r: &mut Reader, count: u64) -> Result<(BTreeMap<u32, u64>, u64), GgufError> {
    const P: &str = "tensor list";
    let mut per_type = BTreeMap::new();
    let mut data_end = 0u64;
    for _ in 0..count {
        let name = r.string(P)?;
        let dims = r.u32(P)?;
        if dims > 8 {
            return Err(r.malformed(format!("tensor {name} has {dims} dimensions")));
        }
        let mut elements = 1u64;
        for _ in 0..dims {
            let d = r.u64(P)?;
            elements = elements
                .checked_mul(d)
                .ok_or_else(|| r.malformed(format!("tensor {name} is too large")))?;
        }
        let ty = r.u32(P)?;
        let offset = r.u64(P)?;
        *per_type.entry(ty).or_insert(0u64) += elements;
        if let Some(bytes) = tensor_bytes(ty, elements) {
            data_end = data_end.max(offset.saturating_add(bytes));
        }
    }
    Ok((per_type, data_end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn reads_a_synthetic_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "m.gguf",
            &wick_testutil::synthetic_gguf(1 << 20, "qwen2", 15, 0),
        );
        let h = GgufHeader::read(&path).unwrap();
        assert_eq!(h.version(), 3);
        assert_eq!(h.tensor_count(), 1);
        assert_eq!(h.architecture(), Some("qwen2"));
        assert_eq!(h.name(), Some("synthetic"));
        assert_eq!(h.context_length(), Some(2048));
        assert_eq!(h.quantization().as_deref(), Some("Q4_K_M"));
        assert_eq!(h.chat_template(), Some(wick_testutil::SYNTHETIC_TEMPLATE));
        assert_eq!(h.vocab_size(), Some(5));
        let special = h.special_tokens();
        assert_eq!(special.len(), 2);
        assert_eq!((special[0].role, special[0].id), ("bos", 1));
        assert_eq!(special[0].text.as_deref(), Some("<s>"));
        assert_eq!(special[1].text.as_deref(), Some("</s>"));
    }

    #[test]
    fn strings_under_a_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = wick_testutil::synthetic_gguf_with(
            1 << 16,
            "llama",
            15,
            0,
            &[
                ("chat_template.roles.user.prefix", "<u>"),
                ("chat_template.begin", "<s>"),
                ("chat_templates.other", "no"),
            ],
        );
        let h = GgufHeader::read(&write(&dir, "m.gguf", &bytes)).unwrap();
        assert_eq!(
            h.strings_with_prefix("chat_template."),
            [
                ("chat_template.begin", "<s>"),
                ("chat_template.roles.user.prefix", "<u>")
            ]
        );
        assert_eq!(
            h.strings_with_prefix("general.name"),
            [("general.name", "synthetic")]
        );
        assert!(h.strings_with_prefix("general.file_type").is_empty());
    }

    #[test]
    fn names_the_quantization_from_tensors_without_a_file_type() {
        let dir = tempfile::tempdir().unwrap();
        // file_type 5 is no longer a named type: the F32 tensor decides.
        let path = write(
            &dir,
            "m.gguf",
            &wick_testutil::synthetic_gguf(4096, "llama", 5, 0),
        );
        let header = GgufHeader::read(&path).unwrap();
        assert_eq!(header.quantization().as_deref(), Some("F32"));
        let types = header.tensor_types();
        assert_eq!(types.len(), 1, "{types:?}");
        assert_eq!(types[0].0, "F32");
        assert!(types[0].1 > 0);
    }

    #[test]
    fn every_truncation_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let full = wick_testutil::synthetic_gguf(8192, "llama", 15, 0);
        for cut in [0, 3, 10, 30, 200, 400, full.len() - 1] {
            let path = write(&dir, "cut.gguf", &full[..cut]);
            let err = GgufHeader::read(&path).unwrap_err();
            let msg = err.to_string();
            if cut < 4 {
                assert!(
                    matches!(err, GgufError::Truncated { .. } | GgufError::BadMagic),
                    "{cut}: {msg}"
                );
            } else {
                assert!(matches!(err, GgufError::Truncated { .. }), "{cut}: {msg}");
                assert!(msg.contains("truncated"), "{msg}");
            }
        }
    }

    #[test]
    fn text_and_future_versions_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let text = write(&dir, "t.gguf", b"just some text, not a model at all......");
        assert!(matches!(GgufHeader::read(&text), Err(GgufError::BadMagic)));
        let mut future = wick_testutil::synthetic_gguf(4096, "llama", 15, 0);
        future[4] = 9;
        let path = write(&dir, "f.gguf", &future);
        assert!(GgufHeader::read(&path)
            .unwrap_err()
            .to_string()
            .contains("version 9"));
        assert!(matches!(
            GgufHeader::read(dir.path()),
            Err(GgufError::NotAFile)
        ));
        let missing = dir.path().join("missing.gguf");
        assert!(GgufHeader::read(&missing)
            .unwrap_err()
            .to_string()
            .contains("cannot read it"));
    }

    #[test]
    fn absurd_lengths_do_not_allocate() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = b"GGUF\x03\0\0\0".to_vec();
        bytes.extend_from_slice(&0u64.to_le_bytes());
        bytes.extend_from_slice(&1u64.to_le_bytes());
        bytes.extend_from_slice(&u64::MAX.to_le_bytes()); // key length
        bytes.resize(64, 0);
        let path = write(&dir, "huge.gguf", &bytes);
        let err = GgufHeader::read(&path).unwrap_err();
        assert!(matches!(err, GgufError::Malformed { .. }), "{err}");
        let mut many = b"GGUF\x03\0\0\0".to_vec();
        many.extend_from_slice(&u64::MAX.to_le_bytes()); // tensors
        many.extend_from_slice(&0u64.to_le_bytes());
        let path = write(&dir, "many.gguf", &many);
        assert!(matches!(
            GgufHeader::read(&path),
            Err(GgufError::Truncated { .. })
        ));
    }

    #[test]
    fn reads_the_real_test_model() {
        let h = GgufHeader::read(&wick_testutil::model_path()).unwrap();
        assert_eq!(h.architecture(), Some("llama"));
        assert_eq!(h.quantization().as_deref(), Some("Q4_1"));
        assert_eq!(h.context_length(), Some(8192));
        assert!(h
            .chat_template()
            .is_some_and(|t| t.contains("<|im_start|>")));
        assert_eq!(h.vocab_size(), Some(49152));
        let eos = h
            .special_tokens()
            .into_iter()
            .find(|t| t.role == "eos")
            .unwrap();
        assert_eq!(eos.text.as_deref(), Some("<|im_end|>"));
    }
}
