//! Tables from ggml: tensor element types (name, block size, bytes per block) and the
//! `general.file_type` codes that name a file's quantization.

/// `(ggml type id, name, elements per block, bytes per block)`.
const TYPES: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
];

/// `general.file_type` (llama.cpp's `llama_ftype`) to the quantization's usual name.
const FILE_TYPES: &[(u32, &str)] = &[
    (0, "F32"),
    (1, "F16"),
    (2, "Q4_0"),
    (3, "Q4_1"),
    (7, "Q8_0"),
    (8, "Q5_0"),
    (9, "Q5_1"),
    (10, "Q2_K"),
    (11, "Q3_K_S"),
    (12, "Q3_K_M"),
    (13, "Q3_K_L"),
    (14, "Q4_K_S"),
    (15, "Q4_K_M"),
    (16, "Q5_K_S"),
    (17, "Q5_K_M"),
    (18, "Q6_K"),
    (19, "IQ2_XXS"),
    (20, "IQ2_XS"),
    (21, "Q2_K_S"),
    (22, "IQ3_XS"),
    (23, "IQ3_XXS"),
    (24, "IQ1_S"),
    (25, "IQ4_NL"),
    (26, "IQ3_S"),
    (27, "IQ3_M"),
    (28, "IQ2_S"),
    (29, "IQ2_M"),
    (30, "IQ4_XS"),
    (31, "IQ1_M"),
    (32, "BF16"),
    (36, "TQ1_0"),
    (37, "TQ2_0"),
    (38, "MXFP4_MOE"),
];

/// The name of ggml tensor type `id`, if known.
pub(crate) fn type_name(id: u32) -> Option<&'static str> {
    TYPES.iter().find(|t| t.0 == id).map(|t| t.1)
}

/// Bytes that `elements` values of ggml type `id` take, if the type is known and the count is
/// a whole number of blocks.
pub(crate) fn tensor_bytes(id: u32, elements: u64) -> Option<u64> {
    let &(_, _, block, size) = TYPES.iter().find(|t| t.0 == id)?;
    elements
        .is_multiple_of(block)
        .then(|| (elements / block).checked_mul(size))?
}

/// The quantization name of `general.file_type` code `code`, if known.
pub(crate) fn file_type_name(code: u32) -> Option<&'static str> {
    // Bit 10 (1024) marks a "guessed" file type; the name is the same.
    FILE_TYPES.iter().find(|t| t.0 == code & !1024).map(|t| t.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_block_layout() {
        assert_eq!(tensor_bytes(0, 10), Some(40));
        assert_eq!(tensor_bytes(3, 64), Some(40));
        assert_eq!(tensor_bytes(3, 33), None, "not a whole block");
        assert_eq!(tensor_bytes(12, 512), Some(288));
        assert_eq!(tensor_bytes(99, 32), None, "unknown type");
        assert_eq!(type_name(14), Some("Q6_K"));
    }

    #[test]
    fn file_types_name_quantizations() {
        assert_eq!(file_type_name(3), Some("Q4_1"));
        assert_eq!(file_type_name(15), Some("Q4_K_M"));
        assert_eq!(file_type_name(15 | 1024), Some("Q4_K_M"));
        assert_eq!(file_type_name(5), None);
    }
}
