//! Route components: read the URL, load data through `crate::data`'s server functions and hand
//! the DTOs to the page components of `crate::pages`. A missing session shows a log-in prompt;
//! a failed load shows its message.

use crate::charts::ChartSettings;
use crate::data::{self, Access, EnvListQuery};
use crate::pages;
use crate::pages::environments::{EnvFilters, EnvQuery};
use crate::pages::runs::RunFilters;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};

/// The CSRF token for a page's forms, from a viewer load of the page's own.
///
/// The top bar reads the app's viewer resource under its own `<Suspense>`. Reading that same
/// resource under a page's `<Suspense>` as well is the pattern of leptos issue 4851 (one resource
/// under two boundaries), and a streamed page built that way once stalled mid-body and never
/// ended, in CI. So each boundary reads a resource of its own: one more session lookup per server
/// render, none after hydration (the value travels with the page).
fn csrf_resource() -> Resource<String> {
    Resource::new(
        || (),
        |_| async {
            data::load_viewer()
                .await
                .ok()
                .flatten()
                .map(|v| v.csrf)
                .unwrap_or_default()
        },
    )
}

/// A query parameter of the current URL, reactively.
fn query(name: &'static str) -> impl Fn() -> Option<String> + Copy + Send + Sync {
    let q = use_query_map();
    move || q.with(|m| m.get(name)).filter(|s| !s.is_empty())
}

/// A query parameter as the page starts with it, read once without tracking: chart settings and
/// the seed band are read at the start and then live in signals of their own (reading the query
/// reactively there made Leptos warn on every page).
fn query_once(name: &'static str) -> Option<String> {
    use_query_map()
        .with_untracked(|m| m.get(name))
        .filter(|s| !s.is_empty())
}

/// A path parameter of the current route.
fn param(name: &'static str) -> impl Fn() -> Option<String> + Copy + Send + Sync {
    let p = use_params_map();
    move || p.with(|m| m.get(name))
}

/// What a page shows instead of its content when loading did not succeed.
fn not_shown(r: Result<(), ServerFnError>) -> AnyView {
    match r {
        Ok(()) => {
            // The access cookie may only have expired: a refresh cookie brings the page back.
            #[cfg(feature = "hydrate")]
            Effect::new(|_| crate::session::resume_or_stay());
            view! {
                <div class="card login-prompt">
                    <h1>"Log in to continue"</h1>
                    <p>"This page shows your team's runs; it needs you to be logged in."</p>
                    <p><a class="button" href="/login">"Log in"</a> " or " <a href="/register">"register"</a></p>
                </div>
            }
            .into_any()
        }
        Err(e) => view! { <p class="form-error" role="alert">{server_message(&e)}</p> }.into_any(),
    }
}

/// The user-facing part of a server function error.
fn server_message(e: &ServerFnError) -> String {
    match e {
        ServerFnError::ServerError(m) => m.clone(),
        other => other.to_string(),
    }
}

/// Whether a load failed because the thing does not exist or is not the viewer's to see
/// (`DataError::NotFound`, whose message is "<thing> not found").
fn is_not_found(e: &ServerFnError) -> bool {
    server_message(e).ends_with(" not found")
}

/// The page for a run, environment or link that is not there (the server function already set
/// the response's status to 404).
fn not_found(what: &'static str) -> AnyView {
    view! {
        <Title text=title(format_args!("{what} not found")) />
        <div class="card login-prompt" id="not-found">
            <h1>{format!("{what} not found")}</h1>
            <p>"It does not exist, or it belongs to a team you are not a member of."</p>
            <p><a class="button" href="/runs">"Back to your runs"</a></p>
        </div>
    }
    .into_any()
}

/// A page title: the page's own words first, the product last.
fn title(page: impl std::fmt::Display) -> String {
    format!("{page} · SPADE Studio")
}

fn loading() -> impl IntoView {
    view! { <p class="empty" aria-live="polite">"Loading…"</p> }
}

