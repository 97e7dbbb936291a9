//! Integration tests of the worker (one test binary, as the style guide asks): the HTTP sink
//! against a real loopback server, and three steps of the tiny loop with the real sandbox and
//! the real policy; the checkpoint cadence (`run.weights_every`) with a crash between writes;
//! environment pools exported from a run and played as a fixed pool; a SPICE run; learning
//! regressions of the agent (`learning`) and the designer (`learning_designer`).

mod broken_in_play;
mod families;
mod frozen_designer;
mod judge;
mod learning;
mod learning_designer;
mod learning_smol;
mod loop_tiny;
mod play_rules;
mod pool;
mod ranks;
mod rollout;
mod sink_http;
mod spice;
mod vllm;
mod weights_cadence;

use spade_policy::Policy;
use spade_policy::chat::{Role, agent_transcript};
use spade_policy::preset::{self, BUILTIN_TEXT};
use spade_policy::sft::{SftConfig, SftTrainer, encode_pairs};

/// A sandbox pool of `runners` runner processes, none started ahead.
pub fn pool(runners: usize) -> spade_sandbox::Pool {
    let mut cfg = spade_sandbox::PoolConfig::new(spade_sandbox::RunnerConfig::new(
        spade_sandbox::default_runner_path(),
    ));
    cfg.max_runners = runners;
    cfg.warm = 0;
    spade_sandbox::Pool::new(cfg)
}

/// The tiny model taught to answer `answer` to every game observation in `observations`,
/// first turn and later ones (after `reply` as the environment's answer): an agent whose
/// actions the tests can predict, trained in seconds.
pub fn always_answers(
    answer: &str,
    observations: &[&str],
    reply: &str,
) -> Result<Policy, Box<dyn std::error::Error>> {
    let policy = preset::tiny(&[BUILTIN_TEXT], 3, |_| {})?;
    let tok = policy.require_tokenizer()?;
    let system = spade::prompt::agent_system(spade::EnvKind::Game);
    let mut pairs = vec![];
    for obs in observations {
        let first = spade::prompt::agent_first_message(obs, None);
        pairs.push((Role::Agent.prompt(Some(system), &first), answer.to_owned()));
        for n in 1..6 {
            let turns: Vec<(String, String)> = (0..n)
                .map(|_| (answer.to_owned(), reply.to_owned()))
                .collect();
            pairs.push((
                agent_transcript(Some(system), &first, &turns),
                answer.to_owned(),
            ));
        }
    }
    let data = encode_pairs(tok, &pairs, 4096)?;
    let mut tr = SftTrainer::new(&policy, SftConfig::default())?;
    tr.fit(&policy, &data, 40, 1, |_, _, _| {})?;
    Ok(policy)
}
