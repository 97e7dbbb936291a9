//! Chat templates for the policy's three roles, in Qwen's ChatML layout:
//!
//! ```text
//! <|im_start|>system
//! {system prompt}<|im_end|>
//! <|im_start|>user
//! {message}<|im_end|>
//! <|im_start|>assistant
//! {reply}<|im_end|>
//! ```
//!
//! A prompt ends with `<|im_start|>assistant\n` and the model's turn ends with `<|im_end|>`
//! (the stop token). This is Qwen3's template without its tool and `<think>` handling: a Qwen3
//! hybrid-thinking model may open its reply with a `<think>` block, which the roles' parsers
//! (last `\boxed{}`, last `<tool_call>`) skip over. The roles' output formats follow
//! `shared/spade-spec.md`: the designer writes one Python class ending in `Env`; the hint
//! writer writes a privileged hint; the agent answers in `\boxed{...}` (games) or with
//! `<tool_call>{...}</tool_call>` and `<answer>done</answer>` (tool use).

use crate::tokenizer::{IM_END, IM_START};

/// Who speaks a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speaker {
    System,
    User,
    Assistant,
}

impl Speaker {
    fn tag(self) -> &'static str {
        match self {
            Speaker::System => "system",
            Speaker::User => "user",
            Speaker::Assistant => "assistant",
        }
    }
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub speaker: Speaker,
    pub content: String,
}

impl Message {
    pub fn new(speaker: Speaker, content: impl Into<String>) -> Self {
        Self {
            speaker,
            content: content.into(),
        }
    }
}

/// The system turn a Qwen-family template (Qwen2.5, Qwen3) writes for `tools` when the
/// conversation has no system message of its own: the tool-calling instructions and each
/// schema as its JSON text (`tools`, one per line, as transformers' `tojson` prints them).
pub fn tools_system(tools: &[String]) -> String {
    let mut s = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for t in tools {
        s.push('\n');
        s.push_str(t);
    }
    s.push_str(
        "\n</tools>\n\nFor each function call, return a json object with function name and \
         arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": \
         <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    );
    s
}

/// The turn that carries tool results after an assistant turn (which ended with
/// `<|im_end|>`): one user turn with a `<tool_response>` block per result, in order, then the
/// next assistant header; what a Qwen-family template renders for consecutive `tool` messages.
pub fn tool_responses_frame(results: &[String]) -> String {
    let mut s = format!("\n{IM_START}user");
    for r in results {
        s.push_str("\n<tool_response>\n");
        s.push_str(r);
        s.push_str("\n</tool_response>");
    }
    s.push_str(&format!("{IM_END}\n{IM_START}assistant\n"));
    s
}

/// Renders messages; with `add_generation_prompt` the text ends by opening the assistant's turn.
pub fn render(messages: &[Message], add_generation_prompt: bool) -> String {
    let mut s = String::new();
    for m in messages {
        s.push_str(IM_START);
        s.push_str(m.speaker.tag());
        s.push('\n');
        s.push_str(&m.content);
        s.push_str(IM_END);
        s.push('\n');
    }
    if add_generation_prompt {
        s.push_str(IM_START);
        s.push_str("assistant\n");
    }
    s
}

/// The three roles the one policy plays (spade-spec.md, "One training step").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Writes an executable environment for a skill.
    Designer,
    /// Reads accepted environment code and writes a privileged hint (not trained).
    Hint,
    /// Plays an environment turn by turn.
    Agent,
}

