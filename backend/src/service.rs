//! The service layer under the JSON API and the dashboard: one module per area. A function
//! takes the access scope its caller resolved and typed arguments, applies the area's limits and
//! checks once, and returns the `spade_app::dto` types both serve, so a page and the API cannot
//! drift apart (they did: two cursor parsers, two limits, checks on one side only). HTTP stays
//! with the callers: extractors and status codes in `api`, cookies and page errors in
//! `dashboard`.

pub mod artifacts;
pub mod environments;
pub mod metrics;
pub mod runs;
pub mod teams;
