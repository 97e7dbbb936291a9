//! One run on two ranks (issue 41): the learning test's fixed-env GRPO run (its cached
//! format-taught model and door-game pool, `crate::learning::fixture`) for three steps in this
//! process, then as two rank processes of this test binary (ZeRO-2: each trains half of every
//! update's micro-batches and holds half of the optimizer state). The two play the same
//! episodes, give the same losses (relative 1e-5) and the same final weights (up to rounding:
//! `assert_same_weights`), under ZeRO-3 as well, and the weights moved (so equality is not two runs that never
//! trained). A rank killed mid-run fails the run within the rank timeout, with no launcher to
//! stop it; the run then resumes on two ranks and finishes. A checkpoint resumes on another
//! rank count (two ranks' on one process and on three ranks, one process's on two: the
//! optimizer state re-sharded) and the next step is the one the uninterrupted run takes. And
//! a self-play run (the tiny loop's: designer, validation, hints, hint and no-hint plays) on two ranks designs
//! the same environments (rank 1 designing its share of the slots and writing its share of the
//! hints) and plays the same episodes as one process.

use crate::learning::{self, Res};
use spade::config::RunConfig;
use spade::report::Message;
use spade_worker::ranks::{self, Ranks};
use spade_worker::run::{self, RunOptions};
use spade_worker::sink::FileSink;
use spade_worker::state::StateStore;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The group's timeout in the rank processes (rendezvous and each collective).
const RANK_TIMEOUT: Duration = Duration::from_secs(20);

fn config(steps: u64) -> Res<RunConfig> {
    let f = learning::fixture();
    // A learning rate that moves the tiny model visibly in three steps.
    let mut cfg = learning::config(f, 5, 1e-3, steps)?;
    cfg.run.weights_every = 1;
    cfg.run.checkpoint_every = steps;
    // Eight plays per hall (as the learning test: every step has wins and losses to learn
    // from), a few samples per micro-batch: several micro-batches to share out.
    cfg.agent.global_batch = 24;
    cfg.grpo.micro_batch_tokens = 128;
    let issues = cfg.validate();
    assert!(issues.is_empty(), "{issues:?}");
    Ok(cfg)
}

/// The worker's settings; the warm start (self-play runs) is the tests' shared one.
fn options(label: &str, resume: bool) -> RunOptions {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut opts = RunOptions::new(label, repo.join("envs/seed"), crate::loop_tiny::cache_dir());
    opts.concurrency = Some(2);
    opts.resume = resume;
    opts
}

/// A child process: one rank of the run in `SPADE_TEST_RANKS_OUT` with the configuration in
/// `SPADE_TEST_RANKS_CONFIG` (rank 0 reports into the directory, the others train).
#[test]
#[ignore = "run by the tests below as a rank of their run"]
fn a_rank_of_a_run() {
    let (Ok(config), Ok(out)) = (
        std::env::var("SPADE_TEST_RANKS_CONFIG"),
        std::env::var("SPADE_TEST_RANKS_OUT"),
    ) else {
        return;
    };
    let result = (|| -> Res<()> {
        spade_policy::embed::set_threads(1);
        let cfg = RunConfig::from_toml_str(&std::fs::read_to_string(&config)?)?;
        let world: usize = std::env::var("WORLD_SIZE")?.parse()?;
        let r = Arc::new(Ranks::join_from_env(world, RANK_TIMEOUT)?);
        let out = PathBuf::from(out);
        let resume = std::env::var_os("SPADE_TEST_RANKS_RESUME").is_some();
        let mut opts = options(&format!("rank-{}", r.rank()), resume);
        opts.ranks = Some(r.clone());
        if r.rank() > 0 {
            run::follow(&cfg, &opts, &r, &mut |e| {
                if let run::Event::Log(l) = e {
                    println!("LOG {l}");
                }
            })?;
            return Ok(());
        }
        let mut sink = FileSink::open(&out)?;
        run::run(&cfg, &opts, &StateStore::new(&out), &mut sink, &mut |e| {
            if let run::Event::Log(l) = e {
                println!("LOG {l}");
            }
        })?;
        Ok(())
    })();
    if let Err(e) = result {
        println!("RANK ERROR {e}");
        std::process::exit(2);
    }
}

