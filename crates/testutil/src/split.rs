//! Splitting a GGUF file into shards the way llama.cpp's `gguf-split` writes them: the first
//! shard keeps every key and gains `split.no`, `split.count` and `split.tensors.count`; the
//! others hold only those three keys; the tensors are dealt out in order, each shard's data
//! section re-based and aligned. llama.cpp loads the set from its first shard.

/// A GGUF file cut into `count` shards (`count` ≥ 1; at most one shard per tensor), in order.
///
/// # Panics
///
/// When `bytes` is not a well-formed GGUF v2/v3 file: this is test support.
pub fn split_gguf(bytes: &[u8], count: u16) -> Vec<Vec<u8>> {
    let file = Parsed::new(bytes);
    let count = usize::from(count.max(1)).min(file.tensors.len().max(1));
    let per = file.tensors.len().div_ceil(count);
    let chunks: Vec<&[Tensor<'_>]> = file.tensors.chunks(per.max(1)).collect();
    let n = u16::try_from(chunks.len()).expect("a u16 count");
    let total = i32::try_from(file.tensors.len()).expect("an i32 tensor count");
    chunks
        .iter()
        .enumerate()
        .map(|(i, tensors)| {
            let mut out = Vec::new();
            out.extend_from_slice(b"GGUF");
            out.extend_from_slice(&3u32.to_le_bytes());
            out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
            let kvs: &[&[u8]] = if i == 0 { &file.kvs } else { &[] };
            out.extend_from_slice(&(kvs.len() as u64 + 3).to_le_bytes());
            for kv in kvs {
                out.extend_from_slice(kv);
            }
            put_key(&mut out, "split.no", 2);
            out.extend_from_slice(&u16::try_from(i).expect("a u16 index").to_le_bytes());
            put_key(&mut out, "split.count", 2);
            out.extend_from_slice(&n.to_le_bytes());
            put_key(&mut out, "split.tensors.count", 5);
            out.extend_from_slice(&total.to_le_bytes());
            let mut offset = 0u64;
            for t in *tensors {
                out.extend_from_slice(t.info);
                out.extend_from_slice(&offset.to_le_bytes());
                offset += t.data.len() as u64;
            }
            out.resize(out.len().div_ceil(file.alignment) * file.alignment, 0);
            for t in *tensors {
                out.extend_from_slice(t.data);
            }
            out
        })
        .collect()
}

/// A tensor to write: its name, dimensions, ggml type and data.
pub(crate) type TensorData = (String, Vec<u64>, u32, Vec<u8>);

/// A GGUF v3 file of the key-value pairs `kvs` (each pair's bytes) and `tensors`, in order,
/// each tensor's data aligned to `alignment`.
pub(crate) fn write_gguf(kvs: &[Vec<u8>], tensors: &[TensorData], alignment: usize) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(b"GGUF");
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(kvs.len() as u64).to_le_bytes());
    for kv in kvs {
        out.extend_from_slice(kv);
    }
    let align = |n: usize| n.div_ceil(alignment) * alignment;
    let mut offset = 0usize;
    for (name, dims, ty, data) in tensors {
        out.extend_from_slice(&(name.len() as u64).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&u32::try_from(dims.len()).expect("few dims").to_le_bytes());
        for d in dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&ty.to_le_bytes());
        out.extend_from_slice(&(offset as u64).to_le_bytes());
        offset = align(offset + data.len());
    }
    out.resize(align(out.len()), 0);
    for (_, _, _, data) in tensors {
        out.extend_from_slice(data);
        out.resize(align(out.len()), 0);
    }
    out
}

/// A key-value pair's bytes: `key`, GGUF value type `ty`, the value's bytes `value`.
pub(crate) fn kv(key: &str, ty: u32, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_key(&mut out, key, ty);
    out.extend_from_slice(value);
    out
}

