//! The runner protocol, version [`PROTOCOL_VERSION`].
//!
//! Frames in both directions: the 4 magic bytes `SPD1`, a big-endian `u32` payload length, then
//! that many bytes of JSON (one [`Request`] or [`Response`]). The runner speaks first with
//! [`Response::Hello`]; a parent refuses a runner whose version differs. Payloads over
//! [`MAX_FRAME`] are refused before they are read, so a runaway peer cannot exhaust memory.

use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

/// Bumped on every incompatible change of [`Request`] or [`Response`].
pub const PROTOCOL_VERSION: u32 = 1;
/// Start of every frame; a desynchronised stream fails at the next frame instead of misparsing.
pub const MAGIC: [u8; 4] = *b"SPD1";
/// Largest payload either side accepts (16 MiB).
pub const MAX_FRAME: u32 = 16 << 20;

/// Parent -> runner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Execute `source` in a fresh module namespace, then evaluate `expr` there and return its
    /// `str()`.
    Eval { source: String, expr: String },
    /// Exit cleanly.
    Shutdown,
}

/// Runner -> parent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Response {
    /// First frame of every runner.
    Hello { protocol: u32, python: String },
    /// `str()` of the evaluated expression.
    Value { text: String },
    /// The Python code raised; `kind` is the exception's type name.
    PythonError { kind: String, message: String },
    /// The request itself was unusable (for example source containing a NUL byte).
    BadRequest { message: String },
}

/// Errors of reading or writing a frame.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("I/O on the runner channel: {0}")]
    Io(#[from] io::Error),
    #[error("the peer closed the channel")]
    Closed,
    #[error("bad frame magic {0:?} (stream out of sync)")]
    BadMagic([u8; 4]),
    #[error("frame of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
    TooLarge(u32),
    #[error("malformed frame payload: {0}")]
    Json(#[from] serde_json::Error),
}

/// Writes one frame and flushes.
pub fn write_frame<T: Serialize>(w: &mut impl Write, msg: &T) -> Result<(), FrameError> {
    let payload = serde_json::to_vec(msg)?;
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|n| *n <= MAX_FRAME)
        .ok_or(FrameError::TooLarge(u32::MAX))?;
    w.write_all(&MAGIC)?;
    w.write_all(&len.to_be_bytes())?;
    w.write_all(&payload)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame; [`FrameError::Closed`] on a clean end of stream before a frame starts.
pub fn read_frame<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> Result<T, FrameError> {
    let mut header = [0u8; 8];
    match r.read_exact(&mut header) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let (magic, len) = header.split_at(4);
    let magic: [u8; 4] = [magic[0], magic[1], magic[2], magic[3]];
    if magic != MAGIC {
        return Err(FrameError::BadMagic(magic));
    }
    let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]);
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    let mut payload = vec![0u8; len as usize];
    r.read_exact(&mut payload)?;
    Ok(serde_json::from_slice(&payload)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() -> Result<(), FrameError> {
        let mut buf = Vec::new();
        let req = Request::Eval {
            source: "x = 1\n".into(),
            expr: "x + 1".into(),
        };
        write_frame(&mut buf, &req)?;
        write_frame(&mut buf, &Request::Shutdown)?;
        let mut r = buf.as_slice();
        assert_eq!(read_frame::<Request>(&mut r)?, req);
        assert_eq!(read_frame::<Request>(&mut r)?, Request::Shutdown);
        assert!(matches!(
            read_frame::<Request>(&mut r),
            Err(FrameError::Closed)
        ));
        Ok(())
    }

    #[test]
    fn garbage_and_oversized_frames_are_refused_without_allocating() {
        let mut r: &[u8] = b"hello world!";
        assert!(matches!(
            read_frame::<Request>(&mut r),
            Err(FrameError::BadMagic(_))
        ));
        let mut big = MAGIC.to_vec();
        big.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            read_frame::<Request>(&mut big.as_slice()),
            Err(FrameError::TooLarge(u32::MAX))
        ));
    }
}
