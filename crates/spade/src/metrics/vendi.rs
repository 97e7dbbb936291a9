//! The Vendi score (Friedman & Dieng 2023; spec, "Metrics to log each step"): the exponential
//! of the Shannon entropy of the eigenvalues of K/n, for a positive semi-definite similarity
//! matrix K with unit diagonal. It is the "effective number of distinct items": 1 when all are
//! identical, n when all are orthogonal. Computed as the reference package does
//! (`vendi.score_K`: eigenvalues of the symmetric K/n, non-positive ones dropped, 0 log 0 = 0).
//!
//! Over a run it is taken on a window of environments (spec: the last 40 steps), as the mean
//! and s.d. over 12 random subsamples of 24, so runs with different generation rates compare.
//! Embeddings come from the policy (mean-pooled hidden states, computed by the worker); the
//! fallback here is a hashed word n-gram embedding with a cosine kernel.

use nalgebra::DMatrix;
use rand::Rng;
use rand::seq::index::sample;
use serde::{Deserialize, Serialize};

/// Tolerance for symmetry and the unit diagonal (JSON round trips lose the last digits).
pub const KERNEL_TOLERANCE: f64 = 1e-6;

/// Why a similarity matrix was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KernelError {
    /// The input is not JSON.
    #[error("not valid JSON: {0}")]
    Json(String),
    /// The JSON is not a list of rows.
    #[error("expected a square matrix as a JSON array of arrays of numbers, found {0}")]
    NotAMatrix(&'static str),
    /// No rows.
    #[error("the matrix is empty")]
    Empty,
    /// A row is not a list, or has the wrong length.
    #[error("row {row} has {len} entries, but the matrix has {n} rows (it must be square)")]
    NotSquare { row: usize, len: usize, n: usize },
    /// An entry is not a number (or not finite).
    #[error("entry [{row}][{col}] is not a finite number: {found}")]
    NotANumber {
        row: usize,
        col: usize,
        found: String,
    },
    /// `K[i][j] != K[j][i]`.
    #[error("the matrix is not symmetric: [{row}][{col}] = {a} but [{col}][{row}] = {b}")]
    NotSymmetric {
        row: usize,
        col: usize,
        a: f64,
        b: f64,
    },
    /// `K[i][i] != 1`.
    #[error("diagonal entry [{index}][{index}] is {value}, but a similarity matrix has K_ii = 1")]
    DiagonalNotOne { index: usize, value: f64 },
    /// A clearly negative eigenvalue.
    #[error("the matrix is not positive semi-definite (smallest eigenvalue {0:.3e})")]
    NotPsd(f64),
}

/// Parses a JSON square matrix (`[[1, 0.5], [0.5, 1]]`) and checks that it is a valid
/// similarity matrix.
pub fn kernel_from_json(text: &str) -> Result<Vec<Vec<f64>>, KernelError> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| KernelError::Json(e.to_string()))?;
    let serde_json::Value::Array(rows) = value else {
        return Err(KernelError::NotAMatrix(kind_of(&value)));
    };
    let n = rows.len();
    let mut out = Vec::with_capacity(n);
    for (row, r) in rows.iter().enumerate() {
        let serde_json::Value::Array(entries) = r else {
            return Err(KernelError::NotAMatrix(kind_of(r)));
        };
        let mut parsed = Vec::with_capacity(entries.len());
        for (col, e) in entries.iter().enumerate() {
            match e.as_f64() {
                Some(x) => parsed.push(x),
                None => {
                    return Err(KernelError::NotANumber {
                        row,
                        col,
                        found: e.to_string(),
                    });
                }
            }
        }
        out.push(parsed);
    }
    check_kernel(&out)?;
    Ok(out)
}

fn kind_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Null => "null",
    }
}

/// Checks shape, finiteness, symmetry, unit diagonal and positive semi-definiteness.
pub fn check_kernel(k: &[Vec<f64>]) -> Result<(), KernelError> {
    let n = k.len();
    if n == 0 {
        return Err(KernelError::Empty);
    }
    for (row, r) in k.iter().enumerate() {
        if r.len() != n {
            return Err(KernelError::NotSquare {
                row,
                len: r.len(),
                n,
            });
        }
        for (col, x) in r.iter().enumerate() {
            if !x.is_finite() {
                return Err(KernelError::NotANumber {
                    row,
                    col,
                    found: x.to_string(),
                });
            }
        }
    }
    for (i, row) in k.iter().enumerate() {
        if (row[i] - 1.0).abs() > KERNEL_TOLERANCE {
            return Err(KernelError::DiagonalNotOne {
                index: i,
                value: row[i],
            });
        }
        for (j, other) in k.iter().enumerate().skip(i + 1) {
            if (row[j] - other[i]).abs() > KERNEL_TOLERANCE {
                return Err(KernelError::NotSymmetric {
                    row: i,
                    col: j,
                    a: row[j],
                    b: other[i],
                });
            }
        }
    }
    let min = eigenvalues(k).into_iter().fold(f64::INFINITY, f64::min);
    if min < -KERNEL_TOLERANCE * n as f64 {
        return Err(KernelError::NotPsd(min));
    }
    Ok(())
}

