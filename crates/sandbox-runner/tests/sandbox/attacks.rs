//! One attack per property the sandbox promises (see the `spade_sandbox` crate doc). Each runs
//! hostile code in a real runner and checks, from outside where possible, that it was stopped
//! or neutralised with a clear reason, and that the host and the pool stay healthy.

use super::{pool, pool_with};
use spade_sandbox::{Layer, SandboxError};
use std::time::{Duration, Instant};

/// Runs `code` (which sets `result`) in a fresh isolated runner.
fn attack(code: &str) -> Result<String, SandboxError> {
    attack_with_limit(code, Duration::from_secs(20))
}

fn attack_with_limit(code: &str, limit: Duration) -> Result<String, SandboxError> {
    let mut leased = pool().checkout()?;
    leased.runner.exec(code, "result", limit)
}

/// Wraps `stmt` so that `result` says whether it went through or which exception stopped it.
fn attempt(stmt: &str) -> String {
    let body: String = stmt.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "try:\n{body}    result = 'ALLOWED'\nexcept BaseException as e:\n    result = 'blocked: ' + type(e).__name__ + ': ' + str(e)\n"
    )
}

fn assert_blocked(stmt: &str) -> String {
    match attack(&attempt(stmt)) {
        Ok(r) => {
            assert!(r.starts_with("blocked"), "`{stmt}` was not stopped: {r}");
            r
        }
        Err(e) => panic!("`{stmt}`: the sandbox failed instead of refusing: {e}"),
    }
}

#[test]
fn the_runner_reports_every_isolation_layer_on_this_machine() -> Result<(), SandboxError> {
    let leased = pool().checkout()?;
    let layers = leased.runner.layers();
    for want in [
        Layer::NetNamespace,
        Layer::Landlock,
        Layer::Seccomp,
        Layer::Rlimits,
    ] {
        assert!(layers.contains(&want), "{want:?} missing from {layers:?}");
    }
    Ok(())
}

#[test]
fn reading_host_files_is_refused() {
    for stmt in [
        "open('/etc/passwd').read()",
        "import os; os.listdir('/root')",
        "open('/proc/self/environ').read()",
        "open('/proc/1/environ').read()",
        "import os; os.listdir(os.path.expanduser('~'))",
    ] {
        assert_blocked(stmt);
    }
}

#[test]
fn writing_or_deleting_host_files_is_refused() -> Result<(), Box<dyn std::error::Error>> {
    let victim = tempfile::NamedTempFile::new()?;
    let target = std::env::temp_dir().join(format!("spade-attack-{}", std::process::id()));
    assert_blocked(&format!(
        "open({:?}, 'w').write('pwned')",
        target.display().to_string()
    ));
    assert!(!target.exists(), "the sandbox wrote {}", target.display());
    assert_blocked(&format!(
        "import os; os.remove({:?})",
        victim.path().display().to_string()
    ));
    assert!(victim.path().exists(), "the sandbox deleted a host file");
    // Its own scratch directory is writable: environments may keep files there.
    let r = attack("open('notes.txt', 'w').write('ok')\nresult = open('notes.txt').read()")?;
    assert_eq!(r, "ok");
    Ok(())
}

/// RLIMIT_FSIZE bounds one file; the scratch directory as a whole is bounded too, in bytes and
/// in files: past either bound the call fails and the runner is killed.
#[test]
fn the_scratch_directory_is_bounded_in_total_bytes_and_in_files() -> Result<(), SandboxError> {
    use spade_sandbox::{Pool, PoolConfig, RunnerConfig, ScratchLimits};
    let small = |max_bytes, max_files| {
        let mut rc = RunnerConfig::new(super::RUNNER);
        rc.scratch = ScratchLimits {
            max_bytes,
            max_files,
        };
        let mut cfg = PoolConfig::new(rc);
        cfg.max_runners = 1;
        cfg.warm = 0;
        Pool::new(cfg)
    };
    // Four files of 300 KB: each is far below RLIMIT_FSIZE, together they pass 1 MB.
    let pool = small(1 << 20, 100);
    let mut leased = pool.checkout()?;
    let within = leased.runner.exec(
        "for i in range(3):\n    open(f'part{i}', 'w').write('x' * 300_000)\n",
        "'ok'",
        Duration::from_secs(20),
    )?;
    assert_eq!(within, "ok");
    match leased.runner.exec(
        "open('part3', 'w').write('x' * 300_000)",
        "'ok'",
        Duration::from_secs(20),
    ) {
        Err(SandboxError::Scratch { detail, .. }) => assert!(detail.contains("bytes"), "{detail}"),
        other => panic!("a fourth 300 KB file passed the 1 MB bound: {other:?}"),
    }
    assert!(
        !leased.runner.is_alive(),
        "the runner outlived its scratch bound"
    );
    drop(leased);
    // Many empty files: no bytes to speak of, but past the bound on their number.
    let mut leased = small(1 << 20, 100).checkout()?;
    match leased.runner.exec(
        "import os\nos.mkdir('d')\nfor i in range(150):\n    open(f'd/{i}', 'w').close()\n",
        "'ok'",
        Duration::from_secs(20),
    ) {
        Err(SandboxError::Scratch { detail, .. }) => assert!(detail.contains("files"), "{detail}"),
        other => panic!("150 files passed the bound of 100: {other:?}"),
    }
    Ok(())
}

