//! ggml tensor types and their dequantisation to float32.
//!
//! Only the types small models are commonly published in are implemented, each in ggml's exact
//! block layout (`ggml/src/ggml-common.h`, `dequantize_row_*` in `ggml-quants.c`); every other
//! type is refused by its ggml name rather than guessed at. A K-quant or IQ file has to be
//! re-quantised with llama.cpp's `llama-quantize` (or fetched as Q8_0 / F16) first.

use super::GgufError;

/// ggml's type names by id (`enum ggml_type`); `None` marks ids ggml has retired.
const NAMES: [Option<&str>; 40] = [
    Some("F32"),
    Some("F16"),
    Some("Q4_0"),
    Some("Q4_1"),
    None, // Q4_2, removed
    None, // Q4_3, removed
    Some("Q5_0"),
    Some("Q5_1"),
    Some("Q8_0"),
    Some("Q8_1"),
    Some("Q2_K"),
    Some("Q3_K"),
    Some("Q4_K"),
    Some("Q5_K"),
    Some("Q6_K"),
    Some("Q8_K"),
    Some("IQ2_XXS"),
    Some("IQ2_XS"),
    Some("IQ3_XXS"),
    Some("IQ1_S"),
    Some("IQ4_NL"),
    Some("IQ3_S"),
    Some("IQ2_S"),
    Some("IQ4_XS"),
    Some("I8"),
    Some("I16"),
    Some("I32"),
    Some("I64"),
    Some("F64"),
    Some("IQ1_M"),
    Some("BF16"),
    None, // Q4_0_4_4, removed
    None, // Q4_0_4_8, removed
    None, // Q4_0_8_8, removed
    Some("TQ1_0"),
    Some("TQ2_0"),
    None, // IQ4_NL_4_4, removed
    None, // IQ4_NL_4_8, removed
    None, // IQ4_NL_8_8, removed
    Some("MXFP4"),
];

/// A ggml type this module can dequantise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    F32,
    F16,
    Bf16,
    /// Blocks of 32: f16 scale `d`, 32 × i8 `q`; value `q * d`.
    Q8_0,
    /// Blocks of 32: f16 `d`, 16 bytes of nibbles (low nibbles are elements 0..16, high
    /// nibbles 16..32); value `(nibble - 8) * d`.
    Q4_0,
    /// Blocks of 32: f16 `d`, f16 `m`, 16 bytes of nibbles as in Q4_0; value `nibble * d + m`.
    Q4_1,
}

impl GgmlType {
    /// The type of `tensor`'s id, or why it is refused.
    pub fn of(tensor: &str, type_id: u32) -> Result<Self, GgufError> {
        Ok(match type_id {
            0 => Self::F32,
            1 => Self::F16,
            30 => Self::Bf16,
            8 => Self::Q8_0,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            _ => {
                return Err(match Self::name_of(type_id) {
                    Some(type_name) => GgufError::UnsupportedTensorType {
                        tensor: tensor.to_string(),
                        type_name,
                    },
                    None => GgufError::UnknownTensorType {
                        tensor: tensor.to_string(),
                        type_id,
                    },
                });
            }
        })
    }

    /// ggml's name of a type id, for any type ggml defines.
    pub fn name_of(type_id: u32) -> Option<&'static str> {
        NAMES.get(type_id as usize).copied().flatten()
    }

    /// ggml's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::Bf16 => "BF16",
            Self::Q8_0 => "Q8_0",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
        }
    }

    /// (elements, bytes) of one block.
    pub fn block(self) -> (u64, u64) {
        match self {
            Self::F32 => (1, 4),
            Self::F16 | Self::Bf16 => (1, 2),
            Self::Q8_0 => (32, 34),
            Self::Q4_0 => (32, 18),
            Self::Q4_1 => (32, 20),
        }
    }
}

/// IEEE half to float32, exactly (subnormals, infinities and NaN included).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let mant = u32::from(h & 0x3ff);
    let bits = match (exp, mant) {
        (0, 0) => sign,
        // Subnormal: mant * 2^-24, exact in float32.
        (0, m) => {
            let magnitude = m as f32 * f32::powi(2.0, -24);
            return if sign == 0 { magnitude } else { -magnitude };
        }
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[i], b[i + 1]]))
}

/// Dequantises `data` (whole blocks of `ty`, as [`super::Gguf::tensor_data`] returns) to
/// float32, appending to `out`.
pub fn dequantize(ty: GgmlType, data: &[u8], out: &mut Vec<f32>) {
    let (elems, bytes) = ty.block();
    out.reserve(data.len() / bytes as usize * elems as usize);
    match ty {
        GgmlType::F32 => out.extend(
            data.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        ),
        GgmlType::F16 => out.extend(data.chunks_exact(2).map(|c| f16_at(c, 0))),
        GgmlType::Bf16 => out.extend(
            data.chunks_exact(2)
                .map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16)),
        ),
        GgmlType::Q8_0 => {
            for b in data.chunks_exact(34) {
                let d = f16_at(b, 0);
                out.extend(b[2..].iter().map(|&q| f32::from(q as i8) * d));
            }
        }
        GgmlType::Q4_0 => {
            for b in data.chunks_exact(18) {
                let d = f16_at(b, 0);
                let qs = &b[2..];
                out.extend(qs.iter().map(|&q| (f32::from(q & 0x0f) - 8.0) * d));
                out.extend(qs.iter().map(|&q| (f32::from(q >> 4) - 8.0) * d));
            }
        }
        GgmlType::Q4_1 => {
            for b in data.chunks_exact(20) {
                let (d, m) = (f16_at(b, 0), f16_at(b, 2));
                let qs = &b[4..];
                out.extend(qs.iter().map(|&q| f32::from(q & 0x0f) * d + m));
                out.extend(qs.iter().map(|&q| f32::from(q >> 4) * d + m));
            }
        }
    }
}
