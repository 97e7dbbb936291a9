//! Decode attention over a paged KV cache, reading each row's blocks where they lie.
//!
//! The pool holds `[slots, kv_heads, head_dim]` keys (and values) in blocks of `block` slots;
//! a row's block table lists its blocks in order (its token `p` sits in slot
//! `table[p / block] * block + p % block`). Per row the kernel makes two passes over the row's
//! slots, each slot's key heads together (they lie side by side): the scores of every query
//! head (grouped-query attention: the query heads that share a key head are its query rows),
//! then, after a softmax over each query's scores, the values weighted by them. Both passes
//! read the pool directly and ask for the slots a few ahead (a row's blocks lie anywhere, so
//! the hardware's stream prefetch loses the thread at each block's end): each key and value
//! is read once and nothing is copied. Besides the output it returns each query's log-sum-exp
//! of scores, which the engine's cascade needs to merge parts read apart (shared prompt
//! blocks).
//!
//! Rounding: dot products run in one register's lanes (16 with AVX-512, 8 with AVX2, fused
//! multiply-adds; 16 unfused running sums on the baseline) and then across them, and `exp` is
//! a polynomial (Cephes' single-precision one, within 2 ulp), so results agree with libtorch's
//! attention to about 1e-6 relative, not bit for bit. With more than one libtorch thread the
//! rows are split among threads; every row is computed by one thread in the same order, so
//! the result does not depend on the thread count.

use crate::capability::{Set, chosen};
use crate::{floats, floats_mut, plain_floats};
use tch::{Device, Kind, Tensor};

/// What one row reads: its blocks in order, and how many keys (the first slots they list).
pub type Reads<'a> = (&'a [u32], usize);

/// Sizes of one call.
#[derive(Debug, Clone, Copy)]
struct Shape {
    kv_heads: usize,
    /// Query heads per key head.
    group: usize,
    head_dim: usize,
    block: usize,
}

