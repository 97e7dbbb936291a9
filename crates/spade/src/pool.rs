//! The environment pool format: what SPADE produces that outlives a run, in a form other tools
//! can read. A pool is a directory holding
//!
//! - one `.py` file per environment (the code the sandbox validated);
//! - `pool.jsonl`: one [`PoolEntry`] per line, naming its file in `code_file`;
//! - `README.md`: a dataset card ([`Card`]): run, model, filters, counts per skill.
//!
//! The same [`PoolEntry`] lines with the code inline (`code` instead of `code_file`) are the
//! streamed form: `GET /api/v1/runs/{id}/environments.jsonl` serves it, and a pool may be given
//! as such a file too. This module parses and checks lines, filters, names files and renders
//! the card, and [`PoolBuilder`] turns entries into the files of a pool; reading and writing
//! directories or archives is the caller's (this crate does no I/O).

use crate::EnvKind;
use crate::report::{EnvStatus, EnvironmentRecord};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};

/// The index file of a pool directory.
pub const POOL_JSONL: &str = "pool.jsonl";
/// The dataset card of a pool directory.
pub const POOL_CARD: &str = "README.md";

/// One environment of a pool (one line of `pool.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolEntry {
    /// Unique within the pool (the run's `env_id` when exported).
    pub id: String,
    pub kind: EnvKind,
    /// One of the spec's skills ([`crate::skills`]), by display name.
    pub skill: String,
    /// The environment's `.py` file, relative to the pool directory (no `..`, not absolute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_file: Option<String>,
    /// The code inline (the streamed form); exactly one of `code_file` and `code` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default)]
    pub hint: Option<String>,
    /// Win rates of the hint plays and of the no-hint plays (0..=1) of its scoring window.
    #[serde(default)]
    pub win_rate_hint: Option<f64>,
    #[serde(default)]
    pub win_rate_no_hint: Option<f64>,
    #[serde(default)]
    pub regret: Option<f64>,
    #[serde(default)]
    pub designer_reward: Option<f64>,
    #[serde(default)]
    pub reward_levels: Option<u32>,
    /// The environment the designer was shown as an example, if any.
    #[serde(default)]
    pub parent_id: Option<String>,
    /// The run it came from (a run id of the service, or a run directory's name).
    #[serde(default)]
    pub run: Option<String>,
    /// The step it was generated at.
    #[serde(default)]
    pub step: Option<u64>,
    pub status: EnvStatus,
    /// Review marks of the run's team (the service's export; none from a run directory).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reviews: Vec<PoolReview>,
}

/// A team member's mark on an environment.
pub use spade_types::Verdict;

/// Which environments a review filter keeps: those some member marked with a verdict, or those
/// no member marked (`unreviewed`). The environment browser's "Review" filter, the export's
/// `verdict` parameter and `spade env export --verdict`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictFilter {
    Good,
    Broken,
    RewardHackable,
    Unreviewed,
}

impl VerdictFilter {
    pub const ALL: [VerdictFilter; 4] = [
        VerdictFilter::Good,
        VerdictFilter::Broken,
        VerdictFilter::RewardHackable,
        VerdictFilter::Unreviewed,
    ];

    /// `good`, `broken`, `reward_hackable` or `unreviewed`, as in a query string.
    pub fn as_str(self) -> &'static str {
        match self.verdict() {
            Some(v) => v.as_str(),
            None => "unreviewed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// The verdict it asks for; `None` for `unreviewed`.
    pub fn verdict(self) -> Option<Verdict> {
        match self {
            VerdictFilter::Good => Some(Verdict::Good),
            VerdictFilter::Broken => Some(Verdict::Broken),
            VerdictFilter::RewardHackable => Some(Verdict::RewardHackable),
            VerdictFilter::Unreviewed => None,
        }
    }

    pub fn matches(self, marks: &[PoolReview]) -> bool {
        match self.verdict() {
            Some(v) => marks.iter().any(|r| r.verdict == v),
            None => marks.is_empty(),
        }
    }
}

/// Whether marks put an environment in its run's curated pool: some member marked it good and
/// none marked it broken or reward-hackable.
pub fn is_curated(marks: &[PoolReview]) -> bool {
    !marks.is_empty() && marks.iter().all(|r| r.verdict == Verdict::Good)
}

/// One review mark as a pool carries it (who marked it stays with the service).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolReview {
    pub verdict: Verdict,
    #[serde(default)]
    pub comment: String,
}

