//! The tool-use prompts in the reference implementation's structure (`model.prompts =
//! "reference"`), in our own words: the designer writes a multi-turn task on the
//! `ToolUseBaseEnv` base class (envs/python/spade_tooluse_base.py) with `_tools`,
//! `_user_messages` revealed one at a time and one `_message_criteria` check per message, in a
//! realistic domain and a task variant drawn per attempt (the reference's call-level rotation:
//! execute 3, read-then-write 2, missing value 1, irrelevant request 1), with its six
//! solvability rules and a worked example; the hint writer gives a value-free plan in 2 to 3
//! sentences.
//!
//! The reference's structure and rules (`spade/core/prompts/tool_use_template.py`'s multi-turn
//! variant, which its tool-use launcher selects, and `hint_generator.py`'s tool-use prompt), not
//! its text. One rule is ours because validation checks it: `solution()` lists the calls with
//! literal arguments, since the sandbox plays them to prove the task solvable; and the base
//! class advances the instructions after every call, so tools need not.

use super::ChatPrompt;
use crate::memory::Examples;
use crate::skills::Skill;

/// The designer's role for tool use.
pub const DESIGNER_SYSTEM: &str = "You are a Python programmer who builds simulated tool-use \
environments: a small backend held in memory, the tools an assistant may call on it, and a \
user who asks for one thing at a time.";

/// Realistic domains, one drawn per attempt (the reference's list of agentic benchmark domains).
pub const DOMAINS: [&str; 10] = [
    "an online shop's orders (items, refunds, shipping)",
    "travel booking (flights, hotels, payment, cancellation)",
    "a mobile phone account (plans, lines, bills, data packs)",
    "personal banking (accounts, transfers, cards, invoices)",
    "a calendar assistant (events, invitations, reminders)",
    "a file system (folders, files, moving, searching)",
    "a shopping cart (catalogue, cart, coupons, checkout)",
    "a support desk (tickets, status, assignees, notes)",
    "a smart home (lights, heating, locks, scenes)",
    "a project tracker (tasks, owners, status, due dates)",
];

/// The task variants and their weights in the rotation.
const VARIANTS: [(&str, u64); 4] = [
    (
        "Variant: execute. The user gives plain instructions and the assistant calls the right \
         tools in the right order; each check reads the state the calls leave.",
        3,
    ),
    (
        "Variant: read, then write. At least one instruction needs a lookup first and then \
         changes that depend on what the lookup returned (for example \"every order above $100\" \
         or \"each line over its data cap\"); its check reads the state those conditional \
         changes leave, not merely that a tool ran.",
        2,
    ),
    (
        "Variant: missing value. At least one instruction refers to something without naming \
         it (\"cancel my latest order\", \"pay the overdue invoice\"); the assistant has to find \
         the id with a read tool before writing, and the write tool rejects a wrong or invented \
         id, so a guess cannot pass the check.",
        1,
    ),
    (
        "Variant: out of scope. Exactly one instruction asks for something none of the domain's \
         tools can do (say, tomorrow's weather in a shop). Add a tool `decline_request` with one \
         required string argument `reason` that records the refusal in the state; only that \
         call meets this instruction's check, and no other tool can plausibly serve it.",
        1,
    ),
];

/// The domain and the task variant of draw `variant` (uniform domain, weighted variant).
pub fn drawn(variant: u64) -> (&'static str, &'static str) {
    let domain = DOMAINS[(variant % DOMAINS.len() as u64) as usize];
    let total: u64 = VARIANTS.iter().map(|(_, w)| w).sum();
    let mut pick = (variant / DOMAINS.len() as u64) % total;
    let mut text = VARIANTS[0].0;
    for (t, w) in VARIANTS {
        if pick < w {
            text = t;
            break;
        }
        pick -= w;
    }
    (domain, text)
}

const INTERFACE: &str = r#"How the episode runs: the agent sees the first user message, calls tools with <tool_call>{"name": ..., "arguments": {...}}</tool_call> (several a turn if it likes), reads each result, and replies <answer>done</answer> once every message is dealt with. A real user does not describe the whole job up front: they ask for one small thing, wait until it is done, then ask for the next. Your environment reproduces that.

