//! The launch form (`/runs/new`), HTTP glue: the form's engine (presets, the field table,
//! parsing a submission, placing each `ConfigIssue` beside its field) is `spade::config::form`;
//! here are the projects a user may launch into, the name/project/executor fields, and the
//! submission. A valid form creates the run through [`crate::service::runs::create`], as the API
//! does (roles, audit, the same checks); an invalid one renders the page again with what was typed, through the request
//! extension [`LaunchDraft`] that `Dashboard::launch` answers from.

use crate::AppState;
use crate::auth::AuthUser;
use crate::service::runs::{CreateRun, EXECUTORS, create};
use crate::service::teams::launchable_projects;
use crate::service::{Caller, Ctx, ServiceResult};
use spade::config::form::{self, Checked};
use spade::config::{ConfigError, DEFAULT_PRESET, RunConfig, preset, presets};
use spade_app::dto::{self, ConfigSection, LaunchForm};
use std::collections::BTreeMap;

/// The form's sections as the page shows them.
fn sections(
    values: &BTreeMap<String, String>,
    preset: &BTreeMap<String, serde_json::Value>,
    errors: &BTreeMap<String, Vec<String>>,
) -> Vec<ConfigSection> {
    form::sections(values, preset, errors)
        .into_iter()
        .map(ConfigSection::from)
        .collect()
}

/// A refused submission, put into the request's extensions for the page render that follows.
#[derive(Debug, Clone)]
pub struct LaunchDraft(pub LaunchForm);

/// A fresh form for `preset_key` (unknown keys fall back to the default preset), or with
/// `from`, "run again with changes": that run's whole configuration, name and project, its
/// differences from the preset marked as changed. A run the caller cannot read is a 404.
pub async fn fresh_form(
    ctx: &Ctx,
    caller: &Caller,
    preset_key: Option<&str>,
    project: Option<i64>,
    from: Option<i64>,
) -> ServiceResult<LaunchForm> {
    let p = preset(preset_key.unwrap_or(DEFAULT_PRESET));
    let preset_cfg = (p.build)();
    let preset_values = form::leaves(&preset_cfg.to_json());
    let mut errors = Vec::new();
    let mut cfg = preset_cfg;
    let mut name = format!("{}-{}", p.key.replace('_', "-"), cfg.run.seed);
    let mut project = project;
    if let Some(run_id) = from {
        let scope = crate::service::member_scope(ctx, caller, run_id).await?;
        let run = crate::service::runs::get(&ctx.db, &scope).await?;
        match crate::service::runs::stored_config(&ctx.db, &scope).await {
            Ok(stored) => cfg = stored,
            // Stored by an older version that this one no longer reads: the form starts from
            // the preset and says so, rather than failing the page.
            Err(e) => errors.push(format!(
                "The configuration of run {run_id} could not be read ({e}); the form starts from the preset instead."
            )),
        }
        name = again_name(&run.name);
        project = project.or(Some(run.project_id));
    }
    let values = form::form_values(&cfg);
    let projects = launchable_projects(ctx, caller).await?;
    let project = project
        .filter(|id| projects.iter().any(|p| p.id == *id))
        .or_else(|| projects.first().map(|p| p.id));
    Ok(LaunchForm {
        projects,
        project,
        presets: presets()
            .iter()
            .map(|p| dto::PresetDto {
                key: p.key.into(),
                label: p.label.into(),
                description: p.description.into(),
            })
            .collect(),
        preset: p.key.into(),
        name,
        executors: EXECUTORS.map(str::to_owned).to_vec(),
        executor: EXECUTORS[0].into(),
        sections: sections(&values, &preset_values, &BTreeMap::new()),
        toml: cfg.to_toml(),
        field_errors: Vec::new(),
        errors,
        toml_submitted: false,
    })
}

/// The name a run launched again from `name` starts with: `NAME-again`, `NAME-again-2`, ...
/// within the 200 characters a name may have.
fn again_name(name: &str) -> String {
    let (stem, n) = match name.rsplit_once("-again") {
        Some((stem, "")) => (stem, 2),
        Some((stem, k)) => match k.strip_prefix('-').and_then(|k| k.parse::<u32>().ok()) {
            Some(k) => (stem, k + 1),
            None => (name, 1),
        },
        None => (name, 1),
    };
    let suffix = if n == 1 {
        "-again".to_owned()
    } else {
        format!("-again-{n}")
    };
    let keep = 200usize.saturating_sub(suffix.len());
    format!("{}{suffix}", stem.chars().take(keep).collect::<String>())
}

/// The submitted form's fields that are not configuration keys.
#[derive(Debug, Default)]
struct Head {
    preset: String,
    name: String,
    project: String,
    executor: String,
    mode: String,
    config_toml: String,
}

