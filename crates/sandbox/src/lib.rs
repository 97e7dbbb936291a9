//! The environment sandbox, parent side: the runner protocol, runner processes, the pool and
//! validation. Generated environment code never runs in the caller's process: it runs in a
//! `spade-sandbox-runner` child (the only binary that embeds CPython), one per environment.
//!
//! # What the sandbox covers
//! Each property below has an adversarial test in `crates/sandbox-runner/tests/attacks.rs`.
//! - **No network**: a new network namespace (only a downed loopback), seccomp refuses
//!   `socket`/`socketpair`, Landlock refuses TCP bind/connect.
//! - **No file system beyond a private scratch directory**: Landlock allows reads only beneath
//!   the interpreter's import roots (stdlib, the venv's site-packages) and the system library
//!   directories (shared libraries are public; `/etc/ld.so.cache` too), and reads/writes beneath
//!   a fresh scratch directory (the working directory, removed afterwards). No `/etc`, `/proc`,
//!   home directories or other runners' scratch.
//! - **No new processes or threads**: seccomp refuses fork, vfork, clone, clone3, execve and
//!   execveat, so `subprocess`, `os.system`, `posix_spawn`, fork bombs, double-fork daemons
//!   and threads that would act after a call returns all fail at their first step.
//! - **No reaching out of the box**: seccomp refuses ptrace, process_vm_*, kill/tgkill (and
//!   their queued forms) of any pid but its own, prlimit64/setpriority/sched_set*/ioprio_set
//!   on any process but itself (the kernel lets a process of the same uid lower the worker's
//!   limits), pidfd signalling, mount/namespace/bpf/perf/io_uring/keyring/module calls;
//!   Landlock scoping refuses signals and abstract unix sockets outside; a root runner drops
//!   every capability.
//! - **Lower CPU priority**: a runner starts `RunnerConfig::nice` (10) below its parent, so the
//!   model's decoding runs first when runners outnumber the free cores; without the
//!   capabilities it cannot raise it back.
//! - **Bounded resources**: RLIMIT_AS (address space), RLIMIT_CPU, RLIMIT_NOFILE, RLIMIT_FSIZE,
//!   no core dumps; a wall-clock limit per call after which the runner's whole process group
//!   gets SIGKILL (so ignoring SIGTERM or sleeping forever does not help); observations over
//!   20,000 characters are refused in the runner before they are sent; stderr/stdout output is
//!   drained and only its last 8 KiB kept; protocol frames are capped at 16 MiB.
//! - **Clean environment**: the runner starts with no variables of the parent (only a fixed
//!   `PYTHONHASHSEED` and single-thread BLAS settings), stdin reading `/dev/null`.
//! - **Unforgeable replies**: replies are read from a private duplicate of the runner's stdout
//!   taken before any Python runs; descriptor 1 then points at the capped stderr, and every
//!   reply must echo a random request id that never enters the Python namespace. A stray or
//!   forged frame is a protocol violation: the runner is killed and the environment rejected.
//! - **Checks cannot be fooled from inside**: return values are type-checked through the C API
//!   and converted in the runner's Rust code, and every validation decision is made here in the
//!   parent, so rebinding builtins (`isinstance`, `float`, `type`, ...) changes nothing.
//! - **A broken runner is only an error**: death, timeout or violation gives a typed
//!   [`SandboxError`]; the pool replaces the runner, the caller never panics.
//!
//! # What it does not cover
//! - CPU and memory *bandwidth*: a runner can still slow its neighbours within its CPU limit.
//! - cgroups are not used: memory is bounded per process by RLIMIT_AS (a runner cannot have
//!   children), not by a cgroup; a cgroup would also count page cache.
//! - The runner keeps uid 0 (without capabilities) when started as root, because the
//!   interpreter lives under `/root`; file confinement then rests on Landlock alone. On a
//!   kernel without Landlock the report's `layers` lacks `landlock` and files are not confined.
//! - A generated program that reads its own runner's memory (numpy's array interface can
//!   address raw memory) could learn the current request id and forge a reply; such a reply can
//!   only carry values its own methods could have returned, since every check runs here.
//! - Timing side channels and the kernel's own attack surface through allowed syscalls.
//! - The scratch directory's total size and number of files are measured by the parent after
//!   each call ([`ScratchLimits`]); during one call it can grow past them (bounded by the call's
//!   time limit and RLIMIT_FSIZE per file) before the runner is killed and the directory removed.
//!
//! # What validation can catch, and what it cannot
//! Validation ([`validate`]) plays a program at the spec's fixed seeds *and* at seeds drawn
//! from the operating system's randomness in this process, anew for every validation (recorded
//! in the report, replayable), with probe actions that vary with the seed, and once more in a
//! fresh runner that sees exactly the calls play makes. It catches, with certainty or with
//! high probability per drawn seed:
//! - programs that behave only at the fixed seeds 0, 1, 2, 42, 123 (win for any answer, have a
//!   wrong `solution()`, raise, give rewards outside [-10, 10] or wrong types, answer
//!   nondeterministically, return huge observations, hang, crash or flood their scratch
//!   elsewhere): every drawn seed is such an "elsewhere";
//! - programs that recognise the fixed probe actions (`\boxed{1}`, `\boxed{test}`,
//!   `\boxed{42}`) and let any other first answer win;
//! - programs that tell a validation runner from a play runner by its calls (several resets,
//!   `solution()` calls, seed 42 first), when that changes the drawn probe's episode.
//!
//! It cannot catch, and play's checks ([`validate::step_violation`] on every reset and step
//! return, the call time limit, the runner's type checks) have to:
//! - behaviour that changes only after many turns or calls (validation plays at most
//!   `max_turns` per episode and a handful of episodes), or only on actions no probe and no
//!   solution episode takes;
//! - behaviour on rare seeds: with k drawn seeds, a program that misbehaves on a fraction p of
//!   seeds passes with probability (1 - p)^k (k = 3: a 1% program passes 97% of the time);
//! - behaviour keyed on something validation and play share but tests never vary: the wall
//!   clock, the date, the amount of memory, or the text of the agent's answers;
//! - games that are wrong but consistent: a `solution()` that wins a game whose rules are not
//!   the ones its observation states, or a game that is trivially easy. The LLM self-judge
//!   and the play statistics (win rates, regret) are the only checks of meaning.

pub mod pool;
pub mod protocol;
pub mod repair;
pub mod rlve;
pub mod runner;
pub mod validate;

pub use pool::{EnvSession, Leased, Pool, PoolConfig};
pub use protocol::{EnvKind, Layer, Limits, PROTOCOL_VERSION};
pub use runner::{Runner, RunnerConfig, SandboxError, ScratchLimits};
pub use validate::{Check, Reason, Report, ValidationConfig, validate};

/// Where to find the runner binary: `SPADE_SANDBOX_RUNNER`, else `spade-sandbox-runner` next
/// to the running executable (cargo puts all of a workspace's binaries in one directory).
pub fn default_runner_path() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("SPADE_SANDBOX_RUNNER") {
        return p.into();
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            let dir = exe.parent()?;
            // Test binaries live one level down, in target/<profile>/deps.
            [dir, dir.parent()?]
                .iter()
                .map(|d| d.join("spade-sandbox-runner"))
                .find(|p| p.exists())
        })
        .unwrap_or_else(|| "spade-sandbox-runner".into())
}
