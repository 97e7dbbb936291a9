//! `config.json` of a Qwen3, Qwen3-MoE, Qwen2/Qwen2.5 or Llama checkpoint, parsed by hand from
//! JSON so that every error names its field, and written back so that transformers (4.5x and
//! 5.x) loads it.
//!
//! The four architectures are one decoder ([`crate::qwen3`]); what differs is read from the
//! config into [`Family`] and a few flags:
//! - Qwen3 (and Qwen3-MoE): RMSNorm on each head's queries and keys; q/k/v/o bias when
//!   `attention_bias`.
//! - Qwen2 (`Qwen2ForCausalLM`, also Qwen2.5): no q/k norm; q/k/v always carry a bias, o never
//!   (`Qwen2Attention` hard-codes it; `attention_bias` is not a Qwen2 key).
//! - Llama (`LlamaForCausalLM`: Llama 2/3, SmolLM2): no q/k norm; q/k/v/o bias when
//!   `attention_bias`, gate/up/down bias when `mlp_bias`; rope scaling `linear` or `llama3`.
//!
//! Defaults follow transformers' config classes (5.24): a dense Qwen3's `head_dim` defaults to
//! 128, every other family's to `hidden_size / num_attention_heads`, `num_key_value_heads` to
//! `num_attention_heads`. Rope theta and scaling are read from `rope_theta` / `rope_scaling`
//! (4.x layout) or `rope_parameters` (5.x).

use crate::error::{PolicyError, Result};
use serde_json::{Map, Value, json};
use std::path::Path;

/// Which of the implemented architectures a config describes; see the module doc for what
/// each changes in the decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Qwen3 and, with [`Config::moe`], Qwen3-MoE.
    Qwen3,
    /// Qwen2 and Qwen2.5.
    Qwen2,
    /// Llama 2/3 and models of its layout (SmolLM2).
    Llama,
}

impl Family {
    /// `architectures[0]` and `model_type` of a config of this family.
    pub fn names(self, moe: bool) -> (&'static str, &'static str) {
        match (self, moe) {
            (Family::Qwen3, false) => (ARCHITECTURE, MODEL_TYPE),
            (Family::Qwen3, true) => (MOE_ARCHITECTURE, MOE_MODEL_TYPE),
            (Family::Qwen2, _) => (QWEN2_ARCHITECTURE, QWEN2_MODEL_TYPE),
            (Family::Llama, _) => (LLAMA_ARCHITECTURE, LLAMA_MODEL_TYPE),
        }
    }
}

/// How rotary frequencies are rescaled for longer contexts (transformers'
/// `ROPE_INIT_FUNCTIONS`). Only the types that leave attention's scale alone are implemented;
/// `yarn`, `dynamic` and `longrope` are refused by name.
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    Default,
    /// Every frequency divided by `factor`.
    Linear {
        factor: f64,
    },
    /// Llama 3.1's piecewise rule: wavelengths longer than
    /// `original_max_position_embeddings / low_freq_factor` are divided by `factor`, shorter
    /// than `.. / high_freq_factor` kept, and those between interpolated smoothly.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: f64,
    },
}

impl RopeScaling {
    /// The inverse frequencies after scaling; `inv_freq` are the unscaled ones.
    pub fn apply(&self, inv_freq: &[f64]) -> Vec<f64> {
        match *self {
            RopeScaling::Default => inv_freq.to_vec(),
            RopeScaling::Linear { factor } => inv_freq.iter().map(|f| f / factor).collect(),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor: low,
                high_freq_factor: high,
                original_max_position_embeddings: old,
            } => inv_freq
                .iter()
                .map(|&f| {
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    if wavelen > old / low {
                        f / factor
                    } else if wavelen < old / high {
                        f
                    } else {
                        let smooth = (old / wavelen - low) / (high - low);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                })
                .collect(),
        }
    }

