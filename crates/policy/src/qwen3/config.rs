//! `config.json` of a Qwen3 or Qwen3-MoE checkpoint, parsed by hand from JSON so that every
//! error names its field, and written back so that transformers (4.5x and 5.x) loads it.
//!
//! Defaults follow transformers' `Qwen3Config` and `Qwen3MoeConfig` (5.24): notably a dense
//! model's `head_dim` defaults to 128, a MoE model's to `hidden_size / num_attention_heads`
//! (`Qwen3MoeAttention` reads it with `getattr(config, "head_dim", hidden // heads)`), and
//! `num_key_value_heads` to `num_attention_heads`. Rope theta is read from `rope_theta` (4.x
//! layout) or `rope_parameters.rope_theta` (5.x).

use crate::error::{PolicyError, Result};
use serde_json::{Map, Value, json};
use std::path::Path;

/// The dense architecture.
pub const ARCHITECTURE: &str = "Qwen3ForCausalLM";
/// `model_type` of Qwen3 configs.
pub const MODEL_TYPE: &str = "qwen3";
/// The mixture-of-experts architecture (Qwen3-30B-A3B, Qwen3-235B-A22B).
pub const MOE_ARCHITECTURE: &str = "Qwen3MoeForCausalLM";
/// `model_type` of Qwen3-MoE configs.
pub const MOE_MODEL_TYPE: &str = "qwen3_moe";

/// The mixture-of-experts part of a Qwen3-MoE config (transformers' `Qwen3MoeConfig`).
#[derive(Debug, Clone, PartialEq)]
pub struct Moe {
    /// Experts per sparse layer.
    pub num_experts: i64,
    /// Experts each token is routed to (top-k).
    pub num_experts_per_tok: i64,
    /// SwiGLU width of one expert.
    pub moe_intermediate_size: i64,
    /// Renormalise the top-k router probabilities to sum to 1 (30B-A3B: true; transformers'
    /// default: false).
    pub norm_topk_prob: bool,
    /// Layer `i` is sparse when `(i + 1) % decoder_sparse_step == 0` and it is not in
    /// `mlp_only_layers`.
    pub decoder_sparse_step: i64,
    /// Layers with a dense MLP (`intermediate_size` wide) instead of experts.
    pub mlp_only_layers: Vec<i64>,
    /// Coefficient of the router's load-balancing loss in the checkpoint's config (transformers
    /// default 0.001). Training applies it only when asked (`GrpoConfig::router_aux_coef`).
    pub router_aux_loss_coef: f64,
}

impl Moe {
    /// Whether layer `i` routes to experts (transformers' `Qwen3MoeDecoderLayer` rule).
    pub fn is_sparse(&self, layer: i64) -> bool {
        !self.mlp_only_layers.contains(&layer) && (layer + 1) % self.decoder_sparse_step == 0
    }
}

/// The hyper-parameters of a Qwen3 model, mirroring `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub vocab_size: i64,
    pub hidden_size: i64,
    pub intermediate_size: i64,
    pub num_hidden_layers: i64,
    pub num_attention_heads: i64,
    pub num_key_value_heads: i64,
    pub head_dim: i64,
    pub max_position_embeddings: i64,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub tie_word_embeddings: bool,
    pub attention_bias: bool,
    pub bos_token_id: Option<i64>,
    pub eos_token_ids: Vec<i64>,
    pub pad_token_id: Option<i64>,
    /// Experts, for Qwen3-MoE checkpoints; None for dense Qwen3.
    pub moe: Option<Moe>,
    /// Keys this crate does not interpret (e.g. `initializer_range`, `transformers_version`),
    /// kept so that a load/save round trip preserves them.
    pub extra: Map<String, Value>,
}

/// Keys `to_json` writes itself; everything else read from a file goes to `extra`.
const KNOWN: &[&str] = &[
    "architectures",
    "model_type",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "rms_norm_eps",
    "rope_theta",
    "rope_parameters",
    "rope_scaling",
    "tie_word_embeddings",
    "attention_bias",
    "hidden_act",
    "use_sliding_window",
    "layer_types",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "torch_dtype",
    "dtype",
    "num_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "norm_topk_prob",
    "decoder_sparse_step",
    "mlp_only_layers",
    "router_aux_loss_coef",
];

