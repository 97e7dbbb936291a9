//! Checkpoints and benchmark results of a run (read-only; workers report them via ingestion),
//! and a checkpoint's files as a zip download.

use crate::AppState;
use crate::auth::AuthUser;
use crate::error::{ApiPath, ApiQuery, ApiResult, AppError};
use crate::service;
use crate::service::member_scope;
use axum::Json;
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use spade_app::dto::{BenchmarkRecord, CheckpointRecord};
use spade_app::pages::benchmarks::RowsBy;

pub async fn checkpoints(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<Json<Vec<CheckpointRecord>>> {
    let scope = member_scope(&state.ctx, &auth.caller(), run_id).await?;
    Ok(Json(
        service::artifacts::checkpoints(&state.ctx, &scope).await?,
    ))
}

/// Chunks of a checkpoint zip in flight between the writing thread and the response.
const ZIP_CHUNKS_IN_FLIGHT: usize = 8;

/// `GET /runs/{id}/checkpoints/{step}/download`: the checkpoint's directory as a zip (stored,
/// not compressed: weights do not shrink), streamed as it is read, so a checkpoint of any size
/// needs a few chunks of memory. Only regular files inside the directory go in (a link could
/// point anywhere on the server). Another team's run, or a step without a checkpoint, is a 404.
pub async fn checkpoint_zip(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath((run_id, step)): ApiPath<(i64, i64)>,
) -> ApiResult<Response> {
    let scope = member_scope(&state.ctx, &auth.caller(), run_id).await?;
    let dir = service::artifacts::checkpoint_dir(&state.ctx, &scope, step).await?;
    let files = service::artifacts::checkpoint_files(&dir)?;
    let (tx, rx) =
        tokio::sync::mpsc::channel::<std::io::Result<axum::body::Bytes>>(ZIP_CHUNKS_IN_FLIGHT);
    tokio::task::spawn_blocking(move || {
        let sink = ChannelWriter { tx: tx.clone() };
        if let Err(e) = write_zip(sink, &dir, &files) {
            // The client sees a cut-off body (the zip has no central directory), the log why.
            tracing::warn!(run_id, step, error = %e, "checkpoint download stopped");
            let _ = tx.blocking_send(Err(e));
        }
    });
    let body = axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    Ok(super::attachment(
        "application/zip",
        &format!("run-{run_id}-step-{step}.zip"),
        body,
    ))
}

/// Writes `files` (relative to `dir`) into a zip on `sink`, front to back.
fn write_zip(
    sink: ChannelWriter,
    dir: &std::path::Path,
    files: &[std::path::PathBuf],
) -> std::io::Result<()> {
    use zip::write::SimpleFileOptions;
    let mut zip = zip::ZipWriter::new_stream(sink);
    for rel in files {
        let path = dir.join(rel);
        let mut f = std::fs::File::open(&path)?;
        let len = f.metadata()?.len();
        let opts = SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .large_file(len >= u64::from(u32::MAX));
        zip.start_file(rel.to_string_lossy(), opts)
            .map_err(std::io::Error::other)?;
        std::io::copy(&mut f, &mut zip)?;
    }
    zip.finish().map_err(std::io::Error::other)?;
    Ok(())
}

/// A `Write` that sends what it is given to the response, waiting while the client is slow;
/// a client that went away ends the writing.
struct ChannelWriter {
    tx: tokio::sync::mpsc::Sender<std::io::Result<axum::body::Bytes>>,
}

impl std::io::Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.tx
            .blocking_send(Ok(axum::body::Bytes::copy_from_slice(buf)))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "client went away"))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub async fn benchmarks(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<Json<Vec<BenchmarkRecord>>> {
    let scope = member_scope(&state.ctx, &auth.caller(), run_id).await?;
    Ok(Json(
        service::artifacts::benchmarks(&state.ctx.db, &scope).await?,
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchmarksCsvQuery {
    /// Comma-separated run ids, in the table's order.
    pub runs: String,
    /// `newest` (default: a base-model row, then each run's newest evaluated checkpoint) or
    /// `checkpoints` (every evaluated checkpoint of every run).
    pub rows: Option<String>,
}

/// Runs one benchmarks table holds at most (the team's benchmarks page shows 50).
const MAX_TABLE_RUNS: usize = 50;

/// `GET /benchmarks.csv?runs=1,2&rows=newest|checkpoints`: the paper's table of these runs, as
/// the benchmarks page and the compare view show it (suite means and standard errors, then the
/// group averages). A run the caller cannot read is a 404 naming it.
pub async fn benchmarks_csv(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiQuery(q): ApiQuery<BenchmarksCsvQuery>,
) -> ApiResult<Response> {
    let rows_by = match q.rows.as_deref() {
        None | Some("newest") => RowsBy::Newest,
        Some("checkpoints") => RowsBy::Checkpoint,
        Some(other) => {
            return Err(AppError::invalid(
                "rows",
                format!("must be `newest` or `checkpoints`, got {other:?}"),
            ));
        }
    };
    let ids = super::metrics::run_ids(&q.runs, MAX_TABLE_RUNS)?;
    let csv = service::artifacts::benchmarks_csv(&state.ctx, &auth.caller(), &ids, rows_by).await?;
    let joined: Vec<String> = ids.iter().map(i64::to_string).collect();
    Ok(super::metrics::csv_response(
        format!("benchmarks-{}.csv", joined.join("-")),
        csv,
    ))
}