/// A GGUF string value's bytes (its length, then its bytes), for [`kv`] with type 8.
pub(crate) fn string_value(s: &str) -> Vec<u8> {
    let mut out = (s.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(s.as_bytes());
    out
}

/// A key-value pair's key (its bytes: `kv` as [`Parsed::kvs`] holds it).
pub(crate) fn key_of(kv: &[u8]) -> String {
    Cursor { bytes: kv, pos: 0 }.string()
}

/// The `u32` value of `key` in `file`.
///
/// # Panics
///
/// When `file` has no such key, or its value is not a `u32`.
pub(crate) fn u32_value(file: &Parsed<'_>, key: &str) -> u32 {
    let pair = file
        .kvs
        .iter()
        .find(|pair| key_of(pair) == key)
        .unwrap_or_else(|| panic!("no {key}"));
    // After the key's length and bytes: the value's type (4: u32) and the value.
    let typed = &pair[8 + key.len()..];
    assert_eq!(typed[..4], 4u32.to_le_bytes(), "{key} is a u32");
    u32::from_le_bytes(typed[4..8].try_into().expect("four bytes"))
}

/// A key and its value type (the value follows).
pub(crate) fn put_key(out: &mut Vec<u8>, key: &str, ty: u32) {
    out.extend_from_slice(&(key.len() as u64).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(&ty.to_le_bytes());
}

/// One tensor: its info without the offset, and its data up to the next tensor's (padding
/// included, so every re-based offset stays aligned).
pub(crate) struct Tensor<'a> {
    pub(crate) info: &'a [u8],
    pub(crate) data: &'a [u8],
}

impl Tensor<'_> {
    /// The tensor's name, dimensions and ggml type, read from its info.
    pub(crate) fn describe(&self) -> (String, Vec<u64>, u32) {
        let mut r = Cursor {
            bytes: self.info,
            pos: 0,
        };
        let name = r.string();
        let dims = (0..r.u32()).map(|_| r.u64()).collect();
        (name, dims, r.u32())
    }
}

/// A GGUF file's parts, borrowed: each key-value pair's bytes (`split.*` keys left out), the
/// tensors in data order, the data alignment.
pub(crate) struct Parsed<'a> {
    pub(crate) kvs: Vec<&'a [u8]>,
    pub(crate) tensors: Vec<Tensor<'a>>,
    pub(crate) alignment: usize,
}

impl<'a> Parsed<'a> {
    /// Every tensor as [`write_gguf`] takes it: name, dimensions, type and data (its padding
    /// included, which `write_gguf`'s alignment absorbs).
    pub(crate) fn tensor_data(&self) -> Vec<TensorData> {
        self.tensors
            .iter()
            .map(|t| {
                let (name, dims, ty) = t.describe();
                (name, dims, ty, t.data.to_vec())
            })
            .collect()
    }

    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        assert_eq!(&bytes[..4], b"GGUF", "not a GGUF file");
        let mut r = Cursor { bytes, pos: 8 };
        let n_tensors = r.u64();
        let n_kv = r.u64();
        let mut kvs = Vec::new();
        let mut alignment = 32;
        for _ in 0..n_kv {
            let start = r.pos;
            let key = r.string();
            let ty = r.u32();
            if key == "general.alignment" && ty == 4 {
                alignment = r.u32() as usize;
            } else {
                r.skip_value(ty);
            }
            if !key.starts_with("split.") {
                kvs.push(&bytes[start..r.pos]);
            }
        }
        let mut infos = Vec::new();
        for _ in 0..n_tensors {
            let start = r.pos;
            r.string();
            let dims = r.u32();
            for _ in 0..dims {
                r.u64();
            }
            r.u32();
            let info = &bytes[start..r.pos];
            let offset = usize::try_from(r.u64()).expect("an offset");
            infos.push((info, offset));
        }
        let data_start = r.pos.div_ceil(alignment) * alignment;
        let data_len = bytes.len() - data_start;
        let mut order: Vec<usize> = (0..infos.len()).collect();
        order.sort_by_key(|&i| infos[i].1);
        let mut ends = vec![data_len; infos.len()];
        for pair in order.windows(2) {
            ends[pair[0]] = infos[pair[1]].1;
        }
        let tensors = order
            .iter()
            .map(|&i| Tensor {
                info: infos[i].0,
                data: &bytes[data_start + infos[i].1..data_start + ends[i]],
            })
            .collect();
        Parsed {
            kvs,
            tensors,
            alignment,
        }
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        out
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().expect("4 bytes"))
    }

    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().expect("8 bytes"))
    }

    fn string(&mut self) -> String {
        let n = usize::try_from(self.u64()).expect("a length");
        String::from_utf8_lossy(self.take(n)).into_owned()
    }

    fn skip_value(&mut self, ty: u32) {
        match ty {
            0 | 1 | 7 => self.pos += 1,
            2 | 3 => self.pos += 2,
            4..=6 => self.pos += 4,
            10..=12 => self.pos += 8,
            8 => {
                self.string();
            }
            9 => {
                let elem = self.u32();
                for _ in 0..self.u64() {
                    self.skip_value(elem);
                }
            }
            other => panic!("unknown GGUF value type {other}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_carry_every_tensor_once_and_the_keys_in_the_first() {
        let whole = crate::synthetic_gguf(4096, "llama", 2, 7);
        let shards = split_gguf(&whole, 2);
        // One tensor in the synthetic file: one shard.
        assert_eq!(shards.len(), 1);
        let reparsed = Parsed::new(&shards[0]);
        let original = Parsed::new(&whole);
        assert_eq!(reparsed.tensors.len(), original.tensors.len());
        assert_eq!(reparsed.kvs.len(), original.kvs.len());
        assert_eq!(reparsed.tensors[0].data, original.tensors[0].data);
    }
}
