//! Signed tokens: HS256 access tokens and CSRF tokens bound to a session by HMAC. The opaque
//! random tokens (refresh, share, run, invitation) are in [`crate::tokens`].
//!
//! Access tokens are verified with exactly one algorithm: the header is read first and anything
//! but `HS256` (including `none`, which jsonwebtoken cannot even parse) is refused before any
//! signature check, and the validation itself allows only HS256.

use super::secret::JwtSecret;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Claims of an access token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// User id.
    pub sub: String,
    /// Session id: the token dies with its session (logout revokes it server-side).
    pub sid: i64,
    pub iat: i64,
    pub exp: i64,
}

/// Why an access token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Past its `exp`.
    #[error("the access token has expired")]
    Expired,
    /// Header names another algorithm than HS256 (or `none`).
    #[error("the access token uses a forbidden algorithm")]
    Algorithm,
    /// Bad signature, bad encoding or bad claims.
    #[error("the access token is invalid")]
    Invalid,
}

/// Signs and verifies access tokens.
#[derive(Clone)]
pub struct Signer {
    encoding: EncodingKey,
    decoding: DecodingKey,
    secret: JwtSecret,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("secret", &self.secret)
            .finish()
    }
}

impl Signer {
    pub fn new(secret: JwtSecret) -> Self {
        Self {
            encoding: EncodingKey::from_secret(secret.bytes()),
            decoding: DecodingKey::from_secret(secret.bytes()),
            secret,
        }
    }

    /// Signs `claims` with HS256.
    pub fn sign(&self, claims: &Claims) -> Result<String, jsonwebtoken::errors::Error> {
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &self.encoding)
    }

    /// Verifies an access token: algorithm first, then signature and expiry.
    pub fn verify(&self, token: &str) -> Result<Claims, TokenError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| TokenError::Algorithm)?;
        if header.alg != Algorithm::HS256 {
            return Err(TokenError::Algorithm);
        }
        let mut validation = Validation::new(Algorithm::HS256);
        validation.algorithms = vec![Algorithm::HS256];
        validation.leeway = 5;
        validation.set_required_spec_claims(&["exp", "sub"]);
        jsonwebtoken::decode::<Claims>(token, &self.decoding, &validation)
            .map(|d| d.claims)
            .map_err(|e| match e.kind() {
                jsonwebtoken::errors::ErrorKind::ExpiredSignature => TokenError::Expired,
                jsonwebtoken::errors::ErrorKind::InvalidAlgorithm => TokenError::Algorithm,
                _ => TokenError::Invalid,
            })
    }

    /// The CSRF token of a session: HMAC-SHA256(secret, "csrf:" + sid), base64url. Bound to the
    /// session, so a token planted by another site or another session does not validate.
    pub fn csrf_token(&self, session_id: i64) -> String {
        URL_SAFE_NO_PAD.encode(self.csrf_mac(session_id))
    }

    /// Constant-time check of a presented CSRF token.
    pub fn csrf_matches(&self, session_id: i64, presented: &str) -> bool {
        let expected = self.csrf_mac(session_id);
        match URL_SAFE_NO_PAD.decode(presented) {
            Ok(bytes) => !expected.is_empty() && bool::from(bytes.ct_eq(&expected)),
            Err(_) => false,
        }
    }

    fn csrf_mac(&self, session_id: i64) -> Vec<u8> {
        // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
        let mut mac = match Hmac::<Sha256>::new_from_slice(self.secret.bytes()) {
            Ok(m) => m,
            Err(_) => return Vec::new(),
        };
        mac.update(format!("csrf:{session_id}").as_bytes());
        mac.finalize().into_bytes().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> Signer {
        Signer::new(JwtSecret::random())
    }

    fn claims(exp_offset: i64) -> Claims {
        let now = chrono::Utc::now().timestamp();
        Claims {
            sub: "1".into(),
            sid: 7,
            iat: now,
            exp: now + exp_offset,
        }
    }

    #[test]
    fn a_signed_token_verifies() -> anyhow::Result<()> {
        let s = signer();
        let t = s.sign(&claims(60))?;
        assert_eq!(s.verify(&t).map(|c| c.sid), Ok(7));
        Ok(())
    }

    #[test]
    fn csrf_tokens_are_bound_to_their_session() {
        let s = signer();
        let t = s.csrf_token(3);
        assert!(s.csrf_matches(3, &t));
        assert!(!s.csrf_matches(4, &t));
        assert!(!s.csrf_matches(3, "not base64 !"));
        assert!(!s.csrf_matches(3, ""));
        assert!(
            !signer().csrf_matches(3, &t),
            "another secret must not accept it"
        );
    }
}