#[component]
pub fn RunsPage() -> impl IntoView {
    let (team, status, name, sort, cursor) = (
        query("team"),
        query("status"),
        query("q"),
        query("sort"),
        query("cursor"),
    );
    let (tag, config, metric, metric_min, metric_max) = (
        query("tag"),
        query("config"),
        query("metric"),
        query("metric_min"),
        query("metric_max"),
    );
    let parsed = Memo::new(move |_| {
        let (mut filters, mut problems) = RunFilters::from_query(
            team().as_deref(),
            status().as_deref(),
            name().as_deref(),
            sort().as_deref(),
            cursor().as_deref(),
        );
        let (search, more) = crate::dto::RunSearch {
            tag: tag(),
            config: config(),
            metric: metric(),
            metric_min: metric_min(),
            metric_max: metric_max(),
        }
        .checked();
        filters.search = search;
        problems.extend(more);
        (filters, problems)
    });
    let data = Resource::new(
        move || parsed.get().0,
        |f| {
            data::load_runs(
                f.team,
                f.status.map(|s| s.as_str().to_owned()),
                f.name,
                Some(f.sort).filter(|s| !s.is_empty()),
                f.cursor,
                f.search.tag,
                f.search.config,
                f.search.metric,
                f.search.metric_min,
                f.search.metric_max,
            )
        },
    );
    view! {
        <Title text="Runs · SPADE Studio" />
        <Suspense fallback=loading>
            {move || Suspend::new(async move {
                let (mut filters, problems) = parsed.get_untracked();
                match data.await {
                    Ok(Access::Granted(d)) => {
                        filters.team = d.team;
                        view! { <pages::runs::RunsView runs=d.runs teams=d.teams filters problems team=d.team /> }.into_any()
                    }
                    Ok(Access::LoginRequired) => not_shown(Ok(())),
                    Err(e) => not_shown(Err(e)),
                }
            })}
        </Suspense>
    }
}

/// The team's benchmark results (`?team=ID`).
#[component]
pub fn BenchmarksPage() -> impl IntoView {
    let team = query("team");
    let rows = query("rows");
    let parsed = Memo::new(move |_| team().and_then(|t| t.parse::<i64>().ok()));
    let data = Resource::new(move || parsed.get(), data::load_benchmarks);
    view! {
        <Title text="Benchmarks · SPADE Studio" />
        <Suspense fallback=loading>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(Access::Granted(d)) => view! {
                        <pages::benchmarks::BenchmarksPageView teams=d.teams team=d.team runs=d.runs
                            rows_by=pages::benchmarks::RowsBy::from_query(rows().as_deref()) />
                    }.into_any(),
                    Ok(Access::LoginRequired) => not_shown(Ok(())),
                    Err(e) => not_shown(Err(e)),
                }
            })}
        </Suspense>
    }
}

fn run_id() -> impl Fn() -> Result<i64, String> + Copy + Send + Sync {
    let id = param("id");
    move || {
        let raw = id().unwrap_or_default();
        raw.parse::<i64>()
            .map_err(|_| format!("run id must be a whole number, got \"{raw}\""))
    }
}

/// The error of a path that names no run (`/runs/abc`): 404, like a run that does not exist.
fn bad_run_id(msg: String) -> ServerFnError {
    #[cfg(feature = "ssr")]
    if let Some(opts) = use_context::<leptos_axum::ResponseOptions>() {
        opts.set_status(http::StatusCode::NOT_FOUND);
    }
    ServerFnError::new(msg)
}

