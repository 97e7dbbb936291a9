//! Tool use on the native tool template against a real seed environment in the sandbox, with
//! a scripted rollout (the replies are fixed, so the layout and the environment's handling of
//! several calls a turn are what is tested, not a model).

use super::*;
use spade_policy::engine::{Finished, Request, Rollout, SeqId};
use spade_policy::preset::{self, BUILTIN_TEXT};
use std::time::Duration;

/// Answers every turn with the next scripted reply, and keeps each turn's context.
struct Scripted<'a> {
    tok: &'a Tokenizer,
    end: i64,
    replies: VecDeque<String>,
    pending: Vec<(SeqId, Request)>,
    contexts: Vec<Vec<i64>>,
    opened: u64,
}

impl Rollout for Scripted<'_> {
    fn open(&mut self) -> SeqId {
        self.opened += 1;
        SeqId::from_raw(self.opened)
    }
    fn submit(&mut self, seq: SeqId, req: Request) -> spade_policy::Result<()> {
        self.pending.push((seq, req));
        Ok(())
    }
    fn step(&mut self) -> spade_policy::Result<Vec<Finished>> {
        let mut out = vec![];
        for (seq, req) in std::mem::take(&mut self.pending) {
            self.contexts.push(req.tokens);
            let reply = self.replies.pop_front().unwrap_or_default();
            let mut tokens = self.tok.encode(&reply)?;
            tokens.push(self.end);
            out.push(Finished {
                seq,
                result: Ok(Completion {
                    logprobs: vec![0.0; tokens.len()],
                    tokens,
                    text: Some(reply),
                    finish: Finish::StopToken,
                }),
            });
        }
        Ok(out)
    }
    fn close(&mut self, _: SeqId) {}
    fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }
}

fn pool() -> Pool {
    let mut cfg = spade_sandbox::PoolConfig::new(spade_sandbox::RunnerConfig::new(
        spade_sandbox::default_runner_path(),
    ));
    cfg.max_runners = 1;
    cfg.warm = 0;
    Pool::new(cfg)
}

fn seed_env(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../envs/seed/tooluse")
        .join(name);
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Plays `code` from seed 0 with the scripted `replies` under `template`: the episode and the
/// context of every turn.
fn play(
    code: &str,
    replies: &[String],
    template: ToolTemplate,
) -> Result<(Episode, Vec<String>), Box<dyn std::error::Error>> {
    let policy = preset::tiny(&[BUILTIN_TEXT], 3, |_| {})?;
    let tok = policy.require_tokenizer()?;
    let end = tok.token_id(IM_END).ok_or("no end token")?;
    let opts = PlayOptions {
        max_turns: 10,
        max_context: 8192,
        max_episode_tokens: 8192,
        tool_template: template,
        ..PlayOptions::default()
    };
    let turns = Turns {
        tok,
        end,
        opts: &opts,
        params: SamplingParams::default(),
        suffix: "",
    };
    let pool = pool();
    let jobs = [PlayJob {
        first_index: 0,
        code,
        kind: EnvKind::ToolUse,
        hint: Some("Look the account up first."),
        seeds: vec![0],
        sample_seed: 1,
    }];
    let mut r = Scripted {
        tok,
        end,
        replies: replies.iter().cloned().collect(),
        pending: vec![],
        contexts: vec![],
        opened: 0,
    };
    let mut eps = play_concurrently(&mut r, &pool, &turns, &jobs, 1)?;
    let contexts = r
        .contexts
        .iter()
        .map(|c| tok.decode(c, false))
        .collect::<Result<Vec<_>, _>>()?;
    let ep = eps.pop().and_then(|mut e| e.pop()).ok_or("no episode")?;
    Ok((ep, contexts))
}

/// The environment's own solution from seed 0, one action a turn.
fn solution_actions(code: &str) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let pool = pool();
    let mut env = pool.load(code, Some(EnvKind::ToolUse), None)?;
    let t = env.play_solution(0, Duration::from_secs(60))?;
    Ok(t.turns.into_iter().map(|t| t.action).collect())
}