impl PoolEntry {
    /// The entry of a reported environment (scores are filled in later by
    /// [`PoolEntry::apply_scores`], as the loop reports them k steps after).
    pub fn from_record(r: &EnvironmentRecord, run: Option<&str>) -> Self {
        Self {
            id: r.env_id.clone(),
            kind: r.kind,
            skill: r.skill.clone(),
            code_file: None,
            code: Some(r.code.clone()),
            hint: r.hint.clone(),
            win_rate_hint: r.win_rate_hint,
            win_rate_no_hint: r.win_rate_no_hint,
            regret: r.regret,
            designer_reward: r.designer_reward,
            reward_levels: r.reward_levels,
            parent_id: r.parent_env_id.clone(),
            run: run.map(str::to_owned),
            step: Some(r.step),
            status: r.status,
            reviews: vec![],
        }
    }

    /// The scores of `Message::EnvironmentScored`.
    pub fn apply_scores(&mut self, s: Scores) {
        self.regret = Some(s.regret);
        self.win_rate_hint = Some(s.win_rate_hint);
        self.win_rate_no_hint = Some(s.win_rate_no_hint);
        self.designer_reward = Some(s.designer_reward);
        self.reward_levels = Some(s.reward_levels);
    }
}

/// The delayed scores of one environment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scores {
    pub regret: f64,
    pub win_rate_hint: f64,
    pub win_rate_no_hint: f64,
    pub designer_reward: f64,
    pub reward_levels: u32,
}

/// One thing wrong with a pool, located as precisely as it can be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolProblem {
    /// The file it is in (`pool.jsonl`, an environment's `.py`).
    pub file: String,
    /// 1-based line of `pool.jsonl`, when the problem is one line's.
    pub line: Option<usize>,
    pub message: String,
}

impl std::fmt::Display for PoolProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{l}: {}", self.file, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

/// Checks of one entry that need no file: a known skill of its kind, an id, one code source, a
/// safe relative file name, rates in range. Returns what is wrong, empty when nothing.
pub fn check_entry(e: &PoolEntry) -> Vec<String> {
    let mut out = Vec::new();
    if e.id.trim().is_empty() {
        out.push("`id` must not be empty".into());
    }
    match crate::skills::find(&e.skill) {
        None => out.push(format!(
            "`skill` {:?} is not one of the spec's skills ({})",
            e.skill,
            crate::skills::SKILLS
                .iter()
                .map(|s| s.name)
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Some(s) if s.kind != e.kind => out.push(format!(
            "`skill` {:?} is a {} skill but `kind` is {}",
            e.skill,
            s.kind.as_str(),
            e.kind.as_str()
        )),
        Some(_) => {}
    }
    match (&e.code_file, &e.code) {
        (Some(_), Some(_)) => out.push("set one of `code_file` and `code`, not both".into()),
        (None, None) => out.push("expected `code_file` (a .py file) or `code` (inline)".into()),
        (Some(f), None) => {
            if let Err(m) = check_relative_file(f) {
                out.push(format!("`code_file` {f:?}: {m}"));
            }
        }
        (None, Some(_)) => {}
    }
    for (field, v) in [
        ("win_rate_hint", e.win_rate_hint),
        ("win_rate_no_hint", e.win_rate_no_hint),
    ] {
        if v.is_some_and(|x| !(0.0..=1.0).contains(&x)) {
            out.push(format!("`{field}` must be within 0..=1"));
        }
    }
    out
}

/// A pool's file names stay inside its directory: relative, no `..`, no empty parts, `.py`.
fn check_relative_file(f: &str) -> Result<(), &'static str> {
    if f.starts_with('/') || f.starts_with('\\') || f.contains(':') {
        return Err("must be a path relative to the pool directory");
    }
    if f.split(['/', '\\'])
        .any(|p| p.is_empty() || p == "." || p == "..")
    {
        return Err("must not contain `..`, `.` or empty parts");
    }
    if !f.ends_with(".py") {
        return Err("must name a .py file");
    }
    Ok(())
}

/// Parses the lines of a `pool.jsonl` (named `file` in messages): each valid, checked entry with
/// its 1-based line, and one problem per bad line (not JSON, a field missing or of the wrong
/// type, a failed [`check_entry`], an id seen on an earlier line). Blank lines are skipped.
pub fn parse_jsonl(file: &str, text: &str) -> (Vec<(usize, PoolEntry)>, Vec<PoolProblem>) {
    let mut entries = Vec::new();
    let mut problems = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let problem = |message: String| PoolProblem {
            file: file.to_owned(),
            line: Some(n),
            message,
        };
        let entry: PoolEntry = match serde_json::from_str(line) {
            Ok(e) => e,
            Err(e) => {
                problems.push(problem(format!(
                    "expected one JSON object of the pool format: {e}"
                )));
                continue;
            }
        };
        let issues = check_entry(&entry);
        if !issues.is_empty() {
            problems.push(problem(format!("{}: {}", entry.id, issues.join("; "))));
            continue;
        }
        if let Some(first) = seen.get(&entry.id) {
            problems.push(problem(format!(
                "duplicate id {:?} (first on line {first}); this line is left out",
                entry.id
            )));
            continue;
        }
        seen.insert(entry.id.clone(), n);
        entries.push((n, entry));
    }
    (entries, problems)
}

