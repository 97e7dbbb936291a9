//! The texts the one policy reads in its three roles (spec, "One training step", steps 2, 4
//! and 5, and the environment contracts): the designer prompt (role system prompt + skill
//! name and description + one corpus document + memory examples + the output contract), the
//! hint prompt, the agent's prompts and turn messages, and the self-judge prompt.
//!
//! Each prompt is a [`ChatPrompt`] (system + user text); the worker renders it with the
//! policy's chat template. Two styles ([`PromptStyle`], `model.prompts`): the reference
//! implementation's structure ([`reference`], the default) and the compact prompts below,
//! written after the spec, which the tiny model is warm-started on (changing them means
//! warm-starting again). The texts are ours either way.

use crate::EnvKind;
use crate::memory::{Examples, MemoryRecord};
use crate::report::{Turn, TurnRole};
use crate::skills::Skill;

/// Which prompts the roles read (`model.prompts`; the type lives with the configuration).
pub use crate::config::PromptStyle;

pub mod reference;
pub mod reference_tools;

impl PromptStyle {
    /// Whether environments of `kind` get the reference's prompts.
    fn reference_for(self, kind: EnvKind) -> bool {
        self == PromptStyle::Reference && kind == EnvKind::Game
    }

    /// The designer prompt in this style. `variant` draws what the reference draws per
    /// attempt (the tool-use domain and task variant); the other prompts ignore it.
    pub fn designer_prompt(
        self,
        skill: &Skill,
        document: Option<&str>,
        examples: &Examples<'_>,
        max_turns: u32,
        variant: u64,
    ) -> ChatPrompt {
        match (self, skill.kind) {
            (PromptStyle::Reference, EnvKind::Game) => {
                reference::designer_prompt(skill, document, examples, max_turns)
            }
            (PromptStyle::Reference, EnvKind::ToolUse) => {
                reference_tools::designer_prompt(skill, document, examples, max_turns, variant)
            }
            (PromptStyle::Compact, _) => designer_prompt(skill, document, examples, max_turns),
        }
    }

    /// The hint prompt in this style.
    pub fn hint_prompt(self, kind: EnvKind, code: &str) -> ChatPrompt {
        match (self, kind) {
            (PromptStyle::Reference, EnvKind::Game) => reference::hint_prompt(code),
            (PromptStyle::Reference, EnvKind::ToolUse) => reference_tools::hint_prompt(code),
            (PromptStyle::Compact, _) => hint_prompt(code),
        }
    }

    /// The agent's system prompt (none in the reference's games) and first message.
    pub fn agent_opening(
        self,
        kind: EnvKind,
        observation: &str,
        hint: Option<&str>,
    ) -> (Option<&'static str>, String) {
        if self.reference_for(kind) {
            (None, reference::agent_first_message(observation, hint))
        } else {
            (
                Some(agent_system(kind)),
                agent_first_message(observation, hint),
            )
        }
    }
}

/// A system prompt and the first user message.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChatPrompt {
    pub system: String,
    pub user: String,
}

/// The designer's role.
pub const DESIGNER_SYSTEM: &str = "You are an environment designer. You write complete, \
executable Python environments that train a reasoning agent: tasks that are solvable, \
verifiable and just beyond what the agent can do without help. Reply with the code in one \
```python block and nothing after it.";

/// The hint writer's role (spec 4: strategy, partial solution, key observations).
pub const HINT_SYSTEM: &str = "You read the code of an environment and write a privileged \
hint for a player who cannot see the code: the strategy, a partial solution and the key \
observations. Be concrete and short. Do not play.";

/// The self-judge's role (spec, "Validation").
pub const JUDGE_SYSTEM: &str = "You review an environment for a reasoning agent: its code \
and one played trajectory. Answer \\boxed{yes} if it works (observations consistent with the \
code, rewards right, winnable, terminates) and \\boxed{no} otherwise.";

/// The output contract for games (spec, "Environment contract (games)").
pub fn game_contract(max_turns: u32) -> String {
    format!(
        "Output contract: one Python class whose name ends in `Env`, with\n\
         - `__init__(self, max_turns={max_turns}, **kwargs)`\n\
         - `reset(self, seed=None) -> (observation: str, info: dict)`: a new task from the seed\n\
         - `step(self, action: str) -> (observation: str, reward: float, terminated: bool, \
         truncated: bool, info: dict)`: the action is the player's text; read the last \
         \\boxed{{...}} in it\n\
         - `solution(self) -> str`: the exact action that solves the task in the current \
         state, as \\boxed{{...}}; stepping it every turn must win\n\
         - `close(self)`\n\
         A win gives reward 1.0 and terminates; rewards stay in [-10, 10]. Out of turns: \
         truncated=True, reward 0. The same seed and actions give the same observations. \
         The first observation states the task but never its answer. Standard modules (math, \
         random, re, itertools, collections) need no import; numpy and math_verify are \
         available; no files, network or processes."
    )
}

