//! A synthetic multimodal projector for the real test model: no small vision model is on the
//! package registries, so the tests build one.

use crate::Draw;

/// A GGUF vision projector for libmtmd (llama.cpp's multimodal library) of type `mlp`
/// (`LLaVA` 1.5's: a CLIP-style vision tower, then linear → GELU → linear) whose output width
/// is `n_embd` (SmolLM2-135M: 576), with seeded random weights.
///
/// The tower is as small as libmtmd allows: 32 × 32 pixel images (any image is letterboxed to
/// that), 16 × 16 patches, so **4 embeddings an image**; width 64, one attention head, one
/// block (`clip.vision.feature_layer = [1]`, else the `LLaVA` graph's "second to last layer" would skip
/// it), a feed-forward width of 128 (it must differ from the width: libmtmd swaps up and down
/// otherwise), every tensor F32. About 0.6 MB.
///
/// # Panics
///
/// Never: the weights are 16-bit draws, exact in an `f32`.
pub fn vision_projector(n_embd: u64, seed: u64) -> Vec<u8> {
    const IMAGE: u32 = 32;
    const PATCH: u64 = 16;
    const WIDTH: u64 = 64;
    const FFN: u64 = 128;
    const HIDDEN: u64 = 128;
    let patches = u64::from(IMAGE / 16).pow(2);

    let mut gguf = Writer::default();
    gguf.string("general.architecture", "clip");
    gguf.string("general.name", "wick test projector");
    gguf.boolean("clip.has_vision_encoder", true);
    gguf.string("clip.projector_type", "mlp");
    gguf.boolean("clip.use_gelu", true);
    gguf.u32("clip.vision.image_size", IMAGE);
    gguf.u32("clip.vision.patch_size", 16);
    gguf.u32("clip.vision.embedding_length", 64);
    gguf.u32("clip.vision.feed_forward_length", 128);
    gguf.u32(
        "clip.vision.projection_dim",
        u32::try_from(n_embd).unwrap_or(0),
    );
    gguf.u32("clip.vision.block_count", 1);
    gguf.u32("clip.vision.attention.head_count", 1);
    gguf.f32("clip.vision.attention.layer_norm_epsilon", 1e-5);
    gguf.f32s("clip.vision.image_mean", &[0.5, 0.5, 0.5]);
    gguf.f32s("clip.vision.image_std", &[0.5, 0.5, 0.5]);
    gguf.i32s("clip.vision.feature_layer", &[1]);

    let mut draw = Draw::new(seed);
    // (name, shape as GGUF stores it: ne0 first, the input width of a linear layer; the
    // draws' scale, and a constant added: layer norms' weights are 1).
    let tensors: Vec<(&str, Vec<u64>, f32, f32)> = vec![
        (
            "v.patch_embd.weight",
            vec![PATCH, PATCH, 3, WIDTH],
            0.1,
            0.0,
        ),
        ("v.patch_embd.bias", vec![WIDTH], 0.1, 0.0),
        ("v.position_embd.weight", vec![WIDTH, patches], 0.5, 0.0),
        ("v.pre_ln.weight", vec![WIDTH], 0.0, 1.0),
        ("v.pre_ln.bias", vec![WIDTH], 0.0, 0.0),
        ("v.blk.0.ln1.weight", vec![WIDTH], 0.0, 1.0),
        ("v.blk.0.ln1.bias", vec![WIDTH], 0.0, 0.0),
        ("v.blk.0.attn_q.weight", vec![WIDTH, WIDTH], 0.25, 0.0),
        ("v.blk.0.attn_q.bias", vec![WIDTH], 0.1, 0.0),
        ("v.blk.0.attn_k.weight", vec![WIDTH, WIDTH], 0.25, 0.0),
        ("v.blk.0.attn_k.bias", vec![WIDTH], 0.1, 0.0),
        ("v.blk.0.attn_v.weight", vec![WIDTH, WIDTH], 0.25, 0.0),
        ("v.blk.0.attn_v.bias", vec![WIDTH], 0.1, 0.0),
        ("v.blk.0.attn_out.weight", vec![WIDTH, WIDTH], 0.25, 0.0),
        ("v.blk.0.attn_out.bias", vec![WIDTH], 0.1, 0.0),
        ("v.blk.0.ln2.weight", vec![WIDTH], 0.0, 1.0),
        ("v.blk.0.ln2.bias", vec![WIDTH], 0.0, 0.0),
        ("v.blk.0.ffn_up.weight", vec![WIDTH, FFN], 0.25, 0.0),
        ("v.blk.0.ffn_up.bias", vec![FFN], 0.1, 0.0),
        ("v.blk.0.ffn_down.weight", vec![FFN, WIDTH], 0.2, 0.0),
        ("v.blk.0.ffn_down.bias", vec![WIDTH], 0.1, 0.0),
        ("v.post_ln.weight", vec![WIDTH], 0.0, 1.0),
        ("v.post_ln.bias", vec![WIDTH], 0.0, 0.0),
        ("mm.0.weight", vec![WIDTH, HIDDEN], 0.25, 0.0),
        ("mm.0.bias", vec![HIDDEN], 0.1, 0.0),
        ("mm.2.weight", vec![HIDDEN, n_embd], 0.05, 0.0),
        ("mm.2.bias", vec![n_embd], 0.02, 0.0),
    ];
    for (name, shape, scale, offset) in tensors {
        let n: u64 = shape.iter().product();
        let values: Vec<f32> = (0..n).map(|_| offset + scale * draw.next()).collect();
        gguf.tensor(name, &shape, &values);
    }
    gguf.finish()
}