#[component]
pub fn RunPage() -> impl IntoView {
    let id = run_id();
    let settings = ChartSettings::from_query(
        query_once("smooth").as_deref(),
        query_once("x").as_deref(),
        query_once("log").as_deref(),
    )
    .with_find(query_once("find"));
    let data = Resource::new(id, |id| async move {
        match id {
            Ok(id) => data::load_run(id).await,
            Err(msg) => Err(bad_run_id(msg)),
        }
    });
    let csrf = csrf_resource();
    let views = Resource::new(|| (), |_| data::load_chart_views());
    view! {
        <Suspense fallback=loading>
            {move || Suspend::new(async move {
                let csrf = csrf.await;
                // The run shows without its saved views if they cannot be read.
                let views = match views.await {
                    Ok(Access::Granted(v)) => Some(v),
                    _ => None,
                };
                match data.await {
                    Ok(Access::Granted(d)) => {
                        let run_id = d.run.summary.id;
                        let share = d.shares.map(|shares| view! {
                            <pages::share::ShareSection run_id shares csrf=csrf.clone() />
                        });
                        view! {
                            <Title text=title(format_args!("{} · Run", d.run.summary.name)) />
                            {query("error")().map(|e| view! { <p class="form-error" role="alert">{pages::auth::sentence(e)}</p> })}
                            <pages::run::RunView run=d.run metrics=d.metrics benchmarks=d.benchmarks settings csrf=csrf.clone() views />
                            {share}
                        }.into_any()
                    }
                    Ok(Access::LoginRequired) => not_shown(Ok(())),
                    Err(e) if is_not_found(&e) => not_found("Run"),
                    Err(e) => not_shown(Err(e)),
                }
            })}
        </Suspense>
    }
}

#[component]
pub fn EnvironmentsPage() -> impl IntoView {
    let id = run_id();
    let (skill, status, step_min, step_max, regret_min, verdict, cursor) = (
        query("skill"),
        query("status"),
        query("step_min"),
        query("step_max"),
        query("regret_min"),
        query("verdict"),
        query("cursor"),
    );
    let sort = query("sort");
    let parsed = Memo::new(move |_| {
        EnvFilters::from_query(EnvQuery {
            skill: skill().as_deref(),
            status: status().as_deref(),
            step_min: step_min().as_deref(),
            step_max: step_max().as_deref(),
            regret_min: regret_min().as_deref(),
            verdict: verdict().as_deref(),
            sort: sort().as_deref(),
            cursor: cursor().as_deref(),
        })
    });
    let data = Resource::new(
        move || (id(), parsed.get().0),
        |(id, f)| async move {
            let id = id.map_err(bad_run_id)?;
            let inverted = f.steps_inverted();
            let (step_min, step_max) = f.step_indices();
            let q = EnvListQuery {
                skill: Some(f.skill).filter(|s| !s.is_empty()),
                status: f.status.map(|s| match s {
                    crate::dto::EnvStatus::Accepted => "accepted".to_owned(),
                    crate::dto::EnvStatus::Rejected => "rejected".to_owned(),
                    crate::dto::EnvStatus::BrokenInPlay => "broken_in_play".to_owned(),
                }),
                // An inverted range is not sent: the page shows the form and its message.
                step_min: step_min.filter(|_| !inverted),
                step_max: step_max.filter(|_| !inverted),
                regret_min: f.regret_min,
                verdict: Some(f.verdict).filter(|v| !v.is_empty()),
                sort: Some(f.sort).filter(|v| !v.is_empty()),
                cursor: f.cursor,
            };
            data::load_environments(id, q).await
        },
    );
    view! {
        <Suspense fallback=loading>
            {move || Suspend::new(async move {
                let (filters, problems) = parsed.get_untracked();
                let run_id = id().unwrap_or_default();
                match data.await {
                    Ok(Access::Granted(d)) => {
                        let envs = if filters.steps_inverted() {
                            crate::dto::Page { items: vec![], next_cursor: None }
                        } else {
                            d.envs
                        };
                        view! {
                            <Title text=title(format_args!("Environments of {}", d.run_name)) />
                            <pages::environments::EnvironmentsView run_id run_name=d.run_name skills=d.skills envs filters problems />
                        }.into_any()
                    }
                    Ok(Access::LoginRequired) => not_shown(Ok(())),
                    Err(e) if is_not_found(&e) => not_found("Run"),
                    Err(e) => not_shown(Err(e)),
                }
            })}
        </Suspense>
    }
}

