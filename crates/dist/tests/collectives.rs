//! The bridge's collectives across real processes (Gloo over loopback), against sums worked by
//! hand, and a dead rank: the survivor's collective fails within the timeout instead of
//! hanging.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

const PROBE: &str = env!("CARGO_BIN_EXE_spade-dist-probe");

/// A free port for rank 0's store (the OS picks it; released just before use).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(29_531)
}

fn ranks(world: usize, probe: &[&str], timeout_ms: u64) -> Vec<Output> {
    let port = free_port().to_string();
    let children: Vec<_> = (0..world)
        .map(|rank| {
            Command::new(PROBE)
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", &port)
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", world.to_string())
                .env("PROBE", probe[rank.min(probe.len() - 1)])
                .env("TIMEOUT_MS", timeout_ms.to_string())
                .env("OMP_NUM_THREADS", "1")
                .spawn_output()
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().expect("the probe ran"))
        .collect()
}

trait SpawnOutput {
    fn spawn_output(&mut self) -> std::process::Child;
}

impl SpawnOutput for Command {
    fn spawn_output(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the probe starts")
    }
}

fn line<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(key).map(str::trim))
        .unwrap_or_else(|| panic!("no {key} line in:\n{out}"))
}

#[test]
fn three_ranks_compute_the_sums_worked_by_hand() {
    let outs = ranks(3, &["collectives"], 60_000);
    for (rank, o) in outs.iter().enumerate() {
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "rank {rank}: {out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        // [1, 10] + [2, 20] + [3, 30].
        assert_eq!(line(&out, "all_reduce_sum"), "[6.0, 60.0]");
        // max(0, 1, 2), max(5, 4, 3).
        assert_eq!(line(&out, "all_reduce_max"), "[2.0, 5.0]");
        // Rank 1's 1 * 7 + 1.
        assert_eq!(line(&out, "broadcast"), "[8.0, 8.0, 8.0]");
        // [1 + 2 + 3, 300] into rank 2's view, the ends outside it untouched; the senders'
        // own values kept.
        let want = match rank {
            2 => "[-1.0, 6.0, 300.0, -1.0]".to_string(),
            r => format!("[-1.0, {}.0, 100.0, -1.0]", r + 1),
        };
        assert_eq!(line(&out, "reduce_into"), want, "rank {rank}");
        assert_eq!(line(&out, "reduce_bad_root"), "refused");
        // Rows [r, r^2] in rank order.
        assert_eq!(
            line(&out, "all_gather"),
            "[3, 2] [0.0, 0.0, 1.0, 1.0, 2.0, 4.0]"
        );
        // (1 + 2 + 3) * [1..6] = [6, 12, 18, 24, 30, 36]; rank r keeps rows 2r, 2r + 1.
        let want = [
            "[2, 1] [6.0, 12.0]",
            "[2, 1] [18.0, 24.0]",
            "[2, 1] [30.0, 36.0]",
        ];
        assert_eq!(line(&out, "reduce_scatter"), want[rank], "rank {rank}");
        assert_eq!(line(&out, "barrier"), "ok");
        assert_eq!(line(&out, "bytes"), "from rank 2");
        assert_eq!(line(&out, "empty"), "0");
    }
}

#[test]
fn a_broadcast_with_its_own_wait_outlasts_the_groups_timeout() {
    // Followers wait for rank 0's next command while it plays a step's rollouts: longer than
    // any collective may take, so that wait is the call's own.
    let outs = ranks(2, &["patient"], 1_000);
    for (rank, o) in outs.iter().enumerate() {
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "rank {rank}: {out}");
        assert_eq!(line(&out, "bytes"), "late", "rank {rank}");
    }
}

#[test]
fn a_dead_rank_fails_the_survivors_collective_within_the_timeout() {
    let t = Instant::now();
    let outs = ranks(2, &["survive", "die"], 3_000);
    let took = t.elapsed();
    let survivor = String::from_utf8_lossy(&outs[0].stdout).into_owned();
    assert_eq!(outs[1].status.code(), Some(3), "the dying rank exits");
    assert_eq!(outs[0].status.code(), Some(2), "{survivor}");
    assert!(line(&survivor, "error").len() > 10, "{survivor}");
    assert!(
        took < Duration::from_secs(60),
        "the survivor waited {took:?} for a dead rank"
    );
}

