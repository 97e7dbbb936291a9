//! The environment browser: every environment a run's designer wrote, filtered by skill, step,
//! status, regret and review (a GET form), with the filtered set as a pool to download (a zip
//! of the pool directory, or its JSONL), and the page of one environment: its code, the hint, regret
//! and win rates with and without the hint, sample plays, the diff against the memory
//! environment it was derived from, and why validation rejected it if it did.

use super::{Pagination, fmt_opt, fmt_pct, query_string};
use crate::code::{CodeView, DiffView};
use crate::dto::{EnvStatus, EnvironmentDetail, EnvironmentSummary, Page, PlayDto};
use leptos::prelude::*;

/// The browser's query parameters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EnvFilters {
    pub skill: String,
    pub status: Option<EnvStatus>,
    pub step_min: Option<u64>,
    pub step_max: Option<u64>,
    pub regret_min: Option<f64>,
    /// A review state of [`VERDICTS`] (empty: any).
    pub verdict: String,
    /// An order of [`SORTS`] (empty: by step).
    pub sort: String,
    /// Keyset cursor of the page (absent on the first page).
    pub cursor: Option<String>,
}

/// The review filter's values (the API's `verdict`) and their labels: some member marked the
/// environment so, or no member marked it.
pub const VERDICTS: [(&str, &str); 4] = [
    ("good", "Good"),
    ("broken", "Broken"),
    ("reward_hackable", "Reward-hackable"),
    ("unreviewed", "Unreviewed"),
];

/// The list's orders (the API's `sort`) and their labels; the first is the default.
pub const SORTS: [(&str, &str); 5] = [
    ("step", "Step (oldest first)"),
    ("regret", "Regret (highest first)"),
    ("win_rate_no_hint", "Win rate, no hint (lowest first)"),
    ("win_rate_hint", "Win rate, hint (highest first)"),
    ("designer_reward", "Designer reward (highest first)"),
];

/// Raw query values, as the GET form submits them.
#[derive(Debug, Clone, Default)]
pub struct EnvQuery<'a> {
    pub skill: Option<&'a str>,
    pub status: Option<&'a str>,
    pub step_min: Option<&'a str>,
    pub step_max: Option<&'a str>,
    pub regret_min: Option<&'a str>,
    pub verdict: Option<&'a str>,
    pub sort: Option<&'a str>,
    pub cursor: Option<&'a str>,
}