    fn to_json(&self, theta: f64) -> Value {
        match *self {
            RopeScaling::Default => json!({"rope_type": "default", "rope_theta": theta}),
            RopeScaling::Linear { factor } => {
                json!({"rope_type": "linear", "factor": factor, "rope_theta": theta})
            }
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => json!({
                "rope_type": "llama3",
                "factor": factor,
                "low_freq_factor": low_freq_factor,
                "high_freq_factor": high_freq_factor,
                "original_max_position_embeddings": original_max_position_embeddings as i64,
                "rope_theta": theta,
            }),
        }
    }
}

/// The dense architecture.
pub const ARCHITECTURE: &str = "Qwen3ForCausalLM";
/// `model_type` of Qwen3 configs.
pub const MODEL_TYPE: &str = "qwen3";
/// The mixture-of-experts architecture (Qwen3-30B-A3B, Qwen3-235B-A22B).
pub const MOE_ARCHITECTURE: &str = "Qwen3MoeForCausalLM";
/// `model_type` of Qwen3-MoE configs.
pub const MOE_MODEL_TYPE: &str = "qwen3_moe";
/// Qwen2 and Qwen2.5.
pub const QWEN2_ARCHITECTURE: &str = "Qwen2ForCausalLM";
/// `model_type` of Qwen2 configs.
pub const QWEN2_MODEL_TYPE: &str = "qwen2";
/// Llama and its look-alikes (SmolLM2).
pub const LLAMA_ARCHITECTURE: &str = "LlamaForCausalLM";
/// `model_type` of Llama configs.
pub const LLAMA_MODEL_TYPE: &str = "llama";

/// (architecture, model_type, family, moe) of every implemented architecture.
const ARCHITECTURES: &[(&str, &str, Family, bool)] = &[
    (ARCHITECTURE, MODEL_TYPE, Family::Qwen3, false),
    (MOE_ARCHITECTURE, MOE_MODEL_TYPE, Family::Qwen3, true),
    (QWEN2_ARCHITECTURE, QWEN2_MODEL_TYPE, Family::Qwen2, false),
    (LLAMA_ARCHITECTURE, LLAMA_MODEL_TYPE, Family::Llama, false),
];

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

