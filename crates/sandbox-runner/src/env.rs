//! Driving one environment through the CPython C API (pyo3).
//!
//! Every value an environment returns is checked here with C-level type checks
//! (`PyUnicode_Check`, `PyTuple_GetItem`, ...) and converted to Rust before it leaves the
//! runner, so rebinding `isinstance`, `type`, `float`, `json` or any other builtin or module from
//! environment code cannot make a wrong value pass.

use pyo3::exceptions::PySyntaxError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};
use spade_sandbox::protocol::{
    EnvError, EnvErrorKind, EnvKind, Observation, StepResult, Trajectory, Turn,
};
use std::ffi::CString;

const PRELUDE: &str = include_str!("prelude.py");
const TOOLUSE_BASE: &str = include_str!("../../../envs/python/spade_tooluse.py");
/// The reference implementation's tool-use interface (`ToolUseBaseEnv`), our implementation.
const TOOLUSE_REFERENCE_BASE: &str = include_str!("../../../envs/python/spade_tooluse_base.py");
/// spec "One training step", item 5: agents play at most 25 turns.
const DEFAULT_MAX_TURNS: u32 = 25;
/// Tracebacks are for humans reading a rejection; keep them short.
const MAX_MESSAGE_CHARS: usize = 4_000;
/// Traceback lines kept before the exception: the innermost frames, two lines each.
const TRACEBACK_LINES: usize = 8;
const MAX_INFO_DEPTH: usize = 8;
const MAX_INFO_ITEMS: usize = 10_000;

type EnvResult<T> = Result<T, EnvError>;

fn env_err(kind: EnvErrorKind, message: impl Into<String>) -> EnvError {
    EnvError {
        kind,
        message: message.into(),
    }
}

fn contract(message: impl Into<String>) -> EnvError {
    env_err(EnvErrorKind::Contract, message)
}

/// The namespace every environment is loaded into, built once before isolation.
pub struct Template {
    globals: Py<PyDict>,
}

impl Template {
    pub fn build(py: Python<'_>, site_packages: &str) -> PyResult<Self> {
        let sys = py.import("sys")?;
        if !site_packages.is_empty() {
            sys.getattr("path")?
                .call_method1("append", (site_packages,))?;
        }
        // Bytecode caches would be written next to the sources, outside the scratch dir.
        sys.setattr("dont_write_bytecode", true)?;
        let globals = PyDict::new(py);
        globals.set_item("__builtins__", py.import("builtins")?)?;
        run(py, PRELUDE, &globals)?;
        run(py, TOOLUSE_BASE, &globals)?;
        run(py, TOOLUSE_REFERENCE_BASE, &globals)?;
        Ok(Self {
            globals: globals.unbind(),
        })
    }

    fn fresh<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let g = self.globals.bind(py).copy()?;
        g.set_item("__name__", "__spade_env__")?;
        Ok(g)
    }
}

fn run(py: Python<'_>, source: &str, globals: &Bound<'_, PyDict>) -> PyResult<()> {
    if source.contains('\0') {
        return Err(PySyntaxError::new_err("source contains a NUL byte"));
    }
    let builtins = py.import("builtins")?;
    let code = builtins
        .getattr("compile")?
        .call1((source, ENV_FILE, "exec"))?;
    // The source is in no file, so tracebacks would name its lines without showing them: the
    // line cache holds it under its name (`None` as mtime: `checkcache` leaves such entries).
    let lines: Vec<&str> = source.split_inclusive('\n').collect();
    py.import("linecache")?
        .getattr("cache")?
        .set_item(ENV_FILE, (source.len(), py.None(), lines, ENV_FILE))?;
    builtins.getattr("exec")?.call1((code, globals))?;
    Ok(())
}

/// The file name the environment's code runs under, as its tracebacks and syntax errors name
/// it (the dashboard finds the failing line by it).
pub const ENV_FILE: &str = "<environment>";

/// The directories the interpreter imports from; Landlock keeps them readable.
pub fn import_roots(py: Python<'_>) -> PyResult<Vec<String>> {
    let mut roots: Vec<String> = py.import("sys")?.getattr("path")?.extract()?;
    roots.retain(|p| !p.is_empty() && std::path::Path::new(p).exists());
    Ok(roots)
}

