//! Which kernel set (vector width) this process computes with.
//!
//! tch has no call for ATen's choice, so [`aten_cpu_capability`] repeats ATen's rule
//! (`aten/src/ATen/native/DispatchStub.cpp`, `compute_cpu_capability`): a valid
//! `ATEN_CPU_CAPABILITY` wins, else AVX-512 when the CPU has AVX-512 F/BW/VL/DQ and FMA, else
//! AVX2 with FMA, else the default kernels.

/// The kernel set ATen dispatches CPU operators to in this process: `"avx512"`, `"avx2"` or
/// `"default"` (on x86-64; other architectures report `"default"` unless the variable says
/// otherwise).
pub fn aten_cpu_capability() -> String {
    if let Ok(v) = std::env::var("ATEN_CPU_CAPABILITY") {
        // ATen ignores (with a warning) any other value and detects instead.
        if matches!(v.as_str(), "avx512" | "avx2" | "default") {
            return v;
        }
    }
    detected().name().to_owned()
}

/// A kernel set, ordered by what it needs of the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Set {
    Default,
    Avx2,
    Avx512,
}

impl Set {
    fn name(self) -> &'static str {
        match self {
            Set::Default => "default",
            Set::Avx2 => "avx2",
            Set::Avx512 => "avx512",
        }
    }
}

/// The set this crate's kernels run: ATen's choice, but never more than the CPU has (ATen
/// takes `ATEN_CPU_CAPABILITY=avx512` at its word; our feature-compiled code must not run
/// where the instructions are missing).
pub(crate) fn chosen() -> Set {
    let asked = match aten_cpu_capability().as_str() {
        "avx512" => Set::Avx512,
        "avx2" => Set::Avx2,
        _ => Set::Default,
    };
    asked.min(detected())
}

#[cfg(target_arch = "x86_64")]
fn detected() -> Set {
    let fma = std::arch::is_x86_feature_detected!("fma");
    if fma
        && std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vl")
        && std::arch::is_x86_feature_detected!("avx512dq")
    {
        Set::Avx512
    } else if fma && std::arch::is_x86_feature_detected!("avx2") {
        Set::Avx2
    } else {
        Set::Default
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detected() -> Set {
    Set::Default
}
