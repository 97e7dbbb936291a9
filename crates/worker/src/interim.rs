//! Pieces of the algorithm that belong in `crates/spade` and are not there yet.
//! TODO(core): replace each item with its `spade::metrics` counterpart as it lands (Vendi, the
//! n-gram embedding); this module then disappears.

/// Vendi score of a PSD similarity matrix with unit diagonal: exp(entropy of eig(K/n)).
pub fn vendi(k: &[Vec<f64>]) -> f64 {
    let n = k.len();
    if n == 0 {
        return 0.0;
    }
    let mut a: Vec<Vec<f64>> = k
        .iter()
        .map(|r| r.iter().map(|x| x / n as f64).collect())
        .collect();
    // Cyclic Jacobi rotations: plenty for the 24 x 24 matrices of the spec.
    for _ in 0..100 {
        let off: f64 = (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i][j] * a[i][j])
            .sum();
        if off < 1e-22 {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                if a[p][q].abs() < 1e-300 {
                    continue;
                }
                let theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for r in 0..n {
                    let (arp, arq) = (a[r][p], a[r][q]);
                    a[r][p] = c * arp - s * arq;
                    a[r][q] = s * arp + c * arq;
                }
                for r in 0..n {
                    let (apr, aqr) = (a[p][r], a[q][r]);
                    a[p][r] = c * apr - s * aqr;
                    a[q][r] = s * apr + c * aqr;
                }
            }
        }
    }
    let h: f64 = (0..n)
        .map(|i| a[i][i])
        .filter(|&l| l > 0.0)
        .map(|l| -l * l.ln())
        .sum();
    h.exp()
}

/// Cosine-similarity kernel of embeddings (clamped to [0, 1] off the diagonal is not needed:
/// a Gram matrix of unit vectors is PSD with unit diagonal).
pub fn cosine_kernel(x: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let unit: Vec<Vec<f64>> = x
        .iter()
        .map(|v| {
            let n = v.iter().map(|a| a * a).sum::<f64>().sqrt().max(1e-12);
            v.iter().map(|a| a / n).collect()
        })
        .collect();
    unit.iter()
        .map(|a| {
            unit.iter()
                .map(|b| a.iter().zip(b).map(|(x, y)| x * y).sum())
                .collect()
        })
        .collect()
}

/// Hashed character-trigram counts of `text` (the n-gram fallback embedding), 256 buckets.
pub fn ngram_embedding(text: &str) -> Vec<f64> {
    let mut v = vec![0.0; 256];
    let chars: Vec<char> = text.chars().collect();
    for w in chars.windows(3) {
        let mut h: u64 = 1469598103934665603;
        for c in w {
            h = (h ^ u64::from(*c)).wrapping_mul(1099511628211);
        }
        v[(h % 256) as usize] += 1.0;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vendi_of_identity_and_ones() {
        let n = 4;
        let id: Vec<Vec<f64>> = (0..n)
            .map(|i| (0..n).map(|j| f64::from(u8::from(i == j))).collect())
            .collect();
        assert!((vendi(&id) - 4.0).abs() < 1e-9);
        let ones = vec![vec![1.0; n]; n];
        assert!((vendi(&ones) - 1.0).abs() < 1e-9);
    }
}
