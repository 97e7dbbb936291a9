//! Agent actions, designer code and judge verdicts, including malformed replies.

use super::*;

#[test]
fn the_last_balanced_boxed_counts_with_nested_braces() {
    assert_eq!(last_boxed("\\boxed{1} then \\boxed{2}"), Some("2"));
    assert_eq!(last_boxed("\\boxed{\\frac{1}{2}}"), Some("\\frac{1}{2}"));
    assert_eq!(
        last_boxed("\\boxed{{a}, {b}} and \\boxed{x"),
        Some("{a}, {b}"),
        "cut-off last"
    );
    assert_eq!(last_boxed("no answer"), None);
    assert_eq!(last_boxed("\\boxed{"), None);
    assert_eq!(last_boxed("\\boxed{é{ü}}"), Some("é{ü}"));
}

#[test]
fn game_actions_are_rewrapped_and_thinking_is_ignored() {
    assert_eq!(
        game_action("So the answer is \\boxed{ 42 }.").as_deref(),
        Ok("\\boxed{42}")
    );
    assert_eq!(
        game_action("<think>maybe \\boxed{1}</think>I say \\boxed{2}").as_deref(),
        Ok("\\boxed{2}")
    );
    assert_eq!(
        game_action("<think>\\boxed{1}</think>nothing"),
        Err(FormatError::NoBoxed)
    );
    assert_eq!(
        game_action("<think>\\boxed{1} unfinished"),
        Err(FormatError::NoBoxed)
    );
    assert_eq!(game_action("\\boxed{  }"), Err(FormatError::EmptyBoxed));
    assert_eq!(FORMAT_PENALTY, -0.1);
}

#[test]
fn tool_calls_and_answers_parse_like_the_base_class() {
    let a = tool_action(
        "I will look. <tool_call>{\"name\": \"find\", \"arguments\": {\"id\": 3}}</tool_call>",
    )
    .expect("valid");
    let ToolAction::Call { name, arguments } = a else {
        panic!("a call")
    };
    assert_eq!(name, "find");
    assert_eq!(arguments["id"], 3);
    let a = tool_action(
        "<tool_call>{\"name\": \"list\", \"arguments\": \"{\\\"k\\\": 1}\"}</tool_call>",
    );
    assert!(matches!(a, Ok(ToolAction::Call { ref arguments, .. }) if arguments["k"] == 1));
    let a = tool_action("<tool_call>{\"name\": \"ping\"}</tool_call>");
    assert!(matches!(a, Ok(ToolAction::Call { ref arguments, .. }) if arguments.is_empty()));
    assert_eq!(
        tool_action("<tool_call>{\"name\": \"a\"}</tool_call> <answer> DONE </answer>"),
        Ok(ToolAction::Done),
        "the last element counts"
    );
    assert_eq!(tool_action("nothing"), Err(FormatError::NoToolAction));
    assert_eq!(
        tool_action("<answer>maybe</answer>"),
        Err(FormatError::BadAnswer("maybe".into()))
    );
    for bad in [
        "<tool_call>{name: 1}</tool_call>",
        "<tool_call>[1]</tool_call>",
        "<tool_call>{\"name\": \"\"}</tool_call>",
        "<tool_call>{\"name\": \"a\", \"arguments\": 5}</tool_call>",
        "<tool_call>{\"name\": \"a\", \"arguments\": \"[1]\"}</tool_call>",
    ] {
        assert!(
            matches!(tool_action(bad), Err(FormatError::BadToolCall(_))),
            "{bad}"
        );
    }
}

#[test]
fn designer_code_is_found_in_fences_or_bare() {
    let reply = "Here it is:\n```python\nimport math\nclass CoinEnv:\n    pass\n```\nand a test\n```python\nprint(1)\n```";
    assert_eq!(
        extract_code(reply).as_deref(),
        Ok("import math\nclass CoinEnv:\n    pass\n")
    );
    let bare = "Sure.\nclass MazeEnv(object):\n    def reset(self, seed=None): ...\n";
    assert!(extract_code(bare).is_ok_and(|c| c.starts_with("class MazeEnv(object):")));
    assert_eq!(
        extract_code("```python\nclass Helper:\n    pass\n```"),
        Err(FormatError::NoCode)
    );
    assert_eq!(extract_code("no code at all"), Err(FormatError::NoCode));
    let unclosed = "```python\nclass OpenEnv:\n    x = 1\n";
    assert_eq!(
        extract_code(unclosed).as_deref(),
        Ok("class OpenEnv:\n    x = 1\n")
    );
}

#[test]
fn judge_verdicts() {
    assert_eq!(judge_verdict("It works. \\boxed{yes}"), Some(true));
    assert_eq!(judge_verdict("\\boxed{ No }"), Some(false));
    assert_eq!(judge_verdict("unsure"), None);
}
