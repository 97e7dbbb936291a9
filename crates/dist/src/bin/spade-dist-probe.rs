//! One rank of the bridge's tests (tests/collectives.rs): joins the group from the torchrun
//! environment and runs PROBE (`collectives`: every collective on values each rank can
//! predict, printed one line each; `die`: joins, then exits before the first collective;
//! `survive`: joins, then waits in an all-reduce that a dead rank never joins; `hang`: joins,
//! then stays silent for three timeouts; `survive_started`: starts a reduce and a broadcast
//! with such a rank and waits for them, printing how long it waited; `patient`:
//! rank 0 sends bytes after three times the group's timeout, which the others wait for with a
//! longer wait of their own; `speed`: each collective on a tensor of `ELEMENTS` float32
//! (default 3,145,728: a decoder layer of the small shape) 20 times after a barrier, printed
//! as milliseconds per call and GB/s of the tensor's bytes: what one ZeRO-3 layer gather or
//! reduce costs on this machine, without any compute beside it); `nccl`: joins an NCCL group
//! on GPU `GPU` (default: the rank) and runs each collective once on CUDA tensors with values
//! any world size predicts, then all-reduces `ELEMENTS` float32 20 times (the CUDA build on a
//! GPU machine: scripts/gpu-check; elsewhere it prints why it cannot join); `nccl_beside`: the
//! same on an NCCL group made beside a Gloo group through its store, as the trainer's ranks on
//! GPUs make theirs; `link` (no
//! rendezvous: one process, a thread per GPU, at most 2): the raw NCCL link of vLLM's weight
//! transfer (`NcclLink`), joined by an id, its warm-up, broadcasts of float32, bfloat16 and
//! float16 tensors and an all-reduce against sums worked by hand, a CPU tensor refused; its
//! last line is `link ok: N rank(s)`.

use spade_dist::{NcclLink, ProcessGroup, ReduceOp, Rendezvous};
use std::time::Duration;
use tch::{Kind, Tensor};

fn values(t: &Tensor) -> Vec<f64> {
    let flat = t.to_kind(Kind::Double).reshape([-1]);
    (0..flat.size()[0])
        .map(|i| flat.double_value(&[i]))
        .collect()
}

