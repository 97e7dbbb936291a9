//! Known values, refused inputs and properties of the Vendi score.

use super::*;
use proptest::prelude::*;

fn identity(n: usize) -> Vec<Vec<f64>> {
    (0..n)
        .map(|i| (0..n).map(|j| if i == j { 1.0 } else { 0.0 }).collect())
        .collect()
}

#[test]
fn known_values() {
    assert!((vendi_score(&identity(5)).expect("valid") - 5.0).abs() < 1e-9);
    assert!((vendi_score(&vec![vec![1.0; 4]; 4]).expect("valid") - 1.0).abs() < 1e-9);
    // Two identical items and one orthogonal: eigenvalues 2/3, 1/3.
    let k = vec![
        vec![1.0, 1.0, 0.0],
        vec![1.0, 1.0, 0.0],
        vec![0.0, 0.0, 1.0],
    ];
    let want = (-(2.0f64 / 3.0) * (2.0f64 / 3.0).ln() - (1.0 / 3.0) * (1.0f64 / 3.0).ln()).exp();
    assert!((vendi_score(&k).expect("valid") - want).abs() < 1e-9);
}

#[test]
fn bad_kernels_are_refused_precisely() {
    let e = |s: &str| kernel_from_json(s).expect_err("refused").to_string();
    assert_eq!(
        e("[[1, 0], [0]]"),
        "row 1 has 1 entries, but the matrix has 2 rows (it must be square)"
    );
    assert_eq!(
        e("[[1, 0.2], [0.3, 1]]"),
        "the matrix is not symmetric: [0][1] = 0.2 but [1][0] = 0.3"
    );
    assert_eq!(
        e("[[1, 0], [0, 2]]"),
        "diagonal entry [1][1] is 2, but a similarity matrix has K_ii = 1"
    );
    assert_eq!(
        e("[[1, \"a\"], [0, 1]]"),
        "entry [0][1] is not a finite number: \"a\""
    );
    assert_eq!(e("[]"), "the matrix is empty");
    assert!(e("{\"k\": 1}").contains("found an object"));
    assert!(e("[[1, 0]").starts_with("not valid JSON"));
    assert!(e("[[1, 1, -1], [1, 1, 1], [-1, 1, 1]]").contains("not positive semi-definite"));
    assert_eq!(
        kernel_from_json("[[1, 0.5], [0.5, 1]]"),
        Ok(vec![vec![1.0, 0.5], vec![0.5, 1.0]])
    );
}

#[test]
fn ngram_embeddings_tell_apart_different_texts() {
    let maze = ngram_embedding("class MazeEnv: walls and doors in a grid maze", NGRAM_DIM);
    let maze2 = ngram_embedding("class MazeEnv: walls and doors in a grid maze", NGRAM_DIM);
    let coins = ngram_embedding(
        "class CoinChangeEnv: pay the amount with fewest coins",
        NGRAM_DIM,
    );
    let k = cosine_kernel(&[maze, maze2, coins, vec![0.0; NGRAM_DIM]]);
    assert!((k[0][1] - 1.0).abs() < 1e-12);
    assert!(k[0][2] < 0.5);
    assert_eq!((k[3][3], k[0][3]), (1.0, 0.0));
    let v = vendi_score(&k).expect("cosine kernels are valid");
    assert!(v > 2.0 && v < 3.0, "{v}");
}

#[test]
fn windows_subsample_and_summarise() {
    let embs: Vec<Vec<f64>> = (0..40)
        .map(|i| ngram_embedding(&format!("env {i} rule {}", i % 5), 256))
        .collect();
    let mut rng = crate::seeded_rng(0, &[]);
    let s = windowed_vendi(&embs, 24, 12, &mut rng).expect("non-empty");
    assert_eq!((s.n_envs, s.subsample, s.draws), (40, 24, 12));
    assert!(s.mean >= 1.0 && s.mean <= 24.0 && s.sd > 0.0);
    assert!(s.per_n() <= 1.0);
    let small = windowed_vendi(&embs[..5], 24, 12, &mut rng).expect("non-empty");
    assert_eq!((small.subsample, small.draws, small.sd), (5, 1, 0.0));
    assert!(windowed_vendi(&[], 24, 12, &mut rng).is_none());
}

fn psd_kernel() -> impl Strategy<Value = Vec<Vec<f64>>> {
    (1usize..8, 1usize..6).prop_flat_map(|(n, d)| {
        prop::collection::vec(prop::collection::vec(-1.0f64..1.0, d), n)
            .prop_map(|rows| cosine_kernel(&rows))
    })
}

proptest! {
    #[test]
    fn vendi_lies_in_one_to_n(k in psd_kernel()) {
        let v = vendi_score(&k).expect("cosine kernels are valid");
        prop_assert!(v >= 1.0 - 1e-9 && v <= k.len() as f64 + 1e-9, "{} for n = {}", v, k.len());
    }

    #[test]
    fn vendi_ignores_the_order_of_items(k in psd_kernel(), seed: u64) {
        use rand::seq::SliceRandom;
        let n = k.len();
        let mut perm: Vec<usize> = (0..n).collect();
        perm.shuffle(&mut crate::seeded_rng(seed, &[]));
        let p: Vec<Vec<f64>> = perm.iter().map(|&i| perm.iter().map(|&j| k[i][j]).collect()).collect();
        let (a, b) = (vendi_score_unchecked(&k), vendi_score_unchecked(&p));
        prop_assert!((a - b).abs() < 1e-7, "{} vs {}", a, b);
    }
}
