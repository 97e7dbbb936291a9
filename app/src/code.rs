//! Reading environment code: a highlighted Python view with line numbers, and a side-by-side
//! diff against the memory environment an environment was derived from. The tokenizer and the
//! diff are plain functions (unit-tested); the components only lay their HTML out.

pub mod diff;
pub mod python;

use leptos::prelude::*;

/// Highlighted Python source with line numbers (CSS counters, so copying skips them).
#[component]
pub fn CodeView(
    /// The source to show.
    code: String,
    /// Accessible name of the code region, e.g. "Environment code".
    #[prop(into)]
    label: String,
    /// A line (1-based) to mark as the failing one, e.g. the one a traceback names.
    #[prop(default = None)]
    mark: Option<usize>,
) -> impl IntoView {
    let lines = python::highlight_lines(&code);
    let html: String = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            if mark == Some(i + 1) {
                // Each line is one <span>, so the marked one carries the anchor the rejection
                // links to and says what it is to a screen reader.
                format!(
                    "<span class=\"line failing\" id=\"failing-line\" title=\"The line the error names\">{l}<span class=\"visually-hidden\"> (the failing line)</span>\n</span>"
                )
            } else {
                format!("<span class=\"line\">{l}\n</span>")
            }
        })
        .collect();
    view! {
        <figure class="code-figure">
            <figcaption class="visually-hidden">{label.clone()}</figcaption>
            <pre class="code" tabindex="0" aria-label=label>
                <code inner_html=html></code>
            </pre>
        </figure>
    }
}

/// Side-by-side diff of `old` (left) and `new` (right) with a summary line.
#[component]
pub fn DiffView(
    old: String,
    new: String,
    /// Column header of the left side, e.g. "Memory environment m-12".
    #[prop(into)]
    old_title: String,
    #[prop(into)] new_title: String,
) -> impl IntoView {
    let d = diff::side_by_side(&old, &new);
    let summary = summary(&d);
    let rows: String = d.rows.iter().map(row_html).collect();
    view! {
        <div class="diff">
            <p class="diff-summary">{summary}</p>
            <div class="diff-scroll" tabindex="0" role="region" aria-label="Code diff">
                <table class="diff-table">
                    <colgroup>
                        <col class="ln-col" />
                        <col />
                        <col class="ln-col" />
                        <col />
                    </colgroup>
                    <caption class="visually-hidden">
                        {format!("Differences between {old_title} and {new_title}")}
                    </caption>
                    <thead>
                        <tr>
                            <th scope="col" colspan="2">{old_title.clone()}</th>
                            <th scope="col" colspan="2">{new_title.clone()}</th>
                        </tr>
                    </thead>
                    <tbody inner_html=rows></tbody>
                </table>
            </div>
        </div>
    }
}

/// "3 lines changed, 1 added, 2 removed", naming only the kinds that occur.
fn summary(d: &diff::SideBySide) -> String {
    let count = |k: diff::RowKind| d.rows.iter().filter(|r| r.kind == k).count();
    let parts: Vec<String> = [
        (count(diff::RowKind::Changed), "changed"),
        (count(diff::RowKind::Added), "added"),
        (count(diff::RowKind::Removed), "removed"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    if parts.is_empty() {
        "No changes.".to_owned()
    } else {
        let lines = if d
            .rows
            .iter()
            .filter(|r| r.kind != diff::RowKind::Same)
            .count()
            == 1
        {
            "line"
        } else {
            "lines"
        };
        format!(
            "{} {lines}: {}",
            d.rows
                .iter()
                .filter(|r| r.kind != diff::RowKind::Same)
                .count(),
            parts.join(", ")
        )
    }
}

/// One table row as HTML. Cells carry a text marker (`-`, `+`, `~`) besides the colour, so the
/// difference does not rely on colour alone.
fn row_html(row: &diff::Row) -> String {
    let side = |cell: &Option<diff::Cell>, marker: &str| match cell {
        Some(c) => format!(
            "<td class=\"ln\">{}</td><td class=\"src\"><span class=\"mark\" aria-hidden=\"true\">{marker}</span>{}</td>",
            c.line, c.html
        ),
        None => "<td class=\"ln\"></td><td class=\"src empty\"></td>".to_owned(),
    };
    let (lm, rm) = match row.kind {
        diff::RowKind::Same => (" ", " "),
        diff::RowKind::Added => (" ", "+"),
        diff::RowKind::Removed => ("-", " "),
        diff::RowKind::Changed => ("~", "~"),
    };
    format!(
        "<tr class=\"{}\">{}{}</tr>",
        row.kind.css_class(),
        side(&row.old, lm),
        side(&row.new, rm)
    )
}

/// The line of the environment's own code that an error message names last (1-based): the
/// innermost `File "<environment>", line N` frame of a traceback, or a syntax error's
/// `(<environment>, line N)`. The sandbox runs the code under that file name
/// (`spade_sandbox_runner`'s `ENV_FILE`).
pub fn failing_line(message: &str) -> Option<usize> {
    // The last mention in the text (of either form) is the innermost frame.
    ["\"<environment>\", line ", "(<environment>, line "]
        .into_iter()
        .filter_map(|pat| {
            message.rmatch_indices(pat).find_map(|(i, _)| {
                let digits: String = message[i + pat.len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                digits.parse::<usize>().ok().map(|n| (i, n))
            })
        })
        .max_by_key(|&(i, _)| i)
        .map(|(_, n)| n)
        .filter(|&n| n > 0)
}

#[cfg(test)]
mod failing_line_tests {
    use super::failing_line;

    #[test]
    fn the_innermost_frame_of_the_environment_is_the_failing_line() {
        let tb = "Traceback (most recent call last):\n  File \"<environment>\", line 30, in step\n    return self._score(a)\n  File \"<environment>\", line 12, in _score\n    return 1 / 0\nZeroDivisionError: division by zero";
        assert_eq!(failing_line(tb), Some(12));
        let syntax = "SyntaxError: invalid syntax (<environment>, line 7)";
        assert_eq!(failing_line(syntax), Some(7));
        // Frames of other files (the prelude, the standard library) do not count.
        let other =
            "  File \"/usr/lib/python3.11/json/__init__.py\", line 346, in loads\nValueError: x";
        assert_eq!(failing_line(other), None);
        assert_eq!(failing_line("step timed out"), None);
        assert_eq!(failing_line("File \"<environment>\", line 0"), None);
    }

    #[test]
    fn the_marked_line_carries_the_anchor() {
        use leptos::prelude::*;
        let html = Owner::new().with(|| {
            view! { <super::CodeView code="a = 1\nb = 1 / 0\n".to_owned() label="c" mark=Some(2) /> }
                .to_html()
        });
        assert!(
            html.contains("class=\"line failing\" id=\"failing-line\""),
            "{html}"
        );
        assert_eq!(html.matches("failing-line").count(), 1, "{html}");
    }
}
