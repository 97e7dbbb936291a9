//! One rank of the bridge's tests (tests/collectives.rs): joins the group from the torchrun
//! environment and runs PROBE (`collectives`: every collective on values each rank can
//! predict, printed one line each; `die`: joins, then exits before the first collective;
//! `survive`: joins, then waits in an all-reduce that a dead rank never joins; `patient`:
//! rank 0 sends bytes after three times the group's timeout, which the others wait for with a
//! longer wait of their own).

use spade_dist::{ProcessGroup, ReduceOp, Rendezvous};
use std::time::Duration;
use tch::{Kind, Tensor};

fn values(t: &Tensor) -> Vec<f64> {
    let flat = t.to_kind(Kind::Double).reshape([-1]);
    (0..flat.size()[0])
        .map(|i| flat.double_value(&[i]))
        .collect()
}

fn main() {
    let timeout = std::env::var("TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(30), Duration::from_millis);
    let probe = std::env::var("PROBE").unwrap_or_else(|_| "collectives".into());
    let result = (|| -> spade_dist::Result<()> {
        let r = Rendezvous::from_env(timeout)?;
        let pg = ProcessGroup::join(&r)?;
        let rank = pg.rank() as f64;
        match probe.as_str() {
            "die" => std::process::exit(3),
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