fn rank_command(config: &Path, out: &Path, resume: bool) -> Command {
    let exe = std::env::current_exe().expect("the test binary");
    let mut c = Command::new(exe);
    c.args([
        "ranks::a_rank_of_a_run",
        "--exact",
        "--ignored",
        "--nocapture",
    ])
    .env("SPADE_TEST_RANKS_CONFIG", config)
    .env("SPADE_TEST_RANKS_OUT", out)
    .env("OMP_NUM_THREADS", "1");
    if resume {
        c.env("SPADE_TEST_RANKS_RESUME", "1");
    }
    c
}

/// `n` ranks of the run in `out` (`resume`: resumed), rank `logged.0`'s output in `logged.1`.
fn launch_logged(
    config: &Path,
    out: &Path,
    resume: bool,
    n: usize,
    logged: (usize, &Path),
) -> Res<()> {
    ranks::launch(
        |rank| {
            let mut c = rank_command(config, out, resume);
            if rank == logged.0
                && let Ok(f) = std::fs::File::create(logged.1)
            {
                c.stdout(f);
            }
            c
        },
        n,
    )?;
    Ok(())
}

/// The metrics of each step reported, from `metrics.jsonl`.
fn metrics(out: &Path) -> Res<BTreeMap<u64, BTreeMap<String, f64>>> {
    let mut by_step = BTreeMap::new();
    for e in FileSink::read_all(out)? {
        if let Message::Metrics { step, values, .. } = e.message {
            by_step.insert(step, values);
        }
    }
    Ok(by_step)
}

/// (loss, gradient norm) of each step that took an update.
fn updates(out: &Path) -> Res<BTreeMap<u64, (f64, f64)>> {
    Ok(metrics(out)?
        .into_iter()
        .filter_map(|(s, v)| Some((s, (*v.get("loss")?, *v.get("grad_norm")?))))
        .collect())
}

/// Every weight of a checkpoint directory, by name.
fn weights(dir: &Path) -> Res<BTreeMap<String, Vec<f64>>> {
    let file = dir.join("model.safetensors");
    let named = tch::Tensor::read_safetensors(&file)?;
    named
        .into_iter()
        .map(|(name, t)| {
            let flat = t.to_kind(tch::Kind::Double).reshape([-1]);
            Ok((name, Vec::<f64>::try_from(&flat)?))
        })
        .collect()
}

/// A play as compared: environment, step, with the hint, return, every turn's text.
type Play = (String, u64, bool, f64, Vec<String>);

/// The runs in `one` and `two`, both started from the weights in `base`, took the same updates
/// up to float rounding: their final weights differ by under a thousandth of how far the
/// weights moved, in norm. Elementwise the bound would not hold: AdamW divides each gradient by
/// its own running scale, so an element whose gradient is rounding noise (1e-9) moves by a fair
/// share of the learning rate with the noise's sign, and two exact-up-to-rounding runs may
/// differ there by that much (measured: 1e-7 to 1.3e-5 at most, with learning rates of 1e-4
/// and 1e-3). Ranks that trained other samples or did not sum their gradients differ by a
/// share of the update itself (the dist crate's control).
fn assert_same_weights(one: &Path, two: &Path, base: &Path) -> Res<()> {
    let latest = |d: &Path| d.join("checkpoints/latest");
    let (w0, w1, w2) = (
        weights(base)?,
        weights(&latest(one))?,
        weights(&latest(two))?,
    );
    let norm = |a: &BTreeMap<String, Vec<f64>>, b: &BTreeMap<String, Vec<f64>>| {
        a.iter()
            .flat_map(|(k, x)| x.iter().zip(&b[k]).map(|(p, q)| (p - q) * (p - q)))
            .sum::<f64>()
            .sqrt()
    };
    let (gap, moved) = (norm(&w1, &w2), norm(&w1, &w0));
    eprintln!(
        "final weights: {gap:e} apart in norm, the update {moved:e}; at most {:e} apart in \
         one element",
        max_diff(&w1, &w2)
    );
    assert!(moved > 0.0, "the weights never moved");
    assert!(
        gap <= 1e-3 * moved,
        "final weights {gap:e} apart, {:.2e} of the update",
        gap / moved
    );
    Ok(())
}

/// An environment as compared: id, status, code, hint.
type Designed = (String, String, String, Option<String>);

/// Every play a run directory holds, in the order reported.
fn plays(d: &Path) -> Res<Vec<Play>> {
    let mut v = vec![];
    for e in FileSink::read_all(d)? {
        if let Message::Plays { records } = e.message {
            for p in records {
                let said = p.transcript.iter().map(|t| t.content.clone()).collect();
                v.push((p.env_id, p.step, p.with_hint, p.episode_return, said));
            }
        }
    }
    Ok(v)
}

