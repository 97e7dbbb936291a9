//! Each supported ggml type decodes blocks built by hand from known values, in ggml's layout;
//! unsupported and unknown types are refused by name.

use super::*;

const F16_ONE: u16 = 0x3c00;
const F16_HALF: u16 = 0x3800;
const F16_QUARTER: u16 = 0x3400;
const F16_MINUS_ONE: u16 = 0xbc00;

fn decode(ty: GgmlType, data: &[u8]) -> Vec<f32> {
    let mut out = vec![];
    dequantize(ty, data, &mut out);
    out
}

#[test]
fn half_precision_decodes_exactly() {
    use super::super::dequant::f16_to_f32;
    let cases: [(u16, f32); 9] = [
        (0x0000, 0.0),
        (F16_ONE, 1.0),
        (0xc100, -2.5),
        (0x7bff, 65504.0),
        (0x0400, 6.103_515_6e-5), // smallest normal
        (0x0001, 5.960_464_5e-8), // smallest subnormal, 2^-24
        (0x83ff, -6.097_555e-5),  // largest negative subnormal
        (0x7c00, f32::INFINITY),
        (0xfc00, f32::NEG_INFINITY),
    ];
    for (bits, want) in cases {
        assert_eq!(f16_to_f32(bits), want, "f16 {bits:#06x}");
    }
    assert!(f16_to_f32(0x7e00).is_nan());
    assert_eq!(f16_to_f32(0x8000).to_bits(), (-0.0f32).to_bits());
}

#[test]
fn float_types_round_trip() {
    let want = [1.5f32, -0.0, 3.25e-3, -7.0e10];
    let bytes: Vec<u8> = want.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(decode(GgmlType::F32, &bytes), want);

    let halves: Vec<u8> = [F16_ONE, 0xc100, F16_QUARTER]
        .iter()
        .flat_map(|h| h.to_le_bytes())
        .collect();
    assert_eq!(decode(GgmlType::F16, &halves), [1.0, -2.5, 0.25]);

    // bf16 is the top half of a float32.
    let bf: Vec<u8> = [1.0f32, -2.5, 3.140625]
        .iter()
        .flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes())
        .collect();
    assert_eq!(decode(GgmlType::Bf16, &bf), [1.0, -2.5, 3.140625]);
}

#[test]
fn q8_0_is_scale_times_int8() {
    // Two blocks: d = 0.5 with q = -128, -125, ..., -35, and d = -1 with q = 0..31.
    let q: Vec<i8> = (0..32).map(|i: i32| (-128 + 3 * i) as i8).collect();
    let mut data = F16_HALF.to_le_bytes().to_vec();
    data.extend(q.iter().map(|&v| v as u8));
    data.extend(F16_MINUS_ONE.to_le_bytes());
    data.extend(0..32u8);
    let want: Vec<f32> = q
        .iter()
        .map(|&v| f32::from(v) * 0.5)
        .chain((0..32).map(|i| -(i as f32)))
        .collect();
    assert_eq!(want[0], -64.0);
    assert_eq!(decode(GgmlType::Q8_0, &data), want);
}

/// 16 bytes whose low nibbles hold `lo[i]` and high nibbles `hi[i]`.
fn nibbles(lo: [u8; 16], hi: [u8; 16]) -> Vec<u8> {
    lo.iter().zip(hi).map(|(l, h)| l | (h << 4)).collect()
}

#[test]
fn q4_0_low_nibbles_are_the_first_half() {
    let lo: [u8; 16] = std::array::from_fn(|i| i as u8);
    let hi: [u8; 16] = std::array::from_fn(|i| 15 - i as u8);
    let mut data = F16_QUARTER.to_le_bytes().to_vec();
    data.extend(nibbles(lo, hi));
    let want: Vec<f32> = lo
        .iter()
        .chain(&hi)
        .map(|&n| (f32::from(n) - 8.0) * 0.25)
        .collect();
    assert_eq!(decode(GgmlType::Q4_0, &data), want);
    assert_eq!(want[0], -2.0);
    assert_eq!(want[16], 1.75);
}

