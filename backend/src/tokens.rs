//! Opaque random tokens (refresh, share, run, invitation codes): minted here, stored only as
//! SHA-256, compared in constant time. Both the auth layer and the service mint and check them,
//! so they live beside both rather than inside either. `jobs` mints the tokens of jobs.

pub mod jobs;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A new opaque token: `prefix` + 32 random bytes in base64url (256 bits of entropy).
pub fn random_token(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes))
}

/// Whether `t` has the shape of a share-link token (`sps_` and 32 random bytes, base64url), so
/// only such text from a cookie is ever put on a page.
pub fn looks_like_share_token(t: &str) -> bool {
    looks_like_random_token("sps_", t)
}

/// Whether `t` has the shape [`random_token`] gives with `prefix` (32 bytes in base64url).
pub fn looks_like_random_token(prefix: &str, t: &str) -> bool {
    t.strip_prefix(prefix).is_some_and(|rest| {
        rest.len() == 43
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

/// SHA-256 of a token, as stored in the database.
pub fn hash_token(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// Constant-time comparison of a presented token with a stored hash.
pub fn token_matches(token: &str, stored_hash: &[u8]) -> bool {
    hash_token(token).ct_eq(stored_hash).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_minted_share_tokens_pass_the_shape_check() {
        assert!(looks_like_share_token(&random_token("sps_")));
        assert!(!looks_like_share_token(&random_token("spr_")));
        assert!(!looks_like_share_token("sps_<script>"));
        let t = random_token("sps_");
        assert!(!looks_like_share_token(&format!("{t}x")));
        assert!(!looks_like_share_token(&format!("{}\"", &t[..t.len() - 1])));
    }

    #[test]
    fn stored_hashes_match_only_their_token() {
        let t = random_token("spr_");
        assert!(t.starts_with("spr_"));
        assert!(token_matches(&t, &hash_token(&t)));
        assert!(!token_matches(&random_token("spr_"), &hash_token(&t)));
    }
}
