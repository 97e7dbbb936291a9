//! Which CPU kernels libtorch computes with, as a fingerprint for caches of trained weights.
//!
//! Training is bit-for-bit reproducible for one kernel set but not across sets: libtorch picks
//! its vectorised kernels (ATen's "CPU capability": AVX-512, AVX2 or the default build) from the
//! CPU and `ATEN_CPU_CAPABILITY`, MKL picks its GEMM code paths from the CPU (vendor and model,
//! `MKL_CBWR`, `MKL_ENABLE_INSTRUCTIONS`), and the number of intra-op threads changes how
//! reductions are split. The tiny warm start trained under AVX-512 and under AVX2 kernels on the
//! same machine gave two different models (issue 35), so a cache key of trained weights must
//! name all of these.
//!
//! tch has no call for ATen's choice, so [`aten_cpu_capability`] repeats ATen's rule (see
//! `spade_kernels`, whose own kernels follow it too).

/// The kernel set ATen dispatches CPU operators to in this process: `"avx512"`, `"avx2"` or
/// `"default"`; `spade_kernels` dispatches its own kernels on the same choice.
pub use spade_kernels::aten_cpu_capability;

/// The CPU's vendor and model as `/proc/cpuinfo` names them (MKL's code paths depend on both);
/// `unknown` where that file is not there.
fn cpu_model() -> String {
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return "unknown".into();
    };
    let field = |name: &str| {
        info.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_owned())
            })
            .unwrap_or_default()
    };
    format!("{} {}", field("vendor_id"), field("model name"))
}

/// Everything about this process's CPU kernels that changes trained weights, in one line:
/// ATen's kernel set, the CPU (MKL's dispatch), MKL's reproducibility switches when set, and
/// libtorch's intra-op thread count.
pub fn fingerprint() -> String {
    let mkl: Vec<String> = ["MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| format!("{k}={v}")))
        .collect();
    format!(
        "aten={} cpu={} threads={}{}{}",
        aten_cpu_capability(),
        cpu_model(),
        tch::get_num_threads(),
        if mkl.is_empty() { "" } else { " " },
        mkl.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_names_the_kernel_set_and_the_threads() {
        let f = fingerprint();
        assert!(f.starts_with("aten="), "{f}");
        assert!(
            ["avx512", "avx2", "default"].contains(&aten_cpu_capability().as_str()),
            "{f}"
        );
        assert!(
            f.contains(&format!(" threads={}", tch::get_num_threads())),
            "{f}"
        );
    }
}
