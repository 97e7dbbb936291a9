//! Decode attention over a paged KV cache, two ways on the same pools and tables, one libtorch
//! thread (`--threads N` to change): this crate's kernel reading blocks in place, and what the
//! engine does without it (rows in groups of similar length, each group's blocks gathered with
//! `index_select`, then libtorch's `scaled_dot_product_attention` over the copy with a key
//! mask). Medians of `--reps` calls, the two ways alternating; the ratio is gathered / in place.
//!
//! `cargo bench -p spade-kernels --bench paged -- [--reps N] [--threads N]`

use spade_kernels::{Reads, paged_decode_attention};
use std::time::Instant;
use tch::{Device, Kind, Tensor};

struct Shape {
    name: &'static str,
    kv: i64,
    group: i64,
    d: i64,
    rows: usize,
    /// Keys per row from `lo` to `hi`, spread evenly.
    lo: usize,
    hi: usize,
}

const BLOCK: usize = 16;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    let reps = arg("--reps", 30).max(1);
    let threads = arg("--threads", 1).max(1);
    tch::set_num_threads(threads as i32);
    println!(
        "paged decode attention, {threads} libtorch thread(s), kernel set {}, blocks of {BLOCK}, \
         median of {reps}",
        spade_kernels::aten_cpu_capability()
    );
    for s in [
        Shape {
            name: "tiny (2 kv heads x 2, d 64), 32 rows of 300-1000 keys",
            kv: 2,
            group: 2,
            d: 64,
            rows: 32,
            lo: 300,
            hi: 1000,
        },
        Shape {
            name: "tiny, 32 rows of 30-60 keys (in cache)",
            kv: 2,
            group: 2,
            d: 64,
            rows: 32,
            lo: 30,
            hi: 60,
        },
        Shape {
            name: "tiny, 32 rows of 2000-4000 keys",
            kv: 2,
            group: 2,
            d: 64,
            rows: 32,
            lo: 2000,
            hi: 4000,
        },
        Shape {
            name: "qwen3-4b (8 kv heads x 4, d 128), 16 rows of 1000-3000 keys",
            kv: 8,
            group: 4,
            d: 128,
            rows: 16,
            lo: 1000,
            hi: 3000,
        },
    ] {
        run(&s, reps);
    }
}

fn run(s: &Shape, reps: usize) {
    tch::manual_seed(0);
    let lens: Vec<usize> = (0..s.rows)
        .map(|r| s.lo + (s.hi - s.lo) * r / (s.rows - 1).max(1))
        .collect();
    let blocks: usize = lens.iter().map(|l| l.div_ceil(BLOCK)).sum();
    let slots = (blocks * BLOCK) as i64;
    let opts = (Kind::Float, Device::Cpu);
    let k = Tensor::randn([slots, s.kv, s.d], opts);
    let v = Tensor::randn([slots, s.kv, s.d], opts);
    let q = Tensor::randn([s.rows as i64, s.kv, s.group, s.d], opts);
    // Blocks handed out shuffled, as an engine's free list does after a while.
    let perm: Vec<i64> = Vec::try_from(Tensor::randperm(blocks as i64, (Kind::Int64, Device::Cpu)))
        .unwrap_or_default();
    let mut next = perm.iter().map(|&b| b as u32);
    let tables: Vec<Vec<u32>> = lens
        .iter()
        .map(|l| (0..l.div_ceil(BLOCK)).filter_map(|_| next.next()).collect())
        .collect();
    let reads: Vec<Reads<'_>> = tables
        .iter()
        .zip(&lens)
        .map(|(t, &l)| (t.as_slice(), l))
        .collect();
    let scale = (s.d as f64).powf(-0.5);
    // The gathered way as the engine's `qwen3::pages` runs it: rows sorted by length in
    // groups that gather at most 16,384 slots and whose shortest row is at least half the
    // longest; per group one gather of whole blocks and one attention with a key mask.
    let mut order: Vec<usize> = (0..s.rows).collect();
    order.sort_by_key(|&r| std::cmp::Reverse(lens[r]));
    let mut groups: Vec<Vec<usize>> = vec![];
    for r in order {
        match groups.last_mut() {
            Some(g) if (g.len() + 1) * lens[g[0]] <= 16_384 && 2 * lens[r] >= lens[g[0]] => {
                g.push(r)
            }
            _ => groups.push(vec![r]),
        }
    }
    let prepared: Vec<(Tensor, Tensor, i64, i64, Tensor)> = groups
        .iter()
        .map(|g| {
            let longest = lens[g[0]];
            let nb = longest.div_ceil(BLOCK);
            let flat: Vec<i64> = g
                .iter()
                .flat_map(|&r| {
                    tables[r]
                        .iter()
                        .map(|&b| i64::from(b))
                        .chain(std::iter::repeat(0))
                        .take(nb)
                })
                .collect();
            let gl = Tensor::from_slice(&g.iter().map(|&r| lens[r] as i64).collect::<Vec<_>>());
            let mask = Tensor::arange(longest as i64, (Kind::Int64, Device::Cpu))
                .view([1, -1])
                .lt_tensor(&gl.view([-1, 1]))
                .view([g.len() as i64, 1, 1, longest as i64]);
            let rows = Tensor::from_slice(&g.iter().map(|&r| r as i64).collect::<Vec<_>>());
            (
                Tensor::from_slice(&flat),
                mask,
                nb as i64,
                longest as i64,
                rows,
            )
        })
        .collect();
    let gathered = || {
        let mut out = q.zeros_like();
        for (table, mask, nb, longest, rows) in &prepared {
            let n = rows.size()[0];
            let gather = |pool: &Tensor| {
                pool.view([-1, BLOCK as i64 * s.kv * s.d])
                    .index_select(0, table)
                    .view([n, nb * BLOCK as i64, s.kv, s.d])
                    .narrow(1, 0, *longest)
                    .transpose(1, 2)
            };
            let y = Tensor::scaled_dot_product_attention(
                &q.index_select(0, rows),
                &gather(&k),
                &gather(&v),
                Some(mask),
                0.0,
                false,
                scale,
                false,
            );
            let _ = out.index_copy_(0, rows, &y);
        }
        out
    };
    let in_place = || paged_decode_attention(&q, &k, &v, BLOCK, &reads, scale).map(|r| r.0);
    let (Ok(a), b) = (in_place(), gathered()) else {
        println!("{}: the kernel refused its input", s.name);
        return;
    };
    let err = (a - b).abs().max().double_value(&[]);
    let (mut ta, mut tb) = (vec![], vec![]);
    for _ in 0..reps {
        let t = Instant::now();
        let _ = in_place();
        ta.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let _ = gathered();
        tb.push(t.elapsed().as_secs_f64());
    }
    let (ma, mb) = (median(ta), median(tb));
    let bytes = 2.0 * lens.iter().sum::<usize>() as f64 * (s.kv * s.d * 4) as f64;
    println!(
        "{}: in place {:.3} ms ({:.1} GB/s of keys and values), gathered + sdpa {:.3} ms: {:.2}x (outputs differ by {err:.1e})",
        s.name,
        ma * 1e3,
        bytes / ma / 1e9,
        mb * 1e3,
        mb / ma
    );
}