impl Config {
    /// Reads `dir/config.json`.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|source| PolicyError::MissingConfig {
            path: path.clone(),
            source,
        })?;
        let value: Value =
            serde_json::from_str(&text).map_err(|e| PolicyError::MalformedConfig {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        match value {
            Value::Object(map) => Self::from_map(map),
            _ => Err(PolicyError::MalformedConfig {
                path,
                reason: "expected a JSON object".into(),
            }),
        }
    }

    /// Parses an already decoded `config.json` object.
    pub fn from_map(map: Map<String, Value>) -> Result<Self> {
        let is_moe = check_architecture(&map)?;
        let f = Fields(&map);
        for (field, expected) in [("hidden_act", "silu")] {
            if let Some(v) = f.string(field)?
                && v != expected
            {
                return Err(unsupported(field, &v));
            }
        }
        if f.bool("use_sliding_window", false)? {
            return Err(unsupported("use_sliding_window", "true"));
        }
        if let Some(Value::Array(types)) = map.get("layer_types")
            && let Some(t) = types.iter().find(|t| t.as_str() != Some("full_attention"))
        {
            return Err(unsupported("layer_types", &t.to_string()));
        }
        let num_attention_heads = f.positive("num_attention_heads", None)?;
        let hidden_size = f.positive("hidden_size", None)?;
        let moe = is_moe.then(|| moe_fields(&f)).transpose()?;
        let (default_head_dim, default_intermediate) = match moe {
            Some(_) => (hidden_size / num_attention_heads, Some(6144)),
            None => (128, None),
        };
        let cfg = Config {
            vocab_size: f.positive("vocab_size", None)?,
            hidden_size,
            intermediate_size: f.positive("intermediate_size", default_intermediate)?,
            num_hidden_layers: f.positive("num_hidden_layers", None)?,
            num_attention_heads,
            num_key_value_heads: f.positive("num_key_value_heads", Some(num_attention_heads))?,
            head_dim: f.positive("head_dim", Some(default_head_dim.max(1)))?,
            max_position_embeddings: f.positive("max_position_embeddings", Some(32768))?,
            rms_norm_eps: f.float("rms_norm_eps", Some(1e-6))?,
            rope_theta: rope_theta(&map)?,
            tie_word_embeddings: f.bool("tie_word_embeddings", false)?,
            attention_bias: f.bool("attention_bias", false)?,
            bos_token_id: f.opt_int("bos_token_id")?,
            eos_token_ids: eos_ids(&map)?,
            pad_token_id: f.opt_int("pad_token_id")?,
            moe,
            extra: map
                .iter()
                .filter(|(k, _)| !KNOWN.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks relations between fields that a well-formed Qwen3 config satisfies.
    pub fn validate(&self) -> Result<()> {
        if self.num_attention_heads % self.num_key_value_heads != 0 {
            return Err(PolicyError::field(
                "num_key_value_heads",
                format!(
                    "{} does not divide num_attention_heads = {}",
                    self.num_key_value_heads, self.num_attention_heads
                ),
            ));
        }
        if self.head_dim % 2 != 0 {
            return Err(PolicyError::field(
                "head_dim",
                format!("{} is odd; rotary embeddings need pairs", self.head_dim),
            ));
        }
        if self.rms_norm_eps.is_nan() || self.rms_norm_eps <= 0.0 {
            return Err(PolicyError::field("rms_norm_eps", "must be > 0"));
        }
        if self.rope_theta.is_nan() || self.rope_theta <= 0.0 {
            return Err(PolicyError::field("rope_theta", "must be > 0"));
        }
        if let Some(m) = &self.moe {
            if m.num_experts_per_tok > m.num_experts {
                return Err(PolicyError::field(
                    "num_experts_per_tok",
                    format!(
                        "{} is more than num_experts = {}",
                        m.num_experts_per_tok, m.num_experts
                    ),
                ));
            }
            if let Some(l) = m
                .mlp_only_layers
                .iter()
                .find(|&&l| l < 0 || l >= self.num_hidden_layers)
            {
                return Err(PolicyError::field(
                    "mlp_only_layers",
                    format!(
                        "layer {l} outside 0..{} (num_hidden_layers)",
                        self.num_hidden_layers
                    ),
                ));
            }
            if m.router_aux_loss_coef.is_nan() || m.router_aux_loss_coef < 0.0 {
                return Err(PolicyError::field("router_aux_loss_coef", "must be >= 0"));
            }
        }
        for id in self.eos_token_ids.iter().chain(&self.bos_token_id) {
            if *id < 0 || *id >= self.vocab_size {
                return Err(PolicyError::field(
                    "eos_token_id",
                    format!("token {id} outside the vocabulary of {}", self.vocab_size),
                ));
            }
        }
        Ok(())
    }

    /// The JSON that `save` writes; `dtype` is "float32" or "bfloat16".
    pub fn to_json(&self, dtype: &str) -> Value {
        let mut m = self.extra.clone();
        let eos = match self.eos_token_ids.as_slice() {
            [] => Value::Null,
            [one] => json!(one),
            many => json!(many),
        };
        let (architecture, model_type) = match self.moe {
            Some(_) => (MOE_ARCHITECTURE, MOE_MODEL_TYPE),
            None => (ARCHITECTURE, MODEL_TYPE),
        };
        let known = json!({
            "architectures": [architecture],
            "model_type": model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            // Both layouts: 4.x reads `rope_theta`, 5.x `rope_parameters` (and accepts both).
            "rope_theta": self.rope_theta,
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": self.attention_bias,
            "hidden_act": "silu",
            "use_sliding_window": false,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": eos,
            "pad_token_id": self.pad_token_id,
            "torch_dtype": dtype,
            "dtype": dtype,
        });
        if let Value::Object(k) = known {
            m.extend(k);
        }
        if let Some(e) = &self.moe {
            // 4.x reads `num_experts`, 5.x writes `num_local_experts` (and maps the other).
            m.extend([
                ("num_experts".to_string(), json!(e.num_experts)),
                ("num_local_experts".into(), json!(e.num_experts)),
                ("num_experts_per_tok".into(), json!(e.num_experts_per_tok)),
                (
                    "moe_intermediate_size".into(),
                    json!(e.moe_intermediate_size),
                ),
                ("norm_topk_prob".into(), json!(e.norm_topk_prob)),
                ("decoder_sparse_step".into(), json!(e.decoder_sparse_step)),
                ("mlp_only_layers".into(), json!(e.mlp_only_layers)),
                ("router_aux_loss_coef".into(), json!(e.router_aux_loss_coef)),
            ]);
        }
        Value::Object(m)
    }

    /// Whether layer `i` routes to experts (false for every layer of a dense model).
    pub fn is_sparse(&self, layer: i64) -> bool {
        self.moe.as_ref().is_some_and(|m| m.is_sparse(layer))
    }

    /// Parameters of the model this config describes.
    pub fn num_parameters(&self) -> i64 {
        let (h, hd) = (self.hidden_size, self.head_dim);
        let q = self.num_attention_heads * hd;
        let kv = self.num_key_value_heads * hd;
        let bias = if self.attention_bias {
            q + 2 * kv + h
        } else {
            0
        };
        let attn = h * q + 2 * h * kv + q * h + bias + 2 * hd;
        let ffn: i64 = (0..self.num_hidden_layers)
            .map(|i| match &self.moe {
                Some(m) if m.is_sparse(i) => {
                    m.num_experts * h + m.num_experts * 3 * h * m.moe_intermediate_size
                }
                _ => 3 * h * self.intermediate_size,
            })
            .sum();
        let embed = self.vocab_size * h;
        let head = if self.tie_word_embeddings { 0 } else { embed };
        embed + self.num_hidden_layers * (attn + 2 * h) + ffn + h + head
    }

    /// Parameters one token passes through: all but the experts it is not routed to (the
    /// "A3B" of Qwen3-30B-A3B). Equals [`Config::num_parameters`] for a dense model.
    pub fn active_parameters(&self) -> i64 {
        let Some(m) = &self.moe else {
            return self.num_parameters();
        };
        let idle = m.num_experts - m.num_experts_per_tok;
        let sparse = (0..self.num_hidden_layers)
            .filter(|&i| m.is_sparse(i))
            .count() as i64;
        self.num_parameters() - sparse * idle * 3 * self.hidden_size * m.moe_intermediate_size
    }
}

fn unsupported(field: &str, value: &str) -> PolicyError {
    PolicyError::UnsupportedConfig {
        field: field.into(),
        value: value.into(),
    }
}

/// Checks `model_type` and `architectures` name one of the two implemented architectures
/// consistently; returns whether it is the MoE one.
fn check_architecture(map: &Map<String, Value>) -> Result<bool> {
    let model_type = map.get("model_type").and_then(Value::as_str);
    let mut moe = match model_type {
        None => None,
        Some(MODEL_TYPE) => Some(false),
        Some(MOE_MODEL_TYPE) => Some(true),
        Some(t) => {
            return Err(PolicyError::UnsupportedArchitecture {
                found: format!("model_type \"{t}\""),
            });
        }
    };
    match map.get("architectures") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            let names: Vec<&str> = a.iter().filter_map(Value::as_str).collect();
            let named_moe = match (
                names.contains(&ARCHITECTURE),
                names.contains(&MOE_ARCHITECTURE),
            ) {
                (true, false) => false,
                (false, true) => true,
                _ => {
                    return Err(PolicyError::UnsupportedArchitecture {
                        found: format!("{names:?}"),
                    });
                }
            };
            if moe.is_some_and(|m| m != named_moe) {
                return Err(PolicyError::field(
                    "architectures",
                    format!("{names:?} contradicts model_type {model_type:?}"),
                ));
            }
            moe = Some(named_moe);
        }
        Some(other) => {
            return Err(PolicyError::field(
                "architectures",
                format!("expected a list of names, found {other}"),
            ));
        }
    }
    moe.ok_or_else(|| PolicyError::field("model_type", "missing (and no `architectures` either)"))
}

/// The MoE fields, with transformers' `Qwen3MoeConfig` defaults where a key is absent.
/// `num_local_experts` is accepted for `num_experts` (the config's `attribute_map`).
fn moe_fields(f: &Fields<'_>) -> Result<Moe> {
    let num_experts = match f.get("num_experts") {
        Some(_) => f.positive("num_experts", None)?,
        None => f.positive("num_local_experts", Some(128))?,
    };
    let mlp_only_layers = match f.get("mlp_only_layers") {
        None => vec![],
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_i64().ok_or_else(|| {
                    PolicyError::field(
                        "mlp_only_layers",
                        format!("expected layer indices, found {v}"),
                    )
                })
            })
            .collect::<Result<_>>()?,
        Some(v) => {
            return Err(PolicyError::field(
                "mlp_only_layers",
                format!("expected a list of layer indices, found {v}"),
            ));
        }
    };
    Ok(Moe {
        num_experts,
        num_experts_per_tok: f.positive("num_experts_per_tok", Some(8))?,
        moe_intermediate_size: f.positive("moe_intermediate_size", Some(768))?,
        norm_topk_prob: f.bool("norm_topk_prob", false)?,
        decoder_sparse_step: f.positive("decoder_sparse_step", Some(1))?,
        mlp_only_layers,
        router_aux_loss_coef: f.float("router_aux_loss_coef", Some(0.001))?,
    })
}

