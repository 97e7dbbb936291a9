//! The prompts in the reference implementation's structure (`model.prompts = "reference"`),
//! in our own words: the designer gets the interactive multi-turn game specification (a
//! corpus document in `<REFERENCE_DOCUMENT>` tags first when there is one; the standard
//! library with `math` and `random` only; partial rewards in [0, 1]; a self-verification
//! checklist), then its memory examples in `<REFERENCE_ENVIRONMENTS>` as `### Example i (skill,
//! win_rate, regret)` blocks and one line per negative; the agent reads one user message that
//! frames the game, carries the observation (with `HINT:` for hint plays) and asks for the
//! action in `\boxed{}`; the hint writer is told to write 1 to 3 sentences that never give the
//! answer away; the judge checks five criteria over a trajectory cut to its first turns.
//!
//! The reference's numbers and structure (`spade/core/prompts/corpus_template.py`,
//! `template.py`, `env_memory.py`, `hint_generator.py`, `types.py`), not its text. Two rules
//! stay ours because validation checks them: `solution()` answers for the current state (the
//! sandbox steps it every turn and expects a win), and the first observation never holds the
//! answer. Tool-use environments have their own prompts in this style
//! (`super::reference_tools`).

use super::ChatPrompt;
use crate::memory::{Examples, MemoryRecord};
use crate::skills::Skill;

/// The designer's role for games.
pub const DESIGNER_SYSTEM: &str = "You are a Python programmer and game designer. You build \
interactive, multi-turn text games in which a player makes a sequence of decisions and every \
action changes the state of the world.";

/// What makes a game interactive, how the agent acts, and the code's rules.
fn interactive_spec(max_turns: u32) -> String {
    format!(
        r#"The game must be interactive and take several turns: not a quiz that grades one answer.

How the player acts (the training loop does exactly this):
- Each turn the player replies with one action inside \boxed{{...}}, e.g. \boxed{{open the left door}} or \boxed{{weigh coins 1 2 3}}. step() receives the whole reply; take the command from the last \boxed{{...}} (and the raw text when there is none) and treat it as a move that changes the game, not as a final answer to check once.

What makes it multi-turn:
- One action cannot reach the goal: the player must act in sequence, first uncovering what is hidden and then using it, or moving the state step by step toward a target.
- Part of the state is hidden at reset(); actions reveal it, so the observations change with what the player does.
- Progress earns partial reward below 1.0; reaching the goal gives 1.0 and terminated=True.
- Every observation shows the state after the last action and reminds the player to answer with \boxed{{<action>}}.

Avoid:
- taking one \boxed{{answer}}, grading it and ending the episode;
- stating the whole problem at reset() and checking one submitted value;
- the same static task every turn with only "wrong, try again" as feedback.

Interface (one class whose name ends in Env):
- __init__(self, max_turns={max_turns}, **kwargs): set every attribute, then call reset().
- reset(self, seed=None) -> (observation, info): draw hidden state and a goal that needs several actions from random.Random(seed); the observation gives the situation and the available actions, never the solution; info is a dict.
- step(self, action) -> (observation, reward, terminated, truncated, info): parse the command, update the state, return a new observation; reward in [0, 1]; truncated=True with reward 0.0 when the turn limit is reached without the goal.
- solution(self) -> str: the best next action for the current state, as \boxed{{...}}; taking it every turn from reset() must reach the goal.
- close(self).

Rewards: the total stays in [0, 1]; partial progress below 1.0, the goal exactly 1.0.

Robustness (the failures that keep a game from loading):
- In f-strings and .format(), a brace starts an expression: write a literal brace twice, so \boxed{{<action>}} inside an f-string is written \boxed{{{{<action>}}}}.
- Use only the standard library, with math and random; import what you use; no numpy, files, network or processes.
- Every path through step() returns the 5-tuple (str, float, bool, bool, dict).
- An unknown or garbled command gets a helpful observation and reward 0.0, never an exception.
- Never divide by something that can be zero; do not name an attribute self.solution.

Before you answer, check your game yourself:
- Follow two different action sequences from reset(seed=0): do the observations differ? If not, it is not interactive.
- Does \boxed{{}} carry a command that changes the state rather than a final answer?
- Is progress rewarded in [0, 1], and does solution() win when played every turn?"#
    )
}

