//! A checkpoint's own chat template: the Jinja text in `tokenizer_config.json`
//! (`chat_template`, a string or a list of named templates) or in `chat_template.jinja`
//! (transformers 4.5x+), rendered as transformers' `apply_chat_template` does: the context
//! holds `messages` (`role`, `content`), `add_generation_prompt`, `bos_token` and
//! `eos_token`, plus the helpers `raise_exception` and `strftime_now`; Python string methods
//! (`.strip()`, `.startswith()`, ...) come from minijinja's pycompat layer.
//!
//! A checkpoint without a template (the tiny preset) speaks ChatML ([`crate::chat::render`]).
//! The worker builds its token-level transcripts in ChatML (its multi-turn frames are
//! appended token by token, see `spade_worker::play`), so it accepts a model only when the
//! model's template renders the roles' conversations exactly as ChatML does
//! ([`ChatTemplate::chatml_mismatch`]): Qwen2/2.5/3 and SmolLM2 do; a Llama-3 template does
//! not and is refused by name rather than prompted in a format it never saw.

use crate::chat::{Message, Speaker};
use crate::error::{PolicyError, Result};
use minijinja::{Environment, Error, ErrorKind, context};
use serde_json::Value;
use std::path::Path;

/// The Jinja template's name inside its environment.
const NAME: &str = "chat";

/// A model's chat template, or ChatML when its checkpoint has none.
#[derive(Debug)]
pub struct ChatTemplate {
    /// The Jinja source and its compiled environment; None = ChatML.
    jinja: Option<(String, Environment<'static>)>,
    bos_token: String,
    eos_token: String,
}

fn err(context: &str, e: impl std::fmt::Display) -> PolicyError {
    PolicyError::Tokenizer(format!("chat template ({context}): {e}"))
}

impl Clone for ChatTemplate {
    fn clone(&self) -> Self {
        match &self.jinja {
            None => Self::chatml(),
            // The source compiled once already; compiling it again cannot fail differently.
            Some((src, _)) => Self::from_source(src, &self.bos_token, &self.eos_token)
                .unwrap_or_else(|_| Self::chatml()),
        }
    }
}

impl ChatTemplate {
    /// ChatML, the layout of [`crate::chat::render`].
    pub fn chatml() -> Self {
        Self {
            jinja: None,
            bos_token: String::new(),
            eos_token: crate::tokenizer::IM_END.into(),
        }
    }

    /// Compiles a Jinja chat template.
    pub fn from_source(source: &str, bos_token: &str, eos_token: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<String, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        // Templates that print today's date (Llama 3) get a fixed one: rendering must not
        // depend on the clock, or a prompt's tokens would change from one day to the next.
        env.add_function("strftime_now", |_fmt: String| "01 Jan 2026".to_string());
        env.add_template_owned(NAME.to_string(), source.to_string())
            .map_err(|e| err("syntax", e))?;
        Ok(Self {
            jinja: Some((source.to_string(), env)),
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
        })
    }

