//! QA verdicts in the sandbox agree with math-verify run directly, on equivalent forms of one
//! answer (1/2, 0.5, \frac{1}{2}, \frac12) and on answers that differ.

use serde_json::json;

const DIRECT: &str = r#"
import json, sys
from math_verify import parse, verify
out = []
for gold, pred in json.load(sys.stdin):
    out.append(0.0 if pred is None else (1.0 if verify(parse("\\boxed{" + gold + "}"), parse("\\boxed{" + pred + "}")) else 0.0))
print(json.dumps(out))
"#;

#[test]
fn qa_verdicts_agree_with_math_verify() {
    let cases: Vec<(&str, Option<&str>, f64)> = vec![
        ("1/2", Some("0.5"), 1.0),
        ("1/2", Some("\\frac{1}{2}"), 1.0),
        ("0.5", Some("\\frac12"), 1.0),
        ("\\frac{1}{2}", Some("1/2"), 1.0),
        ("42", Some("42.0"), 1.0),
        ("x+1", Some("1+x"), 1.0),
        ("1/2", Some("1/3"), 0.0),
        ("1/2", Some("abc"), 0.0),
        ("1/2", None, 0.0),
        ("7", Some("}{"), 0.0),
    ];
    let pairs: Vec<(String, Option<String>)> = cases
        .iter()
        .map(|(g, p, _)| (g.to_string(), p.map(str::to_string)))
        .collect();
    let pool = super::pool();
    let mut leased = pool.checkout().unwrap_or_else(|e| panic!("runner: {e}"));
    let ours = spade_eval::qa::verify(&mut leased.runner, &pairs).unwrap();
    let direct = super::python_json(DIRECT, &json!(pairs));
    for (((g, p, expected), o), d) in cases
        .iter()
        .zip(&ours)
        .zip(direct.as_array().into_iter().flatten())
    {
        assert_eq!(
            Some(o.score),
            d.as_f64(),
            "{g} vs {p:?}: ours {o:?}, math-verify {d}"
        );
        assert_eq!(o.score, *expected, "{g} vs {p:?}");
    }
    assert_eq!(ours.len(), cases.len());
}