#[component]
pub fn EnvironmentPage() -> impl IntoView {
    let id = run_id();
    let env = param("env");
    let data = Resource::new(
        move || (id(), env()),
        |(id, env)| async move {
            let id = id.map_err(bad_run_id)?;
            data::load_environment(id, env.unwrap_or_default()).await
        },
    );
    let csrf = csrf_resource();
    view! {
        <Suspense fallback=loading>
            {move || Suspend::new(async move {
                let csrf = csrf.await;
                match data.await {
                    Ok(Access::Granted(env)) => view! {
                        <Title text=title(format_args!("{} · {}", env.summary.env_id, env.run_name)) />
                        <pages::environments::EnvironmentView env csrf error=query("error")() />
                    }.into_any(),
                    Ok(Access::LoginRequired) => not_shown(Ok(())),
                    Err(e) if is_not_found(&e) => not_found("Environment"),
                    Err(e) => not_shown(Err(e)),
                }
            })}
        </Suspense>
    }
}

#[component]
pub fn ComparePage() -> impl IntoView {
    let q = use_query_map();
    // `?run=1&run=2` (the runs list's checkboxes) or `?runs=1,2`.
    let ids = move || {
        q.with(|m| {
            let mut ids: Vec<String> = m.get_all("run").unwrap_or_default();
            if let Some(list) = m.get("runs") {
                ids.extend(list.split(',').map(str::to_owned));
            }
            ids.join(",")
        })
    };
    let settings = ChartSettings::from_query(
        query_once("smooth").as_deref(),
        query_once("x").as_deref(),
        query_once("log").as_deref(),
    )
    .with_find(query_once("find"));
    let band = pages::compare::Band::from_query(query_once("band").as_deref());
    let data = Resource::new(ids, data::load_compare);
    let choices = Resource::new(|| (), |_| data::load_run_choices());
    let views = Resource::new(|| (), |_| data::load_chart_views());
    let csrf = csrf_resource();
    view! {
        <Title text="Compare · SPADE Studio" />
        <Suspense fallback=loading>
            {move || Suspend::new(async move {
                // The picker is a convenience: without it the comparison still shows.
                let choices = match choices.await {
                    Ok(Access::Granted(c)) => c,
                    _ => Vec::new(),
                };
                // So are the saved views.
                let views = match views.await {
                    Ok(Access::Granted(v)) => Some((v, csrf.await)),
                    _ => None,
                };
                match data.await {
                    Ok(Access::Granted(list)) => {
                        let benchmarks: Vec<(String, crate::dto::BenchmarksDto)> = list.iter().map(|d| (format!("{} (#{})", d.run.summary.name, d.run.summary.id), d.benchmarks.clone())).collect();
                        let (runs, metrics): (Vec<_>, Vec<_>) = list.into_iter().map(|d| (d.run, d.metrics)).unzip();
                        view! { <pages::compare::CompareView runs metrics benchmarks settings band choices views /> }.into_any()
                    }
                    Ok(Access::LoginRequired) => not_shown(Ok(())),
                    Err(e) => not_shown(Err(e)),
                }
            })}
        </Suspense>
    }
}

#[component]
pub fn LoginPage() -> impl IntoView {
    let (error, email, next) = (query("error"), query("email"), query("next"));
    view! {
        <Title text="Log in · SPADE Studio" />
        {move || view! {
            <pages::auth::LoginView
                error=error()
                email=email().unwrap_or_default()
                next=next().filter(|n| n.starts_with('/') && !n.starts_with("//")).unwrap_or_else(|| "/runs".into())
            />
        }}
    }
}

#[component]
pub fn RegisterPage() -> impl IntoView {
    let (error, email, name) = (query("error"), query("email"), query("display_name"));
    view! {
        <Title text="Register · SPADE Studio" />
        {move || view! {
            <pages::auth::RegisterView error=error() email=email().unwrap_or_default() display_name=name().unwrap_or_default() />
        }}
    }
}