impl Role {
    /// The default system prompt; callers may pass their own to [`Role::conversation`].
    pub fn system_prompt(self) -> &'static str {
        match self {
            Role::Designer => {
                "You are an environment designer. Write one complete, executable Python \
                 environment: a single class whose name ends in `Env`, with \
                 `__init__(self, max_turns=..., **kwargs)`, `reset(self, seed=None) -> \
                 (observation, info)`, `step(self, action) -> (observation, reward, terminated, \
                 truncated, info)`, `solution(self) -> str` and `close(self)`. A win gives \
                 reward 1.0 and terminates. Reply with the code in one ```python block."
            }
            Role::Hint => {
                "You read the code of an environment and write a privileged hint for a player: \
                 the strategy, a partial solution and the key observations. Do not play."
            }
            Role::Agent => {
                "You are playing an environment turn by turn. Think, then give your action; \
                 the last \\boxed{...} expression in your reply is your action."
            }
        }
    }

    /// Sampling temperature the paper uses for this role (spade-spec.md: 0.6 for designer and
    /// agent, 0.3 for the hint call).
    pub fn temperature(self) -> f64 {
        match self {
            Role::Hint => 0.3,
            Role::Designer | Role::Agent => 0.6,
        }
    }

    /// System prompt (the role's default when `system` is None) + `user`, ready to sample.
    pub fn prompt(self, system: Option<&str>, user: &str) -> String {
        render(&self.conversation(system, user), true)
    }

    /// The opening messages: system, then the user's message.
    pub fn conversation(self, system: Option<&str>, user: &str) -> Vec<Message> {
        vec![
            Message::new(Speaker::System, system.unwrap_or(self.system_prompt())),
            Message::new(Speaker::User, user),
        ]
    }
}

/// An agent's multi-turn transcript: the first observation, then (action, next observation)
/// pairs, ending with the assistant's turn open for the next action.
pub fn agent_transcript(system: Option<&str>, first: &str, turns: &[(String, String)]) -> String {
    let mut msgs = Role::Agent.conversation(system, first);
    for (action, observation) in turns {
        msgs.push(Message::new(Speaker::Assistant, action.clone()));
        msgs.push(Message::new(Speaker::User, observation.clone()));
    }
    render(&msgs, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_use_chatml_and_open_the_assistant_turn() {
        let p = Role::Hint.prompt(Some("SYS"), "class GuessEnv: ...");
        assert_eq!(
            p,
            "<|im_start|>system\nSYS<|im_end|>\n<|im_start|>user\nclass GuessEnv: ...<|im_end|>\n\
             <|im_start|>assistant\n"
        );
    }

    #[test]
    fn agent_transcripts_alternate_actions_and_observations() {
        let t = agent_transcript(Some("S"), "obs0", &[("\\boxed{1}".into(), "obs1".into())]);
        assert!(t.ends_with(
            "<|im_start|>assistant\n\\boxed{1}<|im_end|>\n<|im_start|>user\nobs1<|im_end|>\n\
             <|im_start|>assistant\n"
        ));
        assert_eq!(t.matches("<|im_start|>").count(), 5);
    }

    #[test]
    fn roles_have_the_papers_temperatures() {
        assert_eq!(Role::Hint.temperature(), 0.3);
        assert_eq!(Role::Agent.temperature(), 0.6);
        assert!(Role::Designer.system_prompt().contains("Env"));
    }

    /// Qwen's tool layout written out by hand (Qwen2.5/Qwen3 `tokenizer_config.json`): the
    /// system turn for two tools, and two results after an assistant turn.
    #[test]
    fn tools_and_their_results_take_qwens_layout() {
        let tools = [
            r#"{"type": "function", "function": {"name": "a"}}"#.to_string(),
            r#"{"type": "function", "function": {"name": "b"}}"#.to_string(),
        ];
        assert_eq!(
            tools_system(&tools),
            "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
             You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n\
             {\"type\": \"function\", \"function\": {\"name\": \"a\"}}\n\
             {\"type\": \"function\", \"function\": {\"name\": \"b\"}}\n</tools>\n\n\
             For each function call, return a json object with function name and arguments within \
             <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \
             \"arguments\": <args-json-object>}\n</tool_call>"
        );
        assert_eq!(
            tool_responses_frame(&["12".to_string(), "{\"ok\": true}".to_string()]),
            "\n<|im_start|>user\n<tool_response>\n12\n</tool_response>\n<tool_response>\n\
             {\"ok\": true}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
        );
    }
}
