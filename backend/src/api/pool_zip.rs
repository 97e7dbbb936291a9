//! `GET /runs/{id}/pool.zip` (members) and `GET /shared/{token}/pool.zip` (a share link): the
//! environments the export's filters keep, as a zip of the pool directory `spade env export`
//! writes: one `.py` per environment, `pool.jsonl` and the `README.md` card, all three from
//! `spade::pool::PoolBuilder`, so the archive and the CLI's directory hold the same files.
//!
//! The zip is streamed. Each page of rows ([`ExportPages`]) is compressed into code files and
//! sent while the next is read; entries carry data descriptors (a zip written front to back,
//! never seeking back). `pool.jsonl` has to be one entry, so its lines wait in an unnamed
//! temporary file meanwhile and follow the code files in [`INDEX_CHUNK`] pieces, then the card.
//! Memory stays about one page plus one piece whatever the run's size; the temporary file (the
//! index, about half a kilobyte per environment) is gone when the response ends.

use crate::AppState;
use crate::auth::AuthUser;
use crate::error::{ApiPath, ApiQuery, ApiResult, AppError};
use crate::service::export::{Export, ExportPages, ExportQuery};
use crate::service::member_scope;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::Response;
use futures_util::StreamExt;
use spade::pool::{Card, POOL_CARD, POOL_JSONL, PoolBuilder, PoolEntry};
use spade_db::RunScope;
use std::io::{self, Read, Seek, Write};
use std::sync::{Arc, Mutex};
use zip::write::{SimpleFileOptions, StreamWriter};
use zip::{CompressionMethod, ZipWriter};

/// Bytes of `pool.jsonl` compressed per piece of the body.
pub const INDEX_CHUNK: usize = 256 * 1024;

pub async fn member_zip(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
    ApiQuery(q): ApiQuery<ExportQuery>,
) -> ApiResult<Response> {
    let scope = member_scope(&state.ctx, &auth.caller(), run_id).await?;
    zip_response(&state, scope, q).await
}

/// The same through a share link: an unknown or revoked token is a 404, as on every
/// `/shared/{token}` route.
pub async fn shared_zip(
    State(state): State<AppState>,
    ApiPath(token): ApiPath<String>,
    ApiQuery(q): ApiQuery<ExportQuery>,
) -> ApiResult<Response> {
    let scope = crate::service::shares::resolve(&state.ctx.db, &token).await?;
    zip_response(&state, scope, q).await
}

/// Access and filters are checked before the response starts (404, 422); a failure after that
/// ends the body early, so the client sees a truncated transfer and no zip that looks whole.
async fn zip_response(state: &AppState, scope: RunScope, q: ExportQuery) -> ApiResult<Response> {
    let export: Export = q.checked()?;
    let run = crate::service::runs::get(&state.ctx.db, &scope).await?;
    // The card `spade env export --server URL` writes names the run as "run ID of URL"; the
    // service's URL is the address people reach it at, never a request's Host header.
    let run_label = match state.public_url.as_deref() {
        Some(url) => format!("run {} of {}", run.id, url.trim_end_matches('/')),
        None => format!("run {}", run.id),
    };
    let card = Card {
        run: run_label,
        model: spade::pool::model_of_config(&run.config),
        filter: export.pool.clone(),
        ..Card::default()
    };
    // The index's temporary file: a full disk is the server's trouble, not the request's.
    let writer = PoolZip::new(card)
        .map_err(|e| AppError::Internal(anyhow::Error::new(e).context("pool zip index file")))?;
    let run_id = run.id;
    let state = Stream::Pages(
        Box::new(ExportPages::new(&state.ctx, scope, &export)),
        writer,
    );
    // Fused: the compression layer polls its inner body once more after the end, which a bare
    // `unfold` answers with a panic.
    let body = futures_util::stream::unfold(state, move |s| async move {
        match advance(s).await {
            Ok(Some((bytes, next))) => Some((Ok(bytes), next)),
            Ok(None) => None,
            Err(e) => {
                tracing::error!(run_id, error = %e, "pool zip failed mid-stream");
                Some((Err(e), Stream::Done))
            }
        }
    })
    .fuse();
    Ok(super::attachment(
        "application/zip",
        &format!("run-{run_id}-pool.zip"),
        Body::from_stream(body),
    ))
}

/// Where the body is: code files page by page, then the index piece by piece, then done.
enum Stream {
    // Boxed: the page reader holds its filters and a page buffer, the zip writer its own.
    Pages(Box<ExportPages>, PoolZip),
    Index(PoolZip),
    Done,
}