/// `PROBE=nccl`: each collective once on the group's GPU, then an all-reduce's speed.
fn nccl(pg: &ProcessGroup) -> spade_dist::Result<()> {
    let dev = pg.device();
    let (rank, world) = (pg.rank() as f64, pg.world_size() as f64);
    println!("nccl joined: rank {rank} of {world} on {dev:?}");
    // Rank r holds [r + 1, 10 (r + 1)]: the sums are world (world + 1) / 2 times [1, 10].
    let mut t =
        Tensor::from_slice(&[(rank + 1.0) as f32, (10.0 * (rank + 1.0)) as f32]).to_device(dev);
    pg.all_reduce(&mut t, ReduceOp::Sum)?;
    let want = world * (world + 1.0) / 2.0;
    println!(
        "all_reduce_sum {:?} (want [{want}, {}])",
        values(&t),
        10.0 * want
    );
    let mut b = Tensor::from_slice(&[rank as f32 + 1.0; 3]).to_device(dev);
    pg.broadcast(&mut b, 0)?;
    println!("broadcast {:?} (want rank 0's 1s)", values(&b));
    let mut red = Tensor::from_slice(&[rank as f32 + 1.0]).to_device(dev);
    pg.reduce(&mut red, 0)?;
    println!("reduce {:?} (rank 0 wants {want})", values(&red));
    let g = pg.all_gather(&Tensor::from_slice(&[rank as f32]).to_device(dev))?;
    println!("all_gather {:?} (want 0..{world})", values(&g));
    let n = 2 * pg.world_size() as i64;
    let x = Tensor::arange_start(1, n + 1, (Kind::Float, dev)) * (rank + 1.0);
    let s = pg.reduce_scatter(&x.reshape([n, 1]))?;
    println!(
        "reduce_scatter {:?} (want {want} times chunk {rank} of 1..{n})",
        values(&s)
    );
    pg.barrier()?;
    let got = pg.broadcast_bytes(0, (pg.rank() == 0).then_some(&b"nccl bytes"[..]), None)?;
    println!("bytes {}", String::from_utf8_lossy(&got));
    let elements: i64 = std::env::var("ELEMENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64 << 20);
    let mut big = Tensor::ones([elements], (Kind::Float, dev));
    pg.all_reduce(&mut big, ReduceOp::Sum)?;
    let calls = 20;
    let start = std::time::Instant::now();
    for _ in 0..calls {
        pg.all_reduce(&mut big, ReduceOp::Sum)?;
    }
    let s = start.elapsed().as_secs_f64() / f64::from(calls);
    println!(
        "speed all_reduce: {:.3} ms a call, {:.2} GB/s of {elements} float32",
        s * 1e3,
        (elements * 4) as f64 / s / 1e9
    );
    Ok(())
}

/// One rank of `PROBE=link` on `cuda:rank`: what its tensors sum to after the collectives.
fn link_rank(
    id: &[u8; spade_dist::NCCL_ID_BYTES],
    rank: usize,
    world: usize,
) -> spade_dist::Result<Vec<f64>> {
    let dev = tch::Device::Cuda(rank);
    let mut link = NcclLink::join(id, rank, world, rank, Duration::from_secs(60))?;
    link.warm_up()?;
    let mut cpu = Tensor::from_slice(&[1.0f32]);
    if link.broadcast(&mut cpu, 0).is_ok() {
        return Err(spade_dist::DistError(
            "a CPU tensor was broadcast over NCCL".into(),
        ));
    }
    // Rank 0 holds 0..12 plus an offset per dtype, the others zeros.
    let mut sums = Vec::new();
    for (kind, offset) in [(Kind::Float, 0.5), (Kind::BFloat16, 2.0), (Kind::Half, 1.0)] {
        let t = Tensor::arange(12, (kind, dev)).reshape([3, 4]);
        let mut t = if rank == 0 {
            t + offset
        } else {
            t.zeros_like()
        };
        link.broadcast(&mut t, 0)?;
        sums.push(t.to_kind(Kind::Double).sum(Kind::Double).double_value(&[]));
    }
    let mut one = Tensor::from_slice(&[rank as f32 + 1.0]).to_device(dev);
    link.all_reduce_sum(&mut one)?;
    sums.push(one.double_value(&[0]));
    Ok(sums)
}

/// `PROBE=link`: every rank's sums must be 66 + 12 x the offset, and 1 + 2 + ... for the
/// all-reduce.
fn link() -> spade_dist::Result<()> {
    let world = (tch::Cuda::device_count().max(0) as usize).min(2);
    if world == 0 {
        return Err(spade_dist::DistError("PROBE=link needs a GPU".into()));
    }
    let id = NcclLink::unique_id()?;
    let got: Vec<spade_dist::Result<Vec<f64>>> = std::thread::scope(|s| {
        let hands: Vec<_> = (0..world)
            .map(|rank| s.spawn(move || link_rank(&id, rank, world)))
            .collect();
        hands
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(spade_dist::DistError("a rank panicked".into())))
            })
            .collect()
    });
    let want = vec![72.0, 90.0, 78.0, (world * (world + 1) / 2) as f64];
    for (rank, g) in got.into_iter().enumerate() {
        let g = g?;
        println!("link rank {rank}: {g:?} (want {want:?})");
        if g != want {
            return Err(spade_dist::DistError(format!(
                "rank {rank}: {g:?}, want {want:?}"
            )));
        }
    }
    println!("link ok: {world} rank(s)");
    Ok(())
}