/// A loaded environment instance.
pub struct LoadedEnv {
    env: Py<PyAny>,
    pub kind: EnvKind,
    /// A `ToolUseBaseEnv`: the next action comes from its plan (`_spade_next_action`), not
    /// from `solution()`, which describes the whole episode.
    plays_plan: bool,
    pub class_name: String,
    pub max_turns: u32,
    max_obs_chars: usize,
}

/// Parses, executes and instantiates `source`.
pub fn load(
    py: Python<'_>,
    template: &Template,
    source: &str,
    kind: Option<EnvKind>,
    max_turns: Option<u32>,
    max_obs_chars: usize,
) -> EnvResult<LoadedEnv> {
    let class_name = env_class_name(py, source)?;
    let globals = template.fresh(py).map_err(|e| py_error(py, &e))?;
    run(py, source, &globals).map_err(|e| py_error(py, &e))?;
    let cls = globals
        .get_item(&class_name)
        .map_err(|e| py_error(py, &e))?
        .ok_or_else(|| {
            contract(format!(
                "class {class_name} is not defined after executing the source"
            ))
        })?;
    let subclasses = |base: &str| -> EnvResult<bool> {
        let base = globals
            .get_item(base)
            .map_err(|e| py_error(py, &e))?
            .ok_or_else(|| {
                contract(format!(
                    "the {base} base class is missing from the namespace"
                ))
            })?;
        Ok(cls
            .cast::<PyType>()
            .ok()
            .and_then(|c| c.is_subclass(&base).ok())
            .unwrap_or(false))
    };
    // The reference's interface: one solution() text for the episode, played call by call.
    let plays_plan = subclasses("ToolUseBaseEnv")?;
    let is_tool_use = plays_plan || subclasses("ToolUseEnv")?;
    let kind = kind.unwrap_or(if is_tool_use {
        EnvKind::ToolUse
    } else {
        EnvKind::Game
    });
    if kind == EnvKind::ToolUse && !is_tool_use {
        return Err(contract(format!(
            "{class_name} must subclass ToolUseEnv or ToolUseBaseEnv to follow the tool-use contract"
        )));
    }
    let env = match max_turns {
        Some(n) => {
            let kwargs = PyDict::new(py);
            kwargs
                .set_item("max_turns", n)
                .map_err(|e| py_error(py, &e))?;
            cls.call((), Some(&kwargs))
        }
        None => cls.call0(),
    }
    .map_err(|e| py_error(py, &e))?;
    let max_turns = match max_turns {
        Some(n) => n,
        None => env
            .getattr("max_turns")
            .ok()
            .filter(|v| v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>())
            .and_then(|v| v.extract::<u32>().ok())
            .filter(|n| (1..=1000).contains(n))
            .unwrap_or(DEFAULT_MAX_TURNS),
    };
    Ok(LoadedEnv {
        env: env.unbind(),
        kind,
        plays_plan,
        class_name,
        max_turns,
        max_obs_chars,
    })
}

/// Exactly one top-level class whose name ends in `Env`, found with `ast` before any of the
/// source runs (so nothing in it can have tampered with `ast` yet).
fn env_class_name(py: Python<'_>, source: &str) -> EnvResult<String> {
    if source.contains('\0') {
        return Err(env_err(EnvErrorKind::Syntax, "source contains a NUL byte"));
    }
    let ast = py.import("ast").map_err(|e| py_error(py, &e))?;
    let tree = ast.call_method1("parse", (source, ENV_FILE)).map_err(|e| {
        let mut err = py_error(py, &e);
        err.kind = EnvErrorKind::Syntax;
        err
    })?;
    let class_def = ast.getattr("ClassDef").map_err(|e| py_error(py, &e))?;
    let body = tree.getattr("body").map_err(|e| py_error(py, &e))?;
    let mut names = Vec::new();
    for node in body.try_iter().map_err(|e| py_error(py, &e))? {
        let node = node.map_err(|e| py_error(py, &e))?;
        if node.is_instance(&class_def).unwrap_or(false) {
            let name: String = node
                .getattr("name")
                .and_then(|n| n.extract())
                .map_err(|e| py_error(py, &e))?;
            if name.ends_with("Env") {
                names.push(name);
            }
        }
    }
    match names.len() {
        1 => Ok(names.remove(0)),
        0 => Err(env_err(
            EnvErrorKind::NoEnvClass,
            "no top-level class whose name ends in `Env`",
        )),
        _ => Err(env_err(
            EnvErrorKind::MultipleEnvClasses,
            format!(
                "{} top-level classes end in `Env` ({}); exactly one is allowed",
                names.len(),
                names.join(", ")
            ),
        )),
    }
}