/// The output contract for tool use (spec, "Environment contract (tool use)", and the
/// `ToolUseEnv` base class in envs/python/spade_tooluse.py).
pub fn tool_use_contract(max_turns: u32) -> String {
    format!(
        "Output contract: one class whose name ends in `Env` that subclasses `ToolUseEnv` \
         (provided; do not import it), with\n\
         - `SCENARIO`: one or two sentences shown first\n\
         - `TOOLS`: OpenAI function-calling schemas {{\"type\": \"function\", \"function\": \
         {{\"name\", \"description\", \"parameters\"}}}}, each backed by a method \
         `tool_<name>(self, **arguments)` that reads and changes `self._state` and returns a \
         JSON-serialisable result (raise ValueError for a failed call)\n\
         - `setup(self, rng)`: build `self._state` from `rng` (random.Random) only and return \
         3 to 5 instructions, revealed one after another, each a dict with \"text\", \
         \"check\" (no-argument callable: True when complete; False right after setup) and \
         \"next_call\" (no-argument callable returning the next correct (tool_name, \
         arguments))\n\
         The player calls <tool_call>{{\"name\": ..., \"arguments\": {{...}}}}</tool_call> and \
         ends with <answer>done</answer>; a format error costs -0.1; reward 1.0 only when \
         every instruction is complete. At most {max_turns} turns."
    )
}

/// The output contract for `kind`.
pub fn contract(kind: EnvKind, max_turns: u32) -> String {
    match kind {
        EnvKind::Game => game_contract(max_turns),
        EnvKind::ToolUse => tool_use_contract(max_turns),
    }
}

fn example_block(out: &mut String, heading: &str, r: &MemoryRecord) {
    out.push_str(&format!(
        "\n{heading} ({}, agent win rate {:.2}, regret {:.2}):\n```python\n{}\n```\n",
        r.skill,
        r.win_rate,
        r.regret,
        r.code.trim_end()
    ));
}

/// The designer prompt for one attempt (spec 2). `document` is the corpus document, already
/// truncated (`corpus::truncate_words`), or `None` for the no-corpus ablation; `examples` are
/// from `Memory::examples` (empty for the no-memory ablation).
pub fn designer_prompt(
    skill: &Skill,
    document: Option<&str>,
    examples: &Examples<'_>,
    max_turns: u32,
) -> ChatPrompt {
    let kind_name = match skill.kind {
        EnvKind::Game => "text game",
        EnvKind::ToolUse => "tool-use task",
    };
    let mut user = format!(
        "Skill: {}\n{}\n\nWrite a new {kind_name} that exercises this skill.\n",
        skill.name, skill.description
    );
    if let Some(doc) = document {
        user.push_str(
            "\nDraw the theme, objects or rules of the task from this document (use its ideas; \
             do not quote it at length):\n<document>\n",
        );
        user.push_str(doc.trim());
        user.push_str("\n</document>\n");
    }
    for r in &examples.positives {
        example_block(
            &mut user,
            "A good environment from earlier: hard for the agent but learnable. Make something \
             new of similar difficulty",
            r,
        );
    }
    for r in &examples.negatives {
        let why = if r.win_rate > 0.5 {
            "too easy"
        } else {
            "too hard or broken"
        };
        example_block(
            &mut user,
            &format!("An environment to avoid: {why} for the agent"),
            r,
        );
    }
    user.push('\n');
    user.push_str(&contract(skill.kind, max_turns));
    ChatPrompt {
        system: DESIGNER_SYSTEM.to_string(),
        user,
    }
}

/// The hint prompt (spec 4): the accepted code, for a separate, untrained call.
pub fn hint_prompt(code: &str) -> ChatPrompt {
    ChatPrompt {
        system: HINT_SYSTEM.to_string(),
        user: format!(
            "Environment code:\n```python\n{}\n```\nWrite the hint.",
            code.trim_end()
        ),
    }
}

/// The agent's system prompt for `kind`.
pub fn agent_system(kind: EnvKind) -> &'static str {
    match kind {
        EnvKind::Game => {
            "You are playing a text game turn by turn. Think, then give your action; the last \
             \\boxed{...} expression in your reply is your action."
        }
        EnvKind::ToolUse => {
            "You are an assistant with tools. Each turn, call one tool as \
             <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>; when every \
             instruction is complete, reply <answer>done</answer>."
        }
    }
}

