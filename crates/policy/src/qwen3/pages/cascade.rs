//! Cascade attention for decoding rows that share blocks: plays of one environment after its
//! shared prompt, every request after a common system prompt. A pass finds the runs of blocks
//! several rows list alike ([`shared_runs`]), attends each run with all of its rows' queries
//! together (keys read once, where each row would have copied and read them), attends each
//! row's own blocks as before, and merges the parts by their log-sum-exp, as FlashInfer's
//! cascade and Hydragen do on GPUs. The result is one softmax over all of a row's keys up to
//! float rounding (the engine test
//! `rows_reading_shared_blocks_once_or_in_place_get_the_logits_of_gathering_them_all`). Where
//! decoding rows read in place (float32 on the CPU), their own blocks go to the same kernel as
//! rows that share nothing, which returns the log-sum-exp too.

use super::{Plan, Segment, gather};
use crate::error::Result;
use std::collections::BTreeMap;
use std::ops::Range;
use tch::{Device, Kind, Tensor};

/// A run of blocks several decoding rows list alike ([`shared_runs`]).
pub(super) struct Shared {
    /// The rows, as indices of the pass's decoding rows.
    rows: Tensor,
    blocks: RunBlocks,
}

/// Where a shared run's keys are.
enum RunBlocks {
    /// Consecutive blocks of the pool (a prompt prefilled at once, the usual case): read where
    /// they lie.
    Consecutive(Range<i64>),
    /// Block ids in order, gathered.
    Listed(Tensor),
}

/// A shared run as [`shared_runs`] finds it: its rows (indices of the pass's decoding rows)
/// and the positions in their block tables it covers.
pub(super) type Run = (Vec<usize>, Range<usize>);

/// The fewest key slots a shared run must save (its rows but one times its length) to be
/// read on its own: a run costs a handful of small operations per layer, which a few hundred
/// slots' copy does not pay for.
const SHARED_MIN_SAVED: usize = 512;