/// The skill a `.py` file states in its first line, `"""Skill: <name>. ..."""` (the seed
/// library's convention and the designer prompt's), if it names one of the spec's skills.
pub fn skill_from_docstring(code: &str) -> Option<&'static str> {
    let first = code.lines().next()?.trim().trim_start_matches("\"\"\"");
    let name = first.strip_prefix("Skill: ")?.split('.').next()?.trim();
    crate::skills::find(name).map(|s| s.name)
}

/// What an export keeps. Ranges are inclusive; `None` = no bound.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolFilter {
    pub status: Option<EnvStatus>,
    pub skill: Option<String>,
    /// Band of the no-hint win rate (an environment not scored yet has none: left out when a
    /// bound is set).
    pub win_rate_min: Option<f64>,
    pub win_rate_max: Option<f64>,
    /// Band of the regret (unscored environments are left out when a bound is set).
    pub regret_min: Option<f64>,
    pub regret_max: Option<f64>,
    pub step_min: Option<u64>,
    pub step_max: Option<u64>,
    /// Leave out environments any team member marked with one of these verdicts.
    pub without_verdicts: Vec<Verdict>,
    /// Keep only environments of this review state.
    pub verdict: Option<VerdictFilter>,
    /// Keep only the curated pool ([`is_curated`]).
    pub curated: bool,
}

impl PoolFilter {
    /// What is wrong with the filter itself, naming the option.
    pub fn check(&self) -> Result<(), String> {
        for (name, v) in [
            ("win_rate_min", self.win_rate_min),
            ("win_rate_max", self.win_rate_max),
        ] {
            if v.is_some_and(|x| !(0.0..=1.0).contains(&x)) {
                return Err(format!("{name} must be within 0..=1"));
            }
        }
        for (name, v) in [
            ("regret_min", self.regret_min),
            ("regret_max", self.regret_max),
        ] {
            if v.is_some_and(|x| !x.is_finite()) {
                return Err(format!("{name} must be a finite number"));
            }
        }
        if let (Some(a), Some(b)) = (self.win_rate_min, self.win_rate_max)
            && a > b
        {
            return Err(format!(
                "win_rate_min must not exceed win_rate_max ({a} > {b})"
            ));
        }
        if let (Some(a), Some(b)) = (self.step_min, self.step_max)
            && a > b
        {
            return Err(format!("step_min must not exceed step_max ({a} > {b})"));
        }
        if let Some(s) = &self.skill
            && crate::skills::find(s).is_none()
        {
            return Err(format!("skill {s:?} is not one of the spec's skills"));
        }
        Ok(())
    }

