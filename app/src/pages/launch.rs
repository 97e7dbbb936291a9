//! The launch form (`/runs/new`): a preset to start from (a GET form, so choosing one works
//! without JavaScript), then every configuration field grouped by section, each with the
//! preset's value beside it and the server's validation messages under it. The whole form is
//! one POST to `/runs/new`; the backend validates it with `RunConfig`'s own rules and either
//! creates the run or renders this page again with what was typed and what was wrong. The raw
//! TOML of the configuration is offered as an advanced alternative in the same form.

use crate::dto::{ConfigField, FieldKind, LaunchForm};
use leptos::prelude::*;

/// Where the form posts; the backend owns the route.
pub const LAUNCH_ACTION: &str = "/runs/new";

/// The element id of a configuration field (`designer.plateau.low` -> `cfg-designer-plateau-low`).
pub fn field_id(path: &str) -> String {
    let mut id = String::from("cfg-");
    for c in path.chars() {
        id.push(if c.is_ascii_alphanumeric() { c } else { '-' });
    }
    id
}

/// The launch page.
#[component]
pub fn LaunchView(
    form: LaunchForm,
    /// The viewer's CSRF token, carried by the form.
    csrf: String,
) -> impl IntoView {
    let field_error = |key: &str| {
        form.field_errors
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, m)| m.clone())
            .collect::<Vec<_>>()
    };
    let (name_errors, project_errors, executor_errors) = (
        field_error("name"),
        field_error("project"),
        field_error("executor"),
    );
    let (name_bad, project_bad, executor_bad) = (
        !name_errors.is_empty(),
        !project_errors.is_empty(),
        !executor_errors.is_empty(),
    );
    // Links to every field with a message, so a keyboard or screen-reader user finds them.
    let mut problems: Vec<(String, String)> = form
        .sections
        .iter()
        .flat_map(|s| s.fields.iter())
        .filter(|f| !f.errors.is_empty())
        .map(|f| (field_id(&f.path), f.path.clone()))
        .collect();
    for (key, errs) in [
        ("project", &project_errors),
        ("name", &name_errors),
        ("executor", &executor_errors),
    ] {
        if !errs.is_empty() {
            problems.insert(0, (format!("launch-{key}"), key.to_owned()));
        }
    }
    let preset_description = form
        .presets
        .iter()
        .find(|p| p.key == form.preset)
        .map(|p| p.description.clone())
        .unwrap_or_default();
    let preset_options = form
        .presets
        .iter()
        .map(|p| view! { <option value=p.key.clone() selected=p.key == form.preset>{p.label.clone()}</option> })
        .collect_view();
    let project_options = form
        .projects
        .iter()
        .map(|p| {
            view! {
                <option value=p.id.to_string() selected=form.project == Some(p.id)>
                    {format!("{} / {}", p.team, p.name)}
                </option>
            }
        })
        .collect_view();
    let executor_options = form
        .executors
        .iter()
        .map(
            |e| view! { <option value=e.clone() selected=*e == form.executor>{e.clone()}</option> },
        )
        .collect_view();
    let no_projects = form.projects.is_empty();
    let sections = form
        .sections
        .into_iter()
        .map(|s| {
            let invalid = s.fields.iter().any(|f| !f.errors.is_empty());
            // The form holds every setting (it was 8,100 px tall): a section opens by itself only
            // when it is the run's length and seed or has a problem; the others are one click
            // away, and their fields are submitted closed or open.
            let open = invalid || s.key == "run";
            let count = s.fields.len();
            let fields = s.fields.into_iter().map(field_view).collect_view();
            view! {
                <details class="card config-section" class:has-errors=invalid id=format!("section-{}", s.key) open=open>
                    <summary>
                        <span class="section-title">{s.title.clone()}</span> " " <code class="section-key">{format!("[{}]", s.key)}</code>
                        " " <span class="sub">{format!("{count} setting{}", if count == 1 { "" } else { "s" })}</span>
                    </summary>
                    <fieldset class="config-fields">
                        <legend class="visually-hidden">{s.title}</legend>
                        <div class="config-grid">{fields}</div>
                    </fieldset>
                </details>
            }
        })
        .collect_view();
    let toml_errors = form.toml_submitted.then(|| form.errors.clone());
    let general_errors = (!form.toml_submitted).then(|| form.errors.clone());
    view! {
        <nav class="crumbs" aria-label="Breadcrumb"><a href="/runs">"Runs"</a> " / " <span>"New run"</span></nav>
        <div class="page-head"><h1>"New run"</h1></div>
        {general_errors.unwrap_or_default().into_iter().map(|e| view! { <p class="form-error" role="alert">{e}</p> }).collect_view()}
        {(!problems.is_empty()).then(|| view! {
            <div class="form-error error-summary" role="alert" id="launch-problems">
                <p>{format!("{} setting(s) need attention:", problems.len())}</p>
                <ul>{problems.into_iter().map(|(id, path)| view! { <li><a href=format!("#{id}")><code>{path}</code></a></li> }).collect_view()}</ul>
            </div>
        })}
        {no_projects.then(|| view! {
            <p class="notice" role="status" id="launch-no-projects">
                "You can launch runs only in a project of a team where you are an editor or owner, "
                "and you have none: viewers read runs but do not launch them. "
                <a href="/teams">"Create a team and a project"</a> " first, or ask a team owner to make you an editor."
            </p>
        })}
        // Without a project to launch in (a viewer, or a new user without a team) the form
        // would only offer an empty project list; the notice above says what to do instead.
        {(!no_projects).then(move || view! {
        <form class="card filters preset-form" method="get" action=LAUNCH_ACTION aria-label="Start from a preset">
            <div class="field">
                <label for="launch-preset">"Preset"</label>
                <select id="launch-preset" name="preset" aria-describedby="launch-preset-help">{preset_options}</select>
            </div>
            {form.project.map(|p| view! { <input type="hidden" name="project" value=p.to_string() /> })}
            <button type="submit" class="secondary">"Load preset"</button>
            <p class="help preset-help" id="launch-preset-help">
                {preset_description} " Loading a preset replaces the values below."
            </p>
        </form>
        <form method="post" action=LAUNCH_ACTION class="launch-form" id="launch-form" novalidate>
            <input type="hidden" name="csrf" value=csrf />
            <input type="hidden" name="preset" value=form.preset.clone() />
            <fieldset class="card config-section">
                <legend>"Run"</legend>
                <div class="config-grid">
                    <div class="field" class:invalid=project_bad>
                        <label for="launch-project">"Project"</label>
                        <select id="launch-project" name="project" required aria-invalid=project_bad.then_some("true")>
                            {project_options}
                        </select>
                        {errors_view("launch-project", project_errors)}
                    </div>
                    <div class="field" class:invalid=name_bad>
                        <label for="launch-name">"Run name"</label>
                        <input id="launch-name" name="name" type="text" maxlength="200" required value=form.name
                            aria-invalid=name_bad.then_some("true")
                            aria-describedby=name_bad.then_some("launch-name-err") />
                        {errors_view("launch-name", name_errors)}
                    </div>
                    <div class="field" class:invalid=executor_bad>
                        <label for="launch-executor">"Executor"</label>
                        <select id="launch-executor" name="executor" aria-describedby="launch-executor-help">{executor_options}</select>
                        <p class="help" id="launch-executor-help">"local: a process on the server's machine; ray: a job on the Ray cluster."</p>
                        {errors_view("launch-executor", executor_errors)}
                    </div>
                </div>
            </fieldset>
            {sections}
            <div class="launch-actions card">
                <button type="submit" name="mode" value="fields" id="launch-submit">"Launch run"</button>
                <span class="help">"The configuration is checked on the server; problems are shown next to their fields."</span>
            </div>
            <details class="card toml-details" open=form.toml_submitted>
                <summary>"Advanced: the configuration as TOML"</summary>
                <p class="help" id="launch-toml-help">
                    "Edit the whole configuration as text (what " <code>"spade train --config"</code>
                    " reads; omitted keys take the spec's defaults) and launch it instead of the fields above. "
                    "The project, name and executor above still apply."
                </p>
                {toml_errors.unwrap_or_default().into_iter().map(|e| view! { <p class="form-error" role="alert">{e}</p> }).collect_view()}
                <label for="launch-toml">"Configuration (TOML)"</label>
                <textarea id="launch-toml" name="config_toml" rows="18" spellcheck="false" aria-describedby="launch-toml-help">{form.toml}</textarea>
                <p><button type="submit" name="mode" value="toml" class="secondary" id="launch-toml-submit">"Launch from TOML"</button></p>
            </details>
        </form>
        })}
    }
}

