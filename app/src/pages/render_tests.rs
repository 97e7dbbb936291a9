//! Server-rendered HTML of the pages over sample DTOs: what a person without JavaScript gets.

use super::compare::CompareView;
use super::environments::{EnvFilters, EnvironmentView, EnvironmentsView};
use super::run::RunView;
use super::runs::{RunFilters, RunsView};
use crate::charts::{ChartSettings, Point};
use crate::dto::*;
use leptos::prelude::*;
use std::collections::BTreeMap;

pub(super) fn render(f: impl FnOnce() -> AnyView + 'static) -> String {
    Owner::new().with(|| f().to_html())
}

fn summary(id: i64, status: RunStatus) -> RunSummary {
    RunSummary {
        id,
        name: format!("run-{id}"),
        project: "demo".into(),
        status,
        step: 30,
        total_steps: 120,
        created_at: "2026-11-30T01:02:03Z".into(),
        key_metrics: BTreeMap::from([
            ("learnable_share".into(), 0.3125),
            ("regret_mean".into(), 0.12),
        ]),
        warning: None,
        tags: vec!["baseline".into(), "lr 1e-6".into()],
        waiting: None,
    }
}

pub(super) fn detail(id: i64, status: RunStatus, can_control: bool, seed: u64) -> RunDetail {
    RunDetail {
        summary: summary(id, status),
        config: serde_json::json!({"seed": seed, "grpo": {"clip_low": 0.2}}),
        executor: "local".into(),
        seed: seed as i64,
        code_version: "abc123".into(),
        phase: Some("playing".into()),
        message: None,
        queue: None,
        log_tail: vec![LogLine {
            level: "info".into(),
            line: "step 30 <done>".into(),
        }],
        can_control,
        notes: "Baseline for the\nlearning-rate sweep.".into(),
        team_id: 5,
    }
}

pub(super) fn metric(name: &str) -> MetricSeries {
    MetricSeries {
        name: name.into(),
        points: (0..10)
            .map(|i| Point {
                step: i as f64,
                time_s: i as f64 * 10.0,
                value: 0.1 * i as f64 + 0.05,
            })
            .collect(),
    }
}