/// Attention of one query token per row over the keys and values the paged pools `k_pool` and
/// `v_pool` ([slots, kv_heads, head_dim], float32, contiguous) hold for it: `q` is [rows,
/// kv_heads, group, head_dim] (each key head's query heads as its query rows) and `reads[r]`
/// row r's blocks and key count. Returns the output [rows, kv_heads, group, head_dim] and the
/// log-sum-exp of each query's scaled scores [rows, kv_heads, group, 1], both float32; a row
/// of no keys gets zeros and -inf.
///
/// Errors (a message naming what does not fit) where a tensor is not float32 on the CPU, the
/// shapes disagree, or a table lists a block outside the pool or too few blocks for its keys:
/// the kernel reads the pool only where it has checked it may.
pub fn paged_decode_attention(
    q: &Tensor,
    k_pool: &Tensor,
    v_pool: &Tensor,
    block: usize,
    reads: &[Reads<'_>],
    scale: f64,
) -> Result<(Tensor, Tensor), String> {
    let q = q.contiguous();
    for (name, t) in [("queries", &q), ("keys", k_pool), ("values", v_pool)] {
        if !plain_floats(t) {
            return Err(format!(
                "paged decode attention: {name} must be contiguous float32 on the CPU, got {:?} on {:?}",
                t.kind(),
                t.device()
            ));
        }
    }
    let (qs, ks) = (q.size(), k_pool.size());
    if qs.len() != 4 || ks.len() != 3 || k_pool.size() != v_pool.size() {
        return Err(format!(
            "paged decode attention: expected queries [rows, kv_heads, group, head_dim] and pools \
             [slots, kv_heads, head_dim] alike, got {qs:?}, {ks:?} and {:?}",
            v_pool.size()
        ));
    }
    let dim = |x: i64| usize::try_from(x).unwrap_or(0);
    let (rows, sh) = (
        dim(qs[0]),
        Shape {
            kv_heads: dim(qs[1]),
            group: dim(qs[2]),
            head_dim: dim(qs[3]),
            block,
        },
    );
    if dim(ks[1]) != sh.kv_heads || dim(ks[2]) != sh.head_dim || reads.len() != rows || block == 0 {
        return Err(format!(
            "paged decode attention: queries {qs:?} do not fit pools {ks:?} with {} rows of \
             reads and blocks of {block}",
            reads.len()
        ));
    }
    let blocks = dim(ks[0]) / block;
    for (r, (table, len)) in reads.iter().enumerate() {
        let held = len.div_ceil(block);
        if held > table.len() {
            return Err(format!(
                "paged decode attention: row {r} reads {len} keys but lists {} blocks of {block}",
                table.len()
            ));
        }
        if let Some(b) = table[..held].iter().find(|&&b| b as usize >= blocks) {
            return Err(format!(
                "paged decode attention: row {r} lists block {b} of a pool of {blocks}"
            ));
        }
    }
    let mut out = Tensor::zeros(qs.as_slice(), (Kind::Float, Device::Cpu));
    let mut lse = Tensor::zeros([qs[0], qs[1], qs[2], 1], (Kind::Float, Device::Cpu));
    let (qf, kf, vf) = (floats(&q), floats(k_pool), floats(v_pool));
    let (of, lf) = (floats_mut(&mut out), floats_mut(&mut lse));
    let set = chosen();
    let scale = scale as f32;
    let per_row = (sh.kv_heads * sh.group * sh.head_dim, sh.kv_heads * sh.group);
    let keys: usize = reads.iter().map(|r| r.1).sum();
    let threads = usize::try_from(tch::get_num_threads()).unwrap_or(1).max(1);
    // A thread costs tens of microseconds to start; below this many keys a pass is shorter.
    const KEYS_PER_THREAD: usize = 16_384;
    let threads = threads.min(rows).min(keys / KEYS_PER_THREAD).max(1);
    if threads == 1 {
        let x = Inputs {
            q: qf,
            k: kf,
            v: vf,
            sh,
            reads,
            scale,
        };
        dispatch(set, x, of, lf);
        return Ok((out, lse));
    }
    // Rows in runs of about equal keys, one run a thread.
    let mut cuts = vec![0];
    let mut acc = 0;
    for (r, read) in reads.iter().enumerate() {
        acc += read.1;
        if acc * threads >= keys * cuts.len() && cuts.len() < threads && r + 1 < rows {
            cuts.push(r + 1);
        }
    }
    cuts.push(rows);
    std::thread::scope(|s| {
        let (mut of, mut lf) = (of, lf);
        for w in cuts.windows(2) {
            let n = w[1] - w[0];
            let (o, rest_o) = std::mem::take(&mut of).split_at_mut(n * per_row.0);
            let (l, rest_l) = std::mem::take(&mut lf).split_at_mut(n * per_row.1);
            (of, lf) = (rest_o, rest_l);
            let x = Inputs {
                q: &qf[w[0] * per_row.0..w[1] * per_row.0],
                k: kf,
                v: vf,
                sh,
                reads: &reads[w[0]..w[1]],
                scale,
            };
            s.spawn(move || dispatch(set, x, o, l));
        }
    });
    Ok((out, lse))
}

/// One call's inputs (see [`paged_decode_attention`]), for a run of its rows.
#[derive(Clone, Copy)]
struct Inputs<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    sh: Shape,
    reads: &'a [Reads<'a>],
    scale: f32,
}

