//! Which device a run trains on, and what this process can see (`spade doctor`).
//!
//! Why this exists: a `spade` binary linked against the CPU libtorch cannot see a GPU, and
//! `Device::cuda_if_available()` then quietly answers "CPU", so a run meant for an H100 trained
//! on one CPU thread without a word. [`resolve`] never falls back: a run that asks for CUDA
//! gets CUDA or an error that says what was checked and how to fix it.
//!
//! What "built with CUDA" means: libtorch registers its CUDA backend from the static
//! initialisers of `libtorch_cuda.so`, so the backend exists exactly when that library is
//! loaded into this process (the binary records it as needed, `scripts/build-cuda`).

use serde::Serialize;
use std::path::Path;
use tch::Device;

/// libtorch's intra-op threads in this process.
pub fn threads() -> i32 {
    tch::get_num_threads()
}

/// The libtorch this binary was built against (`build-version` of its libtorch tree).
pub const LIBTORCH_VERSION: &str = env!("SPADE_LIBTORCH_VERSION");

/// Whether libtorch's CUDA backend is in this process (`libtorch_cuda.so` mapped).
pub fn cuda_linked() -> bool {
    loaded_library("libtorch_cuda").is_some()
}

/// GPUs libtorch sees in this process (0 without its CUDA backend).
pub fn cuda_devices() -> usize {
    if cuda_linked() {
        usize::try_from(tch::Cuda::device_count()).unwrap_or(0)
    } else {
        0
    }
}

/// The path of the first mapped shared object whose file name starts with `stem`.
fn loaded_library(stem: &str) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            Path::new(p)
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(stem) && n.contains(".so"))
        })
        .map(str::to_owned)
}

/// A device request that cannot be met, with what was checked and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DeviceError(pub String);

/// What `model.device` accepts (one parser with the configuration's check and the scheduler).
pub use spade_types::DeviceName;

/// `name` as a device, or an error naming what a device may be.
pub fn parse_device(name: &str) -> Result<DeviceName, DeviceError> {
    DeviceName::parse(name).ok_or_else(|| {
        DeviceError(format!(
            "unknown device `{name}`: expected {}",
            DeviceName::EXPECTED
        ))
    })
}

/// The device for `name`, never quietly another one. `auto` is the first GPU when libtorch sees
/// one and the CPU otherwise; `cuda`/`cuda:N` on a binary without CUDA or a node without that
/// GPU is an error naming the binary, what was checked and what to do.
pub fn resolve(name: &str) -> Result<Device, DeviceError> {
    let want = parse_device(name)?;
    let linked = cuda_linked();
    let count = if linked { tch::Cuda::device_count() } else { 0 };
    resolve_with(want, name, linked, count, &binary_name(), &gpu_nodes())
}

/// [`resolve`] with the facts given (tests).
pub fn resolve_with(
    want: DeviceName,
    name: &str,
    linked: bool,
    count: i64,
    binary: &str,
    nodes: &[String],
) -> Result<Device, DeviceError> {
    match want {
        DeviceName::Cpu => Ok(Device::Cpu),
        DeviceName::Auto if count > 0 => Ok(Device::Cuda(0)),
        DeviceName::Auto => Ok(Device::Cpu),
        DeviceName::Cuda(_) if !linked => Err(DeviceError(format!(
            "model.device = \"{name}\", but {binary} was built without CUDA: libtorch_cuda.so \
             is not loaded in this process, so libtorch has no CUDA backend ({}). Build the \
             CUDA worker with `scripts/build-cuda` and run jobs with it (docs/operations.md, \
             \"GPUs\"), or set model.device = \"cpu\"",
            if nodes.is_empty() {
                "this node shows no /dev/nvidia* device either".to_owned()
            } else {
                format!("this node has {}", nodes.join(", "))
            }
        ))),
        DeviceName::Cuda(i) if i64::from(i) >= count => Err(DeviceError(format!(
            "model.device = \"{name}\", but libtorch sees {count} GPU(s) (binary {binary}, \
             built with CUDA; CUDA_VISIBLE_DEVICES = {}; device nodes: {}). Check the driver \
             with nvidia-smi, and that the scheduler gives this job its GPUs (`spade-server \
             --gpus`, or Ray's entrypoint_num_gpus)",
            std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "unset".into()),
            if nodes.is_empty() {
                "none".to_owned()
            } else {
                nodes.join(", ")
            }
        ))),
        DeviceName::Cuda(i) => Ok(Device::Cuda(i as usize)),
    }
}

