//! The vLLM rollout backend (`spade_worker::vllm`). Against real `vllm serve` processes of the
//! tiny model on CPU only with `SPADE_TEST_VLLM=1` (vLLM from `scripts/setup --vllm`; a
//! server takes a minute or two to start on a loaded 2-core machine); without it that test
//! prints SKIPPED and passes. The bad-input tests that need no vLLM (nothing listening, a
//! server of another version) always run.

use spade_policy::engine::generate_all;
use spade_policy::preset::{self, BUILTIN_TEXT};
use spade_policy::sample::SamplingParams;
use spade_sandbox::{EnvKind, Pool};
use spade_worker::play::{self, Backend, PlayJob, PlayOptions};
use spade_worker::vllm::{Fleet, FleetOptions, logprob_gap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn enabled() -> bool {
    std::env::var("SPADE_TEST_VLLM").is_ok_and(|v| v == "1")
}

/// `cfg` generating on one vLLM server the run starts on `port` (one OpenMP thread, a
/// startup allowance for a loaded machine).
pub(crate) fn one_started_server(cfg: &mut spade::config::RunConfig, port: u16) {
    cfg.model.rollout = spade::config::RolloutBackend::Vllm;
    cfg.vllm.start = 1;
    cfg.vllm.port = port;
    cfg.vllm.threads = 1;
    cfg.vllm.startup_timeout_s = 900;
}

/// True, and said on stderr, when the tests against real vLLM are off (`SPADE_TEST_VLLM=1`
/// turns them on; `scripts/setup --vllm` installs vLLM).
pub(crate) fn skipped() -> bool {
    if !enabled() {
        eprintln!("SKIPPED: set SPADE_TEST_VLLM=1 to run against real vLLM (scripts/setup --vllm)");
    }
    !enabled()
}

fn options(dir: &Path, start: u32, urls: Vec<String>) -> FleetOptions {
    let venv = std::env::var_os("SPADE_CACHE")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| std::path::PathBuf::from(h).join(".cache/spade-studio"))
        })
        .unwrap_or_default()
        .join("venv-vllm");
    FleetOptions {
        urls,
        start,
        port: 8391,
        venv,
        threads: 1,
        kv_cache_gib: 1,
        gpus: vec![],
        tensor_parallel: 1,
        max_model_len: 1024,
        weights_dir: dir.join("weights"),
        log_dir: dir.join("logs"),
        startup_timeout: Duration::from_secs(900),
        request_timeout: Duration::from_secs(120),
        on_gpu: false,
        weight_sync: spade::config::WeightSync::Disk,
        env: vec![],
    }
}

const OBS: &str = "I picked an integer from 1 to 50. Answer as \\boxed{n}.";

const GUESS: &str = r#"
"""Guess a number from 1 to 50 in up to four tries."""