impl EnvFilters {
    /// Parses the query; each bad value is dropped with a message naming the field.
    pub fn from_query(q: EnvQuery<'_>) -> (Self, Vec<String>) {
        let mut problems = Vec::new();
        let nonempty = |v: Option<&str>| {
            v.map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        // Steps are counted from 1 on every page, as the charts, the log and the CSV files count
        // them (the stored index is one less).
        let mut step = |field: &str, v: Option<&str>| {
            let s = nonempty(v)?;
            match s.parse::<u64>() {
                Ok(0) => {
                    problems.push(format!(
                        "{field} counts from 1 (the first step is step 1), got 0."
                    ));
                    None
                }
                Ok(n) => Some(n),
                Err(_) => {
                    problems.push(format!("{field} must be a whole number, got \"{s}\"."));
                    None
                }
            }
        };
        let step_min = step("Step from", q.step_min);
        let step_max = step("Step to", q.step_max);
        let cursor = nonempty(q.cursor);
        let regret_min = nonempty(q.regret_min).and_then(|s| match s.parse::<f64>() {
            Ok(v) if v.is_finite() => Some(v),
            _ => {
                problems.push(format!("Minimum regret must be a number, got \"{s}\"."));
                None
            }
        });
        let status = match nonempty(q.status).as_deref() {
            None => None,
            Some("accepted") => Some(EnvStatus::Accepted),
            Some("rejected") => Some(EnvStatus::Rejected),
            Some("broken_in_play") => Some(EnvStatus::BrokenInPlay),
            Some(other) => {
                problems.push(format!(
                    "Status must be accepted, rejected or broken_in_play, got \"{other}\"."
                ));
                None
            }
        };
        if let (Some(a), Some(b)) = (step_min, step_max)
            && a > b
        {
            problems.push(format!(
                "Step from ({a}) is after step to ({b}); no environment can match."
            ));
        }
        let verdict = match nonempty(q.verdict) {
            None => String::new(),
            Some(v) if VERDICTS.iter().any(|(k, _)| *k == v) => v,
            Some(other) => {
                problems.push(format!(
                    "Review must be good, broken, reward_hackable or unreviewed, got \"{other}\"."
                ));
                String::new()
            }
        };
        let sort = super::sort_from_query(&SORTS, q.sort.map(str::trim)).unwrap_or_else(|other| {
            let all: Vec<&str> = SORTS.iter().map(|(k, _)| *k).collect();
            problems.push(format!(
                "Sort must be one of {}, got \"{other}\".",
                all.join(", ")
            ));
            String::new()
        });
        let skill = nonempty(q.skill).unwrap_or_default();
        (
            Self {
                skill,
                status,
                step_min,
                step_max,
                regret_min,
                verdict,
                sort,
                cursor,
            },
            problems,
        )
    }

    /// Whether "step from" is after "step to": no environment can match, the page says so
    /// beside the form and lists none (the API refuses such a range; the page once showed its
    /// bare 422 instead of the form).
    pub fn steps_inverted(&self) -> bool {
        matches!((self.step_min, self.step_max), (Some(a), Some(b)) if a > b)
    }

    /// The step bounds as the service and the API take them: stored indices, from 0 (the page's
    /// step 1 is index 0).
    pub fn step_indices(&self) -> (Option<u64>, Option<u64>) {
        let index = |v: Option<u64>| v.map(|s| s.saturating_sub(1));
        (index(self.step_min), index(self.step_max))
    }

    /// The URL of the page at `cursor` with these filters and this order.
    pub fn href(&self, run_id: i64, cursor: Option<&str>) -> String {
        let mut pairs = self.filter_pairs(false);
        pairs.push(("sort", self.sort.clone()));
        pairs.push(("cursor", cursor.unwrap_or_default().to_owned()));
        format!("/runs/{run_id}/environments{}", query_string(&pairs))
    }

    /// The filters as query pairs (empty values are left out by `query_string`): the steps as
    /// the page counts them, or as the API's indices (`api`).
    fn filter_pairs(&self, api: bool) -> Vec<(&'static str, String)> {
        let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        let (step_min, step_max) = if api {
            self.step_indices()
        } else {
            (self.step_min, self.step_max)
        };
        let pairs = [
            ("skill", self.skill.clone()),
            (
                "status",
                self.status
                    .map(|s| status_str(s).to_owned())
                    .unwrap_or_default(),
            ),
            ("step_min", opt(step_min)),
            ("step_max", opt(step_max)),
            (
                "regret_min",
                self.regret_min.map(|v| v.to_string()).unwrap_or_default(),
            ),
            ("verdict", self.verdict.clone()),
        ];
        pairs.to_vec()
    }

    /// A pool export of the run with these filters, all pages: `environments.jsonl` (one pool
    /// line per environment) or `pool.zip` (the pool directory).
    /// Exports are in step order, so the list's order is not passed on.
    pub fn export_href(&self, run_id: i64, export: &str) -> String {
        format!(
            "/api/v1/runs/{run_id}/{export}{}",
            query_string(&self.filter_pairs(true))
        )
    }
}

fn status_str(s: EnvStatus) -> &'static str {
    match s {
        EnvStatus::Accepted => "accepted",
        EnvStatus::Rejected => "rejected",
        EnvStatus::BrokenInPlay => "broken_in_play",
    }
}

