//! Side-by-side line diff of two Python sources: an environment against the memory
//! environment it was derived from, so a reviewer sees what the designer changed. Both sides
//! are highlighted as whole files first (a triple-quoted string can span lines), then the diff
//! picks lines by number.

use super::python::highlight_lines;
use similar::{DiffTag, TextDiff};

/// How a row of the side-by-side view differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    Same,
    /// Only on the right (new) side.
    Added,
    /// Only on the left (old) side.
    Removed,
    /// Both sides present, text differs.
    Changed,
}

impl RowKind {
    pub fn css_class(self) -> &'static str {
        match self {
            RowKind::Same => "diff-same",
            RowKind::Added => "diff-add",
            RowKind::Removed => "diff-del",
            RowKind::Changed => "diff-chg",
        }
    }
}

/// One side of a row: 1-based line number and highlighted HTML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub line: usize,
    pub html: String,
}

/// One row of the side-by-side view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub kind: RowKind,
    pub old: Option<Cell>,
    pub new: Option<Cell>,
}

/// The rows of the side-by-side diff plus counts for the summary line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideBySide {
    pub rows: Vec<Row>,
    pub added: usize,
    pub removed: usize,
}

/// Diffs `old` against `new` line by line. A replaced block pairs lines up (changed rows) and
/// leaves the longer side's remainder as added or removed rows.
pub fn side_by_side(old: &str, new: &str) -> SideBySide {
    let old_html = highlight_lines(old);
    let new_html = highlight_lines(new);
    let cell = |html: &[String], i: usize| Cell {
        line: i + 1,
        html: html.get(i).cloned().unwrap_or_default(),
    };
    let diff = TextDiff::from_lines(old, new);
    let mut rows = Vec::new();
    let (mut added, mut removed) = (0, 0);
    for op in diff.ops() {
        let (o, n) = (op.old_range(), op.new_range());
        match op.tag() {
            DiffTag::Equal => rows.extend(o.zip(n).map(|(i, j)| Row {
                kind: RowKind::Same,
                old: Some(cell(&old_html, i)),
                new: Some(cell(&new_html, j)),
            })),
            DiffTag::Delete => {
                removed += o.len();
                rows.extend(o.map(|i| Row {
                    kind: RowKind::Removed,
                    old: Some(cell(&old_html, i)),
                    new: None,
                }));
            }
            DiffTag::Insert => {
                added += n.len();
                rows.extend(n.map(|j| Row {
                    kind: RowKind::Added,
                    old: None,
                    new: Some(cell(&new_html, j)),
                }));
            }
            DiffTag::Replace => {
                removed += o.len();
                added += n.len();
                let (o, n): (Vec<_>, Vec<_>) = (o.collect(), n.collect());
                for k in 0..o.len().max(n.len()) {
                    let (l, r) = (o.get(k), n.get(k));
                    let kind = match (l, r) {
                        (Some(_), Some(_)) => RowKind::Changed,
                        (Some(_), None) => RowKind::Removed,
                        _ => RowKind::Added,
                    };
                    rows.push(Row {
                        kind,
                        old: l.map(|&i| cell(&old_html, i)),
                        new: r.map(|&j| cell(&new_html, j)),
                    });
                }
            }
        }
    }
    SideBySide {
        rows,
        added,
        removed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_sources_have_only_same_rows() {
        let d = side_by_side("a = 1\nb = 2\n", "a = 1\nb = 2\n");
        assert_eq!(d.rows.len(), 2);
        assert!(d.rows.iter().all(|r| r.kind == RowKind::Same));
        assert_eq!((d.added, d.removed), (0, 0));
    }

    #[test]
    fn changes_pair_up_and_remainders_are_added_or_removed() {
        let old = "x = 1\ny = 2\nz = 3\n";
        let new = "x = 1\ny = 20\nw = 4\nz = 3\nv = 5\n";
        let d = side_by_side(old, new);
        let kinds: Vec<RowKind> = d.rows.iter().map(|r| r.kind).collect();
        assert_eq!(
            kinds,
            vec![
                RowKind::Same,
                RowKind::Changed,
                RowKind::Added,
                RowKind::Same,
                RowKind::Added
            ]
        );
        let changed = &d.rows[1];
        assert_eq!(changed.old.as_ref().map(|c| c.line), Some(2));
        assert_eq!(changed.new.as_ref().map(|c| c.line), Some(2));
        assert!(changed.new.as_ref().is_some_and(|c| c.html.contains("20")));
        // Line numbers on each side follow that side's own numbering.
        assert_eq!(d.rows[3].old.as_ref().map(|c| c.line), Some(3));
        assert_eq!(d.rows[3].new.as_ref().map(|c| c.line), Some(4));
        assert_eq!((d.added, d.removed), (3, 1));
    }

    #[test]
    fn lines_inside_a_multiline_string_keep_the_string_colour() {
        let old = "doc = \"\"\"\nold text\n\"\"\"\n";
        let new = "doc = \"\"\"\nnew text\n\"\"\"\n";
        let d = side_by_side(old, new);
        let changed = d.rows.iter().find(|r| r.kind == RowKind::Changed);
        let html = changed.and_then(|r| r.new.as_ref()).map(|c| c.html.clone());
        assert_eq!(
            html.as_deref(),
            Some("<span class=\"tok-str\">new text</span>")
        );
    }
}