impl LoadedEnv {
    pub fn reset(&self, py: Python<'_>, seed: Option<i64>) -> EnvResult<Observation> {
        let kwargs = PyDict::new(py);
        kwargs
            .set_item("seed", seed)
            .map_err(|e| py_error(py, &e))?;
        let ret = self
            .env
            .bind(py)
            .call_method("reset", (), Some(&kwargs))
            .map_err(|e| py_error(py, &e))?;
        let tuple = ret.cast::<PyTuple>().map_err(|_| {
            contract(format!(
                "reset() must return a tuple (obs, info), got {}",
                type_name(&ret)
            ))
        })?;
        if tuple.len() != 2 {
            return Err(contract(format!(
                "reset() must return 2 values (obs, info), got {}",
                tuple.len()
            )));
        }
        let obs = self.observation(&item(tuple, 0)?, "reset")?;
        let info = info_json(&item(tuple, 1)?, "reset")?;
        Ok(Observation { obs, info })
    }

    pub fn step(&self, py: Python<'_>, action: &str) -> EnvResult<StepResult> {
        let ret = self
            .env
            .bind(py)
            .call_method1("step", (action,))
            .map_err(|e| py_error(py, &e))?;
        let tuple = ret.cast::<PyTuple>().map_err(|_| {
            contract(format!(
                "step() must return a tuple (obs, reward, terminated, truncated, info), got {}",
                type_name(&ret)
            ))
        })?;
        if tuple.len() != 5 {
            return Err(contract(format!(
                "step() must return 5 values (obs, reward, terminated, truncated, info), got {}",
                tuple.len()
            )));
        }
        Ok(StepResult {
            obs: self.observation(&item(tuple, 0)?, "step")?,
            reward: reward(&item(tuple, 1)?)?,
            terminated: flag(&item(tuple, 2)?, "terminated")?,
            truncated: flag(&item(tuple, 3)?, "truncated")?,
            info: info_json(&item(tuple, 4)?, "step")?,
        })
    }

    pub fn solution(&self, py: Python<'_>) -> EnvResult<String> {
        let ret = self
            .env
            .bind(py)
            .call_method0(if self.plays_plan {
                "_spade_next_action"
            } else {
                "solution"
            })
            .map_err(|e| py_error(py, &e))?;
        // An int or float answer is common and harmless; anything else must be a str.
        if ret.is_instance_of::<PyString>() {
            return string(&ret);
        }
        if (ret.is_instance_of::<PyInt>() || ret.is_instance_of::<PyFloat>())
            && !ret.is_instance_of::<PyBool>()
        {
            return ret
                .str()
                .map(|s| s.to_string_lossy().into_owned())
                .map_err(|e| py_error(py, &e));
        }
        Err(contract(format!(
            "solution() must return a str, got {}",
            type_name(&ret)
        )))
    }

    pub fn criteria(&self, py: Python<'_>) -> EnvResult<Vec<bool>> {
        let ret = self
            .env
            .bind(py)
            .call_method0("criteria")
            .map_err(|e| py_error(py, &e))?;
        let list = ret.cast::<PyList>().map_err(|_| {
            contract(format!(
                "criteria() must return a list of bool, got {}",
                type_name(&ret)
            ))
        })?;
        let mut out = Vec::with_capacity(list.len());
        for i in 0..list.len() {
            let v = list.get_item(i).map_err(|e| py_error(py, &e))?;
            out.push(flag(&v, "criteria()[i]")?);
        }
        Ok(out)
    }

