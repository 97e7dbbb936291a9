//! A small Python tokenizer for syntax highlighting. Designer-written environments are Python,
//! and people read a lot of them, so keywords, strings (prefixed, triple-quoted, unterminated),
//! comments, numbers, decorators and the names after `def`/`class` get their own colour.
//!
//! It never fails: any input (including broken code the sandbox rejected) tokenizes, and the
//! concatenated token texts always equal the input. Output HTML is escaped, so code that
//! contains `<script>` shows as text.

/// What a piece of source is, for colouring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    Keyword,
    /// `self`, `print`, `len` and a few other names people scan for.
    Builtin,
    /// A string literal with its prefix and quotes.
    Str,
    Comment,
    Number,
    /// `@name` at the start of a decorator.
    Decorator,
    /// The name right after `def` or `class`.
    Definition,
    Name,
    /// Operators, brackets, whitespace, anything else.
    Other,
}

impl TokenKind {
    /// CSS class of the span, or `None` for text that is not coloured.
    pub fn css_class(self) -> Option<&'static str> {
        match self {
            TokenKind::Keyword => Some("tok-kw"),
            TokenKind::Builtin => Some("tok-bi"),
            TokenKind::Str => Some("tok-str"),
            TokenKind::Comment => Some("tok-com"),
            TokenKind::Number => Some("tok-num"),
            TokenKind::Decorator => Some("tok-dec"),
            TokenKind::Definition => Some("tok-def"),
            TokenKind::Name | TokenKind::Other => None,
        }
    }
}

/// One token: a kind and the exact slice of source it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token<'a> {
    pub kind: TokenKind,
    pub text: &'a str,
}

const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

const BUILTINS: &[&str] = &[
    "self",
    "cls",
    "print",
    "len",
    "range",
    "int",
    "str",
    "float",
    "bool",
    "list",
    "dict",
    "set",
    "tuple",
    "min",
    "max",
    "sum",
    "abs",
    "enumerate",
    "zip",
    "sorted",
    "isinstance",
    "super",
    "ValueError",
    "Exception",
];

/// Splits `src` into tokens; their texts concatenate back to `src`.
pub fn tokenize(src: &str) -> Vec<Token<'_>> {
    let mut spans = Vec::new();
    let mut i = 0;
    let bytes = src.as_bytes();
    // The previous keyword, so the next name after `def`/`class` becomes a definition.
    let mut after_def = false;
    while i < src.len() {
        let rest = &src[i..];
        let c = rest.chars().next().unwrap_or('\0');
        let (kind, len) = if c == '#' {
            (TokenKind::Comment, rest.find('\n').unwrap_or(rest.len()))
        } else if let Some(len) = string_len(rest) {
            (TokenKind::Str, len)
        } else if c.is_ascii_digit()
            || (c == '.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            (TokenKind::Number, number_len(rest))
        } else if c == '@' && line_start_is_blank(src, i) {
            let len = 1 + rest[1..]
                .find(|ch: char| !(is_ident_char(ch) || ch == '.'))
                .unwrap_or(rest.len() - 1);
            (TokenKind::Decorator, len)
        } else if is_ident_start(c) {
            let len = rest
                .find(|ch: char| !is_ident_char(ch))
                .unwrap_or(rest.len());
            let word = &rest[..len];
            let kind = if KEYWORDS.contains(&word) {
                TokenKind::Keyword
            } else if after_def {
                TokenKind::Definition
            } else if BUILTINS.contains(&word) {
                TokenKind::Builtin
            } else {
                TokenKind::Name
            };
            (kind, len)
        } else {
            (TokenKind::Other, c.len_utf8())
        };
        let text = &rest[..len];
        match kind {
            TokenKind::Keyword => after_def = text == "def" || text == "class",
            TokenKind::Other if text.trim().is_empty() && text != "\n" => {}
            _ => after_def = false,
        }
        push(&mut spans, kind, i, i + len);
        i += len;
    }
    spans
        .into_iter()
        .map(|(kind, start, end)| Token {
            kind,
            text: &src[start..end],
        })
        .collect()
}

/// Appends a token span, merging runs of uncoloured characters so the HTML stays small.
fn push(out: &mut Vec<(TokenKind, usize, usize)>, kind: TokenKind, start: usize, end: usize) {
    if let Some(last) = out.last_mut()
        && last.0 == TokenKind::Other
        && kind == TokenKind::Other
        && last.2 == start
    {
        last.2 = end;
        return;
    }
    out.push((kind, start, end));
}

fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn is_ident_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

fn line_start_is_blank(src: &str, i: usize) -> bool {
    let line_start = src[..i].rfind('\n').map_or(0, |p| p + 1);
    src[line_start..i].chars().all(char::is_whitespace)
}

/// Length of the string literal at the start of `s` (prefix, quotes, body), or `None` if `s`
/// does not start one. Unterminated strings run to the end of the line (single quotes) or of
/// the input (triple quotes), as Python's own tokenizer would report them.
fn string_len(s: &str) -> Option<usize> {
    let prefix_len = s
        .char_indices()
        .take_while(|(_, c)| matches!(c, 'r' | 'R' | 'b' | 'B' | 'f' | 'F' | 'u' | 'U'))
        .count();
    if prefix_len > 2 {
        return None;
    }
    let prefix = &s[..prefix_len];
    let raw = prefix.contains(['r', 'R']);
    let body = &s[prefix_len..];
    let quote = body.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let triple: String = std::iter::repeat_n(quote, 3).collect();
    let (open, close) = if body.starts_with(&triple) {
        (3, triple.as_str())
    } else {
        (1, &body[..1])
    };
    let mut j = open;
    let chars = body.as_bytes();
    while j < body.len() {
        if !raw && chars[j] == b'\\' {
            // Skip the escaped character (which may be a multi-byte one).
            j += 1;
            if let Some(ch) = body[j..].chars().next() {
                j += ch.len_utf8();
            }
            continue;
        }
        if raw && chars[j] == b'\\' && j + 1 < body.len() {
            // In raw strings a backslash still keeps the next quote from closing the string.
            j += 1 + body[j + 1..].chars().next().map_or(0, char::len_utf8);
            continue;
        }
        if body[j..].starts_with(close) {
            return Some(prefix_len + j + close.len());
        }
        if open == 1 && chars[j] == b'\n' {
            return Some(prefix_len + j);
        }
        j += body[j..].chars().next().map_or(1, char::len_utf8);
    }
    Some(s.len())
}

/// Length of the number literal at the start of `s`: hex/octal/binary, decimals with `_`,
/// fractions, exponents and an imaginary `j`.
fn number_len(s: &str) -> usize {
    let b = s.as_bytes();
    if b.len() > 1 && b[0] == b'0' && matches!(b[1], b'x' | b'X' | b'o' | b'O' | b'b' | b'B') {
        return 2 + s[2..]
            .find(|c: char| !(c.is_ascii_hexdigit() || c == '_'))
            .unwrap_or(s.len() - 2);
    }
    let mut j = 0;
    let digits = |j: &mut usize| {
        while *j < b.len() && (b[*j].is_ascii_digit() || b[*j] == b'_') {
            *j += 1;
        }
    };
    digits(&mut j);
    if j < b.len() && b[j] == b'.' {
        j += 1;
        digits(&mut j);
    }
    if j < b.len() && matches!(b[j], b'e' | b'E') {
        let mut k = j + 1;
        if k < b.len() && matches!(b[k], b'+' | b'-') {
            k += 1;
        }
        if k < b.len() && b[k].is_ascii_digit() {
            j = k;
            digits(&mut j);
        }
    }
    if j < b.len() && matches!(b[j], b'j' | b'J') {
        j += 1;
    }
    j.max(1)
}