/// Started collectives (ZeRO-3's prefetch and running reduces) with a rank that is alive but
/// silent: the survivor's wait fails after the group's timeout, not when the silent rank
/// finally exits (three timeouts later).
#[test]
fn a_silent_rank_fails_started_collectives_within_the_timeout() {
    let outs = ranks(2, &["survive_started", "hang"], 3_000);
    let survivor = String::from_utf8_lossy(&outs[0].stdout).into_owned();
    assert_eq!(outs[1].status.code(), Some(3), "the silent rank exits");
    assert_eq!(outs[0].status.code(), Some(2), "{survivor}");
    assert!(line(&survivor, "error").len() > 10, "{survivor}");
    let ms: u64 = line(&survivor, "waited")
        .trim_end_matches(" ms")
        .parse()
        .unwrap_or(u64::MAX);
    assert!(
        (2_500..7_000).contains(&ms),
        "the survivor waited {ms} ms (timeout 3,000 ms): {survivor}"
    );
}

#[test]
fn a_malformed_environment_is_named() {
    let o = Command::new(PROBE)
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", "29400")
        .env("RANK", "2")
        .env("WORLD_SIZE", "2")
        .output()
        .expect("the probe ran");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(line(&out, "error"), "RANK 2 is not below WORLD_SIZE 2");
    let o = Command::new(PROBE)
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", "port")
        .env("RANK", "0")
        .env("WORLD_SIZE", "1")
        .output()
        .expect("the probe ran");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        line(&out, "error"),
        "MASTER_PORT = \"port\" is not a number"
    );
}

/// An NCCL group where it cannot be: this CPU build says it has no NCCL, and the CUDA build
/// (scripts/build-cuda) on a machine without a GPU says libtorch sees none, at once either way
/// (two ranks, so no rank waits for the other in the store first).
#[test]
fn an_nccl_group_without_nccl_or_a_gpu_is_refused_at_once() {
    if spade_dist::nccl_built() && tch::Cuda::device_count() > 0 {
        eprintln!("skipped: a GPU is here (scripts/gpu-check runs PROBE=nccl on it)");
        return;
    }
    let start = Instant::now();
    let want = if spade_dist::nccl_built() {
        "libtorch sees 0 GPU(s)"
    } else {
        "built without NCCL"
    };
    // Joined directly, and beside a Gloo group (the trainer's ranks on GPUs).
    for probe in ["nccl", "nccl_beside"] {
        let outs = ranks(2, &[probe], 60_000);
        for (rank, o) in outs.iter().enumerate() {
            let out = String::from_utf8_lossy(&o.stdout);
            assert_eq!(o.status.code(), Some(2), "{probe} rank {rank}: {out}");
            assert!(
                line(&out, "error").contains(want),
                "{probe} rank {rank}: {out}"
            );
        }
    }
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
}

/// The raw NCCL link vLLM's weight transfer joins: in the CUDA build it mints real ids here
/// (no GPU needed) and refuses to join without a GPU, naming what it saw; elsewhere it says the
/// build has no NCCL. With GPUs, the probe's `PROBE=link` (one rank per GPU: the warm-up,
/// broadcasts of three dtypes, an all-reduce, a CPU tensor refused).
#[test]
fn the_nccl_link_mints_ids_and_joins_only_on_a_gpu() {
    use spade_dist::{NCCL_ID_BYTES, NcclLink};
    let timeout = Duration::from_secs(60);
    if !spade_dist::nccl_built() {
        let e = NcclLink::unique_id().map(|_| ()).unwrap_err().0;
        assert!(e.contains("built without NCCL"), "{e}");
        let e = NcclLink::join(&[0; NCCL_ID_BYTES], 0, 1, 0, timeout)
            .map(|_| ())
            .unwrap_err()
            .0;
        assert!(e.contains("built without NCCL"), "{e}");
        return;
    }
    let a = NcclLink::unique_id().expect("an id");
    let b = NcclLink::unique_id().expect("another id");
    assert_ne!(a, b, "two ids are two communicators");
    assert!(a.iter().any(|&x| x != 0));
    let gpus = tch::Cuda::device_count() as usize;
    if gpus == 0 {
        let start = Instant::now();
        let e = NcclLink::join(&a, 0, 1, 0, timeout)
            .map(|_| ())
            .unwrap_err()
            .0;
        assert!(e.contains("libtorch sees 0 GPU(s)"), "{e}");
        assert!(start.elapsed() < Duration::from_secs(5));
        return;
    }
    // One rank per GPU (at most 2) in threads of the probe: see PROBE=link.
    let out = Command::new(PROBE)
        .env("PROBE", "link")
        .output()
        .expect("the probe ran");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        line(&text, "link ok:"),
        format!("{} rank(s)", gpus.min(2)),
        "{text}"
    );
}
