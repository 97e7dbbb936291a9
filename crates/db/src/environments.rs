//! Environments a run's designer wrote, and the sampled plays on them. Listing returns summaries
//! (no code); one environment comes with its code, hint, a few plays and its parent.

use crate::types::{EnvKind, EnvStatus, Verdict};
use crate::{DbError, RunScope};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

/// One row of the environment list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EnvSummary {
    pub id: i64,
    pub env_id: String,
    pub step: i64,
    pub skill: String,
    pub kind: EnvKind,
    pub status: EnvStatus,
    pub rejection_reason: Option<String>,
    pub parent_env_id: Option<String>,
    pub regret: Option<f64>,
    pub win_rate_hint: Option<f64>,
    pub win_rate_no_hint: Option<f64>,
    pub designer_reward: Option<f64>,
    pub reward_levels: Option<i32>,
    /// A short title from the module docstring ([`title_of`]); empty when the code has none.
    pub title: String,
    /// The skill the docstring names ([`code_skill_of`]); `skill` is what the designer was
    /// asked for, and the two differ when the model wrote another game than asked. Empty when
    /// the docstring names none.
    pub code_skill: String,
}

/// Characters of code the list reads to find a title: the docstring is at the top.
const TITLE_HEAD_CHARS: i32 = 600;
/// The longest title shown; longer ones are cut at a word and end in "…".
pub const TITLE_MAX_CHARS: usize = 72;

/// A short title for an environment from the start of its code: the module docstring's first
/// line without the `Skill: ...` and `Mechanic: ...` sentences the designer prompt asks for
/// ("Skill: Optimization. Mechanic: single-answer (3 tries). Pay an exact amount with the
/// fewest coins." -> "Pay an exact amount with the fewest coins"), else the first class name,
/// else empty. Ids like `s3-g1-a0` say nothing to a reader; this says what the game is.
pub fn title_of(code: &str) -> String {
    let doc = docstring_first_line(code);
    let mut rest = doc.trim();
    for label in ["Skill:", "Mechanic:"] {
        if let Some(after) = rest.strip_prefix(label) {
            rest = after_sentence(after).trim_start();
        }
    }
    let title = first_sentence(rest);
    if !title.is_empty() {
        return shorten(title);
    }
    code.lines()
        .find_map(|l| l.strip_prefix("class "))
        .map(|l| {
            l.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .unwrap_or("")
                .to_owned()
        })
        .unwrap_or_default()
}

/// The skill the module docstring names in the `Skill: ...` sentence the designer prompt asks
/// for ("Skill: Optimization. Mechanic: ..." -> "Optimization"); empty without one.
pub fn code_skill_of(code: &str) -> String {
    docstring_first_line(code)
        .trim()
        .strip_prefix("Skill:")
        .map(|after| {
            let rest = after_sentence(after);
            let named = &after[..after.len() - rest.len()];
            named
                .trim()
                .trim_end_matches('.')
                .trim()
                .chars()
                .take(60)
                .collect()
        })
        .unwrap_or_default()
}

/// The first line of the module docstring (triple double or single quotes, optionally `r`).
fn docstring_first_line(code: &str) -> &str {
    let t = code.trim_start_matches('\u{feff}').trim_start();
    let t = t.strip_prefix(['r', 'R']).unwrap_or(t);
    let Some(body) = t.strip_prefix("\"\"\"").or_else(|| t.strip_prefix("'''")) else {
        return "";
    };
    let end = [body.find("\"\"\""), body.find("'''"), body.find('\n')]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(body.len());
    &body[..end]
}

/// What follows the first ". " (or a final ".") outside parentheses.
fn after_sentence(s: &str) -> &str {
    let mut depth = 0i32;
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            '.' if depth <= 0 => {
                let next = &s[i + 1..];
                if next.is_empty() || next.starts_with(' ') {
                    return next;
                }
            }
            _ => {}
        }
    }
    ""
}

/// `s` up to its first sentence end, without the full stop.
fn first_sentence(s: &str) -> &str {
    let rest = after_sentence(s);
    let cut = s.len() - rest.len();
    s[..cut].trim().trim_end_matches('.').trim()
}

