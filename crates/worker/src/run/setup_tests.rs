//! The set-up's choices: episodes in flight, the warm starts' options, the update's recipe.

use super::*;

#[test]
fn episodes_in_flight_default_to_the_engines_batch() {
    let mut opts = RunOptions::new("t", PathBuf::from("envs/seed"), PathBuf::from("cache"));
    let mut cfg = RunConfig::default();
    // The paper's defaults: as many episodes as the engine decodes at once.
    assert_eq!(cfg.agent.concurrency, 0);
    assert_eq!(concurrency(&cfg, &opts), cfg.model.max_batch as usize);
    cfg.model.max_batch = 64;
    assert_eq!(concurrency(&cfg, &opts), 64);
    cfg.agent.concurrency = 12;
    assert_eq!(concurrency(&cfg, &opts), 12);
    opts.concurrency = Some(3);
    assert_eq!(concurrency(&cfg, &opts), 3);
}

#[test]
fn a_pretrained_warm_start_fine_tunes_its_checkpoint_on_hinted_episodes() {
    let opts = RunOptions::new("t", PathBuf::from("envs/seed"), PathBuf::from("cache"));
    let mut cfg = RunConfig::tiny_cpu_demo();
    cfg.model.preset = spade_policy::preset::SMOLLM2.into();
    cfg.model.warm_start = spade::config::WarmStartData::Families;
    let tiny = warm_start_options(&cfg, &opts, &None);
    let w = pretrained_warm_start_options(&cfg, &opts, &None, PathBuf::from("smol"));
    assert_eq!(w.base.as_deref(), Some(Path::new("smol")));
    assert_eq!(w.family.as_deref(), Some("vault"));
    assert!(w.agent_hint_only && !tiny.agent_hint_only);
    assert_eq!((w.epochs, w.max_epochs), (1, 4));
    assert!(
        w.lr < tiny.lr / 10.0,
        "{} vs the tiny model's {}",
        w.lr,
        tiny.lr
    );
    // Everything else is the tiny model's data and measurement.
    assert_eq!(
        (w.designer_variants, w.agent_episodes, w.measure_samples),
        (
            tiny.designer_variants,
            tiny.agent_episodes,
            tiny.measure_samples
        )
    );
}

#[test]
fn a_fixed_env_run_warm_starts_no_designer() {
    let opts = RunOptions::new("t", PathBuf::from("envs/seed"), PathBuf::from("cache"));
    let mut cfg = RunConfig::tiny_cpu_demo();
    let spade = warm_start_options(&cfg, &opts, &None);
    assert_eq!(spade.designer_variants, 4);
    assert_eq!(spade.measure_samples, super::super::DEFAULT_WARM_MEASURE);
    cfg.ablation.fixed_env_pool = Some("envs/seed".into());
    let fixed = warm_start_options(&cfg, &opts, &None);
    assert_eq!((fixed.designer_variants, fixed.measure_samples), (0, 0));
    assert_eq!(
        fixed.agent_episodes, spade.agent_episodes,
        "the agent still learns"
    );
}

/// The run's `[grpo]` recipe reaches the trainer: the reference's by default, the old
/// token mean and torch's AdamW settings when a configuration names them.
#[test]
fn the_grpo_recipe_reaches_the_trainer() {
    let g = grpo_config(&RunConfig::gpu_qwen3_games());
    assert_eq!(g.loss_norm, LossNorm::SampleMean);
    assert_eq!((g.optim.weight_decay, g.optim.beta2), (0.1, 0.98));
    let mut cfg = RunConfig::tiny_cpu_demo();
    cfg.grpo.loss_norm = spade::config::LossNorm::TokenMean;
    cfg.grpo.weight_decay = 0.01;
    cfg.grpo.adam_beta2 = 0.999;
    let g = grpo_config(&cfg);
    assert_eq!(g.loss_norm, LossNorm::TokenMean);
    assert_eq!(
        (g.optim.weight_decay, g.optim.beta2, g.optim.lr),
        (0.01, 0.999, 1e-4)
    );
}