fn rope_theta(map: &Map<String, Value>) -> Result<f64> {
    for key in ["rope_scaling", "rope_parameters"] {
        if let Some(Value::Object(p)) = map.get(key) {
            let kind = p.get("rope_type").or_else(|| p.get("type"));
            if let Some(k) = kind.and_then(Value::as_str)
                && k != "default"
            {
                return Err(unsupported(&format!("{key}.rope_type"), k));
            }
        }
    }
    if let Some(Value::Object(p)) = map.get("rope_parameters")
        && let Some(v) = p.get("rope_theta")
    {
        return v
            .as_f64()
            .ok_or_else(|| PolicyError::field("rope_parameters.rope_theta", "expected a number"));
    }
    // transformers' RotaryEmbeddingConfigMixin.default_theta.
    Fields(map).float("rope_theta", Some(10_000.0))
}

fn eos_ids(map: &Map<String, Value>) -> Result<Vec<i64>> {
    let bad = || PolicyError::field("eos_token_id", "expected an integer or a list of integers");
    match map.get("eos_token_id") {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(a)) => a.iter().map(|v| v.as_i64().ok_or_else(bad)).collect(),
        Some(v) => Ok(vec![v.as_i64().ok_or_else(bad)?]),
    }
}

/// Typed access to the fields of a JSON object, with errors that name the field.
struct Fields<'a>(&'a Map<String, Value>);

