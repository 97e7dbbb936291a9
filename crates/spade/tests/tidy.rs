//! The repository's structural rules, checked by reading the sources (issue 39 step 3):
//!
//! - layers: within every crate, and within every module that has submodules, no two sibling
//!   modules use each other, directly or around a loop. A cycle means neither side can be read,
//!   tested or moved without the other (issue 19 removed the ones that had grown: `api` <->
//!   `service`, `api` <-> `scheduling`, `auth` <-> `service`, the worker's `run` <-> `vllm`, the
//!   app's `layout` -> `routes` -> `pages` -> `layout`). What counts as a use: a `crate::a::b`
//!   path that reaches sibling `b` of module `a`, and `super::x` (also inside `super::{x, y}`) in
//!   a file directly below the siblings' parent. Comments and test modules (files `*_tests.rs`,
//!   everything from a `#[cfg(test)]` line on) do not count;
//! - crate dependencies: the rules the workspace's Cargo.toml states at its top (libtorch,
//!   CPython, SQL and the web server each in one crate; `spade` and `eval` free of I/O crates);
//! - every Rust file opens with a `//!` comment saying what it is for;
//! - no file of the worker over 600 lines (its loop was one of 1,457).
//!
//! Each rule names the file and line, or the crate and dependency, that breaks it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Where a use of one module by another was seen.
type Edges = BTreeMap<String, BTreeMap<String, String>>;

/// The `.rs` files of module `name` at `dir` (its file and everything under its folder).
fn module_files(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let file = dir.join(format!("{name}.rs"));
    if file.is_file() {
        out.push(file);
    }
    let mut stack = vec![dir.join(name)];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The submodules at `dir`: `x.rs` files and `x/` folders (not lib, main, mod, tests).
fn siblings(dir: &Path) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let Ok(rd) = fs::read_dir(dir) else {
        return names;
    };
    for e in rd.flatten() {
        let p = e.path();
        let Some(stem) = p.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let is_module = p.is_dir() || p.extension().is_some_and(|x| x == "rs");
        if is_module
            && !["lib", "main", "mod", "tests", "bin", "benches"].contains(&stem)
            && !stem.ends_with("_tests")
        {
            names.insert(stem.to_owned());
        }
    }
    names
}

/// The identifiers a path continues with after `prefix` (`prefix::x`, or each `x` of
/// `prefix::{x, y::z}`).
fn after<'a>(line: &'a str, prefix: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find(prefix) {
        let before_ok = rest[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        let tail = &rest[i + prefix.len()..];
        rest = tail;
        if !before_ok {
            continue;
        }
        let parts: Vec<&str> = if let Some(group) = tail.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or("");
            inner.split(',').map(str::trim).collect()
        } else {
            vec![tail]
        };
        for p in parts {
            let ident: &str = p
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .unwrap_or("");
            if !ident.is_empty() {
                out.push(ident);
            }
        }
    }
    out
}

/// The uses among the submodules at `dir`, whose module path below the crate is `path`.
fn edges(dir: &Path, path: &[String]) -> Edges {
    let names = siblings(dir);
    let crate_prefix = if path.is_empty() {
        "crate::".to_owned()
    } else {
        format!("crate::{}::", path.join("::"))
    };
    let mut edges = Edges::new();
    for from in &names {
        for file in module_files(dir, from) {
            if file
                .file_stem()
                .and_then(|s| s.to_str())
                .is_some_and(|s| s.ends_with("_tests"))
            {
                continue;
            }
            let Ok(text) = fs::read_to_string(&file) else {
                continue;
            };
            let direct = file.parent() == Some(dir);
            for (n, line) in text.lines().enumerate() {
                let t = line.trim_start();
                if t.starts_with("#[cfg(test)]") {
                    break;
                }
                if t.starts_with("//") {
                    continue;
                }
                let mut used = after(t, &crate_prefix);
                if direct {
                    used.extend(after(t, "super::"));
                }
                for to in used {
                    if to != from && names.contains(to) {
                        edges
                            .entry(from.clone())
                            .or_default()
                            .entry(to.to_owned())
                            .or_insert_with(|| format!("{}:{}", file.display(), n + 1));
                    }
                }
            }
        }
    }
    edges
}

