//! Enumerations stored as PostgreSQL enum types. They are defined once, in `spade-types`, with
//! their sqlx derives behind the feature only this crate enables; their spellings are the
//! database's, so a value read back serializes exactly as it is stored.

pub use spade_types::{EnvKind, EnvStatus, Role, RunStatus, Verdict};