    pub fn matches(&self, e: &PoolEntry) -> bool {
        let within = |v: Option<f64>, lo: Option<f64>, hi: Option<f64>| match v {
            Some(x) => lo.is_none_or(|l| x >= l) && hi.is_none_or(|h| x <= h),
            None => lo.is_none() && hi.is_none(),
        };
        self.status.is_none_or(|s| s == e.status)
            && self.skill.as_ref().is_none_or(|s| *s == e.skill)
            && within(e.win_rate_no_hint, self.win_rate_min, self.win_rate_max)
            && within(e.regret, self.regret_min, self.regret_max)
            && within(
                e.step.map(|s| s as f64),
                self.step_min.map(|s| s as f64),
                self.step_max.map(|s| s as f64),
            )
            && !e
                .reviews
                .iter()
                .any(|r| self.without_verdicts.contains(&r.verdict))
            && self.verdict.is_none_or(|v| v.matches(&e.reviews))
            && (!self.curated || is_curated(&e.reviews))
    }

    /// The filter in words, for the card ("all" when nothing is filtered).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(s) = self.status {
            parts.push(format!("status = {}", status_str(s)));
        }
        if let Some(s) = &self.skill {
            parts.push(format!("skill = {s}"));
        }
        if self.win_rate_min.is_some() || self.win_rate_max.is_some() {
            parts.push(format!(
                "no-hint win rate in [{}, {}]",
                self.win_rate_min.unwrap_or(0.0),
                self.win_rate_max.unwrap_or(1.0)
            ));
        }
        if let Some(r) = self.regret_min {
            parts.push(format!("regret >= {r}"));
        }
        if let Some(r) = self.regret_max {
            parts.push(format!("regret <= {r}"));
        }
        if self.step_min.is_some() || self.step_max.is_some() {
            parts.push(format!(
                "step in [{}, {}]",
                self.step_min.map_or("first".into(), |s| s.to_string()),
                self.step_max.map_or("last".into(), |s| s.to_string())
            ));
        }
        if !self.without_verdicts.is_empty() {
            let v: Vec<&str> = self.without_verdicts.iter().map(|v| v.as_str()).collect();
            parts.push(format!("no mark {}", v.join(" or ")));
        }
        match self.verdict {
            Some(VerdictFilter::Unreviewed) => parts.push("no review mark".into()),
            Some(v) => parts.push(format!("marked {}", v.as_str())),
            None => {}
        }
        if self.curated {
            parts.push("curated (marked good, and broken or reward_hackable by no one)".into());
        }
        if parts.is_empty() {
            "none (every environment)".into()
        } else {
            parts.join(", ")
        }
    }
}

/// `accepted`, `rejected` or `broken_in_play`, as in JSON.
pub fn status_str(s: EnvStatus) -> &'static str {
    match s {
        EnvStatus::Accepted => "accepted",
        EnvStatus::Rejected => "rejected",
        EnvStatus::BrokenInPlay => "broken_in_play",
    }
}

/// A file name for the code of `id` that no other entry of the pool has taken: the id with
/// every character outside `[A-Za-z0-9._-]` replaced by `_` (a leading `.` too), then `-2`,
/// `-3`... on a clash, then `.py`.
pub fn code_file_name(id: &str, taken: &mut HashSet<String>) -> String {
    let mut stem: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(120)
        .collect();
    if stem.is_empty() || stem.starts_with('.') {
        stem.insert(0, '_');
    }
    let mut name = format!("{stem}.py");
    let mut n = 2;
    while !taken.insert(name.clone()) {
        name = format!("{stem}-{n}.py");
        n += 1;
    }
    name
}

/// The model a run configuration (`RunStarted.config`, JSON) names: `model.path`, else
/// `model.preset`, else "unknown".
pub fn model_of_config(config: &serde_json::Value) -> String {
    let model = &config["model"];
    model["path"]
        .as_str()
        .map(|p| format!("checkpoint {p}"))
        .or_else(|| model["preset"].as_str().map(|p| format!("preset {p}")))
        .unwrap_or_else(|| "unknown".into())
}