What you write (the base class ToolUseBaseEnv handles parsing, dispatch, turn counting and the answer):
- reset(self, seed=None) -> (observation, info): seed a random.Random (or the random module) with seed; build self._state (the backend, 10 to 50 records); set self._tools = {name: {"description": ..., "parameters": JSON schema}}; set self._user_messages (3 to 5 short instructions), self._message_criteria (one callable per message, taking the state and returning True once that message is done), self._current_msg = 0 and self._expected_answer = "done"; return (self._user_messages[0], {}).
- tool_<name>(self, ...) -> str: one method per entry of self._tools, reading and changing self._state and returning a short text. After every call the base class checks the current message's criterion and, when it holds, shows the next message to the agent; you need not do that yourself.
- solution(self) -> str: the whole solution from the state reset() built: every call in order, written like order(item='bolts', quantity=4) with literal arguments (or as <tool_call> JSON), then <answer>done</answer>. The checker plays exactly these calls and expects the win, so write real values, never placeholders.

The messages:
- Each is one or two sentences asking for one concrete thing, in the user's words: no tool names, no field names, nothing about the implementation.
- Later messages stay hidden until the earlier ones are met; skipping ahead reveals nothing.
- A message may take several calls (up to about 8).

Example messages and their criteria:
    self._user_messages = ["Open the reports folder.", "Move the oldest report into a new folder called archive.", "Show me what is in archive now."]
    self._message_criteria = [lambda s: s["cwd"] == "/home/reports", lambda s: s["oldest"] in s["tree"].get("/home/reports/archive", []), lambda s: s["last_listed"] == "/home/reports/archive"]

Solvability (broken environments are the most common failure; check each rule):
1. Not met at reset. Every criterion is False on the state reset() returns and becomes True only through the message's own action. A message that asks the agent to check or look something up needs its read tool to record that it ran (say s["checked"] = "balance"), and the criterion reads that record; a criterion on a value that already holds would pass on any call.
2. Same shape. A criterion reads the state in the form the tools write it: if orders are a list of dicts, test any(o["item"] == "laptop" for o in s["orders"]), not "laptop" in s["orders"], which can never be True.
3. Knowable. Every value a criterion needs (an id, a date, an amount) is either stated in the message or returned by some tool. Never require a hidden threshold the agent can only guess; state it, accept any valid change, or let a tool reveal it.
4. Reachable. The tool that meets each criterion can succeed: any key or id it looks up is written by reset() or by an earlier tool.
5. Matched. Each message asks for exactly what its criterion checks, no more and no less.
6. Traced. Before you answer, run reset(seed=0) in your head and play solution() step by step: after each message's calls its criterion turns True, in order, no later criterion is True early, and at the end every criterion holds.

Rules:
- class YourNameEnv(ToolUseBaseEnv): the base class is already defined; do not import it. One top-level class whose name ends in Env.
- The standard library only (random, json, re, math, ...); the tools simulate the backend in memory: no network, files or processes.
- All randomness in reset(); tools are deterministic.
- 3 to 8 tools, among them 1 or 2 plausible distractors the task does not need (do not label them as such); at least one tool with an enum-constrained, required parameter.
- Each tool method's parameter names are exactly the property names of its schema (an optional one gets a default); a mismatch makes every call fail.
- A write tool called in the wrong state (missing folder, unknown id, insufficient balance) returns an error text instead of raising, so the agent learns to look before it acts."#;

