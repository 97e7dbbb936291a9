//! Server configuration: command-line flags, each with an environment variable and a default
//! that works on a developer machine set up by `scripts/setup`.

use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;

/// The default database is the one `scripts/setup` creates.
pub const DEFAULT_DATABASE_URL: &str = "postgres://spade:spade@127.0.0.1:5432/spade";

#[derive(Clone, Parser)]
#[command(
    name = "spade-server",
    version,
    about = "SPADE Studio web service: the dashboard, the REST API under /api/v1, worker ingestion and job scheduling."
)]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "SPADE_ADDR", default_value = "127.0.0.1:3000")]
    pub addr: SocketAddr,

    /// PostgreSQL connection URL.
    #[arg(long, env = "DATABASE_URL", default_value = DEFAULT_DATABASE_URL, hide_env_values = true)]
    pub database_url: String,

    /// Directory holding the built site (pkg/ with the wasm bundle and CSS, plus public files);
    /// scripts/build-site writes it.
    #[arg(long, env = "SPADE_SITE_ROOT", default_value = "site")]
    pub site_root: PathBuf,

    /// Apply pending database migrations at start-up.
    #[arg(long, env = "SPADE_MIGRATE", default_value_t = true, action = clap::ArgAction::Set)]
    pub migrate: bool,

    /// Directory for server state (the generated JWT secret lives in `jwt_secret` there).
    #[arg(long, env = "SPADE_DATA_DIR", default_value = "data")]
    pub data_dir: PathBuf,

    /// Secret that signs access tokens (at least 32 bytes). When absent, one is generated and
    /// kept in the data directory.
    #[arg(long, env = "SPADE_JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,

    /// Who may register: `open` (anyone) or `closed` (only the first user, who becomes admin).
    #[arg(long, env = "SPADE_REGISTRATION", value_enum, default_value_t = RegistrationMode::Open)]
    pub registration: RegistrationMode,

    /// Mark cookies `Secure` (set this when the server is reached over HTTPS).
    #[arg(long, env = "SPADE_SECURE_COOKIES", default_value_t = false, action = clap::ArgAction::Set)]
    pub secure_cookies: bool,
}

/// `--registration`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RegistrationMode {
    Open,
    Closed,
}

impl From<RegistrationMode> for spade_db::users::Registration {
    fn from(m: RegistrationMode) -> Self {
        match m {
            RegistrationMode::Open => spade_db::users::Registration::Open,
            RegistrationMode::Closed => spade_db::users::Registration::FirstUserOnly,
        }
    }
}

// Hand-written so that the database password never reaches a log line.
impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("addr", &self.addr)
            .field(
                "database_url",
                &spade_db::redact_password(&self.database_url),
            )
            .field("site_root", &self.site_root)
            .field("migrate", &self.migrate)
            .field("data_dir", &self.data_dir)
            .field(
                "jwt_secret",
                &self.jwt_secret.as_ref().map(|_| "*** (configured)"),
            )
            .field("registration", &self.registration)
            .field("secure_cookies", &self.secure_cookies)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_hides_the_database_password_and_jwt_secret() {
        let cfg = Config::parse_from([
            "spade-server",
            "--database-url",
            "postgres://u:topsecret@h/d",
            "--jwt-secret",
            "jwtsecretjwtsecretjwtsecretjwtsecret",
        ]);
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("topsecret"), "{shown}");
        assert!(shown.contains("u:***@h/d"), "{shown}");
        assert!(!shown.contains("jwtsecret"), "{shown}");
    }
}