/// A loop in `edges`, as the modules around it, if there is one.
fn find_cycle(edges: &Edges) -> Option<Vec<String>> {
    fn visit(
        v: &str,
        edges: &Edges,
        done: &mut BTreeSet<String>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = stack.iter().position(|s| s == v) {
            let mut cycle = stack[i..].to_vec();
            cycle.push(v.to_owned());
            return Some(cycle);
        }
        if done.contains(v) {
            return None;
        }
        stack.push(v.to_owned());
        for w in edges.get(v).into_iter().flat_map(|m| m.keys()) {
            if let Some(c) = visit(w, edges, done, stack) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(v.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for v in edges.keys() {
        if let Some(c) = visit(v, edges, &mut done, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

/// Every folder of modules in crate `src`, with its module path.
fn module_dirs(src: &Path) -> Vec<(PathBuf, Vec<String>)> {
    let mut out = vec![(src.to_owned(), Vec::new())];
    let mut i = 0;
    while i < out.len() {
        let (dir, path) = out[i].clone();
        for name in siblings(&dir) {
            let sub = dir.join(&name);
            if sub.is_dir() {
                let mut p = path.clone();
                p.push(name);
                out.push((sub, p));
            }
        }
        i += 1;
    }
    out
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn no_two_modules_use_each_other() {
    let root = workspace();
    let mut srcs = vec![root.join("backend/src"), root.join("app/src")];
    let crates = fs::read_dir(root.join("crates")).expect("the workspace's crates folder");
    srcs.extend(crates.flatten().map(|e| e.path().join("src")));
    let mut checked = 0;
    let mut cycles = Vec::new();
    for src in srcs.iter().filter(|s| s.is_dir()) {
        for (dir, path) in module_dirs(src) {
            checked += 1;
            let e = edges(&dir, &path);
            if let Some(c) = find_cycle(&e) {
                let steps: Vec<String> = c
                    .windows(2)
                    .map(|w| format!("  {} -> {} ({})", w[0], w[1], e[&w[0]][&w[1]]))
                    .collect();
                cycles.push(format!("{}:\n{}", dir.display(), steps.join("\n")));
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} module folders found under {}",
        root.display()
    );
    assert!(
        cycles.is_empty(),
        "modules that use each other:\n{}",
        cycles.join("\n")
    );
}

/// The negative control: the reader sees a loop that is there, through `super::{..}` and a
/// `crate::` path, and none in a chain.
#[test]
fn a_loop_between_modules_is_found() {
    let dir = std::env::temp_dir().join(format!("spade-tidy-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let src = dir.join("src");
    fs::create_dir_all(src.join("b")).expect("temp dir");
    let write = |p: &str, s: &str| fs::write(src.join(p), s).expect("write");
    write("lib.rs", "mod a;\nmod b;\nmod c;\n");
    write("a.rs", "use super::{b, Thing};\n");
    write("b.rs", "mod inner;\n");
    write(
        "b/inner.rs",
        "// crate::a is only a comment\nuse crate::c::X;\n",
    );
    write("c.rs", "#[cfg(test)]\nmod tests { use crate::a; }\n");
    let chain = edges(&src, &[]);
    assert_eq!(find_cycle(&chain), None, "{chain:?}");
    assert!(chain["a"].contains_key("b") && chain["b"].contains_key("c"));
    write("c.rs", "pub fn f() { crate::a::g() }\n");
    let looped = edges(&src, &[]);
    let c = find_cycle(&looped).expect("a -> b -> c -> a");
    assert_eq!(c.first(), c.last());
    assert_eq!(c.len(), 4, "{c:?}");
    let _ = fs::remove_dir_all(&dir);
}

/// Every `.rs` file under the workspace's source folders (not build output).
fn rust_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = ["crates", "backend", "app", "frontend", "tests"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let name = e.file_name();
            if p.is_dir() {
                if !["target", "node_modules", "pkg"].contains(&name.to_str().unwrap_or("")) {
                    stack.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_rust_file_says_what_it_is_for() {
    let files = rust_files(&workspace());
    assert!(files.len() > 200, "only {} Rust files found", files.len());
    let silent: Vec<String> = files
        .iter()
        .filter(|f| fs::read_to_string(f).map_or(true, |t| !t.trim_start().starts_with("//!")))
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        silent.is_empty(),
        "files that do not open with a //! comment saying what they are for:\n{}",
        silent.join("\n")
    );
}

#[test]
fn no_worker_file_is_over_600_lines() {
    let root = workspace();
    let long: Vec<String> = rust_files(&root)
        .iter()
        .filter(|f| f.starts_with(root.join("crates/worker/src")))
        .filter_map(|f| {
            let n = fs::read_to_string(f).ok()?.lines().count();
            (n > 600).then(|| format!("{} ({n} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "worker files over 600 lines: {long:?}");
}

/// A package's name and the dependency names of its `[dependencies]` table (not dev- or
/// build-dependencies: tests may reach for a database or a server).
fn packages(root: &Path) -> Vec<(String, BTreeSet<String>)> {
    let mut manifests = vec![
        root.join("backend/Cargo.toml"),
        root.join("app/Cargo.toml"),
        root.join("frontend/Cargo.toml"),
        root.join("tests/Cargo.toml"),
    ];
    let crates = fs::read_dir(root.join("crates")).expect("the workspace's crates folder");
    manifests.extend(crates.flatten().map(|e| e.path().join("Cargo.toml")));
    let mut out = Vec::new();
    for m in manifests.iter().filter(|m| m.is_file()) {
        let text = fs::read_to_string(m).expect("a readable manifest");
        let doc: toml::Table = text.parse().expect("a manifest that parses");
        let name = doc["package"]["name"]
            .as_str()
            .expect("package.name")
            .to_owned();
        let deps = doc
            .get("dependencies")
            .and_then(toml::Value::as_table)
            .map(dependency_names)
            .unwrap_or_default();
        out.push((name, deps));
    }
    out
}

/// A `[dependencies]` table's names as the rules read them: `dep` for a dependency always
/// compiled, `dep?` for an optional one (a feature turns it on), and `dep[f]` for each feature
/// `f` it is compiled with.
fn dependency_names(table: &toml::Table) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (name, spec) in table {
        let optional = spec
            .get("optional")
            .and_then(toml::Value::as_bool)
            .unwrap_or(false);
        out.insert(if optional {
            format!("{name}?")
        } else {
            name.clone()
        });
        for f in spec
            .get("features")
            .and_then(toml::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(toml::Value::as_str)
        {
            out.insert(format!("{name}[{f}]"));
        }
    }
    out
}

/// The rules at the top of the workspace's Cargo.toml, as (dependency, the packages that may
/// have it).
const ONLY: &[(&str, &[&str])] = &[
    // libtorch: only the policy, its kernels and the process groups. torch-sys elsewhere only
    // for its build script's rpath (checked below).
    ("tch", &["spade-policy", "spade-kernels", "spade-dist"]),
    (
        "torch-sys",
        &[
            "spade-policy",
            "spade-kernels",
            "spade-dist",
            "spade-cli",
            "spade-eval",
            "spade-worker",
        ],
    ),
    // CPython: only the sandbox runner.
    ("pyo3", &["spade-sandbox-runner"]),
    // SQL: only db; the shared enums' database derives are an optional feature that only db
    // turns on (the browser bundle and the algorithm compile the enums without sqlx).
    ("sqlx", &["spade-db"]),
    ("sqlx?", &["spade-types"]),
    ("spade-types[sqlx]", &["spade-db"]),
    // The web server: only the backend, and the browser tests' harness that serves it.
    ("axum", &["spade-server", "spade-e2e"]),
    ("tower-http", &["spade-server"]),
    ("jsonwebtoken", &["spade-server"]),
];

/// Crates that do no I/O of their own, and what they must not depend on.
const NO_IO: &[(&str, &[&str])] = &[
    (
        "spade",
        &[
            "tokio",
            "reqwest",
            "sqlx",
            "tch",
            "torch-sys",
            "pyo3",
            "axum",
            "hyper",
        ],
    ),
    ("spade-eval", &["sqlx", "axum", "reqwest", "tokio", "hyper"]),
];

fn broken_dependency_rules(pkgs: &[(String, BTreeSet<String>)]) -> Vec<String> {
    let mut broken = Vec::new();
    for (name, deps) in pkgs {
        for (dep, allowed) in ONLY {
            if deps.contains(*dep) && !allowed.contains(&name.as_str()) {
                broken.push(format!("{name} depends on {dep} (only {allowed:?} may)"));
            }
        }
        for (pkg, banned) in NO_IO {
            if name == pkg {
                for dep in banned.iter().filter(|d| deps.contains(**d)) {
                    broken.push(format!("{name} does no I/O but depends on {dep}"));
                }
            }
        }
    }
    broken
}

#[test]
fn crates_depend_as_the_workspace_says() {
    let root = workspace();
    let pkgs = packages(&root);
    assert!(pkgs.len() >= 12, "only {} packages found", pkgs.len());
    let broken = broken_dependency_rules(&pkgs);
    assert!(broken.is_empty(), "{}", broken.join("\n"));
    // torch-sys outside the policy is for the rpath in build.rs, never for calls into libtorch.
    for (dir, pkg) in [
        ("cli", "spade-cli"),
        ("eval", "spade-eval"),
        ("worker", "spade-worker"),
    ] {
        let build =
            fs::read_to_string(root.join(format!("crates/{dir}/build.rs"))).unwrap_or_default();
        assert!(
            build.contains("DEP_TCH_LIBTORCH_LIB"),
            "{pkg} depends on torch-sys but its build.rs does not set the rpath from it"
        );
        for f in rust_files(&root)
            .iter()
            .filter(|f| f.starts_with(root.join(format!("crates/{dir}/src"))))
        {
            let text = fs::read_to_string(f).unwrap_or_default();
            let calls = |krate: &str| {
                text.match_indices(&format!("{krate}::")).any(|(i, _)| {
                    text[..i]
                        .chars()
                        .next_back()
                        .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
                })
            };
            assert!(
                !calls("torch_sys") && !calls("tch"),
                "{} calls libtorch directly; only crates/policy may",
                f.display()
            );
        }
    }
    // The negative control: a crate that breaks each kind of rule is named, and the table
    // reader sees optional dependencies and features.
    let app: toml::Table = r#"spade-types = { workspace = true, features = ["sqlx"] }"#
        .parse()
        .expect("a table");
    let types: toml::Table = r#"sqlx = { workspace = true, optional = true }"#
        .parse()
        .expect("a table");
    assert_eq!(
        dependency_names(&types),
        BTreeSet::from(["sqlx?".to_owned()])
    );
    let fake = vec![
        ("spade-app".to_owned(), BTreeSet::from(["sqlx".to_owned()])),
        ("spade".to_owned(), BTreeSet::from(["tokio".to_owned()])),
        ("spade-app".to_owned(), dependency_names(&app)),
        ("spade-eval".to_owned(), dependency_names(&types)),
    ];
    assert_eq!(
        broken_dependency_rules(&fake),
        [
            "spade-app depends on sqlx (only [\"spade-db\"] may)",
            "spade does no I/O but depends on tokio",
            "spade-app depends on spade-types[sqlx] (only [\"spade-db\"] may)",
            "spade-eval depends on sqlx? (only [\"spade-types\"] may)",
        ]
    );
}

/// The files of the web layer that may query the database themselves: ingestion (a worker's
/// reports, an evaluation job's results, each checked against its own bearer token). Everything
/// else in `api/` and `dashboard/` reads and writes through `service`.
const INGESTION: &[&str] = &[
    "backend/src/api/ingest.rs",
    "backend/src/api/evaluations.rs",
];

/// The lines of `text` (code, not comments) that query the database directly: a `spade_db`
/// module imported or called (`use spade_db::runs`, `spade_db::runs::get(`), or a scope
/// resolved (`RunScope::for_member(`). Types (`spade_db::RunScope`, `spade_db::Verdict`)
/// are fine: naming a type reads nothing.
fn direct_queries(text: &str) -> Vec<String> {
    let lowercase = |seg: &str| seg.starts_with(|c: char| c.is_ascii_lowercase());
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//"))
        .filter(|l| {
            let module_use = l.strip_prefix("use spade_db::").is_some_and(|rest| {
                // `use spade_db::{RunScope, runs}` or `use spade_db::runs::{self, X}`.
                let items = rest.trim_end_matches(';');
                let names: Vec<&str> = match items.split_once('{') {
                    Some((path, list)) => {
                        let path_segs: Vec<&str> =
                            path.split("::").filter(|s| !s.is_empty()).collect();
                        let listed = list.trim_end_matches('}').split(',').map(str::trim);
                        if path_segs.is_empty() {
                            listed.collect()
                        } else {
                            listed.filter(|n| *n == "self").collect()
                        }
                    }
                    None => items.rsplit("::").next().into_iter().collect(),
                };
                names.iter().any(|n| lowercase(n) && *n != "types")
            });
            let path_call = l.match_indices("spade_db::").any(|(i, _)| {
                let rest = &l[i + "spade_db::".len()..];
                let path: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                rest[path.len()..].starts_with('(')
            });
            let scope = l.contains("Scope::for_");
            module_use || path_call || scope
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_web_layer_reads_and_writes_through_the_service() {
    let root = workspace();
    let mut found = Vec::new();
    let mut checked = 0;
    for f in rust_files(&root).iter().filter(|f| {
        (f.starts_with(root.join("backend/src/api"))
            || f.starts_with(root.join("backend/src/dashboard")))
            && !INGESTION.iter().any(|i| f.ends_with(i))
    }) {
        checked += 1;
        let text = fs::read_to_string(f).unwrap_or_default();
        for l in direct_queries(&text) {
            found.push(format!("{}: {l}", f.display()));
        }
    }
    assert!(checked >= 10, "only {checked} web-layer files found");
    assert!(
        found.is_empty(),
        "the API and the pages query the database only through `service` (ingestion aside):\n{}",
        found.join("\n")
    );
    // The negative control: each way of querying directly is seen, and types are not.
    let sample = "use spade_db::{RunScope, runs};\nuse spade_db::environments::{self, EnvFilter};\n\
                  let r = spade_db::runs::get(&db, &s).await?;\n\
                  let s = RunScope::for_member(&db, 1, 2).await?;\n\
                  use spade_db::{DbError, Role};\nuse spade_db::teams::invitations::Answer;\n\
                  let v = spade_db::Verdict::Good;\n// spade_db::runs::get(x)";
    assert_eq!(
        direct_queries(sample).len(),
        4,
        "{:?}",
        direct_queries(sample)
    );
}
