//! The warm start's criterion, verdict and cache key.

use super::*;

fn report(accepted: usize, measured: usize, needed: usize, epochs: usize) -> WarmStartReport {
    WarmStartReport {
        hash: "h".into(),
        designer_pairs: 1,
        hint_pairs: 1,
        agent_sequences: 1,
        tokens: 1,
        first_loss: 1.0,
        last_loss: 0.5,
        train_seconds: 1.0,
        measured,
        accepted,
        acceptance_rate: 0.0,
        rejections: Default::default(),
        epochs,
        needed,
        criterion_met: accepted >= needed,
        checks: vec![],
        kernels: "aten=avx2".into(),
    }
}

#[test]
fn the_verdict_says_whether_the_designer_writes_valid_environments() {
    let met = report(7, 12, 6, 13);
    assert!(met.designer_ready());
    assert_eq!(
        met.verdict(),
        "warm start: criterion met after 13 epochs: the sandbox accepted 7/12 designer \
         samples on held-back prompts (needs 6)"
    );
    let none = report(0, 12, 6, 24);
    assert!(!none.designer_ready());
    let v = none.verdict();
    assert!(
        v.contains("stopped at its bound of 24 epochs without meeting"),
        "{v}"
    );
    assert!(
        v.ends_with(
            "the designer writes no valid environment yet: the run will show no curriculum"
        ),
        "{v}"
    );
    assert!(
        report(2, 12, 6, 24)
            .verdict()
            .contains("few valid environments")
    );
    assert!(
        report(0, 0, 0, 12)
            .verdict()
            .contains("no designer samples measured")
    );
}

#[test]
fn the_criterion_needs_a_share_of_the_samples_and_at_least_one() {
    let opts = |measure_samples, min_acceptance| WarmStartOptions {
        kinds: vec![],
        seed: 0,
        epochs: 12,
        max_epochs: 24,
        min_acceptance,
        batch_size: 1,
        lr: 0.0,
        designer_variants: 0,
        designer_files: 0,
        agent_episodes: 0,
        hint_code_chars: 0,
        memory_positives: 0,
        memory_negatives: 0,
        memory_code_chars: 0,
        corpus_docs: vec![],
        measure_samples,
        designer_max_new_tokens: 0,
        max_turns: 1,
        family: None,
        base: None,
        agent_hint_only: false,
    };
    assert_eq!(needed_accepts(&opts(12, 0.5)), 6);
    assert_eq!(needed_accepts(&opts(12, 0.3)), 4);
    assert_eq!(needed_accepts(&opts(12, 0.0)), 1);
    assert_eq!(needed_accepts(&opts(12, 1.0)), 12);
    assert_eq!(needed_accepts(&opts(0, 0.5)), 0);
}

#[test]
fn the_cache_key_names_the_cpu_kernels() {
    let o = WarmStartOptions {
        kinds: vec![],
        seed: 0,
        epochs: 12,
        max_epochs: 24,
        min_acceptance: 0.5,
        batch_size: 1,
        lr: 0.0,
        designer_variants: 0,
        designer_files: 0,
        agent_episodes: 0,
        hint_code_chars: 0,
        memory_positives: 0,
        memory_negatives: 0,
        memory_code_chars: 0,
        corpus_docs: vec![],
        measure_samples: 12,
        designer_max_new_tokens: 0,
        max_turns: 1,
        family: None,
        base: None,
        agent_hint_only: false,
    };
    assert_ne!(
        cache_key(&[], &o, "aten=avx2 cpu=x threads=1"),
        cache_key(&[], &o, "aten=avx512 cpu=x threads=1")
    );
}