/// The agent's first message: the first observation, with the hint for hint plays.
pub fn agent_first_message(observation: &str, hint: Option<&str>) -> String {
    match hint {
        Some(h) => format!("{observation}\n\nHint: {}", h.trim()),
        None => observation.to_string(),
    }
}

/// The agent's opening conversation.
pub fn agent_prompt(kind: EnvKind, observation: &str, hint: Option<&str>) -> ChatPrompt {
    ChatPrompt {
        system: agent_system(kind).to_string(),
        user: agent_first_message(observation, hint),
    }
}

/// The message after a turn the agent got wrong in form (the turn earns
/// `parse::FORMAT_PENALTY`): what was wrong, then the unchanged observation.
pub fn format_error_message(error: &crate::parse::FormatError, observation: &str) -> String {
    format!("Format error: {error}. {observation}")
}

/// The self-judge prompt: the code and one played trajectory.
pub fn judge_prompt(code: &str, trajectory: &[Turn]) -> ChatPrompt {
    let mut user = format!(
        "Environment code:\n```python\n{}\n```\n\nOne play:\n",
        code.trim_end()
    );
    for t in trajectory {
        let who = match t.role {
            TurnRole::System => continue,
            TurnRole::User => "Environment",
            TurnRole::Assistant => "Agent",
        };
        user.push_str(&format!("[{who}] {}\n", t.content.trim_end()));
    }
    user.push_str("\nDoes this environment work? Answer \\boxed{yes} or \\boxed{no}.");
    ChatPrompt {
        system: JUDGE_SYSTEM.to_string(),
        user,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::skills;

    /// A memory record of skill Optimization whose code is `class {id}Env: pass`.
    pub(crate) fn rec(id: &str, win_rate: f64) -> MemoryRecord {
        MemoryRecord {
            env_id: id.into(),
            step: 1,
            skill: "Optimization".into(),
            kind: EnvKind::Game,
            code: format!("class {id}Env:\n    pass\n"),
            win_rate,
            regret: 0.3,
        }
    }

    #[test]
    fn the_designer_prompt_has_every_part_in_order() {
        let skill = skills::find("optimization").expect("a skill");
        let (good, bad) = (rec("Good", 0.5), rec("Easy", 0.95));
        let ex = Examples {
            positives: vec![&good],
            negatives: vec![&bad],
        };
        let p = designer_prompt(skill, Some("The knapsack document."), &ex, 25);
        assert_eq!(p.system, DESIGNER_SYSTEM);
        let at = |s: &str| p.user.find(s).unwrap_or_else(|| panic!("missing {s:?}"));
        assert!(at("Skill: Optimization") < at(skill.description));
        assert!(at(skill.description) < at("The knapsack document."));
        assert!(at("The knapsack document.") < at("class GoodEnv"));
        assert!(at("class GoodEnv") < at("too easy"));
        assert!(at("class EasyEnv") < at("Output contract"));
        assert!(p.user.contains("max_turns=25"));
        let bare = designer_prompt(skill, None, &Examples::default(), 6);
        assert!(!bare.user.contains("<document>") && !bare.user.contains("```python"));
        let tool = skills::find("error_recovery").expect("a skill");
        assert!(
            designer_prompt(tool, None, &ex, 25)
                .user
                .contains("ToolUseEnv")
        );
    }

    #[test]
    fn hint_agent_and_judge_prompts() {
        assert!(
            hint_prompt("class AEnv: pass")
                .user
                .contains("class AEnv: pass")
        );
        let a = agent_prompt(EnvKind::Game, "Guess 1-10.", Some("binary search"));
        assert_eq!(a.user, "Guess 1-10.\n\nHint: binary search");
        assert!(a.system.contains("\\boxed"));
        assert_eq!(agent_first_message("obs", None), "obs");
        assert!(agent_system(EnvKind::ToolUse).contains("<answer>done</answer>"));
        let turns = [
            Turn {
                role: TurnRole::User,
                content: "obs".into(),
            },
            Turn {
                role: TurnRole::Assistant,
                content: "\\boxed{3}".into(),
            },
        ];
        let j = judge_prompt("code", &turns);
        assert!(j.user.contains("[Environment] obs\n[Agent] \\boxed{3}"));
        let m = format_error_message(&crate::parse::FormatError::NoBoxed, "Guess again.");
        assert!(m.starts_with("Format error: no \\boxed{...} answer found"));
    }
}