/// A GGUF v3 file being written: metadata, tensor infos and F32 data, each tensor's data
/// padded to 32 bytes (the default alignment).
#[derive(Default)]
struct Writer {
    kv: Vec<u8>,
    n_kv: u64,
    infos: Vec<u8>,
    data: Vec<u8>,
    n_tensors: u64,
}

impl Writer {
    fn key(&mut self, key: &str, kind: u32) {
        put_str(&mut self.kv, key);
        self.kv.extend_from_slice(&kind.to_le_bytes());
        self.n_kv += 1;
    }

    fn string(&mut self, key: &str, value: &str) {
        self.key(key, 8);
        put_str(&mut self.kv, value);
    }

    fn boolean(&mut self, key: &str, value: bool) {
        self.key(key, 7);
        self.kv.push(u8::from(value));
    }

    fn u32(&mut self, key: &str, value: u32) {
        self.key(key, 4);
        self.kv.extend_from_slice(&value.to_le_bytes());
    }

    fn f32(&mut self, key: &str, value: f32) {
        self.key(key, 6);
        self.kv.extend_from_slice(&value.to_le_bytes());
    }

    fn f32s(&mut self, key: &str, values: &[f32]) {
        self.key(key, 9);
        self.kv.extend_from_slice(&6u32.to_le_bytes());
        self.kv
            .extend_from_slice(&(values.len() as u64).to_le_bytes());
        for v in values {
            self.kv.extend_from_slice(&v.to_le_bytes());
        }
    }

    fn i32s(&mut self, key: &str, values: &[i32]) {
        self.key(key, 9);
        self.kv.extend_from_slice(&5u32.to_le_bytes());
        self.kv
            .extend_from_slice(&(values.len() as u64).to_le_bytes());
        for v in values {
            self.kv.extend_from_slice(&v.to_le_bytes());
        }
    }

