//! A person's own settings that belong to no team, over their service modules: saved chart
//! views (`/chart-views`). The account itself (name, password, sessions) is `auth::account`.

use crate::AppState;
use crate::auth::AuthUser;
use crate::error::{ApiJson, ApiPath, ApiResult};
use crate::service::chart_views::{self, SaveView};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use spade_app::dto::ChartViewRecord;

pub async fn chart_views(
    State(state): State<AppState>,
    auth: AuthUser,
) -> ApiResult<Json<Vec<ChartViewRecord>>> {
    Ok(Json(chart_views::list(&state.ctx, &auth.caller()).await?))
}

pub async fn save_chart_view(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiJson(req): ApiJson<SaveView>,
) -> ApiResult<Json<ChartViewRecord>> {
    Ok(Json(
        chart_views::save(&state.ctx, &auth.caller(), &req).await?,
    ))
}

pub async fn delete_chart_view(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<StatusCode> {
    chart_views::delete(&state.ctx, &auth.caller(), id).await?;
    Ok(StatusCode::NO_CONTENT)
}