/// Runs [`rows`] compiled for `set`.
#[allow(unsafe_code)]
fn dispatch(set: Set, x: Inputs<'_>, out: &mut [f32], lse: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    match set {
        // SAFETY: `chosen` picks a set only where the CPU reports every feature it enables.
        Set::Avx512 => return unsafe { rows_avx512(x, out, lse) },
        // SAFETY: as above.
        Set::Avx2 => return unsafe { rows_avx2(x, out, lse) },
        Set::Default => {}
    }
    let _ = set;
    // SAFETY: `Plain` needs no CPU feature.
    #[allow(unsafe_code)]
    unsafe {
        rows::<Plain>(x, out, lse)
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
#[allow(unsafe_code)]
fn rows_avx512(x: Inputs<'_>, out: &mut [f32], lse: &mut [f32]) {
    // SAFETY: this function is compiled with (and only called on CPUs with) AVX-512F.
    unsafe { rows::<x86::Avx512>(x, out, lse) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(unsafe_code)]
fn rows_avx2(x: Inputs<'_>, out: &mut [f32], lse: &mut [f32]) {
    // SAFETY: this function is compiled with (and only called on CPUs with) AVX2 and FMA.
    unsafe { rows::<x86::Avx2>(x, out, lse) }
}

/// The vector operations of one kernel set.
#[allow(unsafe_code)]
trait Lanes {
    /// `a . b` over the shorter length.
    ///
    /// # Safety
    /// The CPU has the set's features (the caller is compiled for them).
    unsafe fn dot(a: &[f32], b: &[f32]) -> f32;
    /// `o += w * x` over the shorter length.
    ///
    /// # Safety
    /// As [`Lanes::dot`].
    unsafe fn axpy(o: &mut [f32], w: f32, x: &[f32]);
    /// Asks for `x`'s cache lines ahead of their use (a row's blocks lie anywhere in the
    /// pool, so the hardware's stream prefetch loses the thread at every block's end).
    fn prefetch(_x: &[f32]) {}
}

/// How many slots ahead of the one in use the kernel asks for keys and values.
const AHEAD: usize = 8;

/// Lanes of the portable set's running sums.
const LANES: usize = 16;

/// Any CPU: sums in [`LANES`] running sums (the compiler vectorises what it can), products
/// and sums unfused.
struct Plain;

#[allow(unsafe_code)]
impl Lanes for Plain {
    #[inline(always)]
    unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        let mut acc = [0f32; LANES];
        let (ac, bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
        let tail: f32 = ac
            .remainder()
            .iter()
            .zip(bc.remainder())
            .map(|(x, y)| x * y)
            .sum();
        for (x, y) in ac.zip(bc) {
            for i in 0..LANES {
                acc[i] += x[i] * y[i];
            }
        }
        sum_lanes(acc) + tail
    }

    #[inline(always)]
    unsafe fn axpy(o: &mut [f32], w: f32, x: &[f32]) {
        for (o, x) in o.iter_mut().zip(x) {
            *o += w * *x;
        }
    }
}

#[inline(always)]
fn sum_lanes(mut acc: [f32; LANES]) -> f32 {
    let mut w = LANES / 2;
    while w > 0 {
        for i in 0..w {
            acc[i] += acc[i + w];
        }
        w /= 2;
    }
    acc[0]
}

/// The x86-64 sets, in explicit vector instructions (the compiler's own vectorisation of the
/// portable dot product used two lanes of a register at a time).
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86 {
    use super::Lanes;
    use std::arch::x86_64::*;

    pub(super) struct Avx512;
    pub(super) struct Avx2;

    /// Fetches each 64-byte line of `x` into the cache.
    #[inline(always)]
    fn fetch(x: &[f32]) {
        for line in x.chunks(16) {
            // SAFETY: a prefetch reads nothing the program sees and cannot fault; the address
            // lies in `x`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
        }
    }

    /// The sum of an AVX-512 register's lanes.
    ///
    /// # Safety
    /// The CPU has AVX-512F.
    #[inline(always)]
    unsafe fn sum512(acc: __m512) -> f32 {
        // SAFETY: the caller's CPU has AVX-512F.
        unsafe { _mm512_reduce_add_ps(acc) }
    }

    /// The sum of an AVX register's lanes (halves, then pairs).
    ///
    /// # Safety
    /// The CPU has AVX.
    #[inline(always)]
    unsafe fn sum256(acc: __m256) -> f32 {
        // SAFETY: the caller's CPU has AVX (it has AVX2).
        unsafe {
            let h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
            let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)))
        }
    }

    /// [`Lanes`] for a register of `$n` floats and its instructions.
    macro_rules! lanes {
        ($set:ident, $n:literal, $zero:ident, $splat:ident, $load:ident, $store:ident,
         $fmadd:ident, $sum:ident) => {
            impl Lanes for $set {
                #[inline(always)]
                fn prefetch(x: &[f32]) {
                    fetch(x)
                }

                #[inline(always)]
                unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
                    let n = a.len().min(b.len());
                    let (pa, pb) = (a.as_ptr(), b.as_ptr());
                    let mut i = 0;
                    // SAFETY (all blocks): loads read $n floats from i, and i + $n <= n;
                    // the caller guarantees the set's features.
                    let mut acc = unsafe { $zero() };
                    while i + $n <= n {
                        acc = unsafe { $fmadd($load(pa.add(i)), $load(pb.add(i)), acc) };
                        i += $n;
                    }
                    let mut s = unsafe { $sum(acc) };
                    for j in i..n {
                        s = a[j].mul_add(b[j], s);
                    }
                    s
                }

                #[inline(always)]
                unsafe fn axpy(o: &mut [f32], w: f32, x: &[f32]) {
                    let n = o.len().min(x.len());
                    let (po, px) = (o.as_mut_ptr(), x.as_ptr());
                    let mut i = 0;
                    // SAFETY: as in `dot`; `o` is borrowed mutably, so nothing else reads
                    // what it stores.
                    unsafe {
                        let wv = $splat(w);
                        while i + $n <= n {
                            $store(po.add(i), $fmadd(wv, $load(px.add(i)), $load(po.add(i))));
                            i += $n;
                        }
                    }
                    for j in i..n {
                        o[j] = w.mul_add(x[j], o[j]);
                    }
                }
            }
        };
    }

    lanes!(
        Avx512,
        16,
        _mm512_setzero_ps,
        _mm512_set1_ps,
        _mm512_loadu_ps,
        _mm512_storeu_ps,
        _mm512_fmadd_ps,
        sum512
    );
    lanes!(
        Avx2,
        8,
        _mm256_setzero_ps,
        _mm256_set1_ps,
        _mm256_loadu_ps,
        _mm256_storeu_ps,
        _mm256_fmadd_ps,
        sum256
    );
}