/// The next piece of the body and the state after it; `None` at the end.
async fn advance(s: Stream) -> io::Result<Option<(Bytes, Stream)>> {
    match s {
        Stream::Pages(mut pages, w) => match pages.next().await.map_err(io::Error::other)? {
            Some(entries) => {
                let (w, bytes, ()) = blocking(w, move |w| w.add(entries)).await?;
                Ok(Some((bytes, Stream::Pages(pages, w))))
            }
            None => {
                let (w, bytes, ()) = blocking(w, PoolZip::start_index).await?;
                Ok(Some((bytes, Stream::Index(w))))
            }
        },
        Stream::Index(w) => {
            let (w, bytes, more) = blocking(w, |w| {
                let more = w.index_piece()?;
                if !more {
                    w.finish()?;
                }
                Ok(more)
            })
            .await?;
            Ok(Some((
                bytes,
                if more { Stream::Index(w) } else { Stream::Done },
            )))
        }
        Stream::Done => Ok(None),
    }
}

/// Runs `f` on the writer on a blocking thread (compression and file I/O), then hands back
/// the writer, the zip bytes it produced and what `f` returned.
async fn blocking<R: Send + 'static>(
    mut w: PoolZip,
    f: impl FnOnce(&mut PoolZip) -> io::Result<R> + Send + 'static,
) -> io::Result<(PoolZip, Bytes, R)> {
    tokio::task::spawn_blocking(move || {
        let r = f(&mut w)?;
        let bytes = w.out.take()?;
        Ok((w, bytes, r))
    })
    .await
    .map_err(io::Error::other)?
}

/// The zip's output between two pieces of the body: the writer appends, the stream takes.
#[derive(Debug, Clone, Default)]
struct Out(Arc<Mutex<Vec<u8>>>);

impl Out {
    fn take(&self) -> io::Result<Bytes> {
        let mut buf = self
            .0
            .lock()
            .map_err(|_| io::Error::other("zip output lock poisoned"))?;
        Ok(Bytes::from(std::mem::take(&mut *buf)))
    }
}

impl Write for Out {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| io::Error::other("zip output lock poisoned"))?
            .extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A pool being written as a zip.
struct PoolZip {
    /// `None` once finished.
    zip: Option<ZipWriter<StreamWriter<Out>>>,
    out: Out,
    pool: PoolBuilder,
    /// `pool.jsonl` until it is copied into the zip.
    index: io::BufWriter<std::fs::File>,
}

fn options() -> SimpleFileOptions {
    SimpleFileOptions::default()
        .compression_method(CompressionMethod::Deflated)
        .unix_permissions(0o644)
}

impl PoolZip {
    fn new(card: Card) -> io::Result<Self> {
        let out = Out::default();
        Ok(Self {
            zip: Some(ZipWriter::new_stream(out.clone())),
            out,
            pool: PoolBuilder::new(card),
            index: io::BufWriter::new(tempfile::tempfile()?),
        })
    }

    fn zip(&mut self) -> io::Result<&mut ZipWriter<StreamWriter<Out>>> {
        self.zip
            .as_mut()
            .ok_or_else(|| io::Error::other("the pool zip is finished"))
    }

    fn start(&mut self, name: String) -> io::Result<&mut ZipWriter<StreamWriter<Out>>> {
        let zip = self.zip()?;
        zip.start_file(name, options()).map_err(io::Error::other)?;
        Ok(zip)
    }

    /// One page: each entry's code file into the zip, its line into the index. An entry the
    /// format refuses is left out, as `spade env export` leaves it out.
    fn add(&mut self, entries: Vec<PoolEntry>) -> io::Result<()> {
        for e in entries {
            let id = e.id.clone();
            match self.pool.add(e) {
                Ok(f) => {
                    self.start(f.name)?.write_all(f.code.as_bytes())?;
                    writeln!(self.index, "{}", f.line)?;
                }
                Err(reason) => {
                    tracing::warn!(env_id = id, %reason, "left out of a pool zip");
                }
            }
        }
        Ok(())
    }

    fn start_index(&mut self) -> io::Result<()> {
        self.index.flush()?;
        self.index.get_mut().rewind()?;
        self.start(POOL_JSONL.to_owned())?;
        Ok(())
    }

    /// Copies the next piece of the index; `false` once it is all in.
    fn index_piece(&mut self) -> io::Result<bool> {
        let mut piece = vec![0u8; INDEX_CHUNK];
        let n = self.index.get_mut().read(&mut piece)?;
        self.zip()?.write_all(&piece[..n])?;
        Ok(n > 0)
    }

    /// The card, then the central directory.
    fn finish(&mut self) -> io::Result<()> {
        let card = self.pool.card().render();
        self.start(POOL_CARD.to_owned())?
            .write_all(card.as_bytes())?;
        let zip = self
            .zip
            .take()
            .ok_or_else(|| io::Error::other("the pool zip is finished"))?;
        zip.finish().map_err(io::Error::other)?;
        Ok(())
    }
}