fn shorten(t: &str) -> String {
    if t.chars().count() <= TITLE_MAX_CHARS {
        return t.to_owned();
    }
    let head: String = t.chars().take(TITLE_MAX_CHARS - 1).collect();
    let at_word = head.rfind(' ').filter(|&i| i > TITLE_MAX_CHARS / 2);
    format!("{}…", head[..at_word.unwrap_or(head.len())].trim_end())
}

/// One environment in full.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EnvDetail {
    #[serde(flatten)]
    pub summary: EnvSummary,
    pub rejection_message: Option<String>,
    pub code: String,
    pub hint: Option<String>,
    pub attempts: i32,
    pub created_at: DateTime<Utc>,
}

/// A sampled play.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Play {
    pub id: i64,
    pub env_id: String,
    pub step: i64,
    pub with_hint: bool,
    pub episode_return: f64,
    pub won: bool,
    pub turns: i32,
    pub transcript: serde_json::Value,
}

/// How the list is ordered. Every order ends in the row id, so pages never overlap; rows
/// without the sorted value come last.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EnvSort {
    /// By step, then id (the order they were written in).
    #[default]
    Step,
    /// Highest regret first.
    Regret,
    /// Lowest no-hint win rate first (the hardest for the agent).
    WinRateNoHint,
    /// Highest hinted win rate first.
    WinRateHint,
    /// Highest designer reward first.
    DesignerReward,
}

impl EnvSort {
    pub const ALL: [EnvSort; 5] = [
        EnvSort::Step,
        EnvSort::Regret,
        EnvSort::WinRateNoHint,
        EnvSort::WinRateHint,
        EnvSort::DesignerReward,
    ];

    /// The query-parameter spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EnvSort::Step => "step",
            EnvSort::Regret => "regret",
            EnvSort::WinRateNoHint => "win_rate_no_hint",
            EnvSort::WinRateHint => "win_rate_hint",
            EnvSort::DesignerReward => "designer_reward",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// The `sort` query parameter: absent or empty is the default; anything else unknown is
    /// the message the API and the pages both show ("expected a, b or c, got ...").
    pub fn from_param(v: Option<&str>) -> Result<Self, String> {
        match v.filter(|v| !v.is_empty()) {
            None => Ok(Self::default()),
            Some(v) => Self::parse(v).ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|s| s.as_str()).collect();
                format!("expected {}, got {v:?}", crate::one_of(&names))
            }),
        }
    }

    /// The row's place in a sorted (not step-ordered) list, ascending: the same numbers the
    /// query's `CASE` computes, so a cursor taken from a row resumes exactly after it.
    fn key(self, e: &EnvSummary) -> f64 {
        let desc = |v: Option<f64>| v.map_or(f64::INFINITY, |v| -v);
        match self {
            EnvSort::Step => e.step as f64,
            EnvSort::Regret => desc(e.regret),
            EnvSort::WinRateNoHint => e.win_rate_no_hint.unwrap_or(f64::INFINITY),
            EnvSort::WinRateHint => desc(e.win_rate_hint),
            EnvSort::DesignerReward => desc(e.designer_reward),
        }
    }
}

/// Where a page starts: after the row a previous page's [`EnvFilter::cursor_after`] named.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EnvCursor {
    /// Step order: (step, id).
    Step(i64, i64),
    /// Another order: (sort key, id).
    Key(f64, i64),
}

impl EnvCursor {
    /// Parses a `next_cursor` of a list in `sort` order; `None` for anything else (a cursor of
    /// another order included).
    pub fn parse(sort: EnvSort, c: &str) -> Option<Self> {
        let (k, id) = c.split_once(':')?;
        let id = id.parse().ok()?;
        match sort {
            EnvSort::Step => Some(EnvCursor::Step(k.parse().ok()?, id)),
            _ => {
                let key: f64 = k.strip_prefix('k')?.parse().ok()?;
                (!key.is_nan()).then_some(EnvCursor::Key(key, id))
            }
        }
    }
}

