//! Metric series: names, one series downsampled on the server (LTTB), and CSV export.

use crate::AppState;
use crate::auth::AuthUser;
use crate::error::{ApiPath, ApiQuery, ApiResult, AppError};
use crate::service::member_scope;
use crate::service::{self, metrics::SeriesQuery};
use axum::Json;
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use spade_app::dto::{SeriesRecord, SeriesSummary};
use spade_db::RunScope;
use std::fmt::Write;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsvQuery {
    /// Comma-separated metric names; all metrics when absent.
    pub names: Option<String>,
}

pub async fn names(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<Json<Vec<SeriesSummary>>> {
    let scope = member_scope(&state.ctx, &auth.caller(), run_id).await?;
    Ok(Json(service::metrics::names(&state.ctx.db, &scope).await?))
}

pub async fn series(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath((run_id, name)): ApiPath<(i64, String)>,
    ApiQuery(q): ApiQuery<SeriesQuery>,
) -> ApiResult<Json<SeriesRecord>> {
    let scope = member_scope(&state.ctx, &auth.caller(), run_id).await?;
    Ok(Json(
        service::metrics::series(&state.ctx.db, &scope, name, q).await?,
    ))
}

/// `GET /compare/metrics.csv`: the runs of a compare view.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompareCsvQuery {
    /// Comma-separated run ids (2 to 20), as the compare page's `runs=`.
    pub runs: String,
    /// Comma-separated metric names; all metrics when absent.
    pub names: Option<String>,
}

/// Most runs one compare export covers (the compare page draws no more either).
const MAX_COMPARE_RUNS: usize = 20;

fn name_list(names: Option<&str>) -> Vec<String> {
    names
        .map(|s| {
            s.split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Appends `run_id,name,step,value,elapsed_s` rows of one run.
async fn csv_rows(
    state: &AppState,
    scope: &RunScope,
    run_id: i64,
    names: &[String],
    csv: &mut String,
) -> ApiResult<()> {
    for r in crate::service::metrics::export(&state.ctx.db, scope, names).await? {
        // Writing to a String cannot fail.
        let _ = writeln!(
            csv,
            "{run_id},{},{},{},{}",
            csv_field(&r.name),
            // Counted from 1, as the charts, the log and the environment pages count steps.
            r.step + 1,
            r.value,
            r.elapsed_s
        );
    }
    Ok(())
}

/// The run ids of a `runs=1,2,3` parameter, duplicates dropped, 1 to `max` of them.
pub(crate) fn run_ids(runs: &str, max: usize) -> ApiResult<Vec<i64>> {
    let mut ids = Vec::new();
    for part in runs.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let id: i64 = part.parse().map_err(|_| {
            AppError::invalid(
                "runs",
                format!("{part:?} is not a run id (comma-separated integers)"),
            )
        })?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    if !(1..=max).contains(&ids.len()) {
        return Err(AppError::invalid(
            "runs",
            format!("1 to {max} run ids, got {}", ids.len()),
        ));
    }
    Ok(ids)
}

pub(crate) fn csv_response(file: String, csv: String) -> Response {
    super::attachment("text/csv; charset=utf-8", &file, csv)
}

/// The compare view's curves as one CSV (issue 20, item 14): every listed run's rows, in the
/// order given. A run the caller cannot read is a 404 naming it, as its own page would be.
pub async fn compare_csv(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiQuery(q): ApiQuery<CompareCsvQuery>,
) -> ApiResult<Response> {
    let ids = run_ids(&q.runs, MAX_COMPARE_RUNS)?;
    let names = name_list(q.names.as_deref());
    let mut csv = String::from("run_id,name,step,value,elapsed_s\n");
    for &id in &ids {
        let scope = member_scope(&state.ctx, &auth.caller(), id).await?;
        csv_rows(&state, &scope, id, &names, &mut csv).await?;
    }
    let joined: Vec<String> = ids.iter().map(i64::to_string).collect();
    Ok(csv_response(
        format!("compare-{}-metrics.csv", joined.join("-")),
        csv,
    ))
}

/// `run_id,name,step,value,elapsed_s` rows, by name then step.
pub async fn export_csv(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
    ApiQuery(q): ApiQuery<CsvQuery>,
) -> ApiResult<Response> {
    let scope = member_scope(&state.ctx, &auth.caller(), run_id).await?;
    let names = name_list(q.names.as_deref());
    let mut csv = String::from("run_id,name,step,value,elapsed_s\n");
    csv_rows(&state, &scope, run_id, &names, &mut csv).await?;
    Ok(csv_response(format!("run-{run_id}-metrics.csv"), csv))
}

/// RFC 4180 quoting: fields with a comma, quote or line break are quoted, quotes doubled. A
/// field starting with `=`, `+`, `-`, `@`, TAB or CR would be run as a formula by spreadsheets
/// (a metric named `=HYPERLINK(...)` is a link in the victim's sheet), so it gets a leading `'`,
/// as OWASP's CSV-injection advice says. Metric names are written by workers, i.e. by whatever
/// code a run executes.
pub fn csv_field(s: &str) -> String {
    let s = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_owned()
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::csv_field;

    #[test]
    fn csv_fields_are_quoted_when_needed() {
        assert_eq!(csv_field("reward/mean"), "reward/mean");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(
            csv_field("=HYPERLINK(\"http://evil\",\"x\")"),
            "\"'=HYPERLINK(\"\"http://evil\"\",\"\"x\"\")\""
        );
        for f in ["+1", "-1+2", "@SUM(A1)", "\tx"] {
            assert!(
                csv_field(f).trim_start_matches('"').starts_with('\''),
                "{f}"
            );
        }
    }
}