#[test]
fn runs_list_has_badges_progress_metrics_and_plain_page_links() {
    let page = Page {
        items: vec![
            summary(1, RunStatus::Running),
            summary(2, RunStatus::Failed),
            RunSummary {
                waiting: Some("waiting for 2 GPUs (0 of this node's 4 free)".into()),
                ..summary(3, RunStatus::Starting)
            },
        ],
        next_cursor: Some("2".into()),
    };
    let teams = vec![
        TeamDto {
            id: 4,
            name: "lab".into(),
            role: "owner".into(),
        },
        TeamDto {
            id: 5,
            name: "other".into(),
            role: "viewer".into(),
        },
    ];
    let filters = RunFilters {
        team: Some(5),
        status: None,
        name: Some("demo".into()),
        sort: "name".into(),
        cursor: Some("9".into()),
        search: crate::pages::runs::RunSearch {
            tag: Some("baseline".into()),
            ..Default::default()
        },
    };
    let html = render(move || {
        view! { <RunsView runs=page teams filters problems=vec!["Unknown status".into()] team=Some(5) /> }
            .into_any()
    });
    assert!(html.contains(r#"class="badge status-running""#), "{html}");
    assert!(html.contains(r#"class="badge status-failed""#));
    // A run whose job waits for GPUs says so under its status.
    assert!(
        html.contains(
            r#"<span class="run-waiting">waiting for 2 GPUs (0 of this node's 4 free)</span>"#
        ),
        "{html}"
    );
    assert!(html.contains(r#"<progress max="100" value="25.0""#));
    assert!(html.contains("31%"), "learnable share as a percentage");
    assert!(
        html.contains(r#"href="/runs?team=5&amp;q=demo&amp;sort=name&amp;tag=baseline""#),
        "first page link keeps the filters, the order and the search: {html}"
    );
    // Tags show under the name, each a link to the runs of the team shown that share it.
    assert!(
        html.contains(r#"<a href="/runs?team=5&amp;tag=lr%201e-6" class="tag">lr 1e-6</a>"#),
        "{html}"
    );
    assert!(html.contains(r#"id="runs-tag""#) && html.contains(r#"value="baseline""#));
    assert!(html.contains(r#"<option value="name" selected"#), "{html}");
    assert!(
        html.contains(r#"id="runs-q" name="q" type="search" maxlength="200" value="demo""#),
        "the name search shows what was searched: {html}"
    );
    assert!(
        html.contains(
            r#"href="/runs?team=5&amp;q=demo&amp;sort=name&amp;tag=baseline&amp;cursor=2""#
        )
    );
    assert!(html.contains(r#"<option value="5" selected"#));
    assert!(html.contains("Unknown status"));
    assert!(html.contains(r#"<label for="runs-status">"#) && html.contains(r#"id="runs-status""#));
}

#[test]
fn run_page_offers_cancel_only_to_those_who_may_and_escapes_the_log() {
    let settings = || ChartSettings::from_query(None, None, None);
    let html = render(move || {
        view! { <RunView run=detail(7, RunStatus::Running, true, 1) metrics=vec![metric("regret_mean"), metric("win_rate/Optimization")] settings=settings() csrf="t0k".into() /> }
            .into_any()
    });
    assert!(
        html.contains(r#"<form method="post" action="/runs/7/cancel"><input type="hidden" name="csrf" value="t0k">"#),
        "{html}"
    );
    assert!(!html.contains("/runs/7/resume"));
    assert!(html.contains("step 30 &lt;done&gt;"));
    assert_eq!(html.matches("<svg").count(), 2, "two charts");
    // The configuration grouped by section, keys breaking only after `_`.
    assert!(
        html.contains(r#"<th colspan="2" scope="colgroup">grpo</th>"#),
        "{html}"
    );
    assert!(html.contains("clip_<wbr>low<wbr>"), "{html}");
    assert!(
        html.contains(r#"href="/api/v1/runs/7/metrics.csv""#),
        "the CSV export is one link away"
    );
    let viewer = render(move || {
        view! { <RunView run=detail(7, RunStatus::Running, false, 1) metrics=vec![] settings=settings() csrf="t0k".into() /> }.into_any()
    });
    assert!(
        !viewer.contains("/cancel"),
        "a viewer gets no cancel button"
    );
    assert!(viewer.contains("No metrics reported yet."));
    let failed = render(move || {
        view! { <RunView run=detail(7, RunStatus::Failed, true, 1) metrics=vec![] settings=settings() csrf="t0k".into() /> }.into_any()
    });
    assert!(failed.contains("/runs/7/resume") && !failed.contains("/runs/7/cancel"));
    // Tags and notes for everyone; editing, deleting and "run again" for editors, and deleting
    // only once no job is live.
    for page in [&html, &viewer, &failed] {
        assert!(
            page.contains("Baseline for the\nlearning-rate sweep."),
            "{page}"
        );
        assert!(
            page.contains(r#"href="/runs?team=5&amp;tag=baseline""#),
            "its own team's runs"
        );
    }
    assert!(
        html.contains(r#"action="/runs/7/details""#) && html.contains(r#"href="/runs/new?from=7""#)
    );
    assert!(
        !html.contains("/runs/7/delete"),
        "a running run offers no delete"
    );
    assert!(failed.contains(r#"action="/runs/7/delete""#));
    assert!(!viewer.contains("/runs/7/details") && !viewer.contains("from=7"));
}

#[test]
fn log_scale_leaves_out_values_at_or_below_zero_and_says_so() {
    let html = render(|| {
        let settings = ChartSettings::from_query(Some("0.5"), Some("time"), Some("1"));
        let mut m = metric("regret_mean");
        m.points[0].value = -0.2;
        view! { <RunView run=detail(7, RunStatus::Running, true, 1) metrics=vec![m] settings csrf=String::new() /> }
            .into_any()
    });
    assert!(
        html.contains("1 point at or below 0 not shown: a log scale has no place for them."),
        "{html}"
    );
    assert!(html.contains("<svg"), "the other points are drawn");
    assert!(html.contains(r#"<option value="time" selected"#));
    // Nothing above zero: the chart's place says so.
    let html = render(|| {
        let settings = ChartSettings::from_query(None, None, Some("1"));
        let mut m = metric("regret_mean");
        m.points.iter_mut().for_each(|p| p.value = 0.0);
        view! { <RunView run=detail(7, RunStatus::Running, true, 1) metrics=vec![m] settings csrf=String::new() /> }
            .into_any()
    });
    assert!(html.contains("switch log scale off"), "{html}");
}

#[test]
fn environment_page_shows_code_diff_plays_and_rejection() {
    let env = EnvironmentDetail {
        summary: EnvironmentSummary {
            env_id: "e-5".into(),
            run_id: 3,
            step: 12,
            skill: "Optimization".into(),
            kind: EnvKind::Game,
            status: EnvStatus::Rejected,
            rejection_reason: Some("not_solvable".into()),
            regret: None,
            win_rate_hint: None,
            win_rate_no_hint: None,
            verdicts: vec![],
            title: String::new(),
            code_skill: String::new(),
        },
        run_name: "tiny".into(),
        code: "class CoinEnv:\n    def reset(self, seed=None):\n        return 'obs', {}\n".into(),
        hint: None,
        rejection_message: Some("solution() did not win in 10 turns".into()),
        designer_reward: Some(-0.5),
        reward_levels: None,
        attempts: 3,
        parent: Some(ParentEnvironment {
            env_id: "m-1".into(),
            code: "class CoinEnv:\n    pass\n".into(),
        }),
        plays: vec![PlayDto {
            with_hint: true,
            episode_return: 1.0,
            won: true,
            turns: 2,
            transcript: vec![TurnDto {
                role: "assistant".into(),
                content: "\\boxed{7}".into(),
            }],
        }],
        reviews: vec![],
        can_review: false,
    };
    // A traceback naming a line of the code: linked from the rejection, marked in the code.
    let mut raised = env.clone();
    raised.rejection_message = Some(
        "  File \"<environment>\", line 3, in reset\n    return 'obs', {}\nKeyError: 'x'".into(),
    );
    let marked = render(move || view! { <EnvironmentView env=raised /> }.into_any());
    assert!(
        marked.contains(r##"<a href="#failing-line">line 3</a>"##),
        "{marked}"
    );
    let third = marked
        .split("<span class=\"line")
        .nth(3)
        .unwrap_or_default();
    assert!(
        third.starts_with(" failing\" id=\"failing-line\""),
        "{third}"
    );
    let html = render(move || view! { <EnvironmentView env /> }.into_any());
    assert!(!html.contains("failing-line"), "no line named, none marked");
    assert!(html.contains("rejected: not_solvable"));
    assert!(html.contains("solution() did not win in 10 turns"));
    assert!(
        html.contains(r#"<span class="tok-kw">class</span>"#),
        "{html}"
    );
    assert!(html.contains("diff-add") && html.contains("Memory m-1"));
    assert!(html.contains("2 lines: 1 changed, 1 added"), "{html}");
    assert!(html.contains("Play 1: won, return 1, 2 turns"));
    assert!(html.contains("With hint") && !html.contains("Without hint"));
}

#[test]
fn a_broken_environment_shows_its_reason_and_seed() {
    let env = EnvironmentDetail {
        summary: EnvironmentSummary {
            env_id: "e-9".into(),
            run_id: 3,
            step: 4,
            skill: "Optimization".into(),
            kind: EnvKind::Game,
            status: EnvStatus::BrokenInPlay,
            rejection_reason: Some("reward_out_of_range".into()),
            regret: None,
            win_rate_hint: None,
            win_rate_no_hint: None,
            verdicts: vec![],
            title: String::new(),
            code_skill: String::new(),
        },
        run_name: "tiny".into(),
        code: "class CoinEnv:\n    pass\n".into(),
        hint: None,
        rejection_message: Some("with seed 1234567: reward 1000000 is outside [-10, 10]".into()),
        designer_reward: Some(-0.5),
        reward_levels: None,
        attempts: 1,
        parent: None,
        plays: vec![],
        reviews: vec![ReviewDto {
            reviewer: "Ada".into(),
            verdict: "reward_hackable".into(),
            comment: "any box wins".into(),
            updated_at: "2026-12-01T10:00:00Z".into(),
        }],
        can_review: true,
    };
    let html = render(move || view! { <EnvironmentView env /> }.into_any());
    assert!(
        html.contains("broken in play: reward_out_of_range"),
        "{html}"
    );
    assert!(
        html.contains("Broken in play: stopped at its first contract violation"),
        "{html}"
    );
    assert!(html.contains("with seed 1234567"), "{html}");
}

#[test]
fn environment_list_links_rows_and_keeps_filters_in_page_links() {
    let item = EnvironmentSummary {
        env_id: "e-1".into(),
        run_id: 3,
        step: 4,
        skill: "Logical Deduction".into(),
        kind: EnvKind::Game,
        status: EnvStatus::Accepted,
        rejection_reason: None,
        regret: Some(0.35),
        win_rate_hint: Some(0.65),
        win_rate_no_hint: Some(0.3),
        verdicts: vec!["good".into()],
        title: "Seat five friends in a row from clues".into(),
        code_skill: "Spatial Reasoning".into(),
    };
    let envs = Page {
        items: vec![item],
        next_cursor: Some("4.1".into()),
    };
    let filters = EnvFilters {
        skill: "Logical Deduction".into(),
        sort: "regret".into(),
        ..Default::default()
    };
    let html = render(move || {
        view! { <EnvironmentsView run_id=3 run_name="tiny".into() skills=vec!["Logical Deduction".into(), "Optimization".into()] envs filters problems=vec![] /> }
            .into_any()
    });
    assert!(
        html.contains(r#"href="/runs/3/environments/e-1""#),
        "{html}"
    );
    assert!(html.contains(r#"<option value="Logical Deduction" selected"#));
    assert!(
        html.contains(r#"href="/runs/3/environments?skill=Logical%20Deduction&amp;sort=regret&amp;cursor=4.1""#),
        "{html}"
    );
    assert!(
        html.contains(r#"<option value="regret" selected"#),
        "{html}"
    );
    assert!(
        html.contains(r#"<span class="env-title">Seat five friends in a row from clues</span>"#)
            && html.contains(r#"<code class="env-id">e-1</code>"#),
        "a readable title with the id beside it: {html}"
    );
    assert!(!html.contains("First page"));
    assert!(html.contains("65%") && html.contains("0.35"));
    // The skill asked for and the one the code names, each labelled (issue 43: they disagreed
    // with nothing to say which was which).
    assert!(html.contains("Skill asked for"), "{html}");
    assert!(html.contains("code says: Spatial Reasoning"), "{html}");
    assert!(
        html.contains(r#"<span class="badge review-good">good</span>"#),
        "{html}"
    );
    // The pool export with the same filters, every page of it: the zip and the JSONL.
    assert!(
        html.contains(r#"href="/api/v1/runs/3/pool.zip?skill=Logical%20Deduction""#),
        "{html}"
    );
    assert!(
        html.contains(r#"href="/api/v1/runs/3/environments.jsonl?skill=Logical%20Deduction""#),
        "{html}"
    );
    assert!(
        html.contains(r#"<select id="env-verdict" name="verdict">"#),
        "{html}"
    );
}

#[test]
fn compare_shows_only_differing_keys_and_one_overlay_per_metric() {
    let html = render(|| {
        let runs = vec![
            detail(1, RunStatus::Succeeded, false, 1),
            detail(2, RunStatus::Succeeded, false, 2),
        ];
        let metrics = vec![
            vec![metric("regret_mean")],
            vec![metric("regret_mean"), metric("vendi")],
        ];
        view! { <CompareView runs metrics settings=ChartSettings::from_query(None, None, None) /> }
            .into_any()
    });
    assert!(html.contains("<code>seed</code>"), "{html}");
    assert!(!html.contains("grpo.clip_low"), "equal keys are hidden");
    // Two overlays, and (the runs differ only in the seed) two mean-and-spread charts.
    assert_eq!(html.matches("<svg").count(), 4);
    assert!(html.contains("run-1 (#1)") && html.contains("run-2 (#2)"));
    assert!(html.contains("Mean and spread over seeds"), "{html}");
    assert!(
        html.contains("run-1 (#1) and 1 more seed (mean, range)"),
        "{html}"
    );
    // Applying the chart settings (a GET form) keeps the runs on the page.
    assert!(
        html.contains(r#"<input type="hidden" name="run" value="1"><input type="hidden" name="run" value="2"><!><label for="chart-smooth">"#),
        "{html}"
    ); // The overlays come in the run page's sections, collapsible, regret before diversity.
    let (reward, diversity) = (
        html.find(r#"<span class="chart-section-title">Reward and regret</span>"#),
        html.find(r#"<span class="chart-section-title">Diversity</span>"#),
    );
    assert!(
        matches!((reward, diversity), (Some(a), Some(b)) if a < b),
        "{html}"
    );
    assert_eq!(
        html.matches(r#"<details open class="chart-section">"#)
            .count(),
        2,
        "{html}"
    );
}

/// Marks show with who and why; editors get the form (with their CSRF token), viewers do not.
#[test]
fn the_review_section_shows_marks_and_offers_the_form_only_to_editors() {
    let env = |can_review: bool| EnvironmentDetail {
        summary: EnvironmentSummary {
            env_id: "e-2".into(),
            run_id: 3,
            step: 1,
            skill: "Optimization".into(),
            kind: EnvKind::Game,
            status: EnvStatus::Accepted,
            rejection_reason: None,
            regret: Some(0.2),
            win_rate_hint: Some(0.5),
            win_rate_no_hint: Some(0.25),
            verdicts: vec![],
            title: String::new(),
            code_skill: String::new(),
        },
        run_name: "tiny".into(),
        code: "class CoinEnv:\n    pass\n".into(),
        hint: Some("count coins".into()),
        rejection_message: None,
        designer_reward: Some(0.3),
        reward_levels: Some(2),
        attempts: 1,
        parent: None,
        plays: vec![],
        reviews: vec![ReviewDto {
            reviewer: "Ada".into(),
            verdict: "broken".into(),
            comment: "the checker is wrong".into(),
            updated_at: "2026-12-01T10:00:00Z".into(),
        }],
        can_review,
    };
    let editor = env(true);
    let html = render(move || {
        view! { <EnvironmentView env=editor csrf="t0k".to_string() error=Some("comment: too long".to_string()) /> }
            .into_any()
    });
    assert!(
        html.contains("the checker is wrong") && html.contains("Ada"),
        "{html}"
    );
    assert!(
        html.contains(r#"action="/runs/3/environments/e-2/review""#),
        "{html}"
    );
    assert!(html.contains(r#"value="t0k""#) && html.contains("comment: too long"));
    let viewer = env(false);
    let html = render(move || view! { <EnvironmentView env=viewer /> }.into_any());
    assert!(html.contains("the checker is wrong"));
    assert!(
        html.contains("Memory parent")
            && html.contains("None: the designer was shown no memory environment"),
        "an environment without a parent says so: {html}"
    );
    assert!(
        !html.contains("review-form"),
        "a viewer gets no form: {html}"
    );
}
