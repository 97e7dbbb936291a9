//! Saved chart views: a person's named chart settings (smoothing, x axis, log scale, the chart
//! filter), private to them and offered on every run and compare page they open. Only a person
//! with a session keeps views: an API token acts inside one team, and views belong to no team.

use super::artifacts::time;
use super::{Caller, Ctx, ServiceError, ServiceResult};
use serde::Deserialize;
use spade_app::charts::MAX_SMOOTHING;
use spade_app::dto;
use spade_db::chart_views::{self, ChartView, NewView};

pub const NAME_MAX_CHARS: usize = 60;
pub const FIND_MAX_CHARS: usize = 100;

/// The body of `POST /chart-views` (and the save form).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaveView {
    pub name: String,
    #[serde(default)]
    pub smoothing: f64,
    /// `step` (default) or `time`.
    #[serde(default = "step")]
    pub x_axis: String,
    #[serde(default)]
    pub log_y: bool,
    #[serde(default)]
    pub find: String,
}

fn step() -> String {
    "step".into()
}

impl SaveView {
    fn checked(&self) -> ServiceResult<NewView<'_>> {
        let name = self.name.trim();
        let n = name.chars().count();
        if n == 0 || n > NAME_MAX_CHARS || name.chars().any(char::is_control) {
            return Err(ServiceError::invalid(
                "name",
                format!("must have 1 to {NAME_MAX_CHARS} characters and no line breaks, got {n}"),
            ));
        }
        if !(self.smoothing.is_finite() && (0.0..=MAX_SMOOTHING).contains(&self.smoothing)) {
            return Err(ServiceError::invalid(
                "smoothing",
                format!("expected 0 to {}, got {}", MAX_SMOOTHING, self.smoothing),
            ));
        }
        if !matches!(self.x_axis.as_str(), "step" | "time") {
            return Err(ServiceError::invalid(
                "x_axis",
                format!("expected step or time, got {:?}", self.x_axis),
            ));
        }
        let find = self.find.trim();
        if find.chars().count() > FIND_MAX_CHARS || find.chars().any(char::is_control) {
            return Err(ServiceError::invalid(
                "find",
                format!("at most {FIND_MAX_CHARS} characters, no line breaks"),
            ));
        }
        Ok(NewView {
            name,
            smoothing: self.smoothing,
            x_axis: &self.x_axis,
            log_y: self.log_y,
            find,
        })
    }
}

fn record(v: ChartView) -> dto::ChartViewRecord {
    dto::ChartViewRecord {
        id: v.id,
        created_at: time(&v.created_at),
        name: v.name,
        smoothing: v.smoothing,
        x_axis: v.x_axis,
        log_y: v.log_y,
        find: v.find,
    }
}

/// Saves the caller's view (replacing their view of the same name).
pub async fn save(
    ctx: &Ctx,
    caller: &Caller,
    req: &SaveView,
) -> ServiceResult<dto::ChartViewRecord> {
    caller.in_person("keep chart views")?;
    let v = req.checked()?;
    let saved = chart_views::save(&ctx.db, caller.user_id, &v)
        .await?
        .ok_or_else(|| ServiceError::Conflict {
            code: "too_many_views",
            message: format!(
                "you keep {} chart views already; delete one on the account page first",
                chart_views::MAX_PER_USER
            ),
        })?;
    Ok(record(saved))
}

/// The caller's views, by name.
pub async fn list(ctx: &Ctx, caller: &Caller) -> ServiceResult<Vec<dto::ChartViewRecord>> {
    caller.in_person("read chart views")?;
    Ok(chart_views::list(&ctx.db, caller.user_id)
        .await?
        .into_iter()
        .map(record)
        .collect())
}

/// Deletes the caller's view `id` (another person's is 404).
pub async fn delete(ctx: &Ctx, caller: &Caller, id: i64) -> ServiceResult<()> {
    caller.in_person("delete chart views")?;
    Ok(chart_views::delete(&ctx.db, caller.user_id, id).await?)
}