/// The runs of [`shared_runs`] as the pass reads them, on `dev`.
pub(super) fn shared(segs: &[Segment<'_>], runs: Vec<Run>, dev: Device) -> Vec<Shared> {
    runs.into_iter()
        .map(|(rows, depths)| {
            let idx: Vec<i64> = rows.iter().map(|&i| i as i64).collect();
            let ids: Vec<i64> = segs[rows[0]].table[depths]
                .iter()
                .map(|&b| i64::from(b))
                .collect();
            let consecutive = ids.windows(2).all(|w| w[1] == w[0] + 1);
            Shared {
                rows: super::upload(&idx, dev),
                blocks: match (consecutive, ids.first()) {
                    (true, Some(&first)) => RunBlocks::Consecutive(first..first + ids.len() as i64),
                    _ => RunBlocks::Listed(super::upload(&ids, dev)),
                },
            }
        })
        .collect()
}

/// The runs of blocks that decoding rows share, and what each row reads alone.
///
/// Rows are split by the block they list at a depth (starting at 0), among the rows whose block
/// there is full and before their new token (so nobody writes into it this pass); a split of
/// two or more rows extends while all of them list the same next block, and its rows are split
/// again after it. Each split is a run; those that save [`SHARED_MIN_SAVED`] slots are kept
/// (`(rows, depths)`), and a row's own blocks are the ones no kept run of its covers, in order,
/// its last (partly filled) block last. Keys are attended without order, so a row's own blocks
/// need not be contiguous.
pub(super) fn shared_runs(block: usize, segs: &[Segment<'_>]) -> (Vec<Run>, Vec<Vec<u32>>) {
    // Blocks of row i wholly before its new token's position.
    let full = |i: usize| segs[i].start / block;
    let mut runs = vec![];
    let mut stack: Vec<(Vec<usize>, usize)> = vec![((0..segs.len()).collect(), 0)];
    while let Some((rows, depth)) = stack.pop() {
        let mut by: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for i in rows.into_iter().filter(|&i| full(i) > depth) {
            by.entry(segs[i].table[depth]).or_default().push(i);
        }
        for g in by.into_values().filter(|g| g.len() > 1) {
            let same = |d: usize| {
                g.iter()
                    .all(|&i| full(i) > d && segs[i].table[d] == segs[g[0]].table[d])
            };
            let mut end = depth + 1;
            while same(end) {
                end += 1;
            }
            if (g.len() - 1) * (end - depth) * block >= SHARED_MIN_SAVED {
                runs.push((g.clone(), depth..end));
            }
            stack.push((g, end));
        }
    }
    let mut covered: Vec<Vec<bool>> = segs
        .iter()
        .map(|s| vec![false; (s.start + 1).div_ceil(block)])
        .collect();
    for (rows, depths) in &runs {
        for &i in rows {
            covered[i][depths.clone()].fill(true);
        }
    }
    let own = segs
        .iter()
        .zip(&covered)
        .map(|(s, c)| {
            c.iter()
                .enumerate()
                .filter(|&(_, &x)| !x)
                .map(|(d, _)| s.table[d])
                .collect()
        })
        .collect();
    (runs, own)
}

/// Decoding attention of the rows `qd` ([rows, heads, 1, head_dim]) when some of them share
/// blocks ([`Plan::shared`]): each group's own keys and each shared run apart, every part with
/// its log-sum-exp, merged into one softmax per row (see the module doc).
pub(super) fn cascade(
    a: &super::super::Attention,
    qd: &Tensor,
    plan: &Plan,
    k: &Tensor,
    v: &Tensor,
    block: i64,
) -> Result<Tensor> {
    let (rows, g, d) = (qd.size()[0], a.n_heads / a.n_kv, a.head_dim);
    let (kind, dev) = (qd.kind(), qd.device());
    let scale = (d as f64).powf(-0.5);
    // Queries as each key head's query rows, [rows, kv_heads, g, d] (see decode_attention).
    let q = qd.reshape([rows, a.n_kv, g, d]);
    let mut out = Tensor::zeros([rows, a.n_kv, g, d], (Kind::Float, dev));
    let mut lse = Tensor::zeros([rows, a.n_kv, g, 1], (Kind::Float, dev));
    if let Some(reads) = &plan.in_place {
        let (o, l) = super::in_place(a, qd, reads, k, v, block as usize)?;
        (out, lse) = (o.reshape([rows, a.n_kv, g, d]), l);
    }
    for grp in &plan.groups {
        let gather = |pool: &Tensor| gather(pool, &grp.tables, block, grp.longest);
        let q_rows = match &grp.rows {
            Some(r) => q.index_select(0, r),
            None => q.shallow_clone(),
        };
        let (o, l) = attend(&q_rows, &gather(k), &gather(v), grp.mask.as_ref(), scale)?;
        match &grp.rows {
            Some(r) => {
                let _ = out.index_copy_(0, r, &o);
                let _ = lse.index_copy_(0, r, &l);
            }
            None => (out, lse) = (o, l),
        }
    }
    let s = k.size();
    for run in &plan.shared {
        let n = run.rows.size()[0];
        // The run's keys once, [kv_heads, slots, d]: a view of the pool where its blocks are
        // consecutive (the flash kernel reads strided keys), else gathered.
        let keys = |pool: &Tensor| {
            let slots = match &run.blocks {
                RunBlocks::Consecutive(r) => {
                    pool.narrow(0, r.start * block, (r.end - r.start) * block)
                }
                RunBlocks::Listed(ids) => pool
                    .view([-1, block * s[1] * s[2]])
                    .index_select(0, ids)
                    .view([-1, s[1], s[2]]),
            };
            slots.transpose(0, 1)
        };
        // Every row's queries of a key head together: [kv_heads, n * g, d].
        let qr = q
            .index_select(0, &run.rows)
            .permute([1, 0, 2, 3])
            .reshape([1, a.n_kv, n * g, d]);
        let (o, l) = attend(
            &qr,
            &keys(k).unsqueeze(0),
            &keys(v).unsqueeze(0),
            None,
            scale,
        )?;
        let o = o.reshape([a.n_kv, n, g, d]).permute([1, 0, 2, 3]);
        let l = l.reshape([a.n_kv, n, g, 1]).permute([1, 0, 2, 3]);
        let (po, pl) = (
            out.index_select(0, &run.rows),
            lse.index_select(0, &run.rows),
        );
        let m = pl.maximum(&l);
        let (wp, wl) = ((&pl - &m).exp(), (&l - &m).exp());
        let sum = &wp + &wl;
        let _ = out.index_copy_(0, &run.rows, &((po * &wp + o * &wl) / &sum));
        let _ = lse.index_copy_(0, &run.rows, &(m + sum.log()));
    }
    Ok(out.to_kind(kind).reshape([rows, a.n_heads, 1, d]))
}

/// Attention of queries `q` ([batch, heads, queries, d]) over keys and values ([batch, heads,
/// keys, d]) with an optional additive mask (0 or -inf: libtorch's CPU flash kernel refuses
/// booleans, so `decode_groups` builds them so for the cascade), returning the output and each
/// query's log-sum-exp of scores ([.., queries, 1]), both float32, for [`cascade`]'s merge.
///
/// On CPU libtorch's flash kernel returns the log-sum-exp beside its output and reads the
/// gathered keys where they lie; written out as products, the transposed keys were copied
/// first (a fifth of the decoding process's time, measured). Elsewhere the products.
fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f64,
) -> Result<(Tensor, Tensor)> {
    let flash = matches!(q.kind(), Kind::Float | Kind::BFloat16 | Kind::Half);
    if q.device() == Device::Cpu && flash {
        let (o, l) = Tensor::f_internal_scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, false, mask, scale,
        )?;
        return Ok((o.to_kind(Kind::Float), l.unsqueeze(-1)));
    }
    let scores = q.matmul(&k.transpose(-2, -1)).to_kind(Kind::Float) * scale;
    let scores = match mask {
        Some(m) => scores + m.to_kind(Kind::Float),
        None => scores,
    };
    let l = scores.logsumexp([-1], true);
    let p = (scores - &l).exp();
    Ok((p.to_kind(v.kind()).matmul(v).to_kind(Kind::Float), l))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(table: &[u32], start: usize) -> Segment<'_> {
        Segment {
            table,
            start,
            tokens: &[0],
            logits: true,
        }
    }

    /// Blocks of 16 slots: a 10-block prefix (0..10) under rows 0-5, then 16-block runs under
    /// rows 0-2 (10..26) and rows 3-5 (26..42), tails of their own; rows 6 and 7 share one
    /// block only (too little to read apart).
    #[test]
    fn shared_runs_are_found_level_by_level_and_small_ones_left_to_the_rows() {
        let prefix: Vec<u32> = (0..10).collect();
        let table = |run: u32, own: &[u32]| -> Vec<u32> {
            let mut t = prefix.clone();
            t.extend(run..run + 16);
            t.extend(own);
            t
        };
        let tables = [
            table(10, &[100]),
            table(10, &[101, 102]),
            table(10, &[103]),
            table(26, &[104]),
            table(26, &[105]),
            table(26, &[106, 107]),
            vec![200, 201],
            vec![200, 202],
        ];
        // Row 1 is 20 tokens into its own blocks, the others fewer than a block.
        let starts = [
            26 * 16 + 3,
            26 * 16 + 20,
            26 * 16,
            26 * 16 + 15,
            26 * 16 + 1,
            26 * 16 + 30,
            16 + 4,
            16 + 9,
        ];
        let segs: Vec<Segment<'_>> = tables.iter().zip(starts).map(|(t, s)| seg(t, s)).collect();
        let (mut runs, own) = shared_runs(16, &segs);
        runs.sort_by_key(|(rows, d)| (d.start, rows[0]));
        // Depths are positions in the tables (rows 3-5 list blocks 26..42 at 10..26).
        assert_eq!(
            runs,
            vec![
                (vec![0, 1, 2, 3, 4, 5], 0..10),
                (vec![0, 1, 2], 10..26),
                (vec![3, 4, 5], 10..26),
            ]
        );
        assert_eq!(own[0], vec![100]);
        assert_eq!(own[1], vec![101, 102]);
        // Row 2's new token opens block 26: nothing of it is shared.
        assert_eq!(own[2], vec![103]);
        assert_eq!(own[5], vec![106, 107]);
        assert_eq!(own[6], vec![200, 201]);
        assert_eq!(own[7], vec![200, 202]);
    }
}