/// The worked example the designer reads (a test validates and plays its code).
pub const EXAMPLE: &str = r#"Example of the structure (a file system; yours should be in your own domain):
```python
import json
import random


class ReportArchiveEnv(ToolUseBaseEnv):
    def reset(self, seed=None):
        rng = random.Random(seed)
        reports = sorted(rng.sample(["q1.txt", "q2.txt", "q3.txt", "q4.txt", "memo.txt"], 3))
        self._state = {"cwd": "/home", "tree": {"/home": ["reports"], "/home/reports": reports},
                       "oldest": reports[0], "last_listed": None}
        self._tools = {
            "cd": {"description": "Change the current folder.",
                   "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
            "ls": {"description": "List a folder.",
                   "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
            "mkdir": {"description": "Create a folder inside the current one.",
                      "parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
            "mv": {"description": "Move a file of the current folder into a subfolder.",
                   "parameters": {"type": "object", "properties": {"src": {"type": "string"}, "dst": {"type": "string"}},
                                  "required": ["src", "dst"]}},
        }
        self._user_messages = ["Open the reports folder.",
                               "Move the oldest report into a new folder called archive.",
                               "Show me what is in archive now."]
        self._message_criteria = [
            lambda s: s["cwd"] == "/home/reports",
            lambda s: s["oldest"] in s["tree"].get("/home/reports/archive", []),
            lambda s: s["last_listed"] == "/home/reports/archive",
        ]
        self._current_msg = 0
        self._expected_answer = "done"
        return self._user_messages[0], {}

    def tool_cd(self, path):
        if path not in self._state["tree"]:
            return f"Error: no folder {path}"
        self._state["cwd"] = path
        return f"Now in {path}"

    def tool_ls(self, path):
        if path not in self._state["tree"]:
            return f"Error: no folder {path}"
        self._state["last_listed"] = path
        return json.dumps(self._state["tree"][path])

    def tool_mkdir(self, name):
        path = self._state["cwd"] + "/" + name
        if path in self._state["tree"]:
            return f"Error: {path} exists"
        self._state["tree"][path] = []
        return f"Created {path}"

    def tool_mv(self, src, dst):
        here = self._state["tree"][self._state["cwd"]]
        target = self._state["cwd"] + "/" + dst
        if src not in here or target not in self._state["tree"]:
            return "Error: file or destination not found"
        here.remove(src)
        self._state["tree"][target].append(src)
        return f"Moved {src} to {dst}"

    def solution(self):
        return (f"cd(path='/home/reports') ls(path='/home/reports') mkdir(name='archive') "
                f"mv(src='{self._state['oldest']}', dst='archive') ls(path='/home/reports/archive') "
                "<answer>done</answer>")
```"#;

/// The designer prompt for a tool-use environment: the task, the interface and its rules, the
/// drawn domain and variant, the skill, an optional document as flavour, the worked example,
/// then the memory.
pub fn designer_prompt(
    skill: &Skill,
    document: Option<&str>,
    examples: &Examples<'_>,
    max_turns: u32,
    variant: u64,
) -> ChatPrompt {
    let (domain, task_variant) = drawn(variant);
    let mut user = format!(
        "Write a multi-turn tool-use environment as a subclass of ToolUseBaseEnv. It trains: \
         {} ({})\n\n{INTERFACE}\n\nDomain: {domain}. Build the tools, the state and the user's \
         goal for this domain, as a real user of such a service would ask (search, book, \
         order, change, cancel, pay, schedule): not an exam or a puzzle.\n{task_variant}\n\
         The agent has {max_turns} turns; make it hard but feasible within them.\n",
        skill.name, skill.description
    );
    if let Some(doc) = document {
        user.push_str(
            "\nYou may borrow names, numbers or entities from this snippet for flavour, but the \
             domain above stays fixed and no message may mention the snippet:\n\
             <REFERENCE_SNIPPET>\n",
        );
        user.push_str(doc.trim());
        user.push_str("\n</REFERENCE_SNIPPET>\n");
    }
    user.push('\n');
    user.push_str(EXAMPLE);
    user.push_str(&super::reference::memory_block_of(
        examples,
        "These tool-use environments trained the agent well: hard, but within reach. Take \
         their structure and scale as a guide, and write a different task.",
        |code| code.contains("ToolUseBaseEnv"),
    ));
    user.push_str("\n\nWrite the complete program in one ```python block.");
    ChatPrompt {
        system: DESIGNER_SYSTEM.to_string(),
        user,
    }
}

/// The hint writer's role for tool use: a plan of phases, never the values.
pub const HINT_SYSTEM: &str = "You read the source code of a multi-turn tool-use environment \
and write a hint for the agent that will play it. The agent cannot see the code: it sees one \
user instruction at a time, calls tools with <tool_call>{\"name\": ..., \"arguments\": \
{...}}</tool_call>, reads the results, and answers <answer>done</answer> once every instruction \
is met. Your hint is added to its first observation.\n\n\
Give the approach, not the solution: which kinds of tools matter and in which order of phases \
(which lookup feeds which change), and which tools are beside the point. Tell the agent to find \
ids, names and amounts by calling the lookup tools and reading each instruction rather than \
assuming them; to ask when an instruction leaves out a needed value, and to decline a request \
no tool can serve. Never state argument values, ids, the state's field names or the criteria's \
expressions: a hint that can be copied into calls teaches nothing.\n\n\
2 to 3 sentences, under 100 words, specific to this environment. Reply with the hint text only.";