#[test]
fn sockets_of_every_kind_are_refused() {
    for stmt in [
        "import socket; socket.create_connection(('127.0.0.1', 5432), timeout=2)",
        "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('127.0.0.1', 53))",
        "import socket; s = socket.socket(socket.AF_UNIX); s.connect('/var/run/postgresql/.s.PGSQL.5432')",
        "import socket; socket.socketpair()",
        "import urllib.request; urllib.request.urlopen('http://127.0.0.1:5432', timeout=2)",
    ] {
        assert_blocked(stmt);
    }
}

#[test]
fn new_processes_are_refused() {
    let marker = std::env::temp_dir().join(format!("spade-spawned-{}", std::process::id()));
    let m = marker.display().to_string();
    for stmt in [
        "import subprocess; subprocess.run(['true'])".to_owned(),
        "import os; os.posix_spawn('/bin/true', ['true'], {})".to_owned(),
        "import os; os.fork()".to_owned(),
        "import os; os.execv('/bin/true', ['true'])".to_owned(),
        // os.system reports failure through its return value, not an exception.
        format!("import os\nif os.system('touch {m}') != 0: raise OSError('os.system failed')"),
        "import ctypes; libc = ctypes.CDLL(None)\nif libc.fork() < 0: raise OSError('fork via ctypes failed')".to_owned(),
        "import ctypes; libc = ctypes.CDLL(None)\nif libc.syscall(57) < 0: raise OSError('raw fork syscall failed')".to_owned(),
    ] {
        assert_blocked(&stmt);
    }
    assert!(!marker.exists(), "a spawned process ran");
}

#[test]
fn fork_bombs_and_double_forks_die_at_the_first_fork() {
    let r = assert_blocked("import os\nwhile True:\n    os.fork()");
    assert!(r.contains("PermissionError"), "{r}");
    assert_blocked(
        "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        import time; time.sleep(1000)",
    );
}

#[test]
fn threads_cannot_be_started_so_nothing_acts_after_a_call_returns() {
    let r = assert_blocked(
        "import threading, time\nt = threading.Thread(target=lambda: time.sleep(0.5))\nt.start()",
    );
    assert!(r.contains("RuntimeError"), "{r}");
}

#[test]
fn memory_bombs_hit_the_address_space_limit() {
    assert_blocked("x = bytearray(64 * 1024**3)");
    let r = assert_blocked("chunks = []\nwhile True:\n    chunks.append(bytearray(256 * 1024**2))");
    assert!(r.contains("MemoryError"), "{r}");
}

#[test]
fn cpu_spins_sleeps_and_ignored_sigterm_end_at_the_wall_clock_limit() {
    for code in [
        "while True: pass",
        "import time; time.sleep(10**6)",
        "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: pass",
        // stdin reads /dev/null, so input() cannot block; sleeping afterwards still ends.
        "try:\n    input()\nexcept EOFError:\n    pass\nimport time; time.sleep(10**6)",
    ] {
        let t0 = Instant::now();
        match attack_with_limit(code, Duration::from_secs(2)) {
            Err(SandboxError::Timeout { .. }) => {}
            other => panic!("`{code}` was not stopped by the timeout: {other:?}"),
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the kill took {:?}",
            t0.elapsed()
        );
    }
}

#[test]
fn huge_observations_and_floods_of_output_are_capped() -> Result<(), SandboxError> {
    let pool = pool();
    let source = "class HugeEnv:\n    def __init__(self, max_turns=3):\n        self.max_turns = max_turns\n    def reset(self, seed=None):\n        return 'x' * 5_000_000, {}\n    def step(self, action):\n        return '', 0.0, True, False, {}\n    def solution(self):\n        return '1'\n";
    let mut env = pool.load(source, None, None)?;
    match env.reset(Some(0)) {
        Err(SandboxError::Env(e)) => assert!(e.message.contains("limit is 20000"), "{}", e.message),
        other => panic!("a 5M-character observation passed: {other:?}"),
    }
    drop(env);
    // 200 MB printed: drained and discarded, the runner is neither blocked nor the parent bloated.
    let r = attack(
        "import sys\nfor _ in range(200):\n    sys.stdout.write('y' * 1_000_000)\nresult = 'done'",
    )?;
    assert_eq!(r, "done");
    Ok(())
}