    /// The template of the checkpoint in `dir`: `chat_template.jinja`, else
    /// `tokenizer_config.json`'s `chat_template`, else ChatML. A template that is there but
    /// unreadable or does not compile is an error, not a silent fallback.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let config_path = dir.join("tokenizer_config.json");
        let config: Option<Value> =
            match std::fs::read_to_string(&config_path) {
                Ok(text) => Some(serde_json::from_str(&text).map_err(|e| {
                    PolicyError::Tokenizer(format!("{}: {e}", config_path.display()))
                })?),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(PolicyError::io(&config_path, e)),
            };
        let token = |key: &str| -> String {
            match config.as_ref().and_then(|c| c.get(key)) {
                Some(Value::String(s)) => s.clone(),
                // Older files hold {"content": "<|im_end|>", ...} AddedToken objects.
                Some(Value::Object(o)) => o
                    .get("content")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                _ => String::new(),
            }
        };
        let (bos, eos) = (token("bos_token"), token("eos_token"));
        let jinja_path = dir.join("chat_template.jinja");
        if jinja_path.exists() {
            let src = std::fs::read_to_string(&jinja_path)
                .map_err(|e| PolicyError::io(&jinja_path, e))?;
            return Self::from_source(&src, &bos, &eos);
        }
        match config.as_ref().and_then(|c| c.get("chat_template")) {
            None | Some(Value::Null) => Ok(Self::chatml()),
            Some(Value::String(src)) => Self::from_source(src, &bos, &eos),
            Some(Value::Array(named)) => {
                let default = named
                    .iter()
                    .find(|t| t.get("name") == Some(&"default".into()));
                match default
                    .and_then(|t| t.get("template"))
                    .and_then(Value::as_str)
                {
                    Some(src) => Self::from_source(src, &bos, &eos),
                    None => Err(PolicyError::Tokenizer(format!(
                        "{}: `chat_template` is a list without a template named \"default\"",
                        config_path.display()
                    ))),
                }
            }
            Some(other) => Err(PolicyError::Tokenizer(format!(
                "{}: `chat_template`: expected a string or a list, found {other}",
                config_path.display()
            ))),
        }
    }

    /// The Jinja source; None for ChatML.
    pub fn source(&self) -> Option<&str> {
        self.jinja.as_ref().map(|(s, _)| s.as_str())
    }