/// The tool-use hint prompt: the whole accepted code.
pub fn hint_prompt(code: &str) -> ChatPrompt {
    ChatPrompt {
        system: HINT_SYSTEM.to_string(),
        user: format!("Environment code:\n```python\n{}\n```", code.trim_end()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryRecord;
    use crate::skills;

    fn record(env_id: &str, code: &str, win_rate: f64) -> MemoryRecord {
        MemoryRecord {
            env_id: env_id.into(),
            step: 0,
            skill: "Error Recovery".into(),
            kind: crate::EnvKind::ToolUse,
            code: code.into(),
            win_rate,
            regret: 0.3,
        }
    }

    /// The prompt asks for the reference's base class and its multi-turn fields, with the
    /// solvability rules and a drawn domain and variant, instead of the project's ToolUseEnv.
    #[test]
    fn the_tool_use_designer_prompt_asks_for_the_references_base_class() {
        let skill = skills::find("error_recovery").expect("a skill");
        let good = record("e1", "class ShopEnv(ToolUseBaseEnv):\n    pass\n", 0.5);
        let other_base = record("e2", "class OldEnv(ToolUseEnv):\n    pass\n", 0.5);
        let easy = record("e3", "class EasyEnv(ToolUseBaseEnv):\n    pass\n", 0.97);
        let ex = Examples {
            positives: vec![&good, &other_base],
            negatives: vec![&easy],
        };
        let p = PromptStyleProbe::prompt(skill, Some("Refund rules."), &ex, 25, 0);
        assert_eq!(p.system, DESIGNER_SYSTEM);
        for part in [
            "subclass of ToolUseBaseEnv",
            "self._tools = {name:",
            "self._user_messages (3 to 5",
            "self._message_criteria",
            "self._current_msg = 0",
            "self._expected_answer = \"done\"",
            "1. Not met at reset",
            "2. Same shape",
            "3. Knowable",
            "4. Reachable",
            "5. Matched",
            "6. Traced",
            "enum-constrained",
            "Domain: an online shop's orders",
            "Variant: execute.",
            "The agent has 25 turns",
            "<REFERENCE_SNIPPET>\nRefund rules.\n</REFERENCE_SNIPPET>",
            "class ReportArchiveEnv(ToolUseBaseEnv)",
            "### Example 1 (skill: Error Recovery, win_rate: 0.50, regret: 0.30)",
            "- too easy (win_rate=0.97): class EasyEnv\n",
        ] {
            assert!(p.user.contains(part), "missing {part:?}");
        }
        // A memory example on the other base class would teach the other contract.
        assert!(!p.user.contains("class OldEnv"));
        assert!(!p.user.contains("### Example 2"));
        let at = |s: &str| p.user.find(s).unwrap_or(usize::MAX);
        assert!(at("6. Traced") < at("Domain:"));
        assert!(at("</REFERENCE_SNIPPET>") < at("class ReportArchiveEnv"));
        assert!(at("class ReportArchiveEnv") < at("<REFERENCE_ENVIRONMENTS>"));
        assert!(p.user.ends_with("one ```python block."));
    }

    /// The variant rotation draws every domain and the four variants in the reference's
    /// proportions 3 : 2 : 1 : 1.
    #[test]
    fn the_draw_covers_the_domains_and_weights_the_variants_three_two_one_one() {
        let mut counts = [0u32; 4];
        let mut domains = std::collections::BTreeSet::new();
        for v in 0..(10 * 7) {
            let (d, t) = drawn(v);
            domains.insert(d);
            let i = VARIANTS
                .iter()
                .position(|(x, _)| *x == t)
                .expect("a variant");
            counts[i] += 1;
        }
        assert_eq!(domains.len(), 10);
        assert_eq!(counts, [30, 20, 10, 10]);
    }

    #[test]
    fn the_tool_use_hint_asks_for_a_value_free_plan() {
        let h = hint_prompt("class AEnv(ToolUseBaseEnv): pass\n");
        assert!(
            h.system.contains("2 to 3 sentences")
                && h.system.contains("Never state argument values")
        );
        assert_eq!(
            h.user,
            "Environment code:\n```python\nclass AEnv(ToolUseBaseEnv): pass\n```"
        );
    }

    struct PromptStyleProbe;
    impl PromptStyleProbe {
        fn prompt(
            skill: &Skill,
            doc: Option<&str>,
            ex: &Examples<'_>,
            max_turns: u32,
            variant: u64,
        ) -> ChatPrompt {
            crate::prompt::PromptStyle::Reference
                .designer_prompt(skill, doc, ex, max_turns, variant)
        }
    }
}