/// The kernel for rows `reads` (their queries `q`, outputs `out` and `lse` in the same order),
/// inlined into each feature-compiled copy with that set's [`Lanes`]. A slot holds every key
/// head's vector side by side, so each pass takes a slot's heads together: the row's keys
/// and values are read front to back, once each.
///
/// # Safety
/// The CPU has `L`'s features.
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn rows<L: Lanes>(x: Inputs<'_>, out: &mut [f32], lse: &mut [f32]) {
    let Inputs {
        q,
        k,
        v,
        sh,
        reads,
        scale,
    } = x;
    let (h, g, d, b) = (sh.kv_heads, sh.group, sh.head_dim, sh.block);
    // Query rows of a sequence: every key head's `g` queries.
    let hg = h * g;
    let mut scores: Vec<f32> = vec![];
    let mut starts: Vec<usize> = vec![];
    let mut inv = vec![0f32; hg];
    for (r, &(table, len)) in reads.iter().enumerate() {
        let qr = &q[r * hg * d..(r + 1) * hg * d];
        let or = &mut out[r * hg * d..(r + 1) * hg * d];
        let lr = &mut lse[r * hg..(r + 1) * hg];
        if len == 0 {
            lr.fill(f32::NEG_INFINITY);
            continue;
        }
        scores.clear();
        scores.resize(hg * len, 0.0);
        // Where the row's slots start in the pools, in order.
        starts.clear();
        for (i, &blk) in table.iter().enumerate() {
            let n = b.min(len.saturating_sub(i * b));
            let first = blk as usize * b;
            starts.extend((first..first + n).map(|s| s * h * d));
        }
        for (p, &at) in starts.iter().enumerate() {
            if let Some(&ahead) = starts.get(p + AHEAD) {
                L::prefetch(&k[ahead..ahead + h * d]);
            }
            let slot = &k[at..at + h * d];
            for (head, key) in slot.chunks_exact(d).enumerate() {
                for gi in 0..g {
                    let i = head * g + gi;
                    // SAFETY: the caller's CPU has L's features.
                    let x = unsafe { L::dot(&qr[i * d..(i + 1) * d], key) };
                    scores[i * len + p] = x * scale;
                }
            }
        }
        for (i, s) in scores.chunks_exact_mut(len).enumerate() {
            let m = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum = exp_shifted_sum(s, m);
            lr[i] = m + sum.ln();
            inv[i] = 1.0 / sum;
        }
        or.fill(0.0);
        for (p, &at) in starts.iter().enumerate() {
            if let Some(&ahead) = starts.get(p + AHEAD) {
                L::prefetch(&v[ahead..ahead + h * d]);
            }
            let slot = &v[at..at + h * d];
            for (i, o) in or.chunks_exact_mut(d).enumerate() {
                let val = &slot[(i / g) * d..(i / g + 1) * d];
                // SAFETY: as above.
                unsafe { L::axpy(o, scores[i * len + p], val) };
            }
        }
        for (i, o) in or.chunks_exact_mut(d).enumerate() {
            o.iter_mut().for_each(|x| *x *= inv[i]);
        }
    }
}

