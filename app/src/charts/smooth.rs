//! Exponential moving average smoothing, the way TensorBoard and W&B do it: debiased, so the
//! first points are not dragged toward zero, and one output per input, so x values line up.

/// Smooths `values` with weight `w` in [0, 1): 0 leaves them unchanged, 0.99 is very smooth.
/// Non-finite values pass through and do not poison the average.
pub fn ema(values: &[f64], w: f64) -> Vec<f64> {
    if w <= 0.0 {
        return values.to_vec();
    }
    let mut acc = 0.0;
    let mut n = 0i32;
    values
        .iter()
        .map(|&v| {
            if !v.is_finite() {
                return v;
            }
            acc = acc * w + (1.0 - w) * v;
            n += 1;
            acc / (1.0 - w.powi(n))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_length_and_constant_series() {
        let v = vec![2.0; 50];
        let s = ema(&v, 0.9);
        assert_eq!(s.len(), 50);
        // Debiasing: a constant series stays constant from the first point on.
        assert!(s.iter().all(|x| (x - 2.0).abs() < 1e-12), "{s:?}");
    }

    #[test]
    fn zero_weight_is_identity_and_smoothing_reduces_jumps() {
        let v = [0.0, 1.0, 0.0, 1.0, 0.0, 1.0];
        assert_eq!(ema(&v, 0.0), v.to_vec());
        let s = ema(&v, 0.6);
        assert_eq!(s.len(), v.len());
        let jump = |x: &[f64]| {
            x.windows(2)
                .map(|p| (p[1] - p[0]).abs())
                .fold(0.0, f64::max)
        };
        assert!(jump(&s[2..]) < jump(&v[2..]), "{s:?}");
        // Hand-computed second value: (0.6*0.4*0 + 0.4*1) / (1 - 0.36) = 0.625.
        assert!((s[1] - 0.625).abs() < 1e-12);
    }

    #[test]
    fn nan_passes_through_without_spreading() {
        let s = ema(&[1.0, f64::NAN, 1.0], 0.5);
        assert!(s[1].is_nan());
        assert!((s[2] - 1.0).abs() < 1e-12);
    }
}