/// The messages under a field, referenced by its `aria-describedby`.
fn errors_view(id: &str, errors: Vec<String>) -> impl IntoView + use<> {
    (!errors.is_empty()).then(|| {
        let id = format!("{id}-err");
        view! {
            <div class="field-errors" id=id>
                {errors.into_iter().map(|e| view! { <p class="field-error">{e}</p> }).collect_view()}
            </div>
        }
    })
}

fn field_view(f: ConfigField) -> impl IntoView {
    let id = field_id(&f.path);
    let help_id = format!("{id}-help");
    let invalid = !f.errors.is_empty();
    let described = if invalid {
        format!("{help_id} {id}-err")
    } else {
        help_id.clone()
    };
    let aria_invalid = invalid.then_some("true");
    let default = if f.default.is_empty() {
        "not set".to_owned()
    } else {
        f.default.clone()
    };
    let help = view! {
        <p class="help" id=help_id.clone()>
            {f.help.clone()} " " <span class="preset-value">"Preset: " <code>{default}</code></span>
        </p>
    };
    let label = view! { <label for=id.clone()>{f.label.clone()} <code class="path">{f.path.clone()}</code></label> };
    let step = if f.kind == FieldKind::Integer {
        "1"
    } else {
        "any"
    };
    let control = match f.kind {
        FieldKind::Integer | FieldKind::Number => {
            view! {
                {label}
                <input id=id.clone() name=f.path.clone() type="number" step=step value=f.value.clone() inputmode="decimal"
                    aria-describedby=described.clone() aria-invalid=aria_invalid />
            }
            .into_any()
        }
        FieldKind::Text { optional } => view! {
            {label}
            <input id=id.clone() name=f.path.clone() type="text" value=f.value.clone()
                placeholder=optional.then_some("not set") aria-describedby=described.clone() aria-invalid=aria_invalid />
        }
        .into_any(),
        FieldKind::Bool => view! {
            <span class="check">
                <input id=id.clone() name=f.path.clone() type="checkbox" value="true" checked=f.value == "true"
                    aria-describedby=described.clone() aria-invalid=aria_invalid />
                {label}
            </span>
        }
        .into_any(),
        FieldKind::Choice(options) => view! {
            {label}
            <select id=id.clone() name=f.path.clone() aria-describedby=described.clone() aria-invalid=aria_invalid>
                {options.into_iter().map(|o| view! { <option value=o.clone() selected=o == f.value>{o.clone()}</option> }).collect_view()}
            </select>
        }
        .into_any(),
        FieldKind::Multi(options) => {
            let chosen: Vec<String> = f.value.split(',').map(|s| s.trim().to_owned()).collect();
            // A group label for the checkboxes; each box has its own <label for>.
            view! {
                <span class="multi-label" id=id.clone()>{f.label.clone()} <code class="path">{f.path.clone()}</code></span>
                <span class="multi" role="group" aria-labelledby=id.clone() aria-describedby=described.clone()>
                    {options.into_iter().map(|o| {
                        let oid = format!("{id}-{o}");
                        view! {
                            <span class="check">
                                <input id=oid.clone() name=f.path.clone() type="checkbox" value=o.clone() checked=chosen.contains(&o) />
                                <label for=oid>{o.clone()}</label>
                            </span>
                        }
                    }).collect_view()}
                </span>
            }
            .into_any()
        }
    };
    view! {
        <div class="field cfg-field" class:invalid=invalid>
            {control}
            {errors_view(&id, f.errors)}
            {help}
        </div>
    }
}