/// Replaces each score `s` by `exp(s - m)` and returns their sum.
#[inline(always)]
fn exp_shifted_sum(s: &mut [f32], m: f32) -> f32 {
    let mut acc = [0f32; LANES];
    let mut chunks = s.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for i in 0..LANES {
            c[i] = exp(c[i] - m);
            acc[i] += c[i];
        }
    }
    let mut tail = 0.0;
    for x in chunks.into_remainder() {
        *x = exp(*x - m);
        tail += *x;
    }
    sum_lanes(acc) + tail
}

/// `e^x` for x <= 0 (scores less their maximum): Cephes' `expf` (a degree-5 polynomial on
/// [-ln 2 / 2, ln 2 / 2] times a power of two built from its bits), written so the compiler
/// vectorises it; `-inf` (a masked score) and anything under -87.3 give 0 or about 1e-38.
#[inline(always)]
fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.336_55, 88.376_26);
    let n = (x * LOG2E + 0.5).floor();
    let r = x - n * LN2_HI - n * LN2_LO;
    let z = r * r;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 0.5;
    let y = p * z + r + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_two_ulp_of_the_library_exp() {
        let mut worst = 0f64;
        for i in 0..200_000 {
            let x = -87.0 * (i as f32) / 200_000.0;
            let (got, want) = (exp(x) as f64, (x as f64).exp());
            worst = worst.max(((got - want) / want).abs());
        }
        assert!(worst < 2.5e-7, "relative error {worst}");
        assert_eq!(exp(f32::NEG_INFINITY), exp(-87.336_55));
        assert!(exp(f32::NEG_INFINITY) < 1.2e-38);
    }

    #[test]
    #[allow(unsafe_code)]
    fn every_set_sums_integers_exactly() {
        let a: Vec<f32> = (0..70).map(|i| i as f32).collect();
        let b = vec![2.0f32; 70];
        let want = 2.0 * (69.0 * 70.0 / 2.0);
        let mut o = vec![1.0f32; 70];
        // SAFETY: Plain needs nothing.
        assert_eq!(unsafe { Plain::dot(&a, &b) }, want);
        unsafe { Plain::axpy(&mut o, 3.0, &a) };
        assert!(
            o.iter()
                .enumerate()
                .all(|(i, &x)| x == 1.0 + 3.0 * i as f32)
        );
        #[cfg(target_arch = "x86_64")]
        {
            if crate::capability::chosen() >= Set::Avx2 {
                // SAFETY: the CPU has AVX2 and FMA (checked by `chosen`).
                assert_eq!(unsafe { x86::Avx2::dot(&a, &b) }, want);
                let mut o = vec![1.0f32; 70];
                unsafe { x86::Avx2::axpy(&mut o, 3.0, &a) };
                assert!(
                    o.iter()
                        .enumerate()
                        .all(|(i, &x)| x == 1.0 + 3.0 * i as f32)
                );
            }
            if crate::capability::chosen() >= Set::Avx512 {
                // SAFETY: the CPU has AVX-512F (checked by `chosen`).
                assert_eq!(unsafe { x86::Avx512::dot(&a, &b) }, want);
                let mut o = vec![1.0f32; 70];
                unsafe { x86::Avx512::axpy(&mut o, 3.0, &a) };
                assert!(
                    o.iter()
                        .enumerate()
                        .all(|(i, &x)| x == 1.0 + 3.0 * i as f32)
                );
            }
        }
    }
}
