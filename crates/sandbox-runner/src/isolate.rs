//! The isolation layers a runner applies to itself after the interpreter is initialised and
//! before any environment code runs. Each layer is the operating system's, not Python's:
//!
//! 1. namespaces: a new network namespace (no interfaces but a downed loopback) and new IPC and
//!    UTS namespaces; as non-root, a user namespace first (which makes the others possible);
//! 2. as root: every capability dropped (effective, permitted, inheritable). The uid stays 0
//!    because the interpreter lives under `/root` (mode 700) and imports lazily; file access is
//!    confined by Landlock instead, and signals by seccomp and Landlock scoping;
//! 3. rlimits: address space, CPU seconds, open files, file size, no core dumps;
//! 4. Landlock: read-only access beneath the interpreter's import roots and the system library
//!    dirs (plus `/etc/ld.so.cache`), read-write beneath the private scratch directory, nothing
//!    else (no rest of /etc, no /proc, no home); no TCP bind or
//!    connect; scoped so it can neither signal nor reach abstract unix sockets outside itself;
//! 5. seccomp: no fork/clone/clone3/vfork (so no processes and no threads), no execve, no
//!    sockets, no ptrace or process_vm_*, no kill/tgkill/rt_(tg)sigqueueinfo of any pid but
//!    its own, no limits or scheduling (prlimit64, setpriority, sched_set*, ioprio_set) of any
//!    process but itself, no mount, namespace, bpf, perf, io_uring, keyring or module
//!    syscalls.
//!
//! Layers that the kernel refuses are left out and the runner reports which were applied.

use rustix::process::{Resource, Rlimit};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use spade_sandbox::protocol::{Layer, Limits};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum IsolationError {
    #[error("the runner has {0} threads; isolation needs exactly one")]
    Threads(usize),
    #[error("{step}: {source}")]
    Os {
        step: &'static str,
        source: std::io::Error,
    },
    #[error("landlock: {0}")]
    Landlock(#[from] landlock::RulesetError),
    #[error("seccomp: {0}")]
    Seccomp(String),
}

fn os(step: &'static str) -> impl FnOnce(rustix::io::Errno) -> IsolationError {
    move |e| IsolationError::Os {
        step,
        source: e.into(),
    }
}

/// Applies every layer it can; returns those applied. Fails only when a layer that must work
/// (rlimits, seccomp) could not be applied.
pub fn apply(
    limits: &Limits,
    scratch: &Path,
    readable: &[String],
) -> Result<Vec<Layer>, IsolationError> {
    // setresuid and unshare act on the calling thread only: a second thread would escape.
    let threads = std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(1);
    if threads != 1 {
        return Err(IsolationError::Threads(threads));
    }
    let mut layers = Vec::new();
    let pid = rustix::process::getpid()
        .as_raw_nonzero()
        .get()
        .unsigned_abs();
    let root = rustix::process::geteuid().is_root();

    if !root && unshare(rustix::thread::UnshareFlags::NEWUSER).is_ok() {
        layers.push(Layer::UserNamespace);
    }
    if unshare(rustix::thread::UnshareFlags::NEWNET).is_ok() {
        layers.push(Layer::NetNamespace);
    }
    if unshare(rustix::thread::UnshareFlags::NEWIPC | rustix::thread::UnshareFlags::NEWUTS).is_ok()
    {
        layers.push(Layer::IpcUtsNamespace);
    }
    std::env::set_current_dir(scratch).map_err(|source| IsolationError::Os {
        step: "chdir to the scratch dir",
        source,
    })?;
    if root {
        let none = rustix::thread::CapabilitySet::empty();
        rustix::thread::set_capabilities(
            None,
            rustix::thread::CapabilitySets {
                effective: none,
                permitted: none,
                inheritable: none,
            },
        )
        .map_err(os("dropping capabilities"))?;
        layers.push(Layer::NoCapabilities);
    }

    let lim = |cur: u64| Rlimit {
        current: Some(cur),
        maximum: Some(cur),
    };
    rustix::process::setrlimit(Resource::As, lim(limits.address_space)).map_err(os("RLIMIT_AS"))?;
    // The soft limit sends SIGXCPU; one second later the hard limit kills.
    rustix::process::setrlimit(
        Resource::Cpu,
        Rlimit {
            current: Some(limits.cpu_seconds),
            maximum: Some(limits.cpu_seconds + 1),
        },
    )
    .map_err(os("RLIMIT_CPU"))?;
    rustix::process::setrlimit(Resource::Nofile, lim(limits.open_files))
        .map_err(os("RLIMIT_NOFILE"))?;
    rustix::process::setrlimit(Resource::Fsize, lim(limits.file_size))
        .map_err(os("RLIMIT_FSIZE"))?;
    rustix::process::setrlimit(Resource::Core, lim(0)).map_err(os("RLIMIT_CORE"))?;
    layers.push(Layer::Rlimits);

    // Shared libraries that extension modules load lazily (numpy needs libstdc++), and the
    // loader's cache that finds them; nothing else under /etc.
    let mut readable = readable.to_vec();
    for system in [
        "/usr/lib",
        "/lib",
        "/lib64",
        "/usr/lib64",
        "/usr/local/lib",
        "/etc/ld.so.cache",
    ] {
        if Path::new(system).exists() {
            readable.push(system.to_owned());
        }
    }
    let (fs, scoped) = landlock(scratch, &readable)?;
    if fs {
        layers.push(Layer::Landlock);
    }
    if scoped {
        layers.push(Layer::LandlockScope);
    }

    seccomp(pid)?;
    layers.push(Layer::Seccomp);
    Ok(layers)
}

// rustix marks unshare unsafe because unsharing the file table or fs info behind std's back
// could invalidate assumptions; the flags used here (user, net, ipc, uts) touch neither.
#[allow(unsafe_code)]
fn unshare(flags: rustix::thread::UnshareFlags) -> rustix::io::Result<()> {
    // SAFETY: see above; no CLONE_FILES, CLONE_FS or CLONE_NEWNS among the flags.
    unsafe { rustix::thread::unshare_unsafe(flags) }
}

/// Returns whether file-system rules and scoping were enforced.
fn landlock(scratch: &Path, readable: &[String]) -> Result<(bool, bool), IsolationError> {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, RestrictionStatus, Ruleset,
        RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
    };
    let abi = ABI::V6;
    let status: RestrictionStatus = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))?
        .handle_access(AccessNet::from_all(abi))?
        .scope(Scope::from_all(abi))?
        .create()?
        .add_rules(path_beneath_rules(readable, AccessFs::from_read(abi)))?
        .add_rules(path_beneath_rules([scratch], AccessFs::from_all(abi)))?
        .restrict_self()?;
    // Best effort drops what an older kernel lacks (scoping needs ABI 6, Linux 6.12); only a
    // fully enforced ruleset includes the scoping.
    let enforced = status.ruleset != RulesetStatus::NotEnforced;
    let scoped = status.ruleset == RulesetStatus::FullyEnforced;
    Ok((enforced, scoped))
}