/// The environment list of one run.
#[component]
pub fn EnvironmentsView(
    run_id: i64,
    run_name: String,
    /// The skills that occur in this run, for the filter's options.
    skills: Vec<String>,
    envs: Page<EnvironmentSummary>,
    filters: EnvFilters,
    problems: Vec<String>,
) -> impl IntoView {
    let next = envs
        .next_cursor
        .as_deref()
        .map(|c| filters.href(run_id, Some(c)));
    let first = filters.href(run_id, None);
    let is_first = filters.cursor.is_none();
    let none = envs.items.is_empty();
    let num = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    let rows = envs.items.into_iter().map(env_row).collect_view();
    view! {
        <nav class="crumbs" aria-label="Breadcrumb">
            <a href="/runs">"Runs"</a> " / " <a href=format!("/runs/{run_id}")>{run_name}</a>
        </nav>
        <h1>"Environments"</h1>
        <form class="filters card" method="get" aria-label="Filter environments">
            <div class="field">
                <label for="env-skill">"Skill asked for"</label>
                <select id="env-skill" name="skill">
                    <option value="" selected=filters.skill.is_empty()>"Any"</option>
                    {skills.into_iter().map(|s| { let sel = s == filters.skill; let label = s.clone(); view! { <option value=s selected=sel>{label}</option> } }).collect_view()}
                </select>
            </div>
            <div class="field">
                <label for="env-status">"Status"</label>
                <select id="env-status" name="status">
                    <option value="" selected=filters.status.is_none()>"Any"</option>
                    <option value="accepted" selected=filters.status == Some(EnvStatus::Accepted)>"Accepted"</option>
                    <option value="rejected" selected=filters.status == Some(EnvStatus::Rejected)>"Rejected"</option>
                    <option value="broken_in_play" selected=filters.status == Some(EnvStatus::BrokenInPlay)>"Broken in play"</option>
                </select>
            </div>
            <div class="field small">
                <label for="env-step-min">"Step from"</label>
                <input id="env-step-min" name="step_min" inputmode="numeric" value=num(filters.step_min) />
            </div>
            <div class="field small">
                <label for="env-step-max">"Step to"</label>
                <input id="env-step-max" name="step_max" inputmode="numeric" value=num(filters.step_max) />
            </div>
            <div class="field small">
                <label for="env-regret">"Regret at least"</label>
                <input id="env-regret" name="regret_min" inputmode="decimal" value=filters.regret_min.map(|v| v.to_string()).unwrap_or_default() />
            </div>
            <div class="field">
                <label for="env-verdict">"Review"</label>
                <select id="env-verdict" name="verdict">
                    <option value="" selected=filters.verdict.is_empty()>"Any"</option>
                    {VERDICTS.iter().map(|(v, label)| view! { <option value=*v selected=filters.verdict == *v>{*label}</option> }).collect_view()}
                </select>
            </div>
            <super::SortSelect id="env-sort" sorts=&SORTS current=filters.sort.clone() />
            <button type="submit">"Filter"</button>
            <a class="button secondary" id="pool-zip" href=filters.export_href(run_id, "pool.zip") download=format!("run-{run_id}-pool.zip")>"Download pool"</a>
            <a class="button secondary" id="pool-jsonl" href=filters.export_href(run_id, "environments.jsonl") download=format!("run-{run_id}-pool.jsonl")>"Download pool (JSONL)"</a>
            <a class="button secondary" id="pool-curated" href=format!("/api/v1/runs/{run_id}/pool.zip?curated=true") download=format!("run-{run_id}-curated.zip")>"Download curated pool"</a>
        </form>
        {problems.into_iter().map(|p| view! { <p class="notice" role="status">{p}</p> }).collect_view()}
        {if none {
            view! { <p class="empty">"No environments match."</p> }.into_any()
        } else {
            view! {
                <div class="table-scroll" tabindex="0" role="region" aria-label="Environments">
                    <table class="data envs">
                        <thead><tr>
                            <th scope="col">"Environment"</th><th scope="col" class="num">"Step"</th><th scope="col">"Skill asked for"</th>
                            <th scope="col">"Status"</th><th scope="col" class="num">"Regret"</th>
                            <th scope="col" class="num">"Win rate, hint"</th><th scope="col" class="num">"Win rate, no hint"</th>
                            <th scope="col">"Review"</th>
                        </tr></thead>
                        <tbody>{rows}</tbody>
                    </table>
                </div>
            }.into_any()
        }}
        <Pagination is_first first next />
    }
}

fn env_status_badge(status: EnvStatus, reason: Option<&str>) -> impl IntoView + use<> {
    let text = match (status, reason) {
        (EnvStatus::Accepted, _) => "accepted".to_owned(),
        (EnvStatus::Rejected, Some(r)) => format!("rejected: {r}"),
        (EnvStatus::Rejected, None) => "rejected".to_owned(),
        (EnvStatus::BrokenInPlay, Some(r)) => format!("broken in play: {r}"),
        (EnvStatus::BrokenInPlay, None) => "broken in play".to_owned(),
    };
    view! { <span class=format!("badge env-{}", status_str(status))>{text}</span> }
}