class GuessEnv:
    def __init__(self, max_turns=4, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.target = random.Random(seed).randint(8, 50)
        self.turn = 0
        return "I picked an integer from 1 to 50. Answer as \\boxed{n}.", {}

    def step(self, action):
        self.turn += 1
        if self.turn >= self.max_turns:
            return "Out of tries.", 0.0, False, True, {}
        return "7 is too low.", 0.0, False, False, {}

    def solution(self):
        return str(self.target)
"#;

/// |vLLM - tch| log-prob allowed per sampled token of float32 weights. Measured here (2
/// servers, 8 episodes of 4 turns, 12 tokens a turn, T 0.6): see docs/benchmarks.md, "The vLLM
/// rollout backend".
const TRACE_TOLERANCE: f64 = 2e-3;

#[test]
fn vllm_serves_play_syncs_weights_and_restarts_a_dead_or_hung_server() -> TestResult {
    if skipped() {
        return Ok(());
    }
    let policy = crate::always_answers("\\boxed{7}", &[OBS], "7 is too low.")?;
    let tok = policy.require_tokenizer()?;
    let dir = tempfile::tempdir()?;
    let t = Instant::now();
    let fleet = Arc::new(Fleet::connect(
        &options(dir.path(), 2, vec![]),
        &policy,
        "step-0",
        &mut |l| eprintln!("{l}"),
    )?);
    eprintln!("two servers ready in {:.1} s", t.elapsed().as_secs_f64());
    let v0 = fleet.version();
    assert!(v0.starts_with("step-0-"), "{v0}");

    // A play step's traces: tokens and log-probs line up with what the trainer recomputes.
    let pool = crate::pool(8);
    let (_, worst, _, multi) = play_and_compare(&policy, &fleet, &pool)?;
    assert!(worst < TRACE_TOLERANCE, "max gap {worst}");
    assert!(multi >= 4, "only {multi} multi-turn episodes");

    // Two servers share the sequences.
    let prompts: Vec<Vec<i64>> = (0..8)
        .map(|i| {
            tok.encode(&format!(
                "<|im_start|>user\nCount to {i}.<|im_end|>\n<|im_start|>assistant\n"
            ))
        })
        .collect::<Result<_, _>>()?;
    let seeds: Vec<u64> = (0..8).collect();
    let greedy = SamplingParams {
        temperature: 0.0,
        max_new_tokens: 8,
        ..SamplingParams::default()
    };
    let mut r = fleet.rollout(tok);
    let before = generate_all(&mut r, &prompts, &seeds, &greedy)?;
    assert_eq!(r.turns_per_server(), &[4, 4]);
    drop(r);

    // A weight update changes what the servers sample and the version they report.
    let other = preset::tiny(&[BUILTIN_TEXT], 3, |_| {})?;
    let t = Instant::now();
    let report = fleet.sync(&other, "step-1")?;
    eprintln!(
        "sync: write {:.2} s, load {:.2} s, probe gap {:.2e} ({:.1} s)",
        report.write_s,
        report.load_s,
        report.probe_gap,
        t.elapsed().as_secs_f64()
    );
    assert_ne!(fleet.version(), v0);
    assert!(fleet.version().starts_with("step-1-"));
    let mut r = fleet.rollout(tok);
    let after = generate_all(&mut r, &prompts, &seeds, &greedy)?;
    drop(r);
    let changed = before
        .iter()
        .zip(&after)
        .filter(|(a, b)| a.tokens != b.tokens || a.logprobs != b.logprobs)
        .count();
    assert_eq!(changed, 8, "outputs unchanged by the update");
    // The untrained model's broad distributions make the trace comparison sharp.
    let (_, worst, _, _) = play_and_compare(&other, &fleet, &pool)?;
    assert!(worst < TRACE_TOLERANCE, "after the update: max gap {worst}");
    for (p, c) in prompts.iter().zip(&after) {
        let mut ids = p.clone();
        ids.extend(&c.tokens);
        let mask: Vec<bool> = (0..ids.len()).map(|i| i >= p.len()).collect();
        let mut lp = vec![0.0; p.len()];
        lp.extend(&c.logprobs);
        let tch = spade_policy::train::token_logprobs(other.model(), &[ids], 1.0)?;
        let (_, max, _) = logprob_gap(&lp, &tch[0], &mask);
        assert!(max < TRACE_TOLERANCE, "after the update: gap {max}");
    }

    // A killed server (SIGKILL of its group): the fleet starts it again with the current
    // weights and sends its lost turns again, so the rollout ends as it would have.
    let replay =
        |server: usize, signal, what: &str| -> Result<String, Box<dyn std::error::Error>> {
            let pid = fleet.server_pids()[server].ok_or("no pid")?;
            signal_group(pid, signal)?;
            let t = Instant::now();
            let mut r = fleet.rollout(tok);
            let again = generate_all(&mut r, &prompts, &seeds, &greedy)?;
            drop(r);
            eprintln!("{what}: rollout done in {:.1} s", t.elapsed().as_secs_f64());
            same_outputs(&after, &again, what)?;
            assert_ne!(
                fleet.server_pids()[server],
                Some(pid),
                "{what}: a new process serves"
            );
            let notes = fleet.take_notes();
            eprintln!("{notes:?}");
            match notes.as_slice() {
                [one] if one.contains(fleet.urls()[server]) => Ok(one.clone()),
                _ => Err(format!("{what}: restart notes {notes:?}").into()),
            }
        };
    replay(1, rustix::process::Signal::KILL, "a killed server")?;
    assert_eq!(fleet.restarts(), 1);

    // A server that stops answering while its process lives (SIGSTOP): the watchdog finds its
    // /health silent, and it is restarted the same way.
    let note = replay(0, rustix::process::Signal::STOP, "a stopped server")?;
    assert!(note.contains("did not answer"), "{note}");
    assert_eq!(fleet.restarts(), 2);
    let (url0, url1) = (fleet.urls()[0].to_string(), fleet.urls()[1].to_string());

    // A server reached by URL is not restarted: when it dies, the rollout fails naming it,
    // instead of hanging.
    let o = options(dir.path(), 0, vec![url0.clone()]);
    let remote = Fleet::connect(&o, &other, "step-3", &mut |_| {})?;
    let pid0 = fleet.server_pids()[0].ok_or("server 0 has no pid")?;
    signal_group(pid0, rustix::process::Signal::KILL)?;
    let t = Instant::now();
    let mut r = remote.rollout(tok);
    let err = match generate_all(&mut r, &prompts, &seeds, &greedy) {
        Ok(_) => return Err("a rollout over a killed server succeeded".into()),
        Err(e) => e.to_string(),
    };
    eprintln!(
        "killed remote server: {}",
        err.lines().next().unwrap_or_default()
    );
    assert!(
        err.contains(&url0) && err.contains("reached by URL"),
        "{err}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(remote.restarts(), 0);

    // The wrong model: a policy of another vocabulary cannot be loaded; the error names the
    // server (reached by URL this time: a fleet that did not start it). Last: a server whose
    // reload failed does not load weights again.
    let small = preset::tiny(&["a b c d e f g h"], 1, |_| {})?;
    let o = options(dir.path(), 0, vec![url1.clone()]);
    let err = match Fleet::connect(&o, &small, "step-2", &mut |_| {}) {
        Ok(_) => return Err("a policy of another shape was accepted".into()),
        Err(e) => e.to_string(),
    };
    eprintln!("wrong model: {}", err.lines().next().unwrap_or_default());
    assert!(
        err.contains(&url1) && err.contains("could not load"),
        "{err}"
    );
    Ok(())
}

/// Sends `signal` to the process group `pid` leads.
fn signal_group(pid: u32, signal: rustix::process::Signal) -> TestResult {
    let group = rustix::process::Pid::from_raw(i32::try_from(pid)?).ok_or("pid 0")?;
    rustix::process::kill_process_group(group, signal)?;
    Ok(())
}

/// The same greedy tokens, and log-probs within the trace tolerance (another process of the
/// same weights may round differently).
fn same_outputs(
    want: &[spade_policy::sample::Completion],
    got: &[spade_policy::sample::Completion],
    what: &str,
) -> TestResult {
    assert_eq!(want.len(), got.len(), "{what}");
    for (a, b) in want.iter().zip(got) {
        assert_eq!(a.tokens, b.tokens, "{what}");
        let gap = a
            .logprobs
            .iter()
            .zip(&b.logprobs)
            .map(|(x, y)| f64::from((x - y).abs()))
            .fold(0.0, f64::max);
        assert!(gap < TRACE_TOLERANCE, "{what}: log-prob gap {gap}");
    }
    Ok(())
}

/// Plays 2 environments x 4 episodes through `fleet` and compares every sampled token's
/// log-prob with tch's recomputation at the play temperature: (mean, max, tokens, episodes
/// with more than one turn).
fn play_and_compare(
    policy: &spade_policy::Policy,
    fleet: &Arc<Fleet>,
    pool: &Pool,
) -> Result<(f64, f64, usize, usize), Box<dyn std::error::Error>> {
    let jobs: Vec<PlayJob<'_>> = (0..2)
        .map(|j| PlayJob {
            first_index: 0,
            code: GUESS,
            kind: EnvKind::Game,
            hint: None,
            seeds: (0..4).map(|i| 10 * j + i).collect(),
            sample_seed: 5 + j as u64,
        })
        .collect();
    let opts = PlayOptions {
        max_turns: 4,
        max_new_tokens: 12,
        temperature: 0.6,
        max_context: 1024,
        max_episode_tokens: 1024,
        backend: Backend::Vllm(fleet.clone()),
        ..PlayOptions::default()
    };
    let t = Instant::now();
    let played = play::play_envs(policy, pool, &jobs, &opts, 8)?;
    let (mut worst, mut sum, mut n, mut multi) = (0.0f64, 0.0f64, 0usize, 0);
    for ep in played.iter().flatten() {
        assert!(ep.error.is_none(), "{:?}", ep.error);
        assert!(ep.failure.is_none(), "{:?}", ep.failure);
        assert_eq!(ep.ids.len(), ep.loss_mask.len());
        assert_eq!(ep.ids.len(), ep.logprobs.len());
        assert!(ep.turns >= 1);
        multi += usize::from(ep.turns > 1);
        let tch = spade_policy::train::token_logprobs(
            policy.model(),
            std::slice::from_ref(&ep.ids),
            0.6,
        )?;
        let (mean, max, k) = logprob_gap(&ep.logprobs, &tch[0], &ep.loss_mask);
        assert!(k > 0, "no sampled tokens");
        worst = worst.max(max);
        sum += mean * k as f64;
        n += k;
        // Padded vocabulary rows are never sampled.
        let usable = policy.model().usable_vocab();
        assert!(ep.ids.iter().all(|&id| id < usable));
    }
    let mean = sum / n.max(1) as f64;
    eprintln!(
        "{} episodes in {:.1} s; trace log-probs vs tch: mean |gap| {mean:.2e}, max {worst:.2e} \
         over {n} sampled tokens",
        played.iter().map(Vec::len).sum::<usize>(),
        t.elapsed().as_secs_f64()
    );
    Ok((mean, worst, n, multi))
}

/// `vllm.weight_sync = "nccl"` (issue 42): the policy on cuda:0, one server started on cuda:1
/// with vLLM's NCCL weight transfer; a sync broadcasts another model's weights, writes nothing,
/// and passes the sync's own checks (version label, the probe's log-probs against tch's). Runs
/// only where the CUDA build, two GPUs and vLLM are all present, and says which is missing
/// elsewhere: the GPU machine lent to sessions has no vLLM, so it has not run yet.
#[test]
fn a_gpu_policy_syncs_its_servers_over_nccl_where_two_gpus_and_vllm_are_present() -> TestResult {
    let gpus = tch::Cuda::device_count();
    let nccl = spade_dist::nccl_built();
    if !(enabled() && nccl && gpus >= 2) {
        eprintln!(
            "SKIPPED: the NCCL weight sync needs SPADE_TEST_VLLM=1 with vLLM for GPUs (set: {}), \
             the CUDA build with NCCL (scripts/build-cuda --fetch; this binary: {}) and two \
             GPUs ({gpus} seen)",
            enabled(),
            if nccl { "NCCL" } else { "no NCCL" }
        );
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let on_gpu =
        |seed: u64, name: &str| -> Result<spade_policy::Policy, Box<dyn std::error::Error>> {
            let p = preset::tiny(&[BUILTIN_TEXT], seed, |_| {})?;
            let d = dir.path().join(name);
            p.save(&d)?;
            Ok(spade_policy::Policy::load(&d, tch::Device::Cuda(0))?)
        };
    let policy = on_gpu(1, "first")?;
    let mut o = options(dir.path(), 1, vec![]);
    o.gpus = vec![1];
    o.on_gpu = true;
    o.weight_sync = spade::config::WeightSync::Nccl;
    let fleet = Fleet::connect(&o, &policy, "step-0", &mut |l| eprintln!("{l}"))?;
    let other = on_gpu(3, "second")?;
    let report = fleet.sync(&other, "step-1")?;
    eprintln!(
        "nccl sync: {:.2} s, probe gap {:.2e}",
        report.load_s, report.probe_gap
    );
    assert_eq!((report.path, report.write_s), ("nccl", 0.0));
    assert!(
        fleet.version().starts_with("step-1-"),
        "{}",
        fleet.version()
    );
    assert!(
        !o.weights_dir.join("policy-step-1").exists(),
        "nothing is written"
    );
    Ok(())
}

#[test]
fn a_url_where_nothing_listens_is_named_in_the_error() -> TestResult {
    let policy = preset::tiny(&[BUILTIN_TEXT], 3, |_| {})?;
    let dir = tempfile::tempdir()?;
    let mut o = options(dir.path(), 0, vec!["http://127.0.0.1:9".into()]);
    o.startup_timeout = Duration::from_secs(2);
    let err = match Fleet::connect(&o, &policy, "step-0", &mut |_| {}) {
        Ok(_) => return Err("connected to nothing".into()),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("http://127.0.0.1:9/health"), "{err}");
    assert!(err.contains("not healthy"), "{err}");
    Ok(())
}

#[test]
fn a_server_of_another_vllm_version_is_refused() -> TestResult {
    use axum::routing::get;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            let Ok(listener) = tokio::net::TcpListener::bind("127.0.0.1:0").await else {
                return;
            };
            let _ = tx.send(listener.local_addr().map(|a| a.port()).unwrap_or(0));
            let app = axum::Router::new()
                .route("/health", get(|| async { "" }))
                .route(
                    "/version",
                    get(|| async { axum::Json(serde_json::json!({"version": "0.31.4"})) }),
                );
            let _ = axum::serve(listener, app).await;
        });
    });
    let port = rx.recv_timeout(Duration::from_secs(10))?;
    let url = format!("http://127.0.0.1:{port}");
    let policy = preset::tiny(&[BUILTIN_TEXT], 3, |_| {})?;
    let dir = tempfile::tempdir()?;
    let o = options(dir.path(), 0, vec![url.clone()]);
    let err = match Fleet::connect(&o, &policy, "step-0", &mut |_| {}) {
        Ok(_) => return Err("a server of vLLM 0.31 was accepted".into()),
        Err(e) => e.to_string(),
    };
    assert!(err.contains(&url) && err.contains("0.31.4"), "{err}");
    Ok(())
}

