//! The JWT signing secret: from configuration when given, otherwise generated once and kept in
//! `<data dir>/jwt_secret` (mode 0600), so restarts keep sessions valid. The secret never prints:
//! its `Debug` is `JwtSecret(***)`.

use anyhow::{Context, bail};
use rand::RngCore;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Fewest bytes a configured secret may have (HS256 wants at least the hash size, 32 bytes).
pub const MIN_SECRET_BYTES: usize = 32;

/// Bytes of a generated secret.
const GENERATED_BYTES: usize = 64;

/// HMAC key for access tokens and CSRF tokens.
#[derive(Clone)]
pub struct JwtSecret(Vec<u8>);

impl std::fmt::Debug for JwtSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JwtSecret(***)")
    }
}

impl JwtSecret {
    /// A secret from given bytes; refuses fewer than [`MIN_SECRET_BYTES`].
    pub fn new(bytes: Vec<u8>) -> anyhow::Result<Self> {
        if bytes.len() < MIN_SECRET_BYTES {
            bail!(
                "the JWT secret has {} bytes; at least {MIN_SECRET_BYTES} are required",
                bytes.len()
            );
        }
        Ok(Self(bytes))
    }

    /// A fresh random secret (tests, and the first start without a configured one).
    pub fn random() -> Self {
        let mut bytes = vec![0u8; GENERATED_BYTES];
        rand::rng().fill_bytes(&mut bytes);
        Self(bytes)
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// The configured secret if any, else the one stored in `data_dir/jwt_secret`, else a new one
    /// written there.
    pub fn load_or_create(configured: Option<&str>, data_dir: &Path) -> anyhow::Result<Self> {
        if let Some(s) = configured {
            return Self::new(s.as_bytes().to_vec()).context("SPADE_JWT_SECRET / --jwt-secret");
        }
        let path = data_dir.join("jwt_secret");
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let bytes = decode_hex(text.trim())
                    .with_context(|| format!("{} is not hex", path.display()))?;
                return Self::new(bytes).with_context(|| format!("in {}", path.display()));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("cannot create the data directory {}", data_dir.display()))?;
        let secret = Self::random();
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        file.write_all(encode_hex(&secret.0).as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        tracing::info!(path = %path.display(), "generated a new JWT secret");
        Ok(secret)
    }
}

fn encode_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_hex(text: &str) -> anyhow::Result<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        bail!("odd number of hex digits");
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .with_context(|| format!("bad hex digit near offset {i}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_secret() {
        let s = JwtSecret::new(b"0123456789abcdef0123456789abcdef".to_vec()).expect("32 bytes");
        assert_eq!(format!("{s:?}"), "JwtSecret(***)");
    }

    #[test]
    fn short_secrets_are_refused() {
        assert!(JwtSecret::new(b"short".to_vec()).is_err());
    }

    #[test]
    fn a_generated_secret_is_persisted_and_read_back() -> anyhow::Result<()> {
        let dir = std::env::temp_dir().join(format!("spade-secret-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let first = JwtSecret::load_or_create(None, &dir)?;
        let second = JwtSecret::load_or_create(None, &dir)?;
        assert_eq!(first.0, second.0);
        let mode = std::fs::metadata(dir.join("jwt_secret"))?.permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