/// The hyper-parameters of a model, mirroring `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Which architecture; decides q/k norm and which projections carry biases.
    pub family: Family,
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
    pub rope_scaling: RopeScaling,
    pub tie_word_embeddings: bool,
    /// Qwen3 and Llama: q/k/v/o carry biases. Ignored by Qwen2 (q/k/v always, o never).
    pub attention_bias: bool,
    /// Llama: gate/up/down carry biases.
    pub mlp_bias: bool,
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
    "mlp_bias",
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
        let (family, is_moe) = check_architecture(&map)?;
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
        // transformers' per-class defaults (5.24).
        let per_head = hidden_size / num_attention_heads;
        let (default_head_dim, default_intermediate, default_context) = match (family, &moe) {
            (Family::Qwen3, Some(_)) => (per_head, Some(6144), 32768),
            (Family::Qwen3, None) => (128, None, 32768),
            (Family::Qwen2, _) => (per_head, Some(22016), 32768),
            (Family::Llama, _) => (per_head, Some(11008), 2048),
        };
        let (rope_theta, rope_scaling) = rope(&map)?;
        let cfg = Config {
            family,
            vocab_size: f.positive("vocab_size", None)?,
            hidden_size,
            intermediate_size: f.positive("intermediate_size", default_intermediate)?,
            num_hidden_layers: f.positive("num_hidden_layers", None)?,
            num_attention_heads,
            num_key_value_heads: f.positive("num_key_value_heads", Some(num_attention_heads))?,
            head_dim: f.positive("head_dim", Some(default_head_dim.max(1)))?,
            max_position_embeddings: f
                .positive("max_position_embeddings", Some(default_context))?,
            rms_norm_eps: f.float("rms_norm_eps", Some(1e-6))?,
            rope_theta,
            rope_scaling,
            tie_word_embeddings: f.bool("tie_word_embeddings", false)?,
            attention_bias: f.bool("attention_bias", false)?,
            mlp_bias: f.bool("mlp_bias", false)?,
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

    /// Queries and keys pass a per-head RMSNorm (`q_norm`, `k_norm`): Qwen3 only.
    pub fn qk_norm(&self) -> bool {
        self.family == Family::Qwen3
    }

    /// q/k/v projections carry biases.
    pub fn qkv_bias(&self) -> bool {
        match self.family {
            Family::Qwen2 => true,
            Family::Qwen3 | Family::Llama => self.attention_bias,
        }
    }

    /// The output projection carries a bias.
    pub fn o_bias(&self) -> bool {
        match self.family {
            Family::Qwen2 => false,
            Family::Qwen3 | Family::Llama => self.attention_bias,
        }
    }

    /// The dense MLP's projections carry biases (Llama's `mlp_bias`).
    pub fn mlp_bias(&self) -> bool {
        self.family == Family::Llama && self.mlp_bias
    }

    /// Rotary inverse frequencies `1 / theta^(2i / head_dim)`, rescaled per
    /// [`Config::rope_scaling`].
    pub fn inv_freq(&self) -> Vec<f64> {
        let d = self.head_dim as f64;
        let base: Vec<f64> = (0..self.head_dim / 2)
            .map(|i| 1.0 / self.rope_theta.powf(2.0 * i as f64 / d))
            .collect();
        self.rope_scaling.apply(&base)
    }

    /// Checks relations between fields that a well-formed config satisfies.
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
        if self.moe.is_some() && self.family != Family::Qwen3 {
            return Err(PolicyError::field(
                "model_type",
                "experts are implemented for Qwen3-MoE only",
            ));
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
        let (architecture, model_type) = self.family.names(self.moe.is_some());
        let rope = self.rope_scaling.to_json(self.rope_theta);
        // 4.x reads scaling from `rope_scaling` (null = none), 5.x from `rope_parameters`.
        let rope_scaling = match self.rope_scaling {
            RopeScaling::Default => Value::Null,
            _ => rope.clone(),
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
            "rope_parameters": rope,
            "rope_scaling": rope_scaling,
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": self.attention_bias,
            "mlp_bias": self.mlp_bias,
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
        let embed = self.vocab_size * self.hidden_size;
        let head = if self.tie_word_embeddings { 0 } else { embed };
        let layers: i64 = (0..self.num_hidden_layers)
            .map(|l| self.layer_parameters(l))
            .sum();
        embed + layers + self.hidden_size + head
    }

    /// Parameters of decoder layer `l` (attention, its norms and the layer's feed-forward).
    pub fn layer_parameters(&self, l: i64) -> i64 {
        let (h, hd) = (self.hidden_size, self.head_dim);
        let q = self.num_attention_heads * hd;
        let kv = self.num_key_value_heads * hd;
        let bias = if self.qkv_bias() { q + 2 * kv } else { 0 } + if self.o_bias() { h } else { 0 };
        let norms = if self.qk_norm() { 2 * hd } else { 0 };
        let attn = h * q + 2 * h * kv + q * h + bias + norms;
        let i = self.intermediate_size;
        let mlp_bias = if self.mlp_bias() { 2 * i + h } else { 0 };
        let ffn = match &self.moe {
            Some(m) if m.is_sparse(l) => {
                m.num_experts * h + m.num_experts * 3 * h * m.moe_intermediate_size
            }
            _ => 3 * h * i + mlp_bias,
        };
        attn + 2 * h + ffn
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

/// Checks `model_type` and `architectures` name one implemented architecture consistently;
/// returns its family and whether it is Qwen3-MoE.
fn check_architecture(map: &Map<String, Value>) -> Result<(Family, bool)> {
    let model_type = map.get("model_type").and_then(Value::as_str);
    let by_type = match model_type {
        None => None,
        Some(t) => match ARCHITECTURES.iter().find(|a| a.1 == t) {
            Some(&(_, _, family, moe)) => Some((family, moe)),
            None => {
                return Err(PolicyError::UnsupportedArchitecture {
                    found: format!("model_type \"{t}\""),
                });
            }
        },
    };
    let by_name = match map.get("architectures") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => {
            let names: Vec<&str> = a.iter().filter_map(Value::as_str).collect();
            let known: Vec<_> = ARCHITECTURES
                .iter()
                .filter(|arch| names.contains(&arch.0))
                .collect();
            match known.as_slice() {
                [(_, _, family, moe)] => Some((*family, *moe, names)),
                _ => {
                    return Err(PolicyError::UnsupportedArchitecture {
                        found: format!("{names:?}"),
                    });
                }
            }
        }
        Some(other) => {
            return Err(PolicyError::field(
                "architectures",
                format!("expected a list of names, found {other}"),
            ));
        }
    };
    match (by_type, by_name) {
        (Some(t), Some((family, moe, names))) if t != (family, moe) => Err(PolicyError::field(
            "architectures",
            format!("{names:?} contradicts model_type {model_type:?}"),
        )),
        (_, Some((family, moe, _))) => Ok((family, moe)),
        (Some(t), None) => Ok(t),
        (None, None) => Err(PolicyError::field(
            "model_type",
            "missing (and no `architectures` either)",
        )),
    }
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

/// Theta and scaling, from the 5.x `rope_parameters` or the 4.x `rope_theta` + `rope_scaling`
/// (whose type key is `rope_type`, or `type` in older files).
fn rope(map: &Map<String, Value>) -> Result<(f64, RopeScaling)> {
    let mut theta = None;
    let mut scaling = RopeScaling::Default;
    for key in ["rope_scaling", "rope_parameters"] {
        let Some(Value::Object(p)) = map.get(key) else {
            if let Some(v) = map.get(key).filter(|v| !v.is_null()) {
                return Err(PolicyError::field(
                    key,
                    format!("expected an object, found {v}"),
                ));
            }
            continue;
        };
        if let Some(v) = p.get("rope_theta") {
            theta = Some(v.as_f64().ok_or_else(|| {
                PolicyError::field(&format!("{key}.rope_theta"), "expected a number")
            })?);
        }
        let kind = p.get("rope_type").or_else(|| p.get("type"));
        let num = |name: &str, default: Option<f64>| -> Result<f64> {
            let field = format!("{key}.{name}");
            match (p.get(name), default) {
                (Some(v), _) => match v.as_f64() {
                    Some(x) if x > 0.0 => Ok(x),
                    _ => Err(PolicyError::field(
                        &field,
                        format!("expected a number > 0, found {v}"),
                    )),
                },
                (None, Some(d)) => Ok(d),
                (None, None) => Err(PolicyError::field(&field, "missing")),
            }
        };
        scaling = match kind.and_then(Value::as_str) {
            None | Some("default") => scaling,
            Some("linear") => RopeScaling::Linear {
                factor: num("factor", None)?,
            },
            Some("llama3") => {
                let (low, high) = (
                    num("low_freq_factor", None)?,
                    num("high_freq_factor", None)?,
                );
                if high <= low {
                    return Err(PolicyError::field(
                        &format!("{key}.high_freq_factor"),
                        format!("{high} is not above low_freq_factor {low}"),
                    ));
                }
                RopeScaling::Llama3 {
                    factor: num("factor", None)?,
                    low_freq_factor: low,
                    high_freq_factor: high,
                    original_max_position_embeddings: num(
                        "original_max_position_embeddings",
                        None,
                    )?,
                }
            }
            Some(k) => return Err(unsupported(&format!("{key}.rope_type"), k)),
        };
    }
    match theta {
        Some(t) => Ok((t, scaling)),
        // transformers' RotaryEmbeddingConfigMixin.default_theta.
        None => Ok((Fields(map).float("rope_theta", Some(10_000.0))?, scaling)),
    }
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
    fn other_architectures_and_rope_scaling_types_are_refused() {
        let mut m = base();
        m.insert("architectures".into(), json!(["MistralForCausalLM"]));
        m.insert("model_type".into(), json!("mistral"));
        assert!(err_text(m).contains("unsupported architecture model_type \"mistral\""));
        let mut m = base();
        m.insert("architectures".into(), json!(["Qwen2ForCausalLM"]));
        assert!(err_text(m).contains("contradicts model_type"));
        let mut m = base();
        m.insert(
            "rope_scaling".into(),
            json!({"rope_type": "yarn", "factor": 4.0}),
        );
        assert!(err_text(m).contains("rope_scaling.rope_type` = yarn"));
        let mut m = base();
        m.insert(
            "rope_scaling".into(),
            json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0}),
        );
        assert!(err_text(m).contains("`rope_scaling.high_freq_factor`: missing"));
    }

    fn llama() -> Map<String, Value> {
        let mut m = base();
        m.insert("architectures".into(), json!([LLAMA_ARCHITECTURE]));
        m.insert("model_type".into(), json!(LLAMA_MODEL_TYPE));
        m.remove("head_dim");
        m
    }

    #[test]
    fn llama_and_qwen2_read_their_own_defaults_and_round_trip() -> Result<()> {
        let c = Config::from_map(llama())?;
        assert_eq!(c.family, Family::Llama);
        assert_eq!(c.head_dim, 8, "hidden / heads, not Qwen3's 128");
        assert!(!c.qk_norm() && !c.qkv_bias() && !c.o_bias() && !c.mlp_bias());
        let Value::Object(round) = c.to_json("float32") else {
            panic!("not an object")
        };
        assert_eq!(round["architectures"], json!([LLAMA_ARCHITECTURE]));
        assert_eq!(Config::from_map(round)?, c);

        let mut m = llama();
        m.insert("architectures".into(), json!([QWEN2_ARCHITECTURE]));
        m.insert("model_type".into(), json!(QWEN2_MODEL_TYPE));
        let q2 = Config::from_map(m)?;
        assert!(q2.qkv_bias() && !q2.o_bias() && !q2.qk_norm());
        // Hand count of the biases: q 32, k and v 16 each, per layer.
        let mut no_bias = q2.clone();
        no_bias.family = Family::Llama;
        assert_eq!(q2.num_parameters() - no_bias.num_parameters(), 2 * 64);
        Ok(())
    }

    #[test]
    fn llama3_rope_scaling_matches_transformers_rule_and_round_trips() -> Result<()> {
        let mut m = llama();
        m.remove("rope_theta");
        m.insert("head_dim".into(), json!(64));
        m.insert(
            "rope_parameters".into(),
            json!({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192}),
        );
        let c = Config::from_map(m)?;
        let f = c.inv_freq();
        let base: Vec<f64> = (0..32)
            .map(|i| 500000f64.powf(-(2.0 * i as f64) / 64.0))
            .collect();
        // High frequencies (wavelength < 8192 / 4) unchanged, low (> 8192) divided by 32.
        assert_eq!(f[0], base[0]);
        assert!((f[31] - base[31] / 32.0).abs() < 1e-18);
        // One in between is interpolated: strictly between the two.
        let mid = (0..32)
            .find(|&i| {
                let w = 2.0 * std::f64::consts::PI / base[i];
                w > 2048.0 && w < 8192.0
            })
            .unwrap_or_else(|| panic!("no medium frequency"));
        assert!(f[mid] < base[mid] && f[mid] > base[mid] / 32.0);
        let Value::Object(round) = c.to_json("float32") else {
            panic!("not an object")
        };
        assert_eq!(Config::from_map(round)?, c);
        Ok(())
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
