//! The model's answer: the content of the last `\boxed{...}` in its reply, braces balanced, as
//! the paper's agents answer (spade-spec.md, "Environment contract (games)").

/// The content of the last `\boxed{...}` whose braces balance, or `None` when there is none.
/// A `\boxed{` that never closes is ignored (the model ran out of tokens mid-answer).
pub fn last_boxed(text: &str) -> Option<String> {
    const OPEN: &str = "\\boxed{";
    let mut found = None;
    let mut from = 0;
    while let Some(rel) = text[from..].find(OPEN) {
        let start = from + rel + OPEN.len();
        let mut depth = 1usize;
        let mut end = None;
        for (i, c) in text[start..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(start + i);
                        break;
                    }
                }
                _ => {}
            }
        }
        if let Some(e) = end {
            found = Some(text[start..e].to_string());
        }
        from = start;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_balanced_box_wins() {
        assert_eq!(
            last_boxed("a \\boxed{1} b \\boxed{2}").as_deref(),
            Some("2")
        );
        assert_eq!(
            last_boxed("\\boxed{\\frac{1}{2}}").as_deref(),
            Some("\\frac{1}{2}")
        );
        assert_eq!(
            last_boxed("x \\boxed{[1, {2}]}\n").as_deref(),
            Some("[1, {2}]")
        );
        assert_eq!(last_boxed("\\boxed{}").as_deref(), Some(""));
    }

    #[test]
    fn missing_or_unclosed_boxes_are_no_answer() {
        assert_eq!(last_boxed("the answer is 4"), None);
        assert_eq!(last_boxed("\\boxed{4"), None);
        // An unclosed box after a closed one leaves the closed one as the answer.
        assert_eq!(
            last_boxed("\\boxed{3} then \\boxed{4").as_deref(),
            Some("3")
        );
        assert_eq!(last_boxed("\\boxed 4"), None);
    }
}