#[test]
fn the_parent_and_other_processes_cannot_be_signalled() {
    let parent = std::process::id();
    for stmt in [
        format!("import os, signal; os.kill({parent}, signal.SIGKILL)"),
        "import os, signal; os.kill(os.getppid(), signal.SIGKILL)".to_owned(),
        "import os, signal; os.kill(1, signal.SIGTERM)".to_owned(),
        "import os, signal; os.kill(-1, signal.SIGKILL)".to_owned(),
    ] {
        assert_blocked(&stmt);
    }
    // Still here: the test process was not killed.
}

/// Signals sent by the calls `kill` is not: rt_sigqueueinfo and rt_tgsigqueueinfo (through
/// ctypes, with a queued-signal code as the kernel requires for another process) at a
/// process of the same uid, which must stay alive.
#[test]
fn queued_signals_cannot_reach_another_process() -> Result<(), Box<dyn std::error::Error>> {
    let mut victim = std::process::Command::new("sleep").arg("60").spawn()?;
    let pid = victim.id();
    let send = |call: &str| {
        format!(
            "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n\
             info = (ctypes.c_int * 32)()\ninfo[0] = 9\ninfo[2] = -1\n\
             r = libc.syscall({call}, ctypes.byref(info))\n\
             if r != 0:\n    raise OSError(ctypes.get_errno(), 'refused')"
        )
    };
    let outcomes = [
        // rt_sigqueueinfo(pid, SIGKILL, info)
        attack(&attempt(&send(&format!("129, {pid}, 9"))))?,
        // rt_tgsigqueueinfo(tgid, tid, SIGKILL, info)
        attack(&attempt(&send(&format!("297, {pid}, {pid}, 9"))))?,
    ];
    // Control: the same path aimed at itself with signal 0 (a permission probe) goes
    // through, so ctypes and the call itself work in the sandbox.
    let own = attack(&attempt(&format!(
        "import os\n{}",
        send("129, os.getpid(), 0")
    )))?;
    assert_eq!(own, "ALLOWED", "the control failed: {own}");
    let alive = victim.try_wait()?.is_none();
    let _ = victim.kill();
    let _ = victim.wait();
    for r in &outcomes {
        assert!(
            r.starts_with("blocked"),
            "a queued SIGKILL went through: {r}"
        );
    }
    assert!(alive, "the victim was killed: {outcomes:?}");
    Ok(())
}

/// Field `n` (1-based, as proc(5) counts) of `/proc/self/stat`, after the command name.
fn own_stat(n: usize) -> i64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
    after
        .split_whitespace()
        .nth(n - 3)
        .and_then(|f| f.parse().ok())
        .unwrap_or(i64::MIN)
}

/// This process's `Cpus_allowed_list` line of `/proc/self/status`.
fn own_cpus() -> std::io::Result<Option<String>> {
    Ok(std::fs::read_to_string("/proc/self/status")?
        .lines()
        .find(|l| l.starts_with("Cpus_allowed_list"))
        .map(str::to_owned))
}

/// Runners run at a lower CPU priority than their parent (`RunnerConfig::nice`: the decoding
/// comes first when cores are short), and an environment can neither take that back nor
/// reach the scheduling of any other process: its parent's priority, CPU set, scheduling
/// class and resource limits (same uid, so only the filter stops it) stay as they were.
#[test]
fn an_environment_cannot_change_its_own_or_anyone_elses_scheduling()
-> Result<(), Box<dyn std::error::Error>> {
    let parent = std::process::id();
    let nice = own_stat(19);
    let cpus = own_cpus()?;
    let files = std::fs::read_to_string("/proc/self/limits")?;
    let r = attack("import os\nresult = str(os.getpriority(os.PRIO_PROCESS, 0))")?;
    let want = (nice + i64::from(spade_sandbox::runner::RUNNER_NICE)).min(19);
    assert_eq!(r, want.to_string(), "the runner's nice value");
    for stmt in [
        "import os; os.setpriority(os.PRIO_PROCESS, 0, 0)".to_owned(),
        "import os; os.nice(-5)".to_owned(),
        format!("import os; os.setpriority(os.PRIO_PROCESS, {parent}, 19)"),
        "import os; os.setpriority(os.PRIO_PROCESS, os.getppid(), 19)".to_owned(),
        "import os; os.setpriority(os.PRIO_USER, 0, 19)".to_owned(),
        "import os; os.setpriority(os.PRIO_PGRP, 0, 19); os.setpriority(os.PRIO_PGRP, 1, 19)"
            .to_owned(),
        format!("import os; os.sched_setaffinity({parent}, {{0}})"),
        format!("import os; os.sched_setscheduler({parent}, os.SCHED_IDLE, os.sched_param(0))"),
        format!("import os; os.sched_setparam({parent}, os.sched_param(0))"),
        format!("import resource; resource.prlimit({parent}, resource.RLIMIT_NOFILE, (3, 3))"),
    ] {
        assert_blocked(&stmt);
    }
    assert_eq!(own_stat(19), nice, "the parent's nice value changed");
    assert_eq!(own_stat(41), 0, "the parent's scheduling policy changed");
    assert_eq!(own_cpus()?, cpus, "the parent's CPU set changed");
    assert_eq!(std::fs::read_to_string("/proc/self/limits")?, files);
    Ok(())
}