/// The class name of a record's code (`class NameEnv`), or its id when none is found.
fn class_name(r: &MemoryRecord) -> String {
    r.code
        .lines()
        .find_map(|l| {
            let rest = l.trim_start().strip_prefix("class ")?;
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .unwrap_or_else(|| r.env_id.clone())
}

/// The memory block after the specification: positives as numbered examples with their
/// scores, negatives one line each.
fn memory_block(examples: &Examples<'_>) -> String {
    memory_block_of(
        examples,
        "These environments trained the player well: hard, but within reach. Take their \
         structure and scale as a guide, and write a different game.",
        |_| true,
    )
}

/// A memory block with its own introduction, showing only the positives whose code `shown`
/// accepts (an example on another contract would teach that contract).
pub(crate) fn memory_block_of(
    examples: &Examples<'_>,
    intro: &str,
    shown: impl Fn(&str) -> bool,
) -> String {
    let mut out = String::new();
    let positives: Vec<_> = examples
        .positives
        .iter()
        .filter(|r| shown(&r.code))
        .collect();
    if !positives.is_empty() {
        out.push_str("\n\n<REFERENCE_ENVIRONMENTS>\n");
        out.push_str(intro);
        out.push('\n');
        for (i, r) in positives.iter().enumerate() {
            out.push_str(&format!(
                "\n### Example {} (skill: {}, win_rate: {:.2}, regret: {:.2})\n```python\n{}\n```\n",
                i + 1,
                r.skill,
                r.win_rate,
                r.regret,
                r.code.trim_end()
            ));
        }
        out.push_str("</REFERENCE_ENVIRONMENTS>\n");
    }
    if !examples.negatives.is_empty() {
        out.push_str("\nDo not write environments like these:\n");
        for r in &examples.negatives {
            let why = if r.win_rate > 0.9 {
                "too easy"
            } else {
                "too hard"
            };
            out.push_str(&format!(
                "- {why} (win_rate={:.2}): class {}\n",
                r.win_rate,
                class_name(r)
            ));
        }
    }
    out
}

/// The designer prompt for a game (see the module doc for its parts and their order).
pub fn designer_prompt(
    skill: &Skill,
    document: Option<&str>,
    examples: &Examples<'_>,
    max_turns: u32,
) -> ChatPrompt {
    let mut user = String::new();
    if let Some(doc) = document {
        user.push_str(
            "Below is a reference document. Build an interactive, multi-turn Python game \
             around a concept or technique it describes: the player should have to use that \
             idea, step by step. The game's text stands on its own and never mentions the \
             document.\n\n<REFERENCE_DOCUMENT>\n",
        );
        user.push_str(doc.trim());
        user.push_str("\n</REFERENCE_DOCUMENT>\n\n");
    } else {
        user.push_str("Build an interactive, multi-turn Python game.\n\n");
    }
    user.push_str(&interactive_spec(max_turns));
    user.push_str(&format!(
        "\n\nTarget skill: {} ({}). The goal should take 3 or more actions.\n\
         Write the complete program in one ```python block.",
        skill.name, skill.description
    ));
    user.push_str(&memory_block(examples));
    ChatPrompt {
        system: DESIGNER_SYSTEM.to_string(),
        user,
    }
}

/// The hint writer's role for games.
pub const HINT_SYSTEM: &str = "You read the source code of a text game and write a hint for \
the player, who sees only the game's observations and answers with \\boxed{...}; your hint is \
added to its first observation.\n\n\
Read reset() and step() to see what the player is asked and how the right answer or move is \
found, and what form of answer the game expects.\n\n\
Write 1 to 3 sentences, under 100 words: the key idea or strategy for this particular game and \
the form of the answer (for example \"a single integer\" or \"a move such as \\boxed{go north}\"). \
Speak of what the player can see, not of the code's variables. Be specific to this game; no \
general advice. Never give the answer itself.\n\n\
Reply with the hint text only.";

/// The hint prompt: the whole accepted code.
pub fn hint_prompt(code: &str) -> ChatPrompt {
    ChatPrompt {
        system: HINT_SYSTEM.to_string(),
        user: format!("Environment code:\n```python\n{}\n```", code.trim_end()),
    }
}

/// The agent's one opening message for a game: the frame, the observation (and the hint, as
/// `HINT:` after it), and where the action goes. No system prompt.
pub fn agent_first_message(observation: &str, hint: Option<&str>) -> String {
    let observation = match hint {
        Some(h) => format!("{observation}\n\nHINT: {}", h.trim()),
        None => observation.to_string(),
    };
    format!(
        "You are playing a text game; take valid actions to win.\nObservation: {observation}\n\
         Think it through step by step, then put your action inside \\boxed{{}}."
    )
}

/// The tool-use agent's one user message on a native tool template: the task as the
/// environment states it (the template carries the tools), the hint after it
/// (`types.py`'s `hint_injection_template`).
pub fn tool_use_first_message(task: &str, hint: Option<&str>) -> String {
    match hint {
        Some(h) => format!("{task}\n\nHINT: {}", h.trim()),
        None => task.to_string(),
    }
}

/// The judge's role.
pub const JUDGE_SYSTEM: &str = "You review generated text games: their code and a played \
trajectory. You decide whether the game works as intended.";

/// One turn of the judged play: the action, its reward and the next observation.
#[derive(Debug, Clone, Copy)]
pub struct JudgedTurn<'a> {
    pub action: &'a str,
    pub reward: f64,
    pub observation: &'a str,
}

/// Turns of the play the judge reads; the rest are counted.
pub const JUDGE_TURNS: usize = 5;

fn cut(text: &str, chars: usize) -> String {
    if text.chars().count() > chars {
        let head: String = text.chars().take(chars).collect();
        format!("{head}...")
    } else {
        text.to_string()
    }
}

/// The trajectory as the judge reads it: the first observation (500 characters at most), the
/// first [`JUDGE_TURNS`] turns (actions and observations 300 characters at most, each reward),
/// then a summary of every turn's rewards.
pub fn judge_trajectory(first: &str, turns: &[JudgedTurn<'_>]) -> String {
    let mut out = format!("Initial observation (turn 0):\n{}\n", cut(first, 500));
    for (i, t) in turns.iter().take(JUDGE_TURNS).enumerate() {
        out.push_str(&format!(
            "\nTurn {}:\n- Action: {}\n- Reward: {}\n- Next observation: {}\n",
            i + 1,
            cut(t.action, 300),
            t.reward,
            cut(t.observation, 300)
        ));
    }
    if turns.len() > JUDGE_TURNS {
        out.push_str(&format!(
            "\n... ({} more turns not shown)\n",
            turns.len() - JUDGE_TURNS
        ));
    }
    let total: f64 = turns.iter().map(|t| t.reward).sum();
    let last = turns
        .last()
        .map_or_else(|| "none".to_string(), |t| t.reward.to_string());
    out.push_str(&format!(
        "\nSummary: {} turns, total reward {total}, final reward {last}.",
        turns.len()
    ));
    out
}

/// The judge prompt: the code, the trajectory ([`judge_trajectory`]) and five criteria.
pub fn judge_prompt(code: &str, trajectory: &str) -> ChatPrompt {
    ChatPrompt {
        system: JUDGE_SYSTEM.to_string(),
        user: format!(
            "## Game code\n```python\n{}\n```\n\n## A played trajectory\n{trajectory}\n\n\
             ## Your task\nCheck the trajectory against the code:\n\
             1. Observations: do they follow from the game's state and logic?\n\
             2. Rewards: are they right for the actions taken (success rewarded)?\n\
             3. Winnable: can a player actually reach the goal?\n\
             4. Bugs: wrong conditions, unreachable success, crashes waiting to happen?\n\
             5. Termination: does the game end on success and at the turn limit?\n\
             Reason about each point, then answer \\boxed{{yes}} if the game works and the \
             trajectory makes sense, or \\boxed{{no}} if it does not.",
            code.trim_end()
        ),
    }
}

/// The tool-use auditor's role. The reference's tool-use launchers run an environment
/// validator over the code alone (`env_validator.py`, `--spade-use-env-validator`): it rejects
/// what no sequence of tool calls can solve and keeps what is merely hard.
pub const TOOL_AUDIT_SYSTEM: &str = "You audit generated Python tool-use environments for one \
thing: whether they can be solved at all. Reject an environment only when no sequence of tool \
calls can satisfy its checks; keep hard ones, since difficulty is what the curriculum needs.";

/// The tool-use audit prompt: the code, then the steps of the audit and the verdict format.
pub fn tool_use_audit_prompt(code: &str) -> ChatPrompt {
    ChatPrompt {
        system: TOOL_AUDIT_SYSTEM.to_string(),
        user: format!(
            "## Environment code\n```python\n{}\n```\n\n\
             ## Audit, check by check\n\
             1. List every instruction's check and the exact state it needs (a key, a value, a \
             type).\n\
             2. For each needed value, find the tool method that writes it. A value drawn at \
             random is fine when some tool returns it to the agent; it is not when no tool ever \
             shows it, or when a tool returns a different value for the same input each time.\n\
             3. Impossible, so reject: a needed value no tool ever writes; two checks that \
             contradict each other; a check that can never be true for the types the tools \
             store (a string looked up in a list of dicts, 5 against \"5\"); a value written \
             only by a tool that always fails; an exact value neither the instructions state \
             nor any tool reveals; most checks already true on the state `setup` builds.\n\
             4. Hard is not impossible, so keep: values the agent must look up first, long \
             strict sequences, distracting tools, instructions that must be read carefully.\n\
             5. Ignore wording, formatting and harmless edge cases.\n\n\
             Answer \\boxed{{no}} if any check cannot be satisfied by the tests above, else \
             \\boxed{{yes}}.",
            code.trim_end()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EnvKind;
    use crate::prompt::PromptStyle;
    use crate::prompt::tests::rec;
    use crate::skills;

    #[test]
    fn the_designer_prompt_has_the_references_parts_in_its_order() {
        let skill = skills::find("optimization").expect("a skill");
        let (a, b) = (rec("Vault", 0.5), rec("Maze", 0.4));
        let (easy, hard) = (rec("EasySum", 0.95), rec("Hard", 0.02));
        let ex = Examples {
            positives: vec![&a, &b],
            negatives: vec![&easy, &hard],
        };
        let p =
            PromptStyle::Reference.designer_prompt(skill, Some("The knapsack text."), &ex, 25, 0);
        assert_eq!(p.system, DESIGNER_SYSTEM);
        let at = |s: &str| p.user.find(s).unwrap_or_else(|| panic!("missing {s:?}"));
        // Document first, in its tags; then the specification; then the target skill; then
        // the memory after it: numbered examples with their scores, one line per negative.
        assert!(
            at("<REFERENCE_DOCUMENT>\nThe knapsack text.\n</REFERENCE_DOCUMENT>")
                < at("How the player acts")
        );
        assert!(at("max_turns=25") < at("Target skill: Optimization"));
        assert!(at("Target skill: Optimization") < at("<REFERENCE_ENVIRONMENTS>"));
        assert!(
            at("### Example 1 (skill: Optimization, win_rate: 0.50, regret: 0.30)")
                < at("class VaultEnv")
        );
        assert!(
            at("### Example 2 (skill: Optimization, win_rate: 0.40, regret: 0.30)")
                < at("</REFERENCE_ENVIRONMENTS>")
        );
        assert!(
            p.user
                .contains("- too easy (win_rate=0.95): class EasySumEnv\n")
        );
        assert!(
            p.user
                .contains("- too hard (win_rate=0.02): class HardEnv\n")
        );
        // A negative is one line, never its code.
        assert!(!p.user.contains("class EasySumEnv:"));
        // The rules the reference states: the standard library with math and random, partial
        // reward in [0, 1], doubled braces, a self-check.
        for rule in [
            "math and random",
            "[0, 1]",
            "\\boxed{{<action>}}",
            "check your game",
        ] {
            assert!(p.user.contains(rule), "missing {rule:?}");
        }
        // Without a document or memory: no tags.
        let bare = PromptStyle::Reference.designer_prompt(skill, None, &Examples::default(), 6, 0);
        assert!(!bare.user.contains("<REFERENCE_") && bare.user.contains("max_turns=6"));
        // Tool use gets the reference's tool-use prompt, on its base class.
        let tool = skills::find("error_recovery").expect("a skill");
        let t = PromptStyle::Reference.designer_prompt(tool, None, &ex, 25, 0);
        assert!(t.user.contains("subclass of ToolUseBaseEnv") && !t.user.contains("(ToolUseEnv)"));
        let t = PromptStyle::Compact.designer_prompt(tool, None, &ex, 25, 0);
        assert!(t.user.contains("subclasses `ToolUseEnv`"));
    }

    #[test]
    fn the_agent_reads_one_user_message_with_the_hint_inside_the_observation() {
        let (system, first) =
            PromptStyle::Reference.agent_opening(EnvKind::Game, "Guess 1-10.", Some(" halve it "));
        assert_eq!(system, None);
        assert!(first.starts_with("You are playing a text game"));
        assert!(first.contains("Observation: Guess 1-10.\n\nHINT: halve it\n"));
        assert!(first.ends_with("\\boxed{}."));
        // The compact style: a system prompt and the bare observation, "Hint:".
        let (system, first) =
            PromptStyle::Compact.agent_opening(EnvKind::Game, "Guess 1-10.", Some("halve it"));
        assert!(system.is_some_and(|s| s.contains("\\boxed")));
        assert_eq!(first, "Guess 1-10.\n\nHint: halve it");
        // Tool use keeps its system prompt in both styles.
        let (system, _) = PromptStyle::Reference.agent_opening(EnvKind::ToolUse, "x", None);
        assert!(system.is_some_and(|s| s.contains("<tool_call>")));
        let h = PromptStyle::Reference.hint_prompt(EnvKind::Game, "class AEnv: pass");
        assert!(
            h.system.contains("1 to 3 sentences") && h.system.contains("Never give the answer")
        );
        assert_eq!(
            h.user,
            "Environment code:\n```python\nclass AEnv: pass\n```"
        );
    }

    /// The tool-use audit reads the code alone and asks for the reference's verdict format.
    #[test]
    fn the_tool_use_audit_shows_the_code_and_the_steps_and_asks_for_a_boxed_verdict() {
        let p = tool_use_audit_prompt("class ShopEnv(ToolUseEnv):\n    pass\n\n");
        assert_eq!(p.system, TOOL_AUDIT_SYSTEM);
        assert!(p.user.starts_with(
            "## Environment code\n```python\nclass ShopEnv(ToolUseEnv):\n    pass\n```"
        ));
        for part in [
            "1. List",
            "2. For each",
            "3. Impossible",
            "4. Hard",
            "5. Ignore",
        ] {
            assert!(p.user.contains(part), "{part}");
        }
        assert!(p.user.ends_with("\\boxed{no} if any check cannot be satisfied by the tests above, else \\boxed{yes}."), "{}", p.user);
    }

    #[test]
    fn the_judge_reads_five_turns_cut_to_their_lengths_and_a_summary() {
        let long_action = "a".repeat(400);
        let turns: Vec<JudgedTurn<'_>> = (0..7)
            .map(|i| JudgedTurn {
                action: if i == 0 { &long_action } else { "\\boxed{go}" },
                reward: if i == 6 { 1.0 } else { 0.25 },
                observation: "moved",
            })
            .collect();
        let first = "o".repeat(600);
        let t = judge_trajectory(&first, &turns);
        // 500 characters of the first observation, 300 of an action, each then "...".
        assert!(t.contains(&format!("{}...\n", "o".repeat(500))));
        assert!(t.contains(&format!("- Action: {}...\n", "a".repeat(300))));
        assert!(t.contains("Turn 5:") && !t.contains("Turn 6:"));
        assert!(t.contains("... (2 more turns not shown)"));
        // 6 x 0.25 + 1.0 = 2.5.
        assert!(
            t.ends_with("Summary: 7 turns, total reward 2.5, final reward 1."),
            "{t}"
        );
        let p = judge_prompt("class AEnv: pass", &t);
        for part in [
            "1. Observations",
            "2. Rewards",
            "3. Winnable",
            "4. Bugs",
            "5. Termination",
        ] {
            assert!(p.user.contains(part), "missing {part}");
        }
        assert!(p.user.contains("\\boxed{yes}") && p.user.contains("\\boxed{no}"));
    }
}
