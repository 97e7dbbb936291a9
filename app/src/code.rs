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
) -> impl IntoView {
    let lines = python::highlight_lines(&code);
    let html: String = lines
        .iter()
        .map(|l| format!("<span class=\"line\">{l}\n</span>"))
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
