//! The reference's play rules (issue 40), each against this project's earlier rule as the
//! control: a game reply without `\boxed{}` reaches the environment's `step` as its raw text
//! (`agent.raw_actions`), and a turn that fills its token budget without the end token ends
//! the episode, truncated, without stepping the game (`agent.end_on_cut_turn`). Both on the
//! engine and on the sampler, with an agent taught to answer one unboxed sentence.

use spade_sandbox::{EnvKind, Pool};
use spade_worker::play::{self, Backend, Episode, PlayOptions};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const OBS: &str = "Say which number you pick.";
const ANSWER: &str = "I pick 7";

/// Wins when the raw reply names 7; says what it got otherwise.
const GAME: &str = r#"
"""Skill: Logical Deduction. Mechanic: single-answer (2 tries). Name the number."""


class SayEnv:
    def __init__(self, max_turns=2, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.turn, self.over = 0, False
        return "Say which number you pick.", {}

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {}
        self.turn += 1
        if "7" in action:
            self.over = True
            return "Right.", 1.0, True, False, {}
        if self.turn >= self.max_turns:
            self.over = True
            return "Out of tries.", 0.0, False, True, {}
        return "Got " + repr(action[:40]) + ". Try again.", 0.0, False, False, {}

    def solution(self):
        return "7"
"#;

fn play(
    policy: &spade_policy::Policy,
    pool: &Pool,
    opts: &PlayOptions,
) -> Result<Vec<Episode>, Box<dyn std::error::Error>> {
    let seeds: Vec<i64> = (1..=4).collect();
    Ok(play::play_env(
        policy,
        pool,
        GAME,
        EnvKind::Game,
        None,
        &seeds,
        opts,
        2,
        5,
    )?)
}

#[test]
fn an_unboxed_reply_reaches_the_game_and_a_cut_turn_ends_the_episode() -> TestResult {
    let pool = crate::pool(2);
    let policy = crate::always_answers(ANSWER, &[OBS], "Got 'I pick 7'. Try again.")?;
    for backend in [Backend::default(), Backend::Sampler] {
        let base = PlayOptions {
            max_turns: 2,
            max_new_tokens: 24,
            temperature: 0.1,
            backend: backend.clone(),
            ..PlayOptions::default()
        };
        // The reference: the raw reply is the action, the game reads the 7 and the agent wins.
        let raw = play(
            &policy,
            &pool,
            &PlayOptions {
                raw_actions: true,
                ..base.clone()
            },
        )?;
        let wins = raw.iter().filter(|e| e.won).count();
        assert!(
            wins >= 3,
            "{backend:?}: {wins} of 4 won with raw actions: {:?}",
            raw.iter().map(|e| &e.transcript).collect::<Vec<_>>()
        );
        assert!(raw.iter().all(|e| e.format_errors == 0));
        // The control (the earlier rule): no box, no step; the agent is told the format it
        // missed until its turns run out, and never wins.
        let boxed_only = play(&policy, &pool, &base)?;
        assert!(boxed_only.iter().all(|e| !e.won && e.turns == 2));
        assert!(
            boxed_only
                .iter()
                .all(|e| e.format_errors == 2 && e.env_calls == 1)
        );

        // A 2-token budget cuts every turn. The reference: the episode ends there, truncated,
        // and the game is never stepped (one call: the reset).
        let cut = PlayOptions {
            max_new_tokens: 2,
            raw_actions: true,
            ..base.clone()
        };
        let ended = play(
            &policy,
            &pool,
            &PlayOptions {
                end_on_cut_turn: true,
                ..cut.clone()
            },
        )?;
        for e in &ended {
            assert!(e.truncated && !e.terminated && !e.won, "{e:?}");
            assert_eq!((e.turns, e.env_calls), (1, 1), "{:?}", e.transcript);
            assert_eq!(e.loss_mask.iter().filter(|&&m| m).count(), 2);
        }
        // The control: the cut turn is closed, the game stepped with the fragment, and play
        // goes on to the turn limit.
        let went_on = play(&policy, &pool, &cut)?;
        for e in &went_on {
            assert!(!e.truncated, "{e:?}");
            assert_eq!(e.turns, 2, "{:?}", e.transcript);
            assert!(e.env_calls >= 2, "{e:?}");
        }

        // The reference's opening: one user message framing the game, no system message.
        let reference = play(
            &policy,
            &pool,
            &PlayOptions {
                prompts: spade::prompt::PromptStyle::Reference,
                max_turns: 1,
                ..base.clone()
            },
        )?;
        let tok = policy.require_tokenizer()?;
        for e in &reference {
            let first = &e.transcript[0].content;
            assert!(first.starts_with("You are playing a text game"), "{first}");
            assert!(first.contains(&format!("Observation: {OBS}")));
            let prompt_len = e.loss_mask.iter().take_while(|&&m| !m).count();
            let opening = tok.decode(&e.ids[..prompt_len], false)?;
            assert!(opening.starts_with("<|im_start|>user\n"), "{opening}");
            assert!(!opening.contains("<|im_start|>system"), "{opening}");
        }
    }
    Ok(())
}

/// Qwen3's hybrid-thinking generation prompt, reduced to its `enable_thinking` switch.
const HYBRID: &str = "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}";

#[test]
fn thinking_off_puts_the_empty_think_block_after_every_assistant_header() -> TestResult {
    let pool = crate::pool(2);
    let taught = crate::always_answers(ANSWER, &[OBS], "Got 'I pick 7'. Try again.")?;
    // The same weights under a hybrid-thinking template, as a Qwen3-4B checkpoint has.
    let dir = tempfile::tempdir()?;
    taught.save(dir.path())?;
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        serde_json::json!({"chat_template": HYBRID, "eos_token": "<|im_end|>"}).to_string(),
    )?;
    let mut policy = spade_policy::Policy::load(dir.path(), spade_policy::default_device())?;
    let opts = PlayOptions {
        max_turns: 2,
        max_new_tokens: 24,
        temperature: 0.1,
        prompts: spade::prompt::PromptStyle::Reference,
        ..PlayOptions::default()
    };
    let header = "<|im_start|>assistant\n";
    for (thinking, block) in [(false, "<think>\n\n</think>\n\n"), (true, "")] {
        policy.set_thinking(thinking)?;
        let eps = play(&policy, &pool, &opts)?;
        let tok = policy.require_tokenizer()?;
        for e in &eps {
            // Every stretch of context before a turn the agent wrote ends with the header and,
            // thinking off, the empty block.
            let mut i = 0;
            let mut openings = 0;
            while i < e.ids.len() {
                let start = i;
                while i < e.ids.len() && !e.loss_mask[i] {
                    i += 1;
                }
                if i < e.ids.len() && i > start {
                    let context = tok.decode(&e.ids[start..i], false)?;
                    assert!(
                        context.ends_with(&format!("{header}{block}")),
                        "thinking {thinking}: {context:?}"
                    );
                    openings += 1;
                }
                while i < e.ids.len() && e.loss_mask[i] {
                    i += 1;
                }
            }
            assert!(openings >= 1, "{:?}", e.transcript);
        }
    }
    Ok(())
}