fn max_diff(a: &BTreeMap<String, Vec<f64>>, b: &BTreeMap<String, Vec<f64>>) -> f64 {
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "the checkpoints hold other tensors"
    );
    a.iter()
        .flat_map(|(k, x)| x.iter().zip(&b[k]).map(|(p, q)| (p - q).abs()))
        .fold(0.0, f64::max)
}

/// A comparison's set-up: `cfg` written to `config`, run in this process into `one`; `two`
/// made, empty, for the ranks.
struct Compared {
    /// Holds the directories until the comparison is done.
    _dir: tempfile::TempDir,
    config: PathBuf,
    one: PathBuf,
    two: PathBuf,
}

fn run_one_process(cfg: &RunConfig) -> Res<Compared> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("run.toml");
    std::fs::write(&config, cfg.to_toml())?;
    let one = dir.path().join("one");
    let mut sink = FileSink::open(&one)?;
    let store = StateStore::new(&one);
    run::run(cfg, &options("one", false), &store, &mut sink, &mut |_| {})?;
    let two = dir.path().join("two");
    std::fs::create_dir_all(&two)?;
    Ok(Compared {
        _dir: dir,
        config,
        one,
        two,
    })
}

#[test]
fn two_ranks_train_a_run_as_one_process_does() -> Res<()> {
    two_ranks_match_one(&config(3)?)
}

/// The same with ZeRO-3: each decoder layer made whole from its owner rank just before its
/// forward and its recomputed backward (and the one process recomputes too).
#[test]
fn two_ranks_under_zero_3_train_a_run_as_one_process_does() -> Res<()> {
    let mut cfg = config(3)?;
    cfg.run.zero_stage = 3;
    cfg.grpo.activation_recompute = true;
    two_ranks_match_one(&cfg)
}

fn two_ranks_match_one(cfg: &RunConfig) -> Res<()> {
    spade_policy::embed::set_threads(1);
    let c = run_one_process(cfg)?;
    let (config_path, one, two) = (&c.config, &c.one, &c.two);
    let started = Instant::now();
    let log = two.join("rank1.log");
    launch_logged(config_path, two, false, 2, (1, &log))?;
    eprintln!("two ranks: {:.1} s", started.elapsed().as_secs_f64());
    // Rank 1 played half of every environment's episodes: 12 of 24 plays a step.
    let said = std::fs::read_to_string(&log)?;
    assert!(
        said.contains("rank 1 of 2: played 36 episodes, trained 3 updates"),
        "rank 1 said: {said}"
    );
    // And the plays are the ones one process plays (each episode's seeds are its place in
    // its environment's episodes, whichever rank plays it).
    let (p1, p2) = (plays(one)?, plays(two)?);
    assert_eq!(p1.len(), 72);
    assert!(p1 == p2, "two ranks played other episodes than one process");

    let (u1, u2) = (updates(one)?, updates(two)?);
    eprintln!("(loss, grad norm): one process {u1:?}, two ranks {u2:?}");
    assert_eq!(u1.len(), 3, "an update in every step: {u1:?}");
    assert_eq!(u1.keys().collect::<Vec<_>>(), u2.keys().collect::<Vec<_>>());
    for (step, (loss, norm)) in &u1 {
        let (loss2, norm2) = u2[step];
        // On-policy GRPO's loss is a sum of z-scored advantages, near 0: its rounding is
        // compared to the scale of its terms (1), the gradient norm relatively.
        assert!(
            (loss - loss2).abs() <= 1e-5 * loss.abs().max(1.0),
            "step {step}: loss {loss2} on two ranks, {loss} in one process"
        );
        assert!(
            (norm - norm2).abs() <= 1e-5 * norm.abs(),
            "step {step}: gradient norm {norm2} on two ranks, {norm} in one process"
        );
    }
    let base = Path::new(&learning::fixture().model_dir);
    let moved = max_diff(&weights(base)?, &weights(&one.join("checkpoints/latest"))?);
    assert!(
        moved > 1e-4,
        "three steps left the weights where they were ({moved})"
    );
    assert_same_weights(one, two, base)?;
    let latest = |d: &Path| d.join("checkpoints/latest");

    // Each rank wrote its half of the optimizer state; nobody wrote the whole of it.
    for rank in 0..2 {
        let shard = latest(two).join(format!("optimizer.rank{rank}-of-2.safetensors"));
        assert!(shard.exists(), "{} is missing", shard.display());
    }
    assert!(!latest(two).join("optimizer.safetensors").exists());
    Ok(())
}