/// Two fixed-env steps of the loop with `model.rollout = "vllm"` and a server the run starts:
/// the plays come from the server, the update's weights reach it after each step (its
/// version names the step), and the traces the trainer rescored agree with tch.
#[test]
fn two_loop_steps_on_a_vllm_server_sync_the_weights_after_each_update() -> TestResult {
    if skipped() {
        return Ok(());
    }
    use spade_worker::run::{self, Event, RunOptions};
    use spade_worker::sink::FileSink;
    use spade_worker::state::StateStore;
    spade_policy::embed::set_threads(1);
    let f = crate::learning::fixture();
    let mut cfg = crate::learning::config(f, 3, 1e-3, 2).map_err(|e| e.to_string())?;
    cfg.agent.global_batch = 8;
    one_started_server(&mut cfg, 8397);
    assert_eq!(cfg.validate(), vec![]);
    let out = tempfile::tempdir()?;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut opts = RunOptions::new("it-vllm", repo.join("envs/seed"), out.path().join("cache"));
    opts.concurrency = Some(4);
    let mut sink = FileSink::open(out.path())?;
    let store = StateStore::new(out.path());
    let mut logs = vec![];
    let mut steps = vec![];
    let outcome = run::run(&cfg, &opts, &store, &mut sink, &mut |e| match e {
        Event::Log(l) => {
            eprintln!("{l}");
            logs.push(l);
        }
        Event::Step { metrics, .. } => steps.push(metrics),
        _ => {}
    })?;
    assert_eq!(outcome.steps, 2);
    // The starting weights, then one sync per update.
    for label in ["weights step-0-", "weights step-1-", "weights step-2-"] {
        assert!(
            logs.iter().any(|l| l.contains(label)),
            "no {label:?} in {logs:#?}"
        );
    }
    for m in &steps {
        eprintln!(
            "step metrics: vllm_sync_s {:?}, vllm_logprob_gap_max {:?}, mean {:?}",
            m.get("vllm_sync_s"),
            m.get("vllm_logprob_gap_max"),
            m.get("vllm_logprob_gap_mean")
        );
        let gap = m
            .get("vllm_logprob_gap_max")
            .copied()
            .ok_or("no vllm_logprob_gap_max")?;
        assert!(gap < TRACE_TOLERANCE, "{gap}");
        assert!(m.contains_key("vllm_sync_s"), "{m:?}");
    }
    // The run stopped its server.
    assert!(
        std::net::TcpStream::connect("127.0.0.1:8397").is_err(),
        "the server outlived the run"
    );
    Ok(())
}