/// The dataset card of a pool (`README.md`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Card {
    /// Which run (service run id and URL, or run directory).
    pub run: String,
    /// Which model generated the environments (the run configuration's model).
    pub model: String,
    pub filter: PoolFilter,
    /// Environments per (kind, skill).
    pub counts: BTreeMap<(EnvKind, String), usize>,
}

impl Card {
    pub fn count(&mut self, e: &PoolEntry) {
        *self.counts.entry((e.kind, e.skill.clone())).or_default() += 1;
    }

    pub fn render(&self) -> String {
        let total: usize = self.counts.values().sum();
        let mut s = format!(
            "# SPADE environment pool\n\n\
             Environments written by a SPADE designer model and checked by the sandbox.\n\n\
             - run: {}\n- model: {}\n- filters: {}\n- environments: {total}\n\n\
             | kind | skill | environments |\n|---|---|---|\n",
            self.run,
            self.model,
            self.filter.describe()
        );
        for ((kind, skill), n) in &self.counts {
            s.push_str(&format!("| {} | {skill} | {n} |\n", kind.as_str()));
        }
        s.push_str(
            "\n## Format\n\n`pool.jsonl` holds one JSON object per environment: `id`, `kind`, \
             `skill`, `code_file` (the `.py` beside this card), `hint`, `win_rate_hint`, \
             `win_rate_no_hint`, `regret`, `designer_reward`, `reward_levels`, `parent_id`, \
             `run`, `step`, `status`, and `reviews` (the team's marks: `verdict` good, broken or \
             reward_hackable, `comment`) when there are any. Each `.py` defines one environment class (`reset`, \
             `step`, `solution`); run it only inside a sandbox: it is generated code.\n\n\
             Use it as `ablation.fixed_env_pool = \"<this directory>\"` in a run configuration.\n",
        );
        s
    }
}

/// Why [`PoolBuilder::add`] left an entry out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The entry has no inline `code` to write into its file.
    #[error("the entry carries no code")]
    NoCode,
    /// An earlier entry of the pool has the same id.
    #[error("a second environment with this id")]
    DuplicateId,
    /// [`check_entry`] found something wrong (the messages, joined).
    #[error("{0}")]
    Invalid(String),
}

/// One environment as a pool directory holds it: its code file and its `pool.jsonl` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolFile {
    /// The `.py` file's name in the pool directory (the line's `code_file`).
    pub name: String,
    pub code: String,
    /// The `pool.jsonl` line, without its newline.
    pub line: String,
}

/// A pool assembled entry by entry: names each entry's code file, gives the `pool.jsonl` line
/// that names it and counts it for the card. Writers put what it gives where the pool goes (a
/// directory: `spade_worker::pool::PoolWriter`; a zip: the service's `pool.zip`), so every
/// form of a pool has the same files, lines and card. It keeps the names and ids seen, never
/// the code.
#[derive(Debug, Clone, Default)]
pub struct PoolBuilder {
    taken: HashSet<String>,
    ids: HashSet<String>,
    card: Card,
}

impl PoolBuilder {
    pub fn new(card: Card) -> Self {
        Self {
            card,
            ..Self::default()
        }
    }

    /// The files of one entry with its code inline (`code`). An entry the format refuses
    /// (no code, a second one with the same id, a failed [`check_entry`]) is left out.
    pub fn add(&mut self, mut e: PoolEntry) -> Result<PoolFile, Refused> {
        let Some(code) = e.code.take() else {
            return Err(Refused::NoCode);
        };
        if self.ids.contains(&e.id) {
            return Err(Refused::DuplicateId);
        }
        let name = code_file_name(&e.id, &mut self.taken);
        e.code_file = Some(name.clone());
        let issues = check_entry(&e);
        if !issues.is_empty() {
            // A refused entry keeps no name, so the next file names do not depend on it.
            self.taken.remove(&name);
            return Err(Refused::Invalid(issues.join("; ")));
        }
        let line = serde_json::to_string(&e).map_err(|er| Refused::Invalid(er.to_string()))?;
        self.ids.insert(e.id.clone());
        self.card.count(&e);
        Ok(PoolFile { name, code, line })
    }

    /// The card so far (its counts are the entries added).
    pub fn card(&self) -> &Card {
        &self.card
    }

    pub fn finish(self) -> Card {
        self.card
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
