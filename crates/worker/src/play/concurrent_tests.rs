//! Environments off the decode loop, measured on the rollout's side: a game that sleeps 2 s in
//! every step beside quick games, with a rollout that answers at once and notes when each
//! sequence was submitted and closed. The quick games' episodes must end while the slow one
//! is still in its first steps; when the decode loop stepped environments itself, each of their
//! turns waited for the slow step.

use super::*;
use spade_policy::preset::{self, BUILTIN_TEXT};
use std::time::Instant;

const SLOW: &str = r#"
import time

class SlowEnv:
    def __init__(self, max_turns=4, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.turn = 0
        return "SLOW game. Answer as \\boxed{n}.", {}

    def step(self, action):
        time.sleep(2)
        self.turn += 1
        return "Again.", 0.0, False, self.turn >= self.max_turns, {}

    def solution(self):
        return "1"
"#;

const QUICK: &str = r#"
class QuickEnv:
    def __init__(self, max_turns=4, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.turn = 0
        return "QUICK game. Answer as \\boxed{n}.", {}

    def step(self, action):
        self.turn += 1
        return "Again.", 0.0, False, self.turn >= self.max_turns, {}

    def solution(self):
        return "1"
"#;

/// Answers every request with `\boxed{7}` at once; notes each sequence's game (from its first
/// prompt), its submissions and its close.
struct Recorder<'a> {
    tok: &'a Tokenizer,
    end: i64,
    next: u64,
    pending: Vec<(SeqId, Request)>,
    slow: BTreeMap<SeqId, bool>,
    submits: Vec<(SeqId, Instant)>,
    closed: Vec<(SeqId, Instant)>,
}

impl Rollout for Recorder<'_> {
    fn open(&mut self) -> SeqId {
        self.next += 1;
        SeqId::from_raw(self.next)
    }
    fn submit(&mut self, seq: SeqId, req: Request) -> spade_policy::Result<()> {
        if !self.slow.contains_key(&seq) {
            let text = self.tok.decode(&req.tokens, false)?;
            self.slow.insert(seq, text.contains("SLOW game"));
        }
        self.submits.push((seq, Instant::now()));
        self.pending.push((seq, req));
        Ok(())
    }
    fn step(&mut self) -> spade_policy::Result<Vec<Finished>> {
        let mut out = vec![];
        for (seq, _) in std::mem::take(&mut self.pending) {
            let mut tokens = self.tok.encode("\\boxed{7}")?;
            tokens.push(self.end);
            out.push(Finished {
                seq,
                result: Ok(Completion {
                    logprobs: vec![0.0; tokens.len()],
                    tokens,
                    text: Some("\\boxed{7}".into()),
                    finish: Finish::StopToken,
                }),
            });
        }
        Ok(out)
    }
    fn close(&mut self, seq: SeqId) {
        self.closed.push((seq, Instant::now()));
    }
    fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }
}

#[test]
fn a_slow_environment_does_not_delay_the_other_episodes_turns()
-> Result<(), Box<dyn std::error::Error>> {
    let policy = preset::tiny(&[BUILTIN_TEXT], 3, |_| {})?;
    let tok = policy.require_tokenizer()?;
    let end = tok.token_id(IM_END).ok_or("no end token")?;
    let opts = PlayOptions {
        max_turns: 4,
        ..PlayOptions::default()
    };
    let turns = Turns {
        tok,
        end,
        opts: &opts,
        params: SamplingParams::default(),
        suffix: "",
    };
    let mut cfg = spade_sandbox::PoolConfig::new(spade_sandbox::RunnerConfig::new(
        spade_sandbox::default_runner_path(),
    ));
    cfg.max_runners = 4;
    cfg.warm = 0;
    let pool = Pool::new(cfg);
    let job = |code, seeds: Vec<i64>| PlayJob {
        first_index: 0,
        code,
        kind: EnvKind::Game,
        hint: None,
        seeds,
        sample_seed: 1,
    };
    let jobs = [job(SLOW, vec![0]), job(QUICK, vec![0, 1, 2])];
    let mut r = Recorder {
        tok,
        end,
        next: 0,
        pending: vec![],
        slow: BTreeMap::new(),
        submits: vec![],
        closed: vec![],
    };
    let eps = play_concurrently(&mut r, &pool, &turns, &jobs, 4)?;
    assert!(
        eps.iter()
            .flatten()
            .all(|e| e.turns == 4 && !e.terminated && e.failure.is_none()),
        "{eps:#?}"
    );
    let slow_submits: Vec<Instant> = r
        .submits
        .iter()
        .filter(|(s, _)| r.slow.get(s) == Some(&true))
        .map(|(_, t)| *t)
        .collect();
    assert_eq!(slow_submits.len(), 4, "one submission a turn");
    let quick_closed: Vec<Instant> = r
        .closed
        .iter()
        .filter(|(s, _)| r.slow.get(s) == Some(&false))
        .map(|(_, t)| *t)
        .collect();
    assert_eq!(quick_closed.len(), 3);
    // The quick games' four turns are done before the slow game's second step is (its third
    // turn is submitted 4 s or more after its first); on the decode loop each quick turn
    // waited for a slow step, so they ended after its third.
    let third = slow_submits[2];
    for (i, t) in quick_closed.iter().enumerate() {
        assert!(
            *t < third,
            "quick episode {i} ended {:?} after the slow game's third turn was submitted",
            t.duration_since(third)
        );
    }
    Ok(())
}