/// This executable's path, for messages.
pub fn binary_name() -> String {
    std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "this binary".into())
}

/// `/dev/nvidia0`, `/dev/nvidia1`, ...: the GPUs the kernel driver exposes on this node,
/// whatever this binary can use.
pub fn gpu_nodes() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/dev") else {
        return Vec::new();
    };
    let mut v: Vec<(u32, String)> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|n| Some((spade_types::nvidia_device_index(&n)?, format!("/dev/{n}"))))
        .collect();
    v.sort();
    v.into_iter().map(|(_, path)| path).collect()
}

/// `nvidia-smi --query-gpu=FIELDS` for this process's CUDA device `index` (the `index`-th entry
/// of `CUDA_VISIBLE_DEVICES` when that is set, indices or UUIDs as a scheduler sets it, else
/// nvidia-smi's device `index`): the fields of its line, `None` where nvidia-smi is missing or
/// fails.
pub fn nvidia_smi_query(index: usize, fields: &str) -> Option<Vec<String>> {
    let id = match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(v) => v.split(',').nth(index)?.trim().to_owned(),
        Err(_) => index.to_string(),
    };
    let text = nvidia_smi_csv(fields, Some(&id))?;
    Some(
        text.lines()
            .next()?
            .split(',')
            .map(|f| f.trim().to_owned())
            .collect(),
    )
}

/// `nvidia-smi --query-gpu=FIELDS` as bare CSV, for one device (`--id`) or all; `None` where
/// nvidia-smi is missing or fails.
fn nvidia_smi_csv(fields: &str, id: Option<&str>) -> Option<String> {
    let mut cmd = std::process::Command::new("nvidia-smi");
    cmd.args([
        &format!("--query-gpu={fields}"),
        "--format=csv,noheader,nounits",
    ]);
    if let Some(id) = id {
        cmd.arg(format!("--id={id}"));
    }
    let out = cmd.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A GPU as `nvidia-smi` describes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gpu {
    pub index: u32,
    pub name: String,
    pub memory_mib: u64,
    pub compute_capability: String,
}

/// What this process can compute on (`spade doctor`, and the worker's first report).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SystemFacts {
    pub binary: String,
    pub libtorch: String,
    /// libtorch's CUDA backend is loaded (see the module doc).
    pub cuda_built: bool,
    /// GPUs libtorch sees (0 without the backend).
    pub cuda_devices: i64,
    pub cudnn: bool,
    /// From `nvidia-smi` where it runs; empty otherwise.
    pub gpus: Vec<Gpu>,
    pub driver: Option<String>,
    /// The NCCL library in this process or beside libtorch, by file name.
    pub nccl: Option<String>,
    pub device_nodes: Vec<String>,
    pub cuda_visible_devices: Option<String>,
    pub intra_op_threads: i32,
    pub inter_op_threads: i32,
    pub cpu: String,
    pub cores: usize,
    pub memory_bytes: u64,
    /// What `model.device = "auto"` picks here.
    pub auto_device: String,
}