fn seccomp(own_pid: u32) -> Result<(), IsolationError> {
    let deny_always: &[i64] = &[
        libc::SYS_fork,
        libc::SYS_vfork,
        libc::SYS_clone,
        libc::SYS_clone3,
        libc::SYS_execve,
        libc::SYS_execveat,
        libc::SYS_socket,
        libc::SYS_socketpair,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_tkill,
        libc::SYS_pidfd_open,
        libc::SYS_pidfd_send_signal,
        libc::SYS_pidfd_getfd,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsmount,
        libc::SYS_fsconfig,
        libc::SYS_fspick,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_acct,
        libc::SYS_personality,
        libc::SYS_mknod,
        libc::SYS_mknodat,
    ];
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        deny_always.iter().map(|&nr| (nr, Vec::new())).collect();
    let cond = |arg: u8, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
            .map_err(|e| IsolationError::Seccomp(e.to_string()))
    };
    let rule = |conds: Vec<SeccompCondition>| {
        SeccompRule::new(conds).map_err(|e| IsolationError::Seccomp(e.to_string()))
    };
    // kill(pid, sig) and tgkill(tgid, tid, sig): only aimed at itself (Python's os.kill on its
    // own pid, and glibc's raise/abort, still work).
    let not_self = || -> Result<Vec<SeccompRule>, IsolationError> {
        Ok(vec![rule(vec![cond(
            0,
            SeccompCmpOp::Ne,
            u64::from(own_pid),
        )?])?])
    };
    rules.insert(libc::SYS_kill, not_self()?);
    rules.insert(libc::SYS_tgkill, not_self()?);
    // Their queued forms, reachable through ctypes; Landlock's signal scoping also stops
    // them where the kernel has it (ABI 6), this wherever seccomp runs.
    rules.insert(libc::SYS_rt_sigqueueinfo, not_self()?);
    rules.insert(libc::SYS_rt_tgsigqueueinfo, not_self()?);
    // Calls that change another process's limits or scheduling, which the kernel allows
    // against any process of the same uid (the worker's, when both run as root): only 0 (the
    // caller) or its own pid. prlimit64 lowering the parent's limits (no more open files, a
    // tiny address space) was the hole; the scheduling calls are closed the same way.
    let other_pid = |arg: u8| -> Result<Vec<SeccompCondition>, IsolationError> {
        Ok(vec![
            cond(arg, SeccompCmpOp::Ne, 0)?,
            cond(arg, SeccompCmpOp::Ne, u64::from(own_pid))?,
        ])
    };
    for nr in [
        libc::SYS_prlimit64,
        libc::SYS_sched_setaffinity,
        libc::SYS_sched_setscheduler,
        libc::SYS_sched_setparam,
        libc::SYS_sched_setattr,
    ] {
        rules.insert(nr, vec![rule(other_pid(0)?)?]);
    }
    // setpriority(which, who, prio) and ioprio_set(which, who, prio): a process (not a group
    // or a user), and that process itself.
    for (nr, process) in [
        (libc::SYS_setpriority, libc::PRIO_PROCESS as u64),
        (libc::SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */),
    ] {
        rules.insert(
            nr,
            vec![
                rule(vec![cond(0, SeccompCmpOp::Ne, process)?])?,
                rule(other_pid(1)?)?,
            ],
        );
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        TargetArch::x86_64,
    )
    .map_err(|e| IsolationError::Seccomp(e.to_string()))?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| IsolationError::Seccomp(e.to_string()))?;
    seccompiler::apply_filter(&program).map_err(|e| IsolationError::Seccomp(e.to_string()))
}
