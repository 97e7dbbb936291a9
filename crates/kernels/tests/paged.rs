//! The paged decode kernel against libtorch's attention over the same keys gathered into a
//! contiguous copy (what the engine did before), under the kernel set this process picks
//! (`ATEN_CPU_CAPABILITY` chooses it for both).

use spade_kernels::{Reads, paged_decode_attention};
use tch::{Device, Kind, Tensor};

/// Pools of `blocks` blocks, rows' tables drawn as a permutation so blocks are scattered.
struct Case {
    k: Tensor,
    v: Tensor,
    q: Tensor,
    tables: Vec<Vec<u32>>,
    lens: Vec<usize>,
    block: usize,
}

fn case(seed: i64, lens: &[usize], kv: i64, group: i64, d: i64, block: usize) -> Case {
    tch::manual_seed(seed);
    let need: usize = lens.iter().map(|l| l.div_ceil(block) + 1).sum();
    let blocks = need + 3;
    let slots = (blocks * block) as i64;
    let k = Tensor::randn([slots, kv, d], (Kind::Float, Device::Cpu));
    let v = Tensor::randn([slots, kv, d], (Kind::Float, Device::Cpu));
    let rows = lens.len() as i64;
    let q = Tensor::randn([rows, kv, group, d], (Kind::Float, Device::Cpu)) * 2.0;
    let perm: Vec<i64> = Vec::try_from(Tensor::randperm(blocks as i64, (Kind::Int64, Device::Cpu)))
        .expect("permutation");
    let mut next = perm.into_iter().map(|b| b as u32);
    let tables = lens
        .iter()
        .map(|l| {
            (0..l.div_ceil(block) + 1)
                .filter_map(|_| next.next())
                .collect()
        })
        .collect();
    Case {
        k,
        v,
        q,
        tables,
        lens: lens.to_vec(),
        block,
    }
}

/// libtorch's answer, row by row: gather the row's slots, then the math of attention in
/// float64 (output and log-sum-exp).
fn reference(c: &Case, scale: f64) -> (Tensor, Tensor) {
    let mut outs = vec![];
    let mut lses = vec![];
    for (r, (table, &len)) in c.tables.iter().zip(&c.lens).enumerate() {
        let slots: Vec<i64> = (0..len)
            .map(|p| (table[p / c.block] as usize * c.block + p % c.block) as i64)
            .collect();
        let idx = Tensor::from_slice(&slots);
        // [kv, len, d]
        let k =
            c.k.index_select(0, &idx)
                .transpose(0, 1)
                .to_kind(Kind::Double);
        let v =
            c.v.index_select(0, &idx)
                .transpose(0, 1)
                .to_kind(Kind::Double);
        let q = c.q.get(r as i64).to_kind(Kind::Double); // [kv, g, d]
        let s = q.matmul(&k.transpose(1, 2)) * scale; // [kv, g, len]
        let l = s.logsumexp([-1], true);
        outs.push((s - &l).exp().matmul(&v));
        lses.push(l);
    }
    (Tensor::stack(&outs, 0), Tensor::stack(&lses, 0))
}

fn reads(c: &Case) -> Vec<Reads<'_>> {
    c.tables
        .iter()
        .zip(&c.lens)
        .map(|(t, &l)| (t.as_slice(), l))
        .collect()
}

fn max_err(a: &Tensor, b: &Tensor) -> f64 {
    (a.to_kind(Kind::Double) - b).abs().max().double_value(&[])
}

#[test]
fn the_kernel_equals_attention_over_gathered_keys() {
    // Qwen3 shapes (head_dim 64 and 128, 1-8 query heads per key head), rows of ragged
    // lengths that end mid-block, a one-key row and a head_dim that is not a multiple of 16.
    for (seed, kv, group, d, block, lens) in [
        (1, 2, 2, 64, 16, vec![1, 17, 300, 33, 1000]),
        (2, 8, 4, 128, 32, vec![5, 64, 700]),
        (3, 1, 1, 40, 8, vec![9, 2, 100]),
        (4, 4, 8, 64, 16, vec![2048]),
    ] {
        let c = case(seed, &lens, kv, group, d, block);
        let scale = (d as f64).powf(-0.5);
        let (out, lse) =
            paged_decode_attention(&c.q, &c.k, &c.v, c.block, &reads(&c), scale).expect("kernel");
        let (want_o, want_l) = reference(&c, scale);
        assert_eq!(out.size(), c.q.size());
        let (eo, el) = (max_err(&out, &want_o), max_err(&lse, &want_l));
        assert!(
            eo < 2e-5 && el < 2e-5,
            "seed {seed}: output off by {eo}, lse by {el}"
        );
    }
}

#[test]
fn many_threads_give_the_same_bits_as_one() {
    let c = case(
        5,
        &[40_000, 30_000, 50_000, 6_000, 10, 25_000],
        2,
        2,
        64,
        16,
    );
    let scale = 0.125;
    tch::set_num_threads(1);
    let one = paged_decode_attention(&c.q, &c.k, &c.v, c.block, &reads(&c), scale).expect("one");
    tch::set_num_threads(3);
    let three =
        paged_decode_attention(&c.q, &c.k, &c.v, c.block, &reads(&c), scale).expect("three");
    tch::set_num_threads(1);
    assert!(one.0.equal(&three.0) && one.1.equal(&three.1));
}

#[test]
fn a_row_of_no_keys_gets_zeros_and_minus_infinity() {
    let c = case(6, &[0, 20], 2, 2, 64, 16);
    let (out, lse) =
        paged_decode_attention(&c.q, &c.k, &c.v, c.block, &reads(&c), 0.125).expect("kernel");
    assert_eq!(out.get(0).abs().sum(Kind::Double).double_value(&[]), 0.0);
    assert_eq!(lse.get(0).max().double_value(&[]), f64::NEG_INFINITY);
    assert!(lse.get(1).isfinite().all().int64_value(&[]) == 1);
}

#[test]
fn tables_that_reach_outside_the_pool_are_refused_not_read() {
    let c = case(7, &[40], 2, 2, 64, 16);
    let blocks = (c.k.size()[0] as usize / c.block) as u32;
    let outside = [0, 1, blocks];
    let e = paged_decode_attention(&c.q, &c.k, &c.v, c.block, &[(&outside, 40)], 0.125)
        .expect_err("block past the pool");
    assert!(
        e.contains(&format!("block {blocks} of a pool of {blocks}")),
        "{e}"
    );
    let short = [0u32];
    let e = paged_decode_attention(&c.q, &c.k, &c.v, c.block, &[(&short, 40)], 0.125)
        .expect_err("too few blocks");
    assert!(e.contains("reads 40 keys but lists 1 blocks"), "{e}");
    let half = c.k.to_kind(Kind::Half);
    let e = paged_decode_attention(&c.q, &half, &c.v, c.block, &reads(&c), 0.125)
        .expect_err("half keys");
    assert!(e.contains("keys must be contiguous float32"), "{e}");
    let e = paged_decode_attention(&c.q, &c.k, &c.v, c.block, &[], 0.125)
        .expect_err("rows without reads");
    assert!(e.contains("1 rows") || e.contains("0 rows"), "{e}");
}