fn env_row(e: EnvironmentSummary) -> impl IntoView {
    view! {
        <tr>
            <td class="env-name">
                <a href=format!("/runs/{}/environments/{}", e.run_id, e.env_id)>{if e.title.is_empty() {
                    view! { <code>{e.env_id.clone()}</code> }.into_any()
                } else {
                    view! { <span class="env-title">{e.title.clone()}</span> }.into_any()
                }}</a>
                {(!e.title.is_empty()).then(|| view! { <br /><code class="env-id">{e.env_id.clone()}</code> })}
            </td>
            <td class="num">{e.step + 1}</td>
            <td>
                {e.skill.clone()}
                {(!e.code_skill.is_empty()).then(|| view! {
                    <br /><span class="sub code-skill" title="The skill the code's docstring names; the column is the skill the designer was asked for">{format!("code says: {}", e.code_skill)}</span>
                })}
            </td>
            <td>{env_status_badge(e.status, e.rejection_reason.as_deref())}</td>
            <td class="num">{fmt_opt(e.regret)}</td>
            <td class="num">{fmt_pct(e.win_rate_hint)}</td>
            <td class="num">{fmt_pct(e.win_rate_no_hint)}</td>
            <td>{e.verdicts.iter().map(|v| view! { <span class=format!("badge review-{v}")>{v.replace('_', "-")}</span> " " }).collect_view()}</td>
        </tr>
    }
}

/// One environment.
#[component]
pub fn EnvironmentView(
    env: EnvironmentDetail,
    /// The viewer's CSRF token, carried by the review form.
    #[prop(default = String::new())]
    csrf: String,
    /// A refused review, named on the page after the redirect.
    #[prop(default = None)]
    error: Option<String>,
) -> impl IntoView {
    let s = env.summary.clone();
    let review = review_section(&env, csrf, error);
    let run_href = format!("/runs/{}", s.run_id);
    // The line of the code the rejection's traceback (or syntax error) names, if any.
    let failing = (s.status != EnvStatus::Accepted)
        .then(|| {
            env.rejection_message
                .as_deref()
                .and_then(crate::code::failing_line)
        })
        .flatten()
        .filter(|&n| n <= env.code.lines().count());
    let rejected = (s.status != EnvStatus::Accepted).then(|| view! {
        <section class="card rejected" aria-labelledby="rej-h">
            <h2 id="rej-h">{if s.status == EnvStatus::BrokenInPlay {
                "Broken in play: stopped at its first contract violation, its plays not trained on"
            } else {
                "Rejected by validation"
            }}</h2>
            <p><strong>{s.rejection_reason.clone().unwrap_or_else(|| "no reason recorded".into())}</strong></p>
            {failing.map(|n| view! { <p>"The error names " <a href="#failing-line">{format!("line {n}")}</a> ", marked in the code below."</p> })}
            {env.rejection_message.clone().map(|m| view! { <pre class="log">{m}</pre> })}
        </section>
    });
    let (hint_plays, plain_plays): (Vec<PlayDto>, Vec<PlayDto>) =
        env.plays.iter().cloned().partition(|p| p.with_hint);
    let diff = match env.parent.clone() {
        Some(p) => view! {
            <section class="card" aria-labelledby="diff-h">
                <h2 id="diff-h">"Changes from memory environment " <code>{p.env_id.clone()}</code></h2>
                <DiffView old=p.code new=env.code.clone() old_title=format!("Memory {}", p.env_id) new_title=format!("This environment {}", s.env_id) />
            </section>
        }
        .into_any(),
        // Say so rather than show nothing: a first-round environment, a run without memory, or
        // a parent this run does not hold.
        None => view! {
            <section class="card" aria-labelledby="diff-h">
                <h2 id="diff-h">"Memory parent"</h2>
                <p class="empty">"None: the designer was shown no memory environment for this one (first regeneration, memory off, or a fixed pool)."</p>
            </section>
        }
        .into_any(),
    };
    view! {
        <nav class="crumbs" aria-label="Breadcrumb">
            <a href="/runs">"Runs"</a> " / " <a href=run_href.clone()>{env.run_name.clone()}</a>
            " / " <a href=format!("{run_href}/environments")>"Environments"</a>
        </nav>
        <div class="page-head">
            <h1>{if s.title.is_empty() {
                view! { <code>{s.env_id.clone()}</code> }.into_any()
            } else {
                view! { {s.title.clone()} " " <code class="env-id">{s.env_id.clone()}</code> }.into_any()
            }}</h1>
            {env_status_badge(s.status, s.rejection_reason.as_deref())}
        </div>
        <section class="card" aria-label="Scores">
            <dl class="facts">
                <div><dt>"Skill asked for"</dt><dd>{s.skill.clone()}</dd></div>
                {(!s.code_skill.is_empty()).then(|| view! {
                    <div><dt>"Skill its code names"</dt><dd class="code-skill">{s.code_skill.clone()}</dd></div>
                })}
                <div><dt>"Step"</dt><dd>{s.step + 1}</dd></div>
                <div><dt>"Regret"</dt><dd>{fmt_opt(s.regret)}</dd></div>
                <div><dt>"Win rate with hint"</dt><dd>{fmt_pct(s.win_rate_hint)}</dd></div>
                <div><dt>"Win rate without hint"</dt><dd>{fmt_pct(s.win_rate_no_hint)}</dd></div>
                <div><dt>"Designer reward"</dt><dd>{fmt_opt(env.designer_reward)}</dd></div>
                <div><dt>"Reward levels"</dt><dd>{env.reward_levels.map_or("—".into(), |v| v.to_string())}</dd></div>
                <div><dt>"Attempts"</dt><dd>{env.attempts}</dd></div>
            </dl>
        </section>
        {rejected}
        <section class="card" aria-labelledby="hint-h">
            <h2 id="hint-h">"Hint"</h2>
            {match env.hint.clone() {
                Some(h) => view! { <p class="hint">{h}</p> }.into_any(),
                None => view! { <p class="empty">"No hint (hints are written for accepted environments)."</p> }.into_any(),
            }}
        </section>
        <section class="card" aria-labelledby="code-h">
            <h2 id="code-h">"Code"</h2>
            <CodeView code=env.code.clone() label="Environment code" mark=failing />
        </section>
        {diff}
        {review}
        <section class="card" aria-labelledby="plays-h">
            <h2 id="plays-h">"Sample plays"</h2>
            {if env.plays.is_empty() { Some(view! { <p class="empty">"No plays recorded."</p> }) } else { None }}
            <Plays title="With hint" plays=hint_plays />
            <Plays title="Without hint" plays=plain_plays />
        </section>
    }
}