fn main() {
    let timeout = std::env::var("TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(30), Duration::from_millis);
    let probe = std::env::var("PROBE").unwrap_or_else(|_| "collectives".into());
    if probe == "link" {
        if let Err(e) = link() {
            println!("error {e}");
            std::process::exit(2);
        }
        return;
    }
    let result = (|| -> spade_dist::Result<()> {
        let r = Rendezvous::from_env(timeout)?;
        let gpu = std::env::var("GPU")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(r.rank);
        // `nccl_beside` keeps the Gloo group (and its store) alive beside the NCCL one.
        let (pg, _gloo) = match probe.as_str() {
            "nccl" => (ProcessGroup::join_nccl(&r, gpu)?, None),
            "nccl_beside" => {
                let gloo = ProcessGroup::join(&r)?;
                (gloo.nccl_beside(gpu)?, Some(gloo))
            }
            _ => (ProcessGroup::join(&r)?, None),
        };
        let rank = pg.rank() as f64;
        match probe.as_str() {
            "die" => std::process::exit(3),
            "nccl" | "nccl_beside" => nccl(&pg)?,
            "speed" => {
                let n: i64 = std::env::var("ELEMENTS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(3 << 20);
                let mut t = Tensor::ones([n], (Kind::Float, tch::Device::Cpu));
                let calls = 20;
                type Op<'a> = Box<dyn Fn(&mut Tensor) -> spade_dist::Result<()> + 'a>;
                let ops: [(&str, Op<'_>); 4] = [
                    ("broadcast", Box::new(|t| pg.broadcast(t, 0))),
                    ("reduce", Box::new(|t| pg.reduce(t, 0))),
                    ("all_reduce", Box::new(|t| pg.all_reduce(t, ReduceOp::Sum))),
                    (
                        "reduce_scatter",
                        Box::new(|t| pg.reduce_scatter(t).map(|_| ())),
                    ),
                ];
                for (name, op) in ops {
                    pg.barrier()?;
                    let start = std::time::Instant::now();
                    for _ in 0..calls {
                        op(&mut t)?;
                    }
                    let s = start.elapsed().as_secs_f64() / f64::from(calls);
                    println!(
                        "speed {name}: {:.2} ms a call, {:.2} GB/s of {n} float32",
                        s * 1e3,
                        (n * 4) as f64 / s / 1e9
                    );
                }
            }
            "patient" => {
                let sent = if pg.rank() == 0 {
                    std::thread::sleep(timeout * 3);
                    Some(&b"late"[..])
                } else {
                    None
                };
                let got = pg.broadcast_bytes(0, sent, Some(timeout * 10))?;
                println!("bytes {}", String::from_utf8_lossy(&got));
            }
            "hang" => {
                // Joined, then silent (alive, its sockets open) for three timeouts.
                std::thread::sleep(timeout * 3);
                std::process::exit(3)
            }
            "survive_started" => {
                // A reduce and a broadcast started with a rank that never sends, then waited.
                let t0 = std::time::Instant::now();
                let mut a = Tensor::from_slice(&[rank as f32]);
                let mut b = Tensor::from_slice(&[rank as f32]);
                let r = pg.reduce_start(&mut a, 0)?;
                let bc = pg.broadcast_start(&mut b, 1)?;
                let res = r.wait().and_then(|()| bc.wait());
                println!("waited {} ms", t0.elapsed().as_millis());
                res?;
            }
            "survive" => {
                let mut t = Tensor::from_slice(&[rank as f32]);
                pg.all_reduce(&mut t, ReduceOp::Sum)?;
                println!("all_reduce {:?}", values(&t));
            }
            _ => {
                // Rank r holds [r + 1, 10 (r + 1)].
                let mut t =
                    Tensor::from_slice(&[(rank + 1.0) as f32, (10.0 * (rank + 1.0)) as f32]);
                pg.all_reduce(&mut t, ReduceOp::Sum)?;
                println!("all_reduce_sum {:?}", values(&t));
                let mut m = Tensor::from_slice(&[rank, 5.0 - rank]);
                pg.all_reduce(&mut m, ReduceOp::Max)?;
                println!("all_reduce_max {:?}", values(&m));
                let mut b = Tensor::from_slice(&[rank * 7.0 + 1.0; 3]);
                pg.broadcast(&mut b, 1)?;
                println!("broadcast {:?}", values(&b));
                // Rank r holds [r + 1, 100]; the sum lands in rank 2's only, and into a
                // narrowed view's own elements only.
                let whole = Tensor::from_slice(&[-1.0f32, (rank + 1.0) as f32, 100.0, -1.0]);
                pg.reduce(&mut whole.narrow(0, 1, 2), 2)?;
                println!("reduce_into {:?}", values(&whole));
                if pg.reduce(&mut whole.narrow(0, 1, 2), 3).is_err() {
                    println!("reduce_bad_root refused");
                }
                let g = pg.all_gather(&Tensor::from_slice(&[rank as f32, (rank * rank) as f32]))?;
                println!("all_gather {:?} {:?}", g.size(), values(&g));
                // Rank r contributes (r + 1) * [1, 2, ..., 2 world].
                let n = 2 * pg.world_size() as i64;
                let x =
                    Tensor::arange_start(1, n + 1, (Kind::Float, tch::Device::Cpu)) * (rank + 1.0);
                let s = pg.reduce_scatter(&x.reshape([n, 1]))?;
                println!("reduce_scatter {:?} {:?}", s.size(), values(&s));
                pg.barrier()?;
                println!("barrier ok");
                // Rank 2's bytes, then an empty message from rank 0.
                let text = format!("from rank {rank}");
                let sent = (pg.rank() == 2).then_some(text.as_bytes());
                let got = pg.broadcast_bytes(2, sent, None)?;
                println!("bytes {}", String::from_utf8_lossy(&got));
                let got = pg.broadcast_bytes(0, (pg.rank() == 0).then_some(&[][..]), None)?;
                println!("empty {}", got.len());
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        println!("error {e}");
        std::process::exit(2);
    }
}