impl SystemFacts {
    /// Looks (runs `nvidia-smi` when it is on PATH; a second at most).
    pub fn probe() -> Self {
        let cuda_built = cuda_linked();
        let cuda_devices = if cuda_built {
            tch::Cuda::device_count()
        } else {
            0
        };
        let (gpus, driver) = nvidia_smi();
        let auto = if cuda_devices > 0 { "cuda:0" } else { "cpu" };
        Self {
            binary: binary_name(),
            libtorch: LIBTORCH_VERSION.into(),
            cuda_built,
            cuda_devices,
            cudnn: cuda_built && tch::Cuda::cudnn_is_available(),
            gpus,
            driver,
            nccl: loaded_library("libnccl").or_else(nccl_beside_libtorch),
            device_nodes: gpu_nodes(),
            cuda_visible_devices: std::env::var("CUDA_VISIBLE_DEVICES").ok(),
            intra_op_threads: tch::get_num_threads(),
            inter_op_threads: tch::get_num_interop_threads(),
            cpu: cpu_model(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_bytes: meminfo("MemTotal").unwrap_or(0),
            auto_device: auto.into(),
        }
    }

    /// One line for a run's log.
    pub fn summary(&self) -> String {
        let gpus: Vec<String> = self
            .gpus
            .iter()
            .map(|g| format!("{} ({} MiB)", g.name, g.memory_mib))
            .collect();
        format!(
            "libtorch {}, CUDA {} ({} device(s){}{}), {} ({} cores, {:.1} GiB)",
            self.libtorch,
            if self.cuda_built {
                "linked"
            } else {
                "not linked"
            },
            self.cuda_devices,
            if gpus.is_empty() {
                String::new()
            } else {
                format!(": {}", gpus.join(", "))
            },
            self.driver
                .as_ref()
                .map(|d| format!(", driver {d}"))
                .unwrap_or_default(),
            self.cpu,
            self.cores,
            self.memory_bytes as f64 / (1u64 << 30) as f64
        )
    }

    /// The text `spade doctor` prints.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let mut line = |k: &str, v: String| s.push_str(&format!("{k:<22} {v}\n"));
        line("binary", self.binary.clone());
        line("libtorch", self.libtorch.clone());
        line(
            "CUDA backend",
            if self.cuda_built {
                "linked (libtorch_cuda.so loaded)".into()
            } else {
                "not linked: CPU only (scripts/build-cuda builds a CUDA worker)".into()
            },
        );
        line("CUDA devices", self.cuda_devices.to_string());
        line("cuDNN", yes(self.cudnn));
        for g in &self.gpus {
            line(
                &format!("GPU {}", g.index),
                format!(
                    "{}, {} MiB, compute capability {}",
                    g.name, g.memory_mib, g.compute_capability
                ),
            );
        }
        line("driver", or_none(&self.driver));
        line("NCCL", or_none(&self.nccl));
        line(
            "device nodes",
            if self.device_nodes.is_empty() {
                "none".into()
            } else {
                self.device_nodes.join(", ")
            },
        );
        line("CUDA_VISIBLE_DEVICES", or_none(&self.cuda_visible_devices));
        line(
            "threads",
            format!(
                "{} intra-op, {} inter-op",
                self.intra_op_threads, self.inter_op_threads
            ),
        );
        line("CPU", format!("{} ({} cores)", self.cpu, self.cores));
        line(
            "memory",
            format!("{:.1} GiB", self.memory_bytes as f64 / (1u64 << 30) as f64),
        );
        line("model.device auto", self.auto_device.clone());
        if !self.cuda_built && !self.device_nodes.is_empty() {
            s.push_str(
                "warning: this node has NVIDIA GPUs that this binary cannot use; runs with \
                 model.device = \"auto\" train on the CPU\n",
            );
        }
        s
    }
}

fn yes(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

fn or_none(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "none".into())
}

/// GPUs and the driver version from `nvidia-smi`, empty where it is missing or fails.
fn nvidia_smi() -> (Vec<Gpu>, Option<String>) {
    nvidia_smi_csv("index,name,memory.total,compute_cap,driver_version", None)
        .map_or((Vec::new(), None), |csv| parse_nvidia_smi(&csv))
}

/// Parses `index, name, memory.total, compute_cap, driver_version` lines.
pub fn parse_nvidia_smi(csv: &str) -> (Vec<Gpu>, Option<String>) {
    let mut driver = None;
    let gpus = csv
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            if f.len() < 5 {
                return None;
            }
            driver = Some(f[4].to_owned());
            Some(Gpu {
                index: f[0].parse().ok()?,
                name: f[1].to_owned(),
                memory_mib: f[2].parse().unwrap_or(0),
                compute_capability: f[3].to_owned(),
            })
        })
        .collect();
    (gpus, driver)
}