/// Filters of [`list`]. Ranges are inclusive; `after` is the keyset cursor `(step, id)` of the
/// last row of the previous page (rows are ordered by step, then id).
#[derive(Debug, Clone, Default)]
pub struct EnvFilter {
    pub skill: Option<String>,
    pub status: Option<EnvStatus>,
    pub step_min: Option<i64>,
    pub step_max: Option<i64>,
    pub regret_min: Option<f64>,
    pub regret_max: Option<f64>,
    /// Review marks (`env_reviews`) the rows must have, or lack.
    pub review: Option<ReviewFilter>,
    /// Step order's keyset cursor (what [`export_page`] reads by).
    pub after: Option<(i64, i64)>,
    /// The list's order ([`list`] only; exports are in step order).
    pub sort: EnvSort,
    /// Another order's keyset cursor (sort key, id).
    pub after_key: Option<(f64, i64)>,
    pub limit: i64,
}

/// Which environments a review filter keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewFilter {
    /// Some member of the team marked it with this verdict (whatever others said).
    Marked(Verdict),
    /// No member marked it.
    Unreviewed,
}

impl EnvFilter {
    /// Starts the page after the row `c` names.
    pub fn set_cursor(&mut self, c: EnvCursor) {
        match c {
            EnvCursor::Step(step, id) => self.after = Some((step, id)),
            EnvCursor::Key(key, id) => self.after_key = Some((key, id)),
        }
    }

    /// The cursor of the page after `last` in this filter's order (the API's `next_cursor`).
    pub fn cursor_after(&self, last: &EnvSummary) -> String {
        match self.sort {
            EnvSort::Step => format!("{}:{}", last.step, last.id),
            s => format!("k{}:{}", s.key(last), last.id),
        }
    }

    /// The review filter as the queries' two parameters: a verdict some mark must have, and
    /// whether no mark may exist.
    fn review_params(&self) -> (Option<Verdict>, bool) {
        match self.review {
            None => (None, false),
            Some(ReviewFilter::Marked(v)) => (Some(v), false),
            Some(ReviewFilter::Unreviewed) => (None, true),
        }
    }
}

/// Environments of the scoped run, filtered, one page, in the filter's order.
pub async fn list(
    pool: &PgPool,
    scope: &RunScope,
    f: &EnvFilter,
) -> Result<Vec<EnvSummary>, DbError> {
    let mut rows = if f.sort == EnvSort::Step {
        list_by_step(pool, scope, f).await?
    } else {
        list_sorted(pool, scope, f).await?
    };
    // The queries return the head of the code as `title`.
    for r in &mut rows {
        r.code_skill = code_skill_of(&r.title);
        r.title = title_of(&r.title);
    }
    Ok(rows)
}