    /// Renders `messages`; with `add_generation_prompt` the text opens the assistant's turn.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        self.render_with(messages, add_generation_prompt, None)
    }

    /// What the template adds to a generation prompt when `enable_thinking` is false (a
    /// hybrid-thinking Qwen3's empty `<think>\n\n</think>\n\n`, which tells the model to answer
    /// without thinking); `None` for a template that does not read the switch (Qwen3's
    /// Instruct-2507 models, Qwen2.5, SmolLM2, ChatML).
    pub fn no_thinking_suffix(&self) -> Result<Option<String>> {
        let msgs = [
            Message::new(Speaker::System, "S"),
            Message::new(Speaker::User, "U"),
        ];
        let plain = self.render_with(&msgs, true, None)?;
        let off = self.render_with(&msgs, true, Some(false))?;
        Ok(match off.strip_prefix(plain.as_str()) {
            Some(suffix) if !suffix.is_empty() => Some(suffix.to_string()),
            _ => None,
        })
    }

    fn render_with(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        enable_thinking: Option<bool>,
    ) -> Result<String> {
        let Some((_, env)) = &self.jinja else {
            return Ok(crate::chat::render(messages, add_generation_prompt));
        };
        let msgs: Vec<Value> = messages
            .iter()
            .map(|m| {
                let role = match m.speaker {
                    Speaker::System => "system",
                    Speaker::User => "user",
                    Speaker::Assistant => "assistant",
                };
                serde_json::json!({"role": role, "content": m.content})
            })
            .collect();
        let tmpl = env.get_template(NAME).map_err(|e| err("load", e))?;
        let ctx = context! {
            messages => msgs,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
        };
        // Left out unless asked, as transformers leaves it out of the context by default.
        let ctx = match enable_thinking {
            Some(on) => context! { enable_thinking => on, ..ctx },
            None => ctx,
        };
        tmpl.render(ctx).map_err(|e| err("render", e))
    }

    /// Whether the template calls tools the way the worker writes them
    /// ([`crate::chat::tools_system`], `<tool_response>` turns): Qwen2.5 and Qwen3 templates,
    /// and ChatML (the tiny preset), which follows Qwen's layout. A template without tool
    /// calling (SmolLM2's) would drop the schemas, as transformers does, so its model plays
    /// tool use inline.
    pub fn calls_tools(&self) -> bool {
        self.source()
            .is_none_or(|src| src.contains("<tool_response>") && src.contains("<tools>"))
    }

    /// Why the worker's ChatML transcripts would not be this model's own format: the first
    /// probe conversation that renders differently, with both texts; None when they agree.
    pub fn chatml_mismatch(&self) -> Result<Option<String>> {
        let probes: [(&[Message], bool); 2] = [
            (
                &[
                    Message::new(Speaker::System, "S"),
                    Message::new(Speaker::User, "U"),
                ],
                true,
            ),
            (
                &[
                    Message::new(Speaker::System, "S"),
                    Message::new(Speaker::User, "U"),
                    Message::new(Speaker::Assistant, "A"),
                    Message::new(Speaker::User, "V"),
                ],
                true,
            ),
        ];
        for (msgs, gen_prompt) in probes {
            let own = self.render(msgs, gen_prompt)?;
            let chatml = crate::chat::render(msgs, gen_prompt);
            if own != chatml {
                return Ok(Some(format!(
                    "the model's chat template renders {own:?} where ChatML renders {chatml:?}"
                )));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-Instruct's template (ChatML with a default system prompt).
    const SMOL: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    /// Llama 3's layout, reduced.
    const LLAMA3: &str = "{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' + m['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

    /// Qwen3's hybrid-thinking generation prompt, reduced to its `enable_thinking` switch.
    const QWEN3_HYBRID: &str = "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\n\n</think>\n\n' }}{% endif %}{% endif %}";

    #[test]
    fn a_hybrid_thinking_template_yields_the_empty_think_block_and_others_none() -> Result<()> {
        let hybrid = ChatTemplate::from_source(QWEN3_HYBRID, "", "<|im_end|>")?;
        // With the switch unset it is ChatML, so the worker accepts it...
        assert_eq!(hybrid.chatml_mismatch()?, None);
        // ...and turning thinking off adds the empty block after the assistant's header.
        assert_eq!(
            hybrid.no_thinking_suffix()?.as_deref(),
            Some("<think>\n\n</think>\n\n")
        );
        let smol = ChatTemplate::from_source(SMOL, "<|im_start|>", "<|im_end|>")?;
        assert_eq!(smol.no_thinking_suffix()?, None);
        assert_eq!(ChatTemplate::chatml().no_thinking_suffix()?, None);
        Ok(())
    }

    #[test]
    fn a_chatml_family_template_agrees_with_chatml_and_adds_its_default_system() -> Result<()> {
        let t = ChatTemplate::from_source(SMOL, "<|im_start|>", "<|im_end|>")?;
        assert_eq!(t.chatml_mismatch()?, None);
        let alone = t.render(&[Message::new(Speaker::User, "hi")], true)?;
        assert!(
            alone.starts_with("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
        );
        assert!(alone.ends_with("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"));
        Ok(())
    }

    #[test]
    fn another_layout_is_reported_with_both_texts() -> Result<()> {
        let t = ChatTemplate::from_source(LLAMA3, "<|begin_of_text|>", "<|eot_id|>")?;
        let why = t.chatml_mismatch()?.unwrap_or_default();
        assert!(
            why.contains("<|start_header_id|>") && why.contains("<|im_start|>"),
            "{why}"
        );
        Ok(())
    }

    #[test]
    fn broken_templates_are_errors_that_say_where() {
        let e = ChatTemplate::from_source("{% for m in messages %}", "", "")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("chat template (syntax)"), "{e}");
        let t = ChatTemplate::from_source("{{ raise_exception('roles must alternate') }}", "", "");
        let e = t
            .and_then(|t| t.render(&[], true))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("roles must alternate"), "{e}");
    }

    /// ChatML and templates with Qwen's tool calling call tools; SmolLM2's and a Llama-3
    /// template do not.
    #[test]
    fn only_templates_with_qwens_tool_calling_call_tools() -> Result<()> {
        assert!(ChatTemplate::chatml().calls_tools());
        let qwen_tools = "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}\
                          </tools>{% endif %}{% for m in messages %}{% if m.role == 'tool' %}\
                          <tool_response>{{ m.content }}</tool_response>{% endif %}{% endfor %}";
        assert!(ChatTemplate::from_source(qwen_tools, "", "")?.calls_tools());
        assert!(!ChatTemplate::from_source(SMOL, "", "")?.calls_tools());
        assert!(!ChatTemplate::from_source(LLAMA3, "", "")?.calls_tools());
        Ok(())
    }
}