/// The reference's layout: the schemas in the system turn the template writes for `tools`,
/// the task alone (with its hint) as the user's message, the first two solution calls in one
/// reply, both executed and shown as two `<tool_response>` blocks of one user turn; the episode
/// is won in one turn fewer than the solution's. Inline (the control) shows the schemas in the
/// observation and runs only the last call of that reply.
#[test]
fn the_native_template_runs_every_call_of_a_reply_and_returns_tool_turns()
-> Result<(), Box<dyn std::error::Error>> {
    let code = seed_env("bank_transfers.py");
    let actions = solution_actions(&code)?;
    assert!(actions.len() >= 3, "{actions:?}");
    assert!(actions[0].starts_with("<tool_call>") && actions[1].starts_with("<tool_call>"));
    let mut script = vec![format!("{}\n{}", actions[0], actions[1])];
    script.extend(actions[2..].iter().cloned());

    let (ep, contexts) = play(&code, &script, ToolTemplate::Native)?;
    assert!(ep.failure.is_none() && ep.error.is_none(), "{ep:?}");
    assert!(ep.won, "{:#?}", ep.transcript);
    assert_eq!(ep.turns as usize, actions.len() - 1);
    assert_eq!(ep.format_errors, 0);
    let first = &contexts[0];
    assert!(
        first.starts_with("<|im_start|>system\n# Tools\n\nYou may call one or more functions"),
        "{first}"
    );
    assert!(
        first.contains("</tool_call><|im_end|>\n<|im_start|>user\n"),
        "{first}"
    );
    assert!(
        first.contains("Instruction 1 of")
            && first.contains(
                "\n\nHINT: Look the account up first.<|im_end|>\n<|im_start|>assistant\n"
            ),
        "{first}"
    );
    assert!(
        !first.contains("Tools (OpenAI function schemas)"),
        "{first}"
    );
    // The second turn's context: the reply, then one user turn with both results.
    let second = &contexts[1];
    let after = second.strip_prefix(first.as_str()).ok_or("not a prefix")?;
    let frame = after
        .split_once("<|im_end|>")
        .map(|(_, f)| f)
        .ok_or("no end of the reply")?;
    assert!(
        frame.starts_with("\n<|im_start|>user\n<tool_response>\n"),
        "{frame}"
    );
    assert_eq!(frame.matches("<tool_response>").count(), 2, "{frame}");
    assert!(
        frame.ends_with("</tool_response><|im_end|>\n<|im_start|>assistant\n"),
        "{frame}"
    );

    let ran = |ep: &Episode, tool: &str| {
        ep.transcript
            .get(2)
            .is_some_and(|t| t.content.contains(&format!("Tool result ({tool})")))
    };
    let name = |action: &str| -> Option<String> {
        let body = action
            .strip_prefix("<tool_call>")?
            .strip_suffix("</tool_call>")?;
        let v: serde_json::Value = serde_json::from_str(body).ok()?;
        Some(v.get("name")?.as_str()?.to_string())
    };
    let (a, b) = (
        name(&actions[0]).ok_or("a call")?,
        name(&actions[1]).ok_or("a call")?,
    );
    assert!(ran(&ep, &a) && ran(&ep, &b), "{:#?}", ep.transcript);

    let (inline, contexts) = play(&code, &script, ToolTemplate::Inline)?;
    assert!(
        !ran(&inline, &a) && ran(&inline, &b),
        "{:#?}",
        inline.transcript
    );
    assert!(contexts[0].contains("Tools (OpenAI function schemas)"));
    assert!(!contexts[1].contains("<tool_response>"));
    Ok(())
}

/// The attack: an environment whose reset hands the native template 30,000 characters of
/// "schemas" in its info dict (the runner checks observations, not info dicts) while its
/// observation stays short. The episode plays inline on the checked observation instead.
#[test]
fn schemas_past_the_observation_limit_never_reach_the_prompt()
-> Result<(), Box<dyn std::error::Error>> {
    let base = seed_env("bank_transfers.py");
    // The seed's class, renamed so the file keeps one environment class, under a subclass
    // whose reset pads its info.
    let class = base
        .lines()
        .find_map(|l| l.strip_prefix("class ").and_then(|r| r.split('(').next()))
        .ok_or("no class")?
        .to_string();
    let code = format!(
        "{}\n\nclass FloodEnv(Padded):\n    def reset(self, seed=None):\n        \
         obs, info = super().reset(seed)\n        info['tools'] = ['x' * 30000]\n        \
         return obs, info\n",
        base.replace(&format!("class {class}("), "class Padded(")
    );
    let (ep, contexts) = play(
        &code,
        &["<answer>done</answer>".to_string()],
        ToolTemplate::Native,
    )?;
    assert!(ep.failure.is_none(), "{:?}", ep.failure);
    assert!(
        !contexts[0].contains("xxxxxxxxxx"),
        "the padding reached the prompt"
    );
    assert!(
        contexts[0].contains("Tools (OpenAI function schemas)"),
        "{}",
        contexts[0]
    );
    Ok(())
}

/// The worked example of the reference-style tool-use prompt (`ToolUseBaseEnv`) passes the
/// sandbox's validation, and its solution, played through the native template with two calls
/// in the first reply, wins: the task alone is the user's message, the schemas in the system
/// turn.
#[test]
fn the_reference_prompts_example_is_valid_and_plays_on_the_native_template()
-> Result<(), Box<dyn std::error::Error>> {
    let example = spade::prompt::reference_tools::EXAMPLE;
    let code = example
        .split_once("```python\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(code, _)| code)
        .ok_or("no code in the example")?;
    let report =
        spade_sandbox::validate(&pool(), code, &spade_sandbox::ValidationConfig::default());
    assert!(report.accepted, "{:#?}", report.rejection);
    assert_eq!(report.kind, Some(EnvKind::ToolUse));
    let actions = solution_actions(code)?;
    assert_eq!(actions.len(), 6, "five calls and the answer: {actions:?}");
    let mut script = vec![format!("{}\n{}", actions[0], actions[1])];
    script.extend(actions[2..].iter().cloned());
    let (ep, contexts) = play(code, &script, ToolTemplate::Native)?;
    assert!(ep.won && ep.error.is_none(), "{:#?}", ep.transcript);
    assert_eq!(ep.turns, 5);
    assert!(
        contexts[0].contains("<|im_start|>user\nOpen the reports folder.\n\nHINT:"),
        "{}",
        contexts[0]
    );
    assert!(!contexts[0].contains("Tools (OpenAI function schemas)"));
    assert_eq!(contexts[1].matches("<tool_response>").count(), 2);
    Ok(())
}