#[test]
fn q4_1_is_nibble_times_d_plus_m() {
    let lo: [u8; 16] = std::array::from_fn(|i| (i * 7 % 16) as u8);
    let hi: [u8; 16] = std::array::from_fn(|i| (i * 3 % 16) as u8);
    let mut data = F16_HALF.to_le_bytes().to_vec();
    data.extend(F16_MINUS_ONE.to_le_bytes());
    data.extend(nibbles(lo, hi));
    let want: Vec<f32> = lo
        .iter()
        .chain(&hi)
        .map(|&n| f32::from(n) * 0.5 - 1.0)
        .collect();
    assert_eq!(decode(GgmlType::Q4_1, &data), want);
}

#[test]
fn types_are_named_and_unsupported_ones_refused_by_name() {
    for (id, ty) in [
        (0, GgmlType::F32),
        (1, GgmlType::F16),
        (2, GgmlType::Q4_0),
        (3, GgmlType::Q4_1),
        (8, GgmlType::Q8_0),
        (30, GgmlType::Bf16),
    ] {
        assert_eq!(GgmlType::of("t", id), Ok(ty));
        assert_eq!(GgmlType::name_of(id), Some(ty.name()));
    }
    for (id, name) in [(12, "Q4_K"), (6, "Q5_0"), (14, "Q6_K"), (16, "IQ2_XXS")] {
        assert_eq!(
            GgmlType::of("blk.3.ffn_up.weight", id),
            Err(GgufError::UnsupportedTensorType {
                tensor: "blk.3.ffn_up.weight".into(),
                type_name: name,
            })
        );
    }
    for id in [4, 31, 40, 1000] {
        assert!(matches!(
            GgmlType::of("x", id),
            Err(GgufError::UnknownTensorType { type_id, .. }) if type_id == id
        ));
    }
}

#[test]
fn quantised_tensors_import_through_the_whole_path() {
    // token_embd as Q8_0, one projection as Q4_0 and one as Q4_1 (innermost dim 32 = one block
    // a row); the imported floats equal the decoded blocks.
    let mut w = tiny("llama");
    let rows = 8usize; // vocabulary
    let mut q8 = vec![];
    for r in 0..rows {
        q8.extend(F16_QUARTER.to_le_bytes());
        q8.extend((0..32).map(|i| (i as i8 - 16 + r as i8) as u8));
    }
    w.tensor("token_embd.weight", &[HIDDEN, rows as u64], 8, q8.clone());
    let block = |d: u16, m: Option<u16>| {
        let mut b = d.to_le_bytes().to_vec();
        if let Some(m) = m {
            b.extend(m.to_le_bytes());
        }
        b.extend((0..16u8).map(|i| i | ((15 - i) << 4)));
        b
    };
    let q4_0: Vec<u8> = (0..FFN).flat_map(|_| block(F16_HALF, None)).collect();
    let q4_1: Vec<u8> = (0..FFN)
        .flat_map(|_| block(F16_QUARTER, Some(F16_MINUS_ONE)))
        .collect();
    w.tensor("blk.0.ffn_gate.weight", &[HIDDEN, FFN], 2, q4_0.clone());
    w.tensor("blk.0.ffn_up.weight", &[HIDDEN, FFN], 3, q4_1.clone());
    let (out, r) = import_bytes("quantised", &w.bytes());
    r.expect("import");
    for (name, ty, data) in [
        ("model.embed_tokens.weight", GgmlType::Q8_0, q8),
        ("model.layers.0.mlp.gate_proj.weight", GgmlType::Q4_0, q4_0),
        ("model.layers.0.mlp.up_proj.weight", GgmlType::Q4_1, q4_1),
    ] {
        let (shape, got) = read_f32(&out, name);
        assert_eq!(got, decode(ty, &data), "{name}");
        assert_eq!(shape.iter().product::<usize>(), got.len());
    }
}