fn head(pairs: &[(String, String)]) -> Head {
    let mut h = Head::default();
    for (k, v) in pairs {
        let slot = match k.as_str() {
            "preset" => &mut h.preset,
            "name" => &mut h.name,
            "project" => &mut h.project,
            "executor" => &mut h.executor,
            "mode" => &mut h.mode,
            "config_toml" => &mut h.config_toml,
            _ => continue,
        };
        *slot = v.clone();
    }
    h
}

/// Handles a submitted launch form: `Ok(run id)` when the run was created, else the form to
/// show again.
pub async fn submit(
    state: &AppState,
    auth: AuthUser,
    pairs: &[(String, String)],
) -> Result<i64, LaunchForm> {
    let h = head(pairs);
    let mut form = match fresh_form(
        &state.ctx,
        &auth.caller(),
        Some(h.preset.as_str()),
        None,
        None,
    )
    .await
    {
        Ok(f) => f,
        Err(e) => {
            tracing::error!(error = %e, "launch form: cannot list projects");
            let mut f = LaunchForm {
                projects: Vec::new(),
                project: None,
                presets: Vec::new(),
                preset: String::new(),
                name: String::new(),
                executors: Vec::new(),
                executor: String::new(),
                sections: Vec::new(),
                toml: String::new(),
                field_errors: Vec::new(),
                errors: Vec::new(),
                toml_submitted: false,
            };
            f.errors
                .push("the server could not load this page; try again shortly".into());
            return Err(f);
        }
    };
    let toml_mode = h.mode == "toml";
    form.toml_submitted = toml_mode;
    form.name = h.name.clone();
    form.executor = h.executor.clone();
    if !h.config_toml.trim().is_empty() {
        form.toml = h.config_toml.clone();
    }
    // Name, project and executor: the API checks them too; checked here to place the messages.
    let name = h.name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        form.field_errors.push((
            "name".into(),
            "give the run a name of 1 to 200 characters".into(),
        ));
    }
    match h.project.parse::<i64>() {
        Ok(id) if form.projects.iter().any(|p| p.id == id) => form.project = Some(id),
        _ => form.field_errors.push((
            "project".into(),
            "choose a project of a team where you are an editor or owner".into(),
        )),
    }
    if !EXECUTORS.contains(&h.executor.as_str()) {
        form.field_errors.push((
            "executor".into(),
            format!("choose one of {}", EXECUTORS.join(", ")),
        ));
    }
    let preset_values = form::leaves(&(preset(&h.preset).build)().to_json());
    let request = if toml_mode {
        // Checked by the API handler, which names the key path of each problem.
        match RunConfig::from_toml_str(&h.config_toml) {
            Ok(_) => Some(CreateRun {
                name: name.to_owned(),
                config_toml: Some(h.config_toml.clone()),
                config: None,
                executor: h.executor.clone(),
            }),
            Err(ConfigError::Invalid(issues)) => {
                form.errors
                    .extend(issues.iter().map(|i| i.to_string().replace('`', "")));
                None
            }
            Err(other) => {
                form.errors.push(other.to_string());
                None
            }
        }
    } else {
        match form::check_fields(pairs) {
            Checked::Valid(cfg) => {
                // Shown again only if the name, project or executor was wrong.
                let values = form::form_values(&cfg);
                form.sections = sections(&values, &preset_values, &BTreeMap::new());
                Some(CreateRun {
                    name: name.to_owned(),
                    config_toml: None,
                    config: Some(cfg.to_json()),
                    executor: h.executor.clone(),
                })
            }
            Checked::Invalid {
                values,
                errors,
                general,
            } => {
                form.sections = sections(&values, &preset_values, &errors);
                form.errors.extend(general);
                None
            }
        }
    };
    let (Some(req), true, Some(project)) = (request, form.field_errors.is_empty(), form.project)
    else {
        return Err(form);
    };
    match create(&state.ctx, &auth.caller(), project, &req).await {
        Ok(run) => Ok(run.id),
        Err(e) => {
            form.errors.push(e.to_string());
            Err(form)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_run_launched_again_is_named_after_it_and_counted() {
        assert_eq!(super::again_name("demo"), "demo-again");
        assert_eq!(super::again_name("demo-again"), "demo-again-2");
        assert_eq!(super::again_name("demo-again-2"), "demo-again-3");
        assert_eq!(super::again_name("demo-against"), "demo-against-again");
        let long = "x".repeat(200);
        let again = super::again_name(&long);
        assert_eq!(again.chars().count(), 200);
        assert!(again.ends_with("-again"));
    }
}
