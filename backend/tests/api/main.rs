//! Integration tests of the API against real PostgreSQL: each `#[sqlx::test]` gets a fresh,
//! migrated database and drives `app(state)` without a port (`tower::ServiceExt::oneshot`).
//! `attacks` holds one test per authentication property, each an attack that must be refused.

mod account;
mod attacks;
mod evaluations;
mod flows;
mod holes;
mod ingest;
mod invitations;
mod live;
mod manage;
mod markup;
mod pages;
mod pools;
mod pools_zip;
mod renew;
mod shutdown;
mod support;
mod tokens;
mod worker_attacks;