/// Step order, on the `(run_id, step, id)` index.
async fn list_by_step(
    pool: &PgPool,
    scope: &RunScope,
    f: &EnvFilter,
) -> Result<Vec<EnvSummary>, DbError> {
    let (after_step, after_id) = f.after.unzip();
    let (marked, unreviewed) = f.review_params();
    let rows = sqlx::query_as!(
        EnvSummary,
        r#"SELECT id, env_id, step, skill, kind AS "kind: EnvKind", status AS "status: EnvStatus",
                  rejection_reason, parent_env_id, regret, win_rate_hint, win_rate_no_hint,
                  designer_reward, reward_levels, left(code, $13) AS "title!",
                  '' AS "code_skill!"
           FROM environments
           WHERE run_id = $1
             AND ($2::text IS NULL OR skill = $2)
             AND ($3::env_status IS NULL OR status = $3)
             AND ($4::bigint IS NULL OR step >= $4)
             AND ($5::bigint IS NULL OR step <= $5)
             AND ($6::float8 IS NULL OR regret >= $6)
             AND ($7::float8 IS NULL OR regret <= $7)
             AND ($8::bigint IS NULL OR (step, id) > ($8, $9::bigint))
             AND ($11::env_verdict IS NULL OR EXISTS (
                   SELECT 1 FROM env_reviews r
                   WHERE r.environment_id = environments.id AND r.verdict = $11))
             AND (NOT $12::bool OR NOT EXISTS (
                   SELECT 1 FROM env_reviews r WHERE r.environment_id = environments.id))
           ORDER BY step, id
           LIMIT $10"#,
        scope.run_id,
        f.skill,
        f.status as Option<EnvStatus>,
        f.step_min,
        f.step_max,
        f.regret_min,
        f.regret_max,
        after_step,
        after_id,
        f.limit,
        marked as Option<Verdict>,
        unreviewed,
        TITLE_HEAD_CHARS
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// Any other order. The key is [`EnvSort::key`] in SQL (descending orders negate the value,
/// missing values are +infinity); no index has it, so a sorted page sorts the run's filtered
/// rows.
async fn list_sorted(
    pool: &PgPool,
    scope: &RunScope,
    f: &EnvFilter,
) -> Result<Vec<EnvSummary>, DbError> {
    let (after_key, after_id) = f.after_key.unzip();
    let (marked, unreviewed) = f.review_params();
    let rows = sqlx::query_as!(
        EnvSummary,
        r#"SELECT id, env_id, step, skill, kind AS "kind: EnvKind", status AS "status: EnvStatus",
                  rejection_reason, parent_env_id, regret, win_rate_hint, win_rate_no_hint,
                  designer_reward, reward_levels, left(code, $13) AS "title!",
                  '' AS "code_skill!"
           FROM environments
           WHERE run_id = $1
             AND ($2::text IS NULL OR skill = $2)
             AND ($3::env_status IS NULL OR status = $3)
             AND ($4::bigint IS NULL OR step >= $4)
             AND ($5::bigint IS NULL OR step <= $5)
             AND ($6::float8 IS NULL OR regret >= $6)
             AND ($7::float8 IS NULL OR regret <= $7)
             AND ($8::float8 IS NULL OR (
                   CASE $14::text
                     WHEN 'regret' THEN coalesce(-regret, 'Infinity')
                     WHEN 'win_rate_no_hint' THEN coalesce(win_rate_no_hint, 'Infinity')
                     WHEN 'win_rate_hint' THEN coalesce(-win_rate_hint, 'Infinity')
                     ELSE coalesce(-designer_reward, 'Infinity')
                   END, id) > ($8, $9::bigint))
             AND ($11::env_verdict IS NULL OR EXISTS (
                   SELECT 1 FROM env_reviews r
                   WHERE r.environment_id = environments.id AND r.verdict = $11))
             AND (NOT $12::bool OR NOT EXISTS (
                   SELECT 1 FROM env_reviews r WHERE r.environment_id = environments.id))
           ORDER BY CASE $14::text
                      WHEN 'regret' THEN coalesce(-regret, 'Infinity')
                      WHEN 'win_rate_no_hint' THEN coalesce(win_rate_no_hint, 'Infinity')
                      WHEN 'win_rate_hint' THEN coalesce(-win_rate_hint, 'Infinity')
                      ELSE coalesce(-designer_reward, 'Infinity')
                    END, id
           LIMIT $10"#,
        scope.run_id,
        f.skill,
        f.status as Option<EnvStatus>,
        f.step_min,
        f.step_max,
        f.regret_min,
        f.regret_max,
        after_key,
        after_id,
        f.limit,
        marked as Option<Verdict>,
        unreviewed,
        TITLE_HEAD_CHARS,
        f.sort.as_str()
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// One environment of the scoped run by its `env_id`.
pub async fn get(pool: &PgPool, scope: &RunScope, env_id: &str) -> Result<EnvDetail, DbError> {
    let r = sqlx::query!(
        r#"SELECT id, env_id, step, skill, kind AS "kind: EnvKind", status AS "status: EnvStatus",
                  rejection_reason, rejection_message, parent_env_id, regret, win_rate_hint,
                  win_rate_no_hint, designer_reward, reward_levels, code, hint, attempts,
                  created_at
           FROM environments WHERE run_id = $1 AND env_id = $2"#,
        scope.run_id,
        env_id
    )
    .fetch_optional(pool)
    .await?
    .ok_or(DbError::NotFound("environment"))?;
    Ok(EnvDetail {
        summary: EnvSummary {
            id: r.id,
            env_id: r.env_id,
            step: r.step,
            skill: r.skill,
            kind: r.kind,
            status: r.status,
            rejection_reason: r.rejection_reason,
            parent_env_id: r.parent_env_id,
            regret: r.regret,
            win_rate_hint: r.win_rate_hint,
            win_rate_no_hint: r.win_rate_no_hint,
            designer_reward: r.designer_reward,
            reward_levels: r.reward_levels,
            title: title_of(&r.code),
            code_skill: code_skill_of(&r.code),
        },
        rejection_message: r.rejection_message,
        code: r.code,
        hint: r.hint,
        attempts: r.attempts,
        created_at: r.created_at,
    })
}

/// Up to `limit` plays of one environment, oldest first.
pub async fn plays(
    pool: &PgPool,
    scope: &RunScope,
    env_id: &str,
    limit: i64,
) -> Result<Vec<Play>, DbError> {
    let rows = sqlx::query_as!(
        Play,
        "SELECT id, env_id, step, with_hint, episode_return, won, turns, transcript
         FROM plays WHERE run_id = $1 AND env_id = $2 ORDER BY id LIMIT $3",
        scope.run_id,
        env_id,
        limit
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// One environment as a pool export needs it: the summary's scores with the code and hint.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EnvExport {
    pub id: i64,
    pub env_id: String,
    pub step: i64,
    pub skill: String,
    pub kind: EnvKind,
    pub status: EnvStatus,
    pub parent_env_id: Option<String>,
    pub regret: Option<f64>,
    pub win_rate_hint: Option<f64>,
    pub win_rate_no_hint: Option<f64>,
    pub designer_reward: Option<f64>,
    pub reward_levels: Option<i32>,
    pub code: String,
    pub hint: Option<String>,
}

/// Filters of [`export_page`]: the list's, and a band of the no-hint win rate.
#[derive(Debug, Clone, Default)]
pub struct ExportFilter {
    /// Filters, keyset cursor and page size, as for [`list`].
    pub env: EnvFilter,
    pub win_rate_min: Option<f64>,
    pub win_rate_max: Option<f64>,
}

/// One page of the scoped run's environments with their code, in (step, id) order. Export
/// reads a run page by page through this, so its memory is one page whatever the run's size.
pub async fn export_page(
    pool: &PgPool,
    scope: &RunScope,
    f: &ExportFilter,
) -> Result<Vec<EnvExport>, DbError> {
    let e = &f.env;
    let (after_step, after_id) = e.after.unzip();
    let (marked, unreviewed) = e.review_params();
    let rows = sqlx::query_as!(
        EnvExport,
        r#"SELECT id, env_id, step, skill, kind AS "kind: EnvKind", status AS "status: EnvStatus",
                  parent_env_id, regret, win_rate_hint, win_rate_no_hint, designer_reward,
                  reward_levels, code, hint
           FROM environments
           WHERE run_id = $1
             AND ($2::text IS NULL OR skill = $2)
             AND ($3::env_status IS NULL OR status = $3)
             AND ($4::bigint IS NULL OR step >= $4)
             AND ($5::bigint IS NULL OR step <= $5)
             AND ($6::float8 IS NULL OR regret >= $6)
             AND ($7::float8 IS NULL OR regret <= $7)
             AND ($8::float8 IS NULL OR win_rate_no_hint >= $8)
             AND ($9::float8 IS NULL OR win_rate_no_hint <= $9)
             AND ($10::bigint IS NULL OR (step, id) > ($10, $11::bigint))
             AND ($13::env_verdict IS NULL OR EXISTS (
                   SELECT 1 FROM env_reviews r
                   WHERE r.environment_id = environments.id AND r.verdict = $13))
             AND (NOT $14::bool OR NOT EXISTS (
                   SELECT 1 FROM env_reviews r WHERE r.environment_id = environments.id))
           ORDER BY step, id
           LIMIT $12"#,
        scope.run_id,
        e.skill,
        e.status as Option<EnvStatus>,
        e.step_min,
        e.step_max,
        e.regret_min,
        e.regret_max,
        f.win_rate_min,
        f.win_rate_max,
        after_step,
        after_id,
        e.limit,
        marked as Option<Verdict>,
        unreviewed
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_come_from_the_docstring_after_skill_and_mechanic() {
        let seed = "\"\"\"Skill: Optimization. Mechanic: single-answer with feedback (3 tries; a feasible but worse pick is told its value). 0/1 knapsack for a hiking trip.\"\"\"\nimport random\n";
        assert_eq!(title_of(seed), "0/1 knapsack for a hiking trip");
        assert_eq!(
            code_skill_of("\"\"\"Skill: Optimization. Mechanic: x. Pay.\"\"\"\nclass A: pass"),
            "Optimization"
        );
        assert_eq!(code_skill_of("\"\"\"Guess the number.\"\"\""), "");
        let two = "\"\"\"Skill: Logical Deduction. Mechanic: single-answer (one attempt). A small zebra puzzle: three houses. Clues pin one down.\"\"\"";
        assert_eq!(title_of(two), "A small zebra puzzle: three houses");
        assert_eq!(
            title_of("'''Guess the number (1-100).'''\nclass X: pass"),
            "Guess the number (1-100)"
        );
        assert_eq!(
            title_of("\"\"\"Skill: Optimization.\"\"\"\nclass CoinEnv:\n    pass"),
            "CoinEnv",
            "no title sentence: the class name"
        );
        assert_eq!(title_of("import random\n"), "");
        assert_eq!(title_of(""), "");
        let long = format!("\"\"\"{}\"\"\"", "word ".repeat(40));
        let t = title_of(&long);
        assert!(
            t.ends_with('…') && t.chars().count() <= TITLE_MAX_CHARS,
            "{t}"
        );
        // A docstring cut off by the list's 600-character head still gives its first line.
        assert_eq!(
            title_of("\"\"\"Find the odd one out. More"),
            "Find the odd one out"
        );
    }

    #[test]
    fn cursors_resume_in_their_own_order_and_refuse_others() {
        let row = EnvSummary {
            id: 9,
            env_id: "s1-g0-a0".into(),
            step: 4,
            skill: "Optimization".into(),
            kind: EnvKind::Game,
            status: EnvStatus::Accepted,
            rejection_reason: None,
            parent_env_id: None,
            regret: Some(0.25),
            win_rate_hint: None,
            win_rate_no_hint: Some(0.5),
            designer_reward: None,
            reward_levels: None,
            title: String::new(),
            code_skill: String::new(),
        };
        for (sort, want) in [
            (EnvSort::Step, "4:9"),
            (EnvSort::Regret, "k-0.25:9"),
            (EnvSort::WinRateNoHint, "k0.5:9"),
            (EnvSort::WinRateHint, "kinf:9"),
            (EnvSort::DesignerReward, "kinf:9"),
        ] {
            let f = EnvFilter {
                sort,
                ..EnvFilter::default()
            };
            let c = f.cursor_after(&row);
            assert_eq!(c, want);
            let mut g = EnvFilter::default();
            g.set_cursor(EnvCursor::parse(sort, &c).expect("its own cursor parses"));
            match sort {
                EnvSort::Step => assert_eq!(g.after, Some((4, 9))),
                _ => assert_eq!(g.after_key, Some((sort.key(&row), 9))),
            }
        }
        assert_eq!(
            EnvCursor::parse(EnvSort::Regret, "4:9"),
            None,
            "a step cursor"
        );
        assert_eq!(EnvCursor::parse(EnvSort::Step, "k1:9"), None);
        assert_eq!(EnvCursor::parse(EnvSort::Regret, "kNaN:9"), None);
        assert_eq!(EnvCursor::parse(EnvSort::Regret, "k1"), None);
        assert_eq!(EnvSort::parse("regret"), Some(EnvSort::Regret));
        assert_eq!(EnvSort::parse("Regret"), None);
    }
}