    /// Reset, then step `solution()` until the episode ends or `max_turns` steps were taken.
    pub fn play_solution(&self, py: Python<'_>, seed: i64, max_turns: u32) -> Trajectory {
        let reset = match self.reset(py, Some(seed)) {
            Ok(o) => o,
            Err(e) => {
                return Trajectory {
                    reset: Observation {
                        obs: String::new(),
                        info: serde_json::Value::Null,
                    },
                    turns: Vec::new(),
                    error: Some(e),
                };
            }
        };
        let mut turns = Vec::new();
        for _ in 0..max_turns {
            let action = match self.solution(py) {
                Ok(s) if self.kind == EnvKind::Game => format!("\\boxed{{{s}}}"),
                Ok(s) => s,
                Err(e) => {
                    return Trajectory {
                        reset,
                        turns,
                        error: Some(e),
                    };
                }
            };
            match self.step(py, &action) {
                Ok(result) => {
                    let done = result.terminated || result.truncated;
                    turns.push(Turn { action, result });
                    if done {
                        break;
                    }
                }
                Err(e) => {
                    return Trajectory {
                        reset,
                        turns,
                        error: Some(e),
                    };
                }
            }
        }
        Trajectory {
            reset,
            turns,
            error: None,
        }
    }

    fn observation(&self, v: &Bound<'_, PyAny>, method: &str) -> EnvResult<String> {
        if !v.is_instance_of::<PyString>() {
            return Err(contract(format!(
                "{method}() must return the observation as a str, got {}",
                type_name(v)
            )));
        }
        let s = string(v)?;
        let n = s.chars().count();
        if n > self.max_obs_chars {
            return Err(env_err(
                EnvErrorKind::ObservationTooLong,
                format!(
                    "{method}() returned an observation of {n} characters; the limit is {}",
                    self.max_obs_chars
                ),
            ));
        }
        Ok(s)
    }
}

/// Executes `source` in a fresh copy of the environment namespace and returns `str(expr)`.
pub fn exec(py: Python<'_>, template: &Template, source: &str, expr: &str) -> EnvResult<String> {
    let globals = template.fresh(py).map_err(|e| py_error(py, &e))?;
    run(py, source, &globals).map_err(|e| py_error(py, &e))?;
    let expr =
        CString::new(expr).map_err(|_| env_err(EnvErrorKind::BadRequest, "NUL in expression"))?;
    let v = py
        .eval(&expr, Some(&globals), None)
        .map_err(|e| py_error(py, &e))?;
    let s = v.str().map_err(|e| py_error(py, &e))?;
    Ok(s.to_string_lossy().into_owned())
}

fn item<'py>(t: &Bound<'py, PyTuple>, i: usize) -> EnvResult<Bound<'py, PyAny>> {
    t.get_item(i)
        .map_err(|_| contract(format!("tuple has no item {i}")))
}

fn string(v: &Bound<'_, PyAny>) -> EnvResult<String> {
    let s = v
        .cast::<PyString>()
        .map_err(|_| contract(format!("expected a str, got {}", type_name(v))))?;
    // Lone surrogates cannot go to UTF-8; replace them rather than fail the episode.
    Ok(s.to_string_lossy().into_owned())
}

fn reward(v: &Bound<'_, PyAny>) -> EnvResult<f64> {
    if v.is_instance_of::<PyBool>() || v.is_instance_of::<PyString>() {
        return Err(contract(format!(
            "reward must be a number, got {}",
            type_name(v)
        )));
    }
    v.extract::<f64>()
        .map_err(|_| contract(format!("reward must be a number, got {}", type_name(v))))
}

/// `bool`, or numpy's `bool_` (which comparisons of numpy values produce).
fn flag(v: &Bound<'_, PyAny>, what: &str) -> EnvResult<bool> {
    if let Ok(b) = v.cast::<PyBool>() {
        return Ok(b.is_true());
    }
    if type_name(v) == "numpy.bool" || type_name(v) == "numpy.bool_" {
        return v
            .is_truthy()
            .map_err(|_| contract(format!("{what} must be a bool")));
    }
    Err(contract(format!(
        "{what} must be a bool, got {}",
        type_name(v)
    )))
}

/// `module.qualname` of the value's type, read from the type object itself.
fn type_name(v: &Bound<'_, PyAny>) -> String {
    let ty = v.get_type();
    let name = ty
        .fully_qualified_name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "<unknown type>".into());
    name.strip_prefix("builtins.")
        .map(str::to_owned)
        .unwrap_or(name)
}