/// Members' marks, and for editors the form that sets theirs (a "broken" or "reward-hackable"
/// mark on a live environment retires it from play at the worker's next report).
fn review_section(
    env: &EnvironmentDetail,
    csrf: String,
    error: Option<String>,
) -> impl IntoView + use<> {
    let s = &env.summary;
    let action = format!("/runs/{}/environments/{}/review", s.run_id, s.env_id);
    let marks = env
        .reviews
        .iter()
        .map(|r| {
            let verdict = r.verdict.replace('_', "-");
            view! {
                <li>
                    <span class=format!("badge review-{}", r.verdict)>{verdict}</span>
                    " " <strong>{r.reviewer.clone()}</strong>
                    " " <time datetime=r.updated_at.clone()>{r.updated_at.clone()}</time>
                    {(!r.comment.is_empty()).then(|| view! { <p>{r.comment.clone()}</p> })}
                </li>
            }
        })
        .collect::<Vec<_>>();
    let form = env.can_review.then(|| view! {
        <form method="post" action=action class="review-form">
            <input type="hidden" name="csrf" value=csrf />
            <fieldset>
                <legend>"Your mark"</legend>
                <label><input type="radio" name="verdict" value="good" required />" good"</label>
                <label><input type="radio" name="verdict" value="broken" />" broken"</label>
                <label><input type="radio" name="verdict" value="reward_hackable" />" reward-hackable"</label>
            </fieldset>
            <label for="review-comment">"Comment"</label>
            <textarea id="review-comment" name="comment" maxlength="2000" rows="3"></textarea>
            <button type="submit">"Save mark"</button>
            <p class="muted">"Broken and reward-hackable marks retire a live environment from play."</p>
        </form>
    });
    view! {
        <section class="card" aria-labelledby="review-h" id="review">
            <h2 id="review-h">"Review"</h2>
            {error.map(|e| view! { <p class="error" role="alert">{e}</p> })}
            {if marks.is_empty() {
                Some(view! { <p class="empty">"Not reviewed yet."</p> })
            } else {
                None
            }}
            <ul class="reviews">{marks}</ul>
            {form}
        </section>
    }
}