    fn tensor(&mut self, name: &str, shape: &[u64], values: &[f32]) {
        put_str(&mut self.infos, name);
        self.infos
            .extend_from_slice(&u32::try_from(shape.len()).unwrap_or(0).to_le_bytes());
        for d in shape {
            self.infos.extend_from_slice(&d.to_le_bytes());
        }
        self.infos.extend_from_slice(&0u32.to_le_bytes()); // F32
        self.infos
            .extend_from_slice(&(self.data.len() as u64).to_le_bytes());
        for v in values {
            self.data.extend_from_slice(&v.to_le_bytes());
        }
        while !self.data.len().is_multiple_of(32) {
            self.data.push(0);
        }
        self.n_tensors += 1;
    }

    fn finish(self) -> Vec<u8> {
        let mut file = b"GGUF".to_vec();
        file.extend_from_slice(&3u32.to_le_bytes());
        file.extend_from_slice(&self.n_tensors.to_le_bytes());
        file.extend_from_slice(&self.n_kv.to_le_bytes());
        file.extend_from_slice(&self.kv);
        file.extend_from_slice(&self.infos);
        while !file.len().is_multiple_of(32) {
            file.push(0);
        }
        file.extend_from_slice(&self.data);
        file
    }
}

fn put_str(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
}

/// A PNG of `width` × `height` pixels filled by `pixel(x, y) -> [r, g, b]`, uncompressed
/// (stored deflate blocks), for tests that send images.
///
/// # Panics
///
/// Never: stored blocks hold at most 65,535 bytes by construction.
pub fn png(width: u32, height: u32, pixel: impl Fn(u32, u32) -> [u8; 3]) -> Vec<u8> {
    let mut raw = Vec::new();
    for y in 0..height {
        raw.push(0); // filter: none
        for x in 0..width {
            raw.extend_from_slice(&pixel(x, y));
        }
    }
    // zlib: header, stored blocks of at most 65,535 bytes, Adler-32.
    let mut zlib = vec![0x78, 0x01];
    let chunks: Vec<&[u8]> = raw.chunks(65_535).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        zlib.push(u8::from(i + 1 == chunks.len()));
        let len = u16::try_from(chunk.len()).expect("at most 65,535");
        zlib.extend_from_slice(&len.to_le_bytes());
        zlib.extend_from_slice(&(!len).to_le_bytes());
        zlib.extend_from_slice(chunk);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for byte in &raw {
        a = (a + u32::from(*byte)) % 65_521;
        b = (b + a) % 65_521;
    }
    zlib.extend_from_slice(&((b << 16) | a).to_be_bytes());

    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut header = Vec::new();
    header.extend_from_slice(&width.to_be_bytes());
    header.extend_from_slice(&height.to_be_bytes());
    header.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit RGB
    for (kind, body) in [(b"IHDR", header), (b"IDAT", zlib), (b"IEND", Vec::new())] {
        png.extend_from_slice(&u32::try_from(body.len()).expect("small").to_be_bytes());
        let mut crc_input = kind.to_vec();
        crc_input.extend_from_slice(&body);
        png.extend_from_slice(&crc_input);
        png.extend_from_slice(&crc32(&crc_input).to_be_bytes());
    }
    png
}

/// CRC-32 (IEEE), bit by bit: PNG chunks need it and these images are tiny.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xffff_ffff_u32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_projector_is_a_gguf_file_of_the_expected_size() {
        let file = vision_projector(576, 1);
        assert_eq!(&file[..4], b"GGUF");
        assert_eq!(u64::from_le_bytes(file[8..16].try_into().unwrap()), 27);
        assert!(
            file.len() > 500_000 && file.len() < 800_000,
            "{}",
            file.len()
        );
        assert_ne!(vision_projector(576, 1), vision_projector(576, 2));
    }

    #[test]
    fn png_crc_and_layout_are_right() {
        // CRC-32 of "IEND" is the fixed value every PNG ends with.
        assert_eq!(crc32(b"IEND"), 0xae42_6082);
        let image = png(2, 1, |x, _| [u8::try_from(x).unwrap() * 255, 0, 0]);
        assert_eq!(&image[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&image[12..16], b"IHDR");
        assert!(image.ends_with(&[0xae, 0x42, 0x60, 0x82]));
    }
}