fn info_json(v: &Bound<'_, PyAny>, method: &str) -> EnvResult<serde_json::Value> {
    if !v.is_instance_of::<PyDict>() {
        return Err(contract(format!(
            "{method}() must return info as a dict, got {}",
            type_name(v)
        )));
    }
    let mut budget = MAX_INFO_ITEMS;
    Ok(to_json(v, 0, &mut budget))
}

/// A JSON rendering of an info value: containers and scalars map directly, anything else
/// becomes its (truncated) `str()`. Depth and size are bounded.
fn to_json(v: &Bound<'_, PyAny>, depth: usize, budget: &mut usize) -> serde_json::Value {
    use serde_json::Value;
    if *budget == 0 || depth > MAX_INFO_DEPTH {
        return Value::String("...".into());
    }
    *budget -= 1;
    if v.is_none() {
        Value::Null
    } else if let Ok(b) = v.cast::<PyBool>() {
        Value::Bool(b.is_true())
    } else if v.is_instance_of::<PyInt>() {
        v.extract::<i64>()
            .map(Value::from)
            .or_else(|_| v.extract::<f64>().map(Value::from))
            .unwrap_or(Value::Null)
    } else if v.is_instance_of::<PyFloat>() {
        v.extract::<f64>().map(Value::from).unwrap_or(Value::Null)
    } else if v.is_instance_of::<PyString>() {
        Value::String(string(v).unwrap_or_default())
    } else if let Ok(d) = v.cast::<PyDict>() {
        let mut map = serde_json::Map::new();
        for (k, val) in d.iter() {
            let key = if k.is_instance_of::<PyString>() {
                string(&k).unwrap_or_default()
            } else {
                k.str()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            };
            map.insert(key, to_json(&val, depth + 1, budget));
        }
        Value::Object(map)
    } else if let Ok(l) = v.cast::<PyList>() {
        Value::Array(l.iter().map(|x| to_json(&x, depth + 1, budget)).collect())
    } else if let Ok(t) = v.cast::<PyTuple>() {
        Value::Array(t.iter().map(|x| to_json(&x, depth + 1, budget)).collect())
    } else {
        let s = v
            .str()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| type_name(v));
        Value::String(s.chars().take(200).collect())
    }
}

/// A traceback as Python's `traceback.format_tb` writes it: its frames with their source
/// lines, which it reads from the line cache where [`run`] put the environment's code (the C
/// printer behind `PyTraceback::format` opens files by name and so shows none of them).
fn format_tb(py: Python<'_>, tb: &Bound<'_, pyo3::types::PyTraceback>) -> Option<String> {
    let formatted = py
        .import("traceback")
        .and_then(|m| m.call_method1("format_tb", (tb,)))
        .and_then(|frames| frames.extract::<Vec<String>>());
    match formatted {
        Ok(frames) => Some(format!(
            "Traceback (most recent call last):\n{}",
            frames.concat()
        )),
        Err(_) => tb.format().ok(),
    }
}

/// An exception from environment code as an [`EnvError`]: type, message, and the innermost
/// traceback lines (bounded).
fn py_error(py: Python<'_>, err: &PyErr) -> EnvError {
    let kind = err
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".into());
    let msg = err
        .value(py)
        .str()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let head = format!("{kind}: {msg}");
    // As Python prints it: the innermost frames (file, line, and the line's code), then the
    // exception, so the failing line of the environment's own code is the last frame shown.
    let mut message = match err.traceback(py).and_then(|tb| format_tb(py, &tb)) {
        Some(tb) => {
            let lines: Vec<&str> = tb.lines().collect();
            let tail = lines[lines.len().saturating_sub(TRACEBACK_LINES)..].join("\n");
            format!("{tail}\n{head}")
        }
        None => head,
    };
    if message.chars().count() > MAX_MESSAGE_CHARS {
        // Keep the end: the exception and the innermost frame.
        let skip = message.chars().count() - MAX_MESSAGE_CHARS;
        message = format!("...{}", message.chars().skip(skip).collect::<String>());
    }
    env_err(EnvErrorKind::Exception, message)
}