/// Escapes text for HTML element content and attribute values.
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// Highlighted HTML for each line of `src` (without the newline). A token that spans lines (a
/// triple-quoted string) is split so every line is balanced HTML on its own.
pub fn highlight_lines(src: &str) -> Vec<String> {
    let mut lines = vec![String::new()];
    for tok in tokenize(src) {
        let class = tok.kind.css_class();
        for (n, piece) in tok.text.split('\n').enumerate() {
            if n > 0 {
                lines.push(String::new());
            }
            if piece.is_empty() {
                continue;
            }
            let Some(line) = lines.last_mut() else {
                continue;
            };
            match class {
                Some(class) => {
                    line.push_str("<span class=\"");
                    line.push_str(class);
                    line.push_str("\">");
                    line.push_str(&escape_html(piece));
                    line.push_str("</span>");
                }
                None => line.push_str(&escape_html(piece)),
            }
        }
    }
    if src.ends_with('\n') {
        lines.pop();
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<(TokenKind, &str)> {
        tokenize(src)
            .into_iter()
            .filter(|t| !matches!(t.kind, TokenKind::Other | TokenKind::Name))
            .map(|t| (t.kind, t.text))
            .collect()
    }

    #[test]
    fn tokens_concatenate_back_to_the_source() {
        let src = "class MazeEnv:\n    def step(self, a):  # move\n        return 0x1F, 1.5e-3, 'x'\n\u{e9}t\u{e9} = \"\"\"a\nb\"\"\"\n";
        let joined: String = tokenize(src).iter().map(|t| t.text).collect();
        assert_eq!(joined, src);
    }

    #[test]
    fn keywords_builtins_definitions_and_comments() {
        let k = kinds("def step(self):  # not a keyword: def\n    return None");
        assert_eq!(
            k,
            vec![
                (TokenKind::Keyword, "def"),
                (TokenKind::Definition, "step"),
                (TokenKind::Builtin, "self"),
                (TokenKind::Comment, "# not a keyword: def"),
                (TokenKind::Keyword, "return"),
                (TokenKind::Keyword, "None"),
            ]
        );
        // A name that merely starts with a keyword is a name.
        assert_eq!(kinds("define = format"), vec![]);
    }

    #[test]
    fn strings_with_prefixes_escapes_and_triple_quotes() {
        assert_eq!(
            kinds(r#"f"a\"b" + 'c'"#),
            vec![(TokenKind::Str, r#"f"a\"b""#), (TokenKind::Str, "'c'")]
        );
        assert_eq!(kinds(r"r'\d+'"), vec![(TokenKind::Str, r"r'\d+'")]);
        let doc = "x = '''one\n# not a comment\n'''  # a comment";
        assert_eq!(
            kinds(doc),
            vec![
                (TokenKind::Str, "'''one\n# not a comment\n'''"),
                (TokenKind::Comment, "# a comment"),
            ]
        );
        // Unterminated: a single-quoted string stops at the line end, a triple one at the end.
        assert_eq!(
            kinds("'abc\nx = 1"),
            vec![(TokenKind::Str, "'abc"), (TokenKind::Number, "1")]
        );
        assert_eq!(
            kinds("\"\"\"abc\nx"),
            vec![(TokenKind::Str, "\"\"\"abc\nx")]
        );
        // An identifier that looks like a prefix is still a name when no quote follows.
        assert_eq!(kinds("rb + br"), vec![]);
    }

    #[test]
    fn numbers_of_every_form() {
        for n in [
            "42", "1_000", "0x1F", "0o17", "0b1010", "3.25", ".5", "1e-3", "2.5E+10", "3j",
        ] {
            assert_eq!(kinds(n), vec![(TokenKind::Number, n)], "{n}");
        }
        // A name with digits is a name, not a number.
        assert_eq!(kinds("x1"), vec![]);
    }

    #[test]
    fn decorators_only_at_line_start() {
        assert_eq!(
            kinds("@staticmethod\ndef f(): return a @ b"),
            vec![
                (TokenKind::Decorator, "@staticmethod"),
                (TokenKind::Keyword, "def"),
                (TokenKind::Definition, "f"),
                (TokenKind::Keyword, "return"),
            ]
        );
    }

    #[test]
    fn html_is_escaped_and_lines_stay_balanced() {
        let lines = highlight_lines("s = \"\"\"<script>alert(1)</script>\n&\"\"\"\nx = 1 < 2\n");
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[0],
            "s = <span class=\"tok-str\">&quot;&quot;&quot;&lt;script&gt;alert(1)&lt;/script&gt;</span>"
        );
        assert_eq!(
            lines[1],
            "<span class=\"tok-str\">&amp;&quot;&quot;&quot;</span>"
        );
        assert_eq!(
            lines[2],
            "x = <span class=\"tok-num\">1</span> &lt; <span class=\"tok-num\">2</span>"
        );
        assert!(!lines.concat().contains("<script"));
    }

    #[test]
    fn empty_and_blank_lines() {
        assert!(highlight_lines("").len() == 1);
        assert_eq!(highlight_lines("a\n\nb"), vec!["a", "", "b"]);
    }
}
