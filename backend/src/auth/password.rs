//! Password hashing with argon2id (the crate's defaults: 19 MiB, 2 passes, 1 lane, OWASP's
//! recommended minimum). Hashing runs on the blocking pool so it never stalls the async workers.

use crate::error::AppError;
use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use rand::RngCore;

/// Shortest and longest accepted passwords (long ones are refused to bound hashing work).
pub const MIN_LEN: usize = 8;
pub const MAX_LEN: usize = 256;

/// Checks the length rules; the error names the field.
pub fn check_policy(password: &str) -> Result<(), AppError> {
    let n = password.chars().count();
    if !(MIN_LEN..=MAX_LEN).contains(&n) {
        return Err(AppError::invalid(
            "password",
            format!("must have {MIN_LEN} to {MAX_LEN} characters, got {n}"),
        ));
    }
    Ok(())
}

/// A PHC-format argon2id hash of `password` with a random salt.
pub async fn hash(password: String) -> Result<String, AppError> {
    tokio::task::spawn_blocking(move || {
        let mut salt = [0u8; 16];
        rand::rng().fill_bytes(&mut salt);
        let salt = SaltString::encode_b64(&salt).map_err(|e| anyhow::anyhow!("salt: {e}"))?;
        Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map(|h| h.to_string())
            .map_err(|e| anyhow::anyhow!("argon2: {e}"))
    })
    .await
    .map_err(|e| AppError::Internal(e.into()))?
    .map_err(AppError::Internal)
}

/// Whether `password` matches the stored hash. With `None` (unknown email) a dummy hash is
/// checked anyway, so the answer takes as long as for a real account.
pub async fn verify(password: String, stored: Option<String>) -> Result<bool, AppError> {
    tokio::task::spawn_blocking(move || {
        let (stored, real) = match stored {
            Some(s) => (s, true),
            None => (DUMMY_HASH.to_owned(), false),
        };
        let parsed = PasswordHash::new(&stored).map_err(|e| anyhow::anyhow!("stored hash: {e}"))?;
        let ok = Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok();
        Ok(ok && real)
    })
    .await
    .map_err(|e| AppError::Internal(e.into()))?
    .map_err(AppError::Internal)
}

/// argon2id hash (default parameters) of a random string nobody knows.
const DUMMY_HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$c3BhZGVzdHVkaW9kdW1teQ$0k7dS7kq7b2dOa0Z3ZC7w9Kx1Yb2n2c1o4vJm0cQhQ8";

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn hashes_verify_only_their_password() -> Result<(), AppError> {
        let h = hash("correct horse".into()).await?;
        assert!(h.starts_with("$argon2id$"));
        assert!(verify("correct horse".into(), Some(h.clone())).await?);
        assert!(!verify("wrong horse".into(), Some(h)).await?);
        assert!(!verify("anything".into(), None).await?);
        Ok(())
    }

    #[test]
    fn policy_names_the_field() {
        let e = check_policy("short").err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("`password`: must have 8 to 256 characters, got 5")
        );
    }
}