#[test]
fn forged_protocol_frames_are_detected_not_believed() {
    // A well-formed reply frame, written to stdout and to every descriptor the runner holds.
    let forge = r#"
import os, json, struct
body = json.dumps({"id": 1, "reply": "text", "text": "FORGED"}).encode()
frame = b"SPD2" + struct.pack(">I", len(body)) + body
print(frame.decode(), flush=True)
for fd in range(0, 64):
    try:
        os.write(fd, frame)
    except OSError:
        pass
result = "genuine"
"#;
    match attack(forge) {
        Err(SandboxError::Protocol { detail, .. }) => {
            assert!(
                detail.contains("forged") || detail.contains("id"),
                "{detail}"
            )
        }
        Ok(r) => assert_eq!(r, "genuine", "a forged frame was believed"),
        Err(e) => panic!("unexpected failure: {e}"),
    }
    // stdout alone cannot reach the channel at all.
    let r = attack("print('SPD2\\x00\\x00\\x00\\x10{\"id\": 1}', flush=True)\nresult = 'in sync'");
    assert_eq!(r.ok().as_deref(), Some("in sync"));
}

#[test]
fn os_exit_and_c_level_crashes_are_typed_errors() {
    match attack("import os; os._exit(3)") {
        Err(SandboxError::Died { status, .. }) => assert!(status.contains('3'), "{status}"),
        other => panic!("os._exit was not reported as a death: {other:?}"),
    }
    let r = assert_blocked("def f(n): return f(n + 1)\nf(0)");
    assert!(r.contains("RecursionError"), "{r}");
    // Nested containers recurse on the C stack in repr(); with the limit lifted that overflows it.
    let deep = "import sys; sys.setrecursionlimit(10**8)\nx = []\nfor _ in range(200_000):\n    x = [x]\nresult = repr(x)";
    match attack_with_limit(deep, Duration::from_secs(60)) {
        Err(SandboxError::Died { .. }) => {}
        Ok(r) => assert!(r.is_empty(), "deep recursion returned {r}"),
        Err(e) => panic!("expected the runner to crash: {e}"),
    }
}

#[test]
fn the_environment_has_no_variables_of_the_parent() -> Result<(), SandboxError> {
    let r = attack("import os\nresult = ','.join(sorted(os.environ))")?;
    for leaked in ["PATH", "HOME", "CARGO", "DATABASE_URL", "RUST"] {
        assert!(!r.contains(leaked), "parent variable leaked: {r}");
    }
    Ok(())
}

#[test]
fn after_every_attack_the_pool_still_serves_environments() -> Result<(), SandboxError> {
    let pool = pool_with(1, 1, Duration::from_secs(2));
    for code in [
        "import os; os._exit(1)",
        "while True: pass",
        "import os; os.fork()",
    ] {
        let _ = pool
            .checkout()?
            .runner
            .exec(code, "1", Duration::from_secs(2));
    }
    let mut r = pool.checkout()?;
    assert_eq!(r.runner.exec("", "6 * 7", Duration::from_secs(10))?, "42");
    assert!(pool.live() <= 1, "runners leaked: {}", pool.live());
    Ok(())
}

#[test]
fn numpy_and_math_verify_work_inside_the_sandbox() -> Result<(), SandboxError> {
    let r =
        attack("result = (int(np.arange(5).sum()), bool(verify(parse('$1/2$'), parse('0.5'))))")?;
    assert_eq!(r, "(10, True)");
    Ok(())
}