impl Fields<'_> {
    fn get(&self, field: &str) -> Option<&Value> {
        self.0.get(field).filter(|v| !v.is_null())
    }

    fn positive(&self, field: &str, default: Option<i64>) -> Result<i64> {
        let v = match (self.get(field), default) {
            (None, Some(d)) => return Ok(d),
            (None, None) => return Err(PolicyError::field(field, "missing")),
            (Some(v), _) => v,
        };
        match v.as_i64() {
            Some(n) if n > 0 => Ok(n),
            _ => Err(PolicyError::field(
                field,
                format!("expected a positive integer, found {v}"),
            )),
        }
    }

    fn opt_int(&self, field: &str) -> Result<Option<i64>> {
        self.get(field)
            .map(|v| {
                v.as_i64().ok_or_else(|| {
                    PolicyError::field(field, format!("expected an integer, found {v}"))
                })
            })
            .transpose()
    }

    fn float(&self, field: &str, default: Option<f64>) -> Result<f64> {
        match (self.get(field), default) {
            (None, Some(d)) => Ok(d),
            (None, None) => Err(PolicyError::field(field, "missing")),
            (Some(v), _) => v
                .as_f64()
                .ok_or_else(|| PolicyError::field(field, format!("expected a number, found {v}"))),
        }
    }

    fn bool(&self, field: &str, default: bool) -> Result<bool> {
        match self.get(field) {
            None => Ok(default),
            Some(v) => v.as_bool().ok_or_else(|| {
                PolicyError::field(field, format!("expected true or false, found {v}"))
            }),
        }
    }

    fn string(&self, field: &str) -> Result<Option<String>> {
        self.get(field)
            .map(|v| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    PolicyError::field(field, format!("expected a string, found {v}"))
                })
            })
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Map<String, Value> {
        match json!({
            "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
            "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 8, "rope_theta": 1e6, "eos_token_id": 3, "initializer_range": 0.02
        }) {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    fn err_text(m: Map<String, Value>) -> String {
        match Config::from_map(m) {
            Ok(c) => panic!("accepted {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn parses_fields_and_keeps_unknown_keys() -> Result<()> {
        let c = Config::from_map(base())?;
        assert_eq!(
            (c.num_key_value_heads, c.head_dim, c.rope_theta),
            (2, 8, 1e6)
        );
        assert_eq!(c.eos_token_ids, vec![3]);
        assert_eq!(c.extra.get("initializer_range"), Some(&json!(0.02)));
        let Value::Object(round) = c.to_json("float32") else {
            panic!("not an object")
        };
        assert_eq!(Config::from_map(round)?, c);
        Ok(())
    }

    #[test]
    fn rope_theta_is_read_from_the_5x_layout() -> Result<()> {
        let mut m = base();
        m.remove("rope_theta");
        m.insert(
            "rope_parameters".into(),
            json!({"rope_type": "default", "rope_theta": 5e5}),
        );
        assert_eq!(Config::from_map(m)?.rope_theta, 5e5);
        Ok(())
    }

    #[test]
    fn errors_name_the_field() {
        let mut m = base();
        m.remove("hidden_size");
        assert_eq!(err_text(m), "config field `hidden_size`: missing");
        let mut m = base();
        m.insert("num_hidden_layers".into(), json!("two"));
        assert!(err_text(m).contains("`num_hidden_layers`: expected a positive integer"));
        let mut m = base();
        m.insert("num_key_value_heads".into(), json!(3));
        assert!(err_text(m).contains("`num_key_value_heads`: 3 does not divide"));
    }

    #[test]
    fn other_architectures_and_rope_scaling_are_refused() {
        let mut m = base();
        m.insert("architectures".into(), json!(["LlamaForCausalLM"]));
        m.insert("model_type".into(), json!("llama"));
        assert!(err_text(m).contains("unsupported architecture model_type \"llama\""));
        let mut m = base();
        m.insert("architectures".into(), json!(["Qwen2ForCausalLM"]));
        assert!(err_text(m).contains("Qwen2ForCausalLM"));
        let mut m = base();
        m.insert(
            "rope_scaling".into(),
            json!({"rope_type": "yarn", "factor": 4.0}),
        );
        assert!(err_text(m).contains("rope_scaling.rope_type` = yarn"));
    }

    fn moe_base() -> Map<String, Value> {
        let mut m = base();
        m.insert("architectures".into(), json!([MOE_ARCHITECTURE]));
        m.insert("model_type".into(), json!(MOE_MODEL_TYPE));
        m.insert("num_local_experts".into(), json!(4));
        m.insert("num_experts_per_tok".into(), json!(2));
        m.insert("moe_intermediate_size".into(), json!(16));
        m.insert("mlp_only_layers".into(), json!([1]));
        m
    }

    #[test]
    fn moe_configs_parse_round_trip_and_name_bad_fields() -> Result<()> {
        let c = Config::from_map(moe_base())?;
        let moe = c.moe.clone().unwrap_or_else(|| panic!("no moe part"));
        assert_eq!((moe.num_experts, moe.num_experts_per_tok), (4, 2));
        assert!(!moe.norm_topk_prob, "transformers' default");
        assert_eq!(moe.router_aux_loss_coef, 0.001);
        assert!(c.is_sparse(0) && !c.is_sparse(1));
        let Value::Object(round) = c.to_json("float32") else {
            panic!("not an object")
        };
        assert_eq!(round["architectures"], json!([MOE_ARCHITECTURE]));
        assert_eq!(round["num_experts"], json!(4));
        assert_eq!(Config::from_map(round)?, c);
        // Hand count: layer 0 sparse (router 4*32, experts 4 * 3*32*16), layer 1 dense.
        let attn = 1024 + 512 + 512 + 1024 + 16 + 64;
        let sparse = 4 * 32 + 4 * 3 * 32 * 16;
        assert_eq!(
            c.num_parameters(),
            3200 + 2 * attn + sparse + 3 * 32 * 64 + 32 + 3200
        );
        assert_eq!(c.active_parameters(), c.num_parameters() - 2 * 3 * 32 * 16);

        let mut m = moe_base();
        m.insert("num_experts_per_tok".into(), json!(5));
        assert!(err_text(m).contains("`num_experts_per_tok`: 5 is more than num_experts = 4"));
        let mut m = moe_base();
        m.insert("mlp_only_layers".into(), json!([2]));
        assert!(err_text(m).contains("`mlp_only_layers`: layer 2 outside 0..2"));
        let mut m = moe_base();
        m.insert("mlp_only_layers".into(), json!("1"));
        assert!(err_text(m).contains("`mlp_only_layers`: expected a list"));
        let mut m = moe_base();
        m.insert("num_local_experts".into(), json!(0));
        assert!(err_text(m).contains("`num_local_experts`: expected a positive integer"));
        let mut m = moe_base();
        m.insert("model_type".into(), json!(MODEL_TYPE));
        assert!(err_text(m).contains("contradicts model_type"));
        Ok(())
    }

    #[test]
    fn parameter_count_matches_a_hand_count() -> Result<()> {
        let c = Config::from_map(base())?;
        // embed 100*32; per layer q 32*32, k,v 32*16 each, o 32*32, norms 8+8, mlp 3*32*64,
        // layer norms 2*32; final norm 32; untied head 100*32.
        let layer = 1024 + 512 + 512 + 1024 + 16 + 3 * 32 * 64 + 64;
        assert_eq!(c.num_parameters(), 3200 + 2 * layer + 32 + 3200);
        Ok(())
    }
}