/// Transcripts as disclosures, so a page with many plays stays short.
#[component]
fn Plays(title: &'static str, plays: Vec<PlayDto>) -> impl IntoView {
    (!plays.is_empty()).then(|| {
        let items = plays
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let turns = p.transcript.into_iter().map(|t| view! {
                    <div class=format!("turn role-{}", t.role.to_lowercase())>
                        <div class="role">{t.role.clone()}</div>
                        <pre>{t.content}</pre>
                    </div>
                }).collect_view();
                view! {
                    <details class="play">
                        <summary>
                            {format!("Play {}: {}, return {}, {} turns", i + 1, if p.won { "won" } else { "lost" }, crate::charts::line::format_number(p.episode_return), p.turns)}
                        </summary>
                        <div class="transcript">{turns}</div>
                    </details>
                }
            })
            .collect_view();
        view! { <h3>{title}</h3> {items} }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_name_the_bad_field() {
        let (f, p) = EnvFilters::from_query(EnvQuery {
            skill: Some("Optimization"),
            status: Some("maybe"),
            step_min: Some("x"),
            step_max: Some("40"),
            regret_min: Some("NaN"),
            verdict: Some("meh"),
            sort: Some("random"),
            cursor: None,
        });
        assert_eq!(f.skill, "Optimization");
        assert_eq!(
            (f.status, f.step_min, f.step_max, f.regret_min, f.cursor),
            (None, None, Some(40), None, None)
        );
        assert_eq!(f.verdict, "");
        assert_eq!(f.sort, "");
        assert_eq!(p.len(), 5, "{p:?}");
        assert!(
            p.iter()
                .any(|m| m.starts_with("Sort must be one of step, regret"))
        );
        assert!(p.iter().any(|m| m.starts_with("Review must be")));
        assert!(
            p.iter()
                .any(|m| m.starts_with("Step from must be a whole number, got \"x\""))
        );
        assert!(p.iter().any(|m| m.starts_with("Minimum regret")));
        assert!(p.iter().any(|m| m.starts_with("Status must be")));
    }

    #[test]
    fn reversed_step_range_is_reported_and_links_round_trip() {
        let (f, p) = EnvFilters::from_query(EnvQuery {
            step_min: Some("9"),
            step_max: Some("3"),
            ..Default::default()
        });
        assert_eq!(p.len(), 1);
        assert_eq!(
            f.href(7, Some("4.10")),
            "/runs/7/environments?step_min=9&step_max=3&cursor=4.10"
        );
    }

    #[test]
    fn the_page_counts_steps_from_1_and_sends_the_api_indices() {
        let (f, p) = EnvFilters::from_query(EnvQuery {
            step_min: Some("1"),
            step_max: Some("3"),
            ..Default::default()
        });
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(f.step_indices(), (Some(0), Some(2)));
        assert_eq!(
            f.href(7, None),
            "/runs/7/environments?step_min=1&step_max=3",
            "the page's own link keeps what was typed"
        );
        assert_eq!(
            f.export_href(7, "environments.jsonl"),
            "/api/v1/runs/7/environments.jsonl?step_min=0&step_max=2"
        );
        let (f, p) = EnvFilters::from_query(EnvQuery {
            step_min: Some("0"),
            ..Default::default()
        });
        assert_eq!(f.step_min, None);
        assert!(p[0].contains("counts from 1"), "{p:?}");
    }

    #[test]
    fn the_review_filter_travels_into_the_page_links_and_the_downloads() {
        let (f, p) = EnvFilters::from_query(EnvQuery {
            status: Some("accepted"),
            verdict: Some("good"),
            cursor: Some("3:40"),
            ..Default::default()
        });
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(
            f.href(7, None),
            "/runs/7/environments?status=accepted&verdict=good"
        );
        assert_eq!(
            f.export_href(7, "pool.zip"),
            "/api/v1/runs/7/pool.zip?status=accepted&verdict=good"
        );
        assert_eq!(
            f.export_href(7, "environments.jsonl"),
            "/api/v1/runs/7/environments.jsonl?status=accepted&verdict=good"
        );
    }

    #[test]
    fn the_order_travels_into_the_page_links_but_not_the_downloads() {
        let (f, p) = EnvFilters::from_query(EnvQuery {
            status: Some("accepted"),
            sort: Some("regret"),
            ..Default::default()
        });
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(
            f.href(7, Some("k-0.5:12")),
            "/runs/7/environments?status=accepted&sort=regret&cursor=k-0.5%3A12"
        );
        assert_eq!(
            f.export_href(7, "pool.zip"),
            "/api/v1/runs/7/pool.zip?status=accepted"
        );
        let (d, _) = EnvFilters::from_query(EnvQuery {
            sort: Some("step"),
            ..Default::default()
        });
        assert_eq!(
            d.href(7, None),
            "/runs/7/environments",
            "the default is left out"
        );
    }
}
