//! The chart pages' "save view" form and the account page's "delete view" form, over the
//! service functions `POST /chart-views` and `DELETE /chart-views/{id}` call. Saving goes back
//! to the page it came from with the saved view's settings in its address.

use super::{encode_query, local_path, posted};
use crate::AppState;
use crate::error::AppError;
use crate::service::chart_views::{self, SaveView};
use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ViewForm {
    name: String,
    smoothing: String,
    x_axis: String,
    log_y: String,
    find: String,
    back: String,
}

/// `back` with `pairs` added to its query.
fn with_query(back: &str, pairs: &[(&str, String)]) -> String {
    let sep = if back.contains('?') { '&' } else { '?' };
    let q: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", encode_query(v)))
        .collect();
    if q.is_empty() {
        back.to_owned()
    } else {
        format!("{back}{sep}{}", q.join("&"))
    }
}

pub(super) async fn save(State(state): State<AppState>, req: Request) -> Response {
    let mut back = "/runs".to_owned();
    let result = async {
        let p = posted(&state, req).await?;
        let f: ViewForm = p.fields()?;
        back = local_path(&f.back).to_owned();
        let smoothing = if f.smoothing.trim().is_empty() {
            0.0
        } else {
            f.smoothing.trim().parse::<f64>().map_err(|_| {
                AppError::invalid(
                    "smoothing",
                    format!("expected a number, got {:?}", f.smoothing),
                )
            })?
        };
        let req = SaveView {
            name: f.name,
            smoothing,
            x_axis: if f.x_axis.is_empty() {
                "step".into()
            } else {
                f.x_axis
            },
            log_y: matches!(f.log_y.as_str(), "1" | "true" | "on"),
            find: f.find,
        };
        Ok::<_, AppError>(chart_views::save(&state.ctx, &p.user.caller(), &req).await?)
    }
    .await;
    let to = match result {
        Ok(v) => with_query(&back, &v.query_pairs()),
        Err(e) => with_query(&back, &[("error", e.to_string())]),
    };
    Redirect::to(&format!("{to}#chart-views")).into_response()
}

pub(super) async fn delete(
    State(state): State<AppState>,
    Path(id): Path<i64>,
    req: Request,
) -> Response {
    let result = async {
        let p = posted(&state, req).await?;
        chart_views::delete(&state.ctx, &p.user.caller(), id).await?;
        Ok::<_, AppError>("Chart view deleted.".to_owned())
    }
    .await;
    super::account::back_to_account(result, "views")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_goes_into_the_pages_own_query() {
        assert_eq!(
            with_query(
                "/compare?run=1&run=2",
                &[("smooth", "0.60".into()), ("find", "win rate".into())]
            ),
            "/compare?run=1&run=2&smooth=0.60&find=win%20rate"
        );
        assert_eq!(
            with_query("/runs/3", &[("log", "1".into())]),
            "/runs/3?log=1"
        );
        assert_eq!(with_query("/runs/3", &[]), "/runs/3");
    }
}
