//! The run's device, sampled once a second while it trains, reported with each step's metrics
//! as W&B's system panel does (the run page's "System" chart): `system/memory_peak_gib`, the
//! most memory seen in use during the step (the process's resident memory on the CPU, the
//! GPU's used memory from `nvidia-smi` on CUDA), and on CUDA `system/gpu_util_pct`, the mean
//! utilisation `nvidia-smi` reported.

use spade_policy::Device;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Window {
    peak_bytes: u64,
    util_sum: f64,
    util_n: u32,
}

/// One reading of the device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Reading {
    pub used_bytes: u64,
    pub util_pct: Option<f64>,
}

/// Samples in a thread of its own until dropped.
pub(crate) struct Sampler {
    window: Arc<Mutex<Window>>,
    stop: Arc<AtomicBool>,
    read: fn(Device) -> Option<Reading>,
    device: Device,
}

impl Sampler {
    pub(crate) fn start(device: Device) -> Self {
        Self::start_with(device, read, Duration::from_secs(1))
    }

    fn start_with(device: Device, read: fn(Device) -> Option<Reading>, every: Duration) -> Self {
        let window = Arc::new(Mutex::new(Window::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (w, s) = (Arc::clone(&window), Arc::clone(&stop));
        // A sampler that cannot start (no thread) leaves only the step-end reading.
        let _ = std::thread::Builder::new()
            .name("spade-system-sampler".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    if let Some(r) = read(device) {
                        add(&w, r);
                    }
                    std::thread::sleep(every);
                }
            });
        Self {
            window,
            stop,
            read,
            device,
        }
    }

    /// The step's figures (with one reading now), and a fresh window for the next step.
    pub(crate) fn take(&self) -> BTreeMap<String, f64> {
        if let Some(r) = (self.read)(self.device) {
            add(&self.window, r);
        }
        let w = std::mem::take(
            &mut *self
                .window
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let mut m = BTreeMap::new();
        if w.peak_bytes > 0 {
            m.insert(
                "system/memory_peak_gib".into(),
                w.peak_bytes as f64 / (1u64 << 30) as f64,
            );
        }
        if w.util_n > 0 {
            m.insert(
                "system/gpu_util_pct".into(),
                w.util_sum / f64::from(w.util_n),
            );
        }
        m
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn add(w: &Mutex<Window>, r: Reading) {
    let mut w = w.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    w.peak_bytes = w.peak_bytes.max(r.used_bytes);
    if let Some(u) = r.util_pct {
        w.util_sum += u;
        w.util_n += 1;
    }
}

fn read(device: Device) -> Option<Reading> {
    match device {
        Device::Cuda(i) => gpu(i),
        _ => {
            let status = std::fs::read_to_string("/proc/self/status").ok()?;
            Some(Reading {
                used_bytes: kib_field(&status, "VmRSS")? * 1024,
                util_pct: None,
            })
        }
    }
}

/// `VmRSS:   123 kB` -> 123.
fn kib_field(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The job's GPU `i` (`spade_policy::device::nvidia_smi_query` maps it to nvidia-smi's id).
fn gpu(i: usize) -> Option<Reading> {
    let f = spade_policy::device::nvidia_smi_query(i, "memory.used,utilization.gpu")?;
    let used_mib: u64 = f.first()?.parse().ok()?;
    let util: f64 = f.get(1)?.parse().ok()?;
    Some(Reading {
        used_bytes: used_mib << 20,
        util_pct: Some(util),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_sampler_reports_this_processs_peak_memory_per_step() {
        let s = Sampler::start(Device::Cpu);
        let m = s.take();
        let gib = m["system/memory_peak_gib"];
        assert!(gib > 0.0 && gib < 64.0, "{m:?}");
        assert!(!m.contains_key("system/gpu_util_pct"));
    }

    #[test]
    fn a_window_keeps_the_peak_and_the_mean_utilisation_then_starts_afresh() {
        fn fake(_: Device) -> Option<Reading> {
            None
        }
        let s = Sampler::start_with(Device::Cuda(0), fake, Duration::from_secs(3600));
        for (used, util) in [(3u64 << 30, 50.0), (5 << 30, 100.0), (4 << 30, 30.0)] {
            add(
                &s.window,
                Reading {
                    used_bytes: used,
                    util_pct: Some(util),
                },
            );
        }
        let m = s.take();
        assert_eq!(m["system/memory_peak_gib"], 5.0);
        assert_eq!(m["system/gpu_util_pct"], 60.0);
        assert!(s.take().is_empty(), "the next step starts afresh");
        assert_eq!(
            kib_field("Name:\tx\nVmRSS:\t  2048 kB\n", "VmRSS"),
            Some(2048)
        );
    }
}
