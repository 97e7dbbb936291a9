//! The OpenAPI 3.1 document served at `/api/v1/openapi.json`, generated from the same endpoint
//! table the router is built from (`api::endpoints`), so every served route is documented.

use crate::api::{Auth, Endpoint};
use serde_json::{Map, Value, json};

/// The document for `endpoints` (plus the health check and the document itself).
pub fn document(endpoints: &[Endpoint]) -> Value {
    let mut paths = Map::new();
    let mut add = |method: &str, path: &str, tag: &str, auth: Auth, summary: &str| {
        let params: Vec<Value> = path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(|name| {
                let ty = if name.ends_with("_id") {
                    "integer"
                } else {
                    "string"
                };
                json!({ "name": name, "in": "path", "required": true, "schema": { "type": ty } })
            })
            .collect();
        let security = match auth {
            Auth::Public | Auth::ShareLink => json!([]),
            Auth::User => json!([{ "bearer": [] }, { "cookie": [] }]),
            Auth::RunToken => json!([{ "runToken": [] }]),
        };
        let op = json!({
            "summary": summary,
            "tags": [tag],
            "parameters": params,
            "security": security,
            "responses": {
                "2XX": { "description": "success" },
                "default": {
                    "description": "an error",
                    "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } }
                }
            }
        });
        let entry = paths
            .entry(format!("/api/v1{path}"))
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(m) = entry {
            m.insert(method.to_owned(), op);
        }
    };
    add(
        "get",
        "/health",
        "meta",
        Auth::Public,
        "Service and database health",
    );
    add(
        "get",
        "/openapi.json",
        "meta",
        Auth::Public,
        "This document",
    );
    for e in endpoints {
        add(e.method, e.path, e.tag, e.auth, e.summary);
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "SPADE Studio API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Runs, environments, metrics and worker ingestion. Cookie-authenticated \
                changes need the X-CSRF-Token header (the spade_csrf cookie's value); bearer \
                requests do not. Errors are {status, code, message}."
        },
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearer": { "type": "http", "scheme": "bearer", "bearerFormat": "JWT" },
                "cookie": { "type": "apiKey", "in": "cookie", "name": "spade_access" },
                "runToken": { "type": "http", "scheme": "bearer", "description": "per-run worker token" }
            },
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["status", "code", "message"],
                    "properties": {
                        "status": { "type": "integer" },
                        "code": { "type": "string" },
                        "message": { "type": "string" }
                    }
                }
            }
        }
    })
}