/// The launch form (`/runs/new?preset=..&project=..`).
#[component]
pub fn LaunchPage() -> impl IntoView {
    let (preset, project, from) = (query("preset"), query("project"), query("from"));
    let data = Resource::new(
        move || {
            (
                preset(),
                project().and_then(|p| p.parse::<i64>().ok()),
                from().and_then(|r| r.parse::<i64>().ok()),
            )
        },
        |(preset, project, from)| data::load_launch(preset, project, from),
    );
    let csrf = csrf_resource();
    view! {
        <Title text="New run · SPADE Studio" />
        <Suspense fallback=loading>
            {move || Suspend::new(async move {
                let csrf = csrf.await;
                match data.await {
                    Ok(Access::Granted(form)) => view! { <pages::launch::LaunchView form csrf /> }.into_any(),
                    Ok(Access::LoginRequired) => not_shown(Ok(())),
                    Err(e) => not_shown(Err(e)),
                }
            })}
        </Suspense>
    }
}

/// The teams page; `?error=` and `?notice=` carry the outcome of the last form.
#[component]
pub fn TeamsPage() -> impl IntoView {
    let data = Resource::new(|| (), |_| data::load_teams());
    let (error, notice) = (query("error"), query("notice"));
    // An invitation link (`?invitation=ID&code=CODE`) fills in that invitation's code.
    let (invitation, code) = (query("invitation"), query("code"));
    let link = move || {
        let id = invitation()?.parse::<i64>().ok()?;
        Some((id, code()?))
    };
    let csrf = csrf_resource();
    view! {
        <Title text="Teams · SPADE Studio" />
        <Suspense fallback=loading>
            {move || Suspend::new(async move {
                let csrf = csrf.await;
                match data.await {
                    Ok(Access::Granted(data)) => view! {
                        <pages::teams::TeamsView data csrf error=error() notice=notice() link=link() />
                    }.into_any(),
                    Ok(Access::LoginRequired) => not_shown(Ok(())),
                    Err(e) => not_shown(Err(e)),
                }
            })}
        </Suspense>
    }
}

/// The account page; `?error=` and `?notice=` carry the outcome of the last form.
#[component]
pub fn AccountPage() -> impl IntoView {
    let data = Resource::new(|| (), |_| data::load_account());
    let (error, notice) = (query("error"), query("notice"));
    let csrf = csrf_resource();
    view! {
        <Title text="Account · SPADE Studio" />
        <Suspense fallback=loading>
            {move || Suspend::new(async move {
                let csrf = csrf.await;
                match data.await {
                    Ok(Access::Granted(data)) => view! {
                        <pages::account::AccountView data csrf error=error() notice=notice() />
                    }.into_any(),
                    Ok(Access::LoginRequired) => not_shown(Ok(())),
                    Err(e) => not_shown(Err(e)),
                }
            })}
        </Suspense>
    }
}

/// A run opened through a share link: no session needed, nothing to act on.
#[component]
pub fn SharedPage() -> impl IntoView {
    let token = param("token");
    let settings = ChartSettings::from_query(
        query_once("smooth").as_deref(),
        query_once("x").as_deref(),
        query_once("log").as_deref(),
    )
    .with_find(query_once("find"));
    let data = Resource::new(token, |t| data::load_shared(t.unwrap_or_default()));
    view! {
        <Suspense fallback=loading>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(d) => view! {
                        <Title text=title(format_args!("{} · Shared run", d.run.summary.name)) />
                        <pages::share::SharedRunView token=token().unwrap_or_default() run=d.run metrics=d.metrics environments=d.environments settings />
                    }.into_any(),
                    Err(e) => view! {
                        <Title text=title("Shared run not found") />
                        <h1>"Shared run"</h1>
                        <p class="form-error" role="alert" id="shared-error">
                            {server_message(&e)} ": the link may have been revoked, or mistyped."
                        </p>
                    }.into_any(),
                }
            })}
        </Suspense>
    }
}