#[test]
fn a_killed_rank_fails_the_run_and_it_resumes_on_as_many_ranks() -> Res<()> {
    spade_policy::embed::set_threads(1);
    let steps = 6;
    let cfg = config(steps)?;
    let dir = tempfile::tempdir()?;
    let config_path = dir.path().join("run.toml");
    std::fs::write(&config_path, cfg.to_toml())?;
    let out = dir.path().join("run");
    std::fs::create_dir_all(&out)?;

    // The ranks started by hand, without `launch` (as on nodes of a cluster): nothing stops
    // rank 0 but its own collectives.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut children = vec![];
    for rank in 0..2 {
        let child = rank_command(&config_path, &out, false)
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", "2")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        children.push(child);
    }
    let started = Instant::now();
    while metrics(&out).map_or(0, |l| l.len()) < 1 {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "no step committed within 10 minutes"
        );
        if let Some(s) = children[0].try_wait()? {
            return Err(format!("rank 0 ended before the kill: {s}").into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    children[1].kill()?;
    children[1].wait()?;
    let killed = Instant::now();
    let mut rank0 = children.remove(0);
    let status = loop {
        if let Some(s) = rank0.try_wait()? {
            break s;
        }
        if killed.elapsed() > RANK_TIMEOUT * 4 {
            let _ = rank0.kill();
            return Err("rank 0 still ran 80 s after rank 1 was killed".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let waited = killed.elapsed();
    let mut said = String::new();
    if let Some(mut o) = rank0.stdout.take() {
        use std::io::Read;
        o.read_to_string(&mut said)?;
    }
    eprintln!("rank 0 ended {waited:?} after rank 1 was killed: {status}");
    assert!(!status.success(), "rank 0 succeeded without rank 1");
    assert!(said.contains("RANK ERROR"), "rank 0 said: {said}");
    let done = metrics(&out)?.len() as u64;
    assert!(done < steps, "the run was over before the kill");

    // Resume on two ranks: the run finishes, every step reported once.
    ranks::launch(|_| rank_command(&config_path, &out, true), 2)?;
    let after = metrics(&out)?;
    assert_eq!(
        after.keys().copied().collect::<Vec<_>>(),
        (0..steps).collect::<Vec<_>>()
    );

    Ok(())
}

/// `cp -a from to`: a run directory copied with its checkpoints' links.
fn copy_run(from: &Path, to: &Path) -> Res<()> {
    let status = Command::new("cp").arg("-a").arg(from).arg(to).status()?;
    if !status.success() {
        return Err(format!("cp -a {} {}: {status}", from.display(), to.display()).into());
    }
    Ok(())
}

#[test]
fn a_checkpoint_resumes_on_another_rank_count_and_takes_the_same_step() -> Res<()> {
    spade_policy::embed::set_threads(1);
    // Two steps in one process and on two ranks, then a third step resumed from each: one
    // process from its own checkpoint (the reference), one process from the two ranks', two
    // ranks from one process's and three ranks from the two ranks'.
    let c = run_one_process(&config(2)?)?;
    let (one, two) = (&c.one, &c.two);
    ranks::launch(|_| rank_command(&c.config, two, false), 2)?;
    let three_steps = c.config.with_file_name("three.toml");
    let more = config(3)?;
    std::fs::write(&three_steps, more.to_toml())?;
    let root = one.parent().ok_or("no parent")?;
    let reference = root.join("reference");
    copy_run(one, &reference)?;
    let mut sink = FileSink::open(&reference)?;
    let store = StateStore::new(&reference);
    run::run(&more, &options("ref", true), &store, &mut sink, &mut |_| {})?;

    // Two ranks' checkpoint on one process.
    let two_to_one = root.join("two-to-one");
    copy_run(two, &two_to_one)?;
    let mut said = vec![];
    let mut sink = FileSink::open(&two_to_one)?;
    let store = StateStore::new(&two_to_one);
    run::run(&more, &options("2to1", true), &store, &mut sink, &mut |e| {
        if let run::Event::Log(l) = e {
            said.push(l);
        }
    })?;
    assert!(
        said.iter()
            .any(|l| l.contains("re-sharded the optimizer state of 2 ranks into one process")),
        "{said:?}"
    );
    // One process's on two ranks, two ranks' on three.
    let mut resumed = vec![two_to_one];
    for (from, ranks, name, want) in [
        (
            one,
            2,
            "one-to-two",
            "re-sharded one process's optimizer state for 2 ranks",
        ),
        (
            two,
            3,
            "two-to-three",
            "re-sharded the optimizer state of 2 ranks for 3 ranks",
        ),
    ] {
        let dir = root.join(name);
        copy_run(from, &dir)?;
        let log = root.join(format!("{name}.log"));
        launch_logged(&three_steps, &dir, true, ranks, (0, &log))?;
        let said = std::fs::read_to_string(&log)?;
        assert!(said.contains(want), "rank 0 said: {said}");
        resumed.push(dir);
    }

    let want = updates(&reference)?;
    assert_eq!(want.keys().copied().collect::<Vec<_>>(), [0, 1, 2]);
    let (loss, norm) = want[&2];
    for dir in &resumed {
        let got = updates(dir)?;
        let (loss2, norm2) = *got.get(&2).ok_or(format!("{}: no step 2", dir.display()))?;
        eprintln!(
            "{}: step 2 (loss, grad norm) ({loss2}, {norm2}), one process ({loss}, {norm})",
            dir.display()
        );
        assert!(
            (loss - loss2).abs() <= 1e-5 * loss.abs().max(1.0),
            "{}: loss {loss2}, {loss} without the move",
            dir.display()
        );
        assert!(
            (norm - norm2).abs() <= 1e-5 * norm.abs(),
            "{}: gradient norm {norm2}, {norm} without the move",
            dir.display()
        );
        // Against the three steps' movement, as two ranks against one process above: a resume
        // with fresh or misplaced moments is off by a share of the last step.
        assert_same_weights(&reference, dir, Path::new(&learning::fixture().model_dir))?;
    }
    Ok(())
}

#[test]
fn a_self_play_run_on_two_ranks_designs_and_plays_what_one_process_does() -> Res<()> {
    spade_policy::embed::set_threads(1);
    // The tiny loop's three-step demo run (its cached warm start); the last step trains the
    // designer samples of the window it flushes.
    let cfg = crate::loop_tiny::three_step_config().map_err(|e| e.to_string())?;
    let warm = crate::loop_tiny::ready_designer(&cfg, &options("warm", false))
        .map_err(|e| e.to_string())?;
    let c = run_one_process(&cfg)?;
    let (config_path, one, two) = (&c.config, &c.one, &c.two);
    let log = two.join("rank1.log");
    launch_logged(config_path, two, false, 2, (1, &log))?;
    // Rank 1 designed its share of the slots and wrote its share of the hints.
    let said = std::fs::read_to_string(&log)?;
    let count = |before: &str| -> Option<usize> {
        said.split(before).next()?.rsplit(' ').next()?.parse().ok()
    };
    let (attempts, hints) = (count(" designer attempts"), count(" hints"));
    eprintln!("rank 1: {attempts:?} designer attempts, {hints:?} hints");
    assert!(
        attempts > Some(0) && hints > Some(0),
        "rank 1 designed nothing: {said}"
    );

    // The same environments, accepted or rejected alike, with the same hints.
    let envs = |d: &Path| -> Res<Vec<Designed>> {
        let mut v = vec![];
        for e in FileSink::read_all(d)? {
            if let Message::Environment { record } = e.message {
                let status = format!("{:?}", record.status);
                v.push((record.env_id, status, record.code, record.hint));
            }
        }
        Ok(v)
    };
    let (e1, e2) = (envs(one)?, envs(two)?);
    assert!(!e1.is_empty());
    assert!(
        e1 == e2,
        "two ranks designed other environments than one process"
    );
    // The same hint and no-hint plays (each rank played its share of each environment's).
    let (p1, p2) = (plays(one)?, plays(two)?);
    let hinted = p1.iter().filter(|p| p.2).count();
    eprintln!(
        "{} environments, {} plays ({hinted} with the hint)",
        e1.len(),
        p1.len()
    );
    assert!(
        hinted > 0 && p1.len() > hinted,
        "hint and no-hint plays: {hinted} of {}",
        p1.len()
    );
    assert!(p1 == p2, "two ranks played other episodes than one process");
    assert_same_weights(one, two, &warm)
}

/// The two-node Ray cluster scripts/test starts (`SPADE_RAY_GCS`) and the Python with Ray.
fn ray_cluster() -> Option<(String, PathBuf)> {
    let Ok(gcs) = std::env::var("SPADE_RAY_GCS") else {
        eprintln!("skipped: SPADE_RAY_GCS is not set (scripts/test starts a two-node Ray cluster)");
        return None;
    };
    let python = std::env::var_os("SPADE_RAY_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::loop_tiny::cache_root().join("venv-ray/bin/python"));
    Some((gcs, python))
}

#[test]
fn two_ranks_placed_by_ray_on_two_nodes_train_as_one_process() -> Res<()> {
    let Some((gcs, python)) = ray_cluster() else {
        return Ok(());
    };
    spade_policy::embed::set_threads(1);
    let cfg = config(3)?;
    let c = run_one_process(&cfg)?;
    let (config_path, one, two) = (&c.config, &c.one, &c.two);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/ray-ranks");
    let rank = rank_command(config_path, two, false);
    let started = Instant::now();
    let o = Command::new(&python)
        .arg(&script)
        // Half a CPU a rank: the Ray executor's tests may hold a share of a node meanwhile.
        .args([
            "--address",
            &gcs,
            "--ranks",
            "2",
            "--cpus",
            "0.5",
            "--wait",
            "300",
            "--",
        ])
        .arg(rank.get_program())
        .args(rank.get_args())
        .envs(rank.get_envs().filter_map(|(k, v)| Some((k, v?))))
        // One machine: every rank's address is loopback (Ray names the nodes by the
        // machine's interface).
        .env("SPADE_RAY_RANK_ADDR", "127.0.0.1")
        .output()?;
    let said = String::from_utf8_lossy(&o.stderr).into_owned();
    eprintln!(
        "ray-ranks: {:.1} s\n{said}",
        started.elapsed().as_secs_f64()
    );
    assert!(o.status.success(), "ray-ranks failed: {}\n{said}", o.status);
    // One rank on each node.
    let nodes: std::collections::BTreeSet<&str> = said
        .lines()
        .filter_map(|l| {
            l.strip_prefix("ray-ranks: rank ")?
                .split(" on node ")
                .nth(1)
        })
        .filter_map(|rest| rest.split_whitespace().next())
        .collect();
    assert_eq!(nodes.len(), 2, "the ranks were not on two nodes:\n{said}");
    assert!(
        plays(one)? == plays(two)?,
        "the ranks on Ray played other episodes"
    );
    assert_same_weights(one, two, Path::new(&learning::fixture().model_dir))
}

/// Two ranks with vLLM servers (`SPADE_TEST_VLLM=1`, vLLM from `scripts/setup --vllm`), under
/// ZeRO-3: rank 0 sends every play to the server the run starts, both ranks train each update,
/// and after each update the server has the trained weights (its log-probs of the next step's
/// plays agree with rank 0's tch rescoring, within the vLLM tests' tolerance).
#[test]
fn two_ranks_train_on_plays_from_a_vllm_server() -> Res<()> {
    if crate::vllm::skipped() {
        return Ok(());
    }
    spade_policy::embed::set_threads(1);
    // config's 24 plays a step: wins and losses to learn from in every step.
    let mut cfg = config(2)?;
    cfg.run.zero_stage = 3;
    cfg.grpo.activation_recompute = true;
    crate::vllm::one_started_server(&mut cfg, 8398);
    let issues = cfg.validate();
    assert!(issues.is_empty(), "{issues:?}");
    let dir = tempfile::tempdir()?;
    let config_path = dir.path().join("run.toml");
    std::fs::write(&config_path, cfg.to_toml())?;
    let out = dir.path().join("two");
    std::fs::create_dir_all(&out)?;
    let log = dir.path().join("rank1.log");
    launch_logged(&config_path, &out, false, 2, (1, &log))?;
    let m = metrics(&out)?;
    assert_eq!(m.len(), 2, "{m:?}");
    let said = std::fs::read_to_string(&log)?;
    assert!(
        said.contains("rank 1 of 2: played 0 episodes, trained 2 updates"),
        "rank 1 said: {said}"
    );
    for (step, v) in &m {
        let gap = v
            .get("vllm_logprob_gap_max")
            .copied()
            .ok_or("no vllm_logprob_gap_max")?;
        eprintln!(
            "step {step}: vllm_logprob_gap_max {gap}, vllm_sync_s {:?}",
            v.get("vllm_sync_s")
        );
        assert!(
            gap < 2e-3,
            "step {step}: the server's log-probs are {gap} from tch's"
        );
        assert!(v.contains_key("vllm_sync_s"), "{v:?}");
        assert!(v.contains_key("loss"), "step {step} took no update: {v:?}");
    }
    assert!(
        std::net::TcpStream::connect("127.0.0.1:8398").is_err(),
        "the server outlived the run"
    );
    Ok(())
}