fn nccl_beside_libtorch() -> Option<String> {
    let torch = loaded_library("libtorch_cpu")?;
    let lib = Path::new(&torch).parent()?;
    // The PyPI wheels keep NCCL in nvidia/nccl/lib beside torch/.
    for dir in [lib.to_path_buf(), lib.join("../../nvidia/nccl/lib")] {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with("libnccl.so") {
                return Some(e.path().display().to_string());
            }
        }
    }
    None
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// A `/proc/meminfo` field in bytes.
pub fn meminfo(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.starts_with(&format!("{field}:")))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIN: &str = "/opt/spade/bin/spade";

    #[test]
    fn cuda_on_a_binary_without_cuda_is_refused_with_the_binary_and_the_fix() {
        let nodes = vec!["/dev/nvidia0".to_owned()];
        let e = resolve_with(DeviceName::Cuda(0), "cuda", false, 0, BIN, &nodes)
            .expect_err("must refuse");
        assert!(e.0.contains(BIN), "{e}");
        assert!(e.0.contains("built without CUDA"), "{e}");
        assert!(e.0.contains("scripts/build-cuda"), "{e}");
        assert!(e.0.contains("/dev/nvidia0"), "{e}");
    }

    #[test]
    fn a_gpu_the_job_was_not_given_is_refused_and_auto_never_pretends() {
        let e = resolve_with(DeviceName::Cuda(2), "cuda:2", true, 2, BIN, &[])
            .expect_err("two GPUs seen, the third asked for");
        assert!(e.0.contains("sees 2 GPU(s)"), "{e}");
        assert_eq!(
            resolve_with(DeviceName::Cuda(1), "cuda:1", true, 2, BIN, &[]),
            Ok(Device::Cuda(1))
        );
        assert_eq!(
            resolve_with(DeviceName::Auto, "auto", false, 0, BIN, &[]),
            Ok(Device::Cpu)
        );
        assert_eq!(
            resolve_with(DeviceName::Auto, "auto", true, 1, BIN, &[]),
            Ok(Device::Cuda(0))
        );
    }

    #[test]
    fn device_names_parse_or_are_refused_by_name() {
        assert_eq!(parse_device("cuda:3"), Ok(DeviceName::Cuda(3)));
        assert_eq!(parse_device("cuda:3").map(|d| d.gpus_needed()), Ok(4));
        assert_eq!(parse_device("cpu").map(|d| d.gpus_needed()), Ok(0));
        let e = parse_device("gpu").expect_err("not a device");
        assert!(e.0.contains("`gpu`"), "{e}");
        assert!(parse_device("cuda:x").is_err());
    }

    #[test]
    fn this_cpu_build_reports_itself_without_cuda() {
        // The CI build links the CPU libtorch only.
        let f = SystemFacts::probe();
        assert!(!f.cuda_built);
        assert_eq!(f.cuda_devices, 0);
        assert_eq!(f.auto_device, "cpu");
        assert!(
            f.libtorch
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit()),
            "{}",
            f.libtorch
        );
        assert!(f.memory_bytes > 0 && f.cores > 0);
        assert!(f.text().contains("not linked: CPU only"), "{}", f.text());
        assert_eq!(
            resolve("cuda").map_err(|e| e.0.contains("built without CUDA")),
            Err(true)
        );
    }

    #[test]
    fn nvidia_smi_lines_are_read() {
        let (g, d) = parse_nvidia_smi(
            "0, NVIDIA H200, 143771, 9.0, 570.86.15\n1, NVIDIA H200, 143771, 9.0, 570.86.15\n",
        );
        assert_eq!(g.len(), 2);
        assert_eq!(g[1].index, 1);
        assert_eq!(g[0].memory_mib, 143_771);
        assert_eq!(g[0].compute_capability, "9.0");
        assert_eq!(d.as_deref(), Some("570.86.15"));
        assert_eq!(parse_nvidia_smi("garbage"), (vec![], None));
    }
}