/// Eigenvalues of the symmetric matrix `k` (its lower triangle is used).
fn eigenvalues(k: &[Vec<f64>]) -> Vec<f64> {
    let n = k.len();
    let m = DMatrix::from_fn(n, n, |i, j| if i >= j { k[i][j] } else { k[j][i] });
    m.symmetric_eigenvalues().iter().copied().collect()
}

/// The Vendi score of a checked similarity matrix, in [1, n].
pub fn vendi_score(k: &[Vec<f64>]) -> Result<f64, KernelError> {
    check_kernel(k)?;
    Ok(vendi_score_unchecked(k))
}

/// The score without the checks (for kernels built here, e.g. by [`cosine_kernel`]).
pub fn vendi_score_unchecked(k: &[Vec<f64>]) -> f64 {
    let n = k.len() as f64;
    if k.is_empty() {
        return 1.0;
    }
    let entropy: f64 = eigenvalues(k)
        .into_iter()
        .map(|l| l / n)
        .filter(|&l| l > 0.0)
        .map(|l| -l * l.ln())
        .sum();
    entropy.exp()
}

/// Cosine similarities of the embeddings (a zero vector is similar only to itself), so the
/// diagonal is 1 and the matrix is positive semi-definite.
pub fn cosine_kernel(embeddings: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let unit: Vec<Option<Vec<f64>>> = embeddings
        .iter()
        .map(|e| {
            let norm = e.iter().map(|x| x * x).sum::<f64>().sqrt();
            (norm > 0.0 && norm.is_finite()).then(|| e.iter().map(|x| x / norm).collect())
        })
        .collect();
    let n = unit.len();
    let mut k = vec![vec![0.0; n]; n];
    for i in 0..n {
        k[i][i] = 1.0;
        for j in i + 1..n {
            if let (Some(a), Some(b)) = (&unit[i], &unit[j]) {
                let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
                let s = dot.clamp(-1.0, 1.0);
                k[i][j] = s;
                k[j][i] = s;
            }
        }
    }
    k
}

/// Dimensions of the fallback embedding.
pub const NGRAM_DIM: usize = 1024;

/// The fallback embedding: counts of word unigrams and bigrams (identifiers and numbers,
/// lower-cased) hashed into `dim` buckets with FNV-1a. Deterministic, cheap, and sensitive to
/// what an environment is about (names, rules, tools), which is what the Vendi score should
/// see when the policy's own embeddings are unavailable.
pub fn ngram_embedding(text: &str, dim: usize) -> Vec<f64> {
    let dim = dim.max(1);
    let mut v = vec![0.0; dim];
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let bucket = |s: &str| (fnv1a(s.as_bytes()) % dim as u64) as usize;
    for (i, w) in words.iter().enumerate() {
        v[bucket(w)] += 1.0;
        if let Some(next) = words.get(i + 1) {
            v[bucket(&format!("{w} {next}"))] += 1.0;
        }
    }
    v
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Vendi over a window: mean and s.d. of the score of `draws` random subsamples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct VendiSummary {
    pub mean: f64,
    /// Population s.d. over the draws (0 with one draw).
    pub sd: f64,
    /// Environments in the window.
    pub n_envs: usize,
    /// Environments per draw (the window size when it is smaller than the subsample).
    pub subsample: usize,
    pub draws: usize,
}

impl VendiSummary {
    /// mean / subsample: the share of distinct environments (the paper's Vendi/n).
    pub fn per_n(&self) -> f64 {
        self.mean / self.subsample.max(1) as f64
    }
}

/// The windowed Vendi score of `embeddings` (spec: subsamples of 24, 12 draws). When the
/// window holds no more than `subsample` environments, all of them are scored once. `None`
/// for an empty window.
pub fn windowed_vendi<R: Rng + ?Sized>(
    embeddings: &[Vec<f64>],
    subsample: usize,
    draws: usize,
    rng: &mut R,
) -> Option<VendiSummary> {
    let n = embeddings.len();
    if n == 0 {
        return None;
    }
    let score = |idx: &[usize]| {
        let picked: Vec<Vec<f64>> = idx.iter().map(|&i| embeddings[i].clone()).collect();
        vendi_score_unchecked(&cosine_kernel(&picked))
    };
    let (scores, size) = if n <= subsample {
        (vec![score(&(0..n).collect::<Vec<_>>())], n)
    } else {
        let s = (0..draws.max(1))
            .map(|_| score(&sample(rng, n, subsample).into_vec()))
            .collect();
        (s, subsample)
    };
    let mean = scores.iter().sum::<f64>() / scores.len() as f64;
    let var = scores.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / scores.len() as f64;
    Some(VendiSummary {
        mean,
        sd: var.sqrt(),
        n_envs: n,
        subsample: size,
        draws: scores.len(),
    })
}

#[cfg(test)]
#[path = "vendi_tests.rs"]
mod tests;
