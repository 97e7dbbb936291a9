//! A BERT-family sentence encoder (Hugging Face `BertModel` / `RobertaModel`) loaded from a local
//! checkpoint directory: what the Vendi score's `sentence` kernel embeds environment code with.
//!
//! The Vendi authors score text diversity with embeddings from unsup-SimCSE RoBERTa-base, taking
//! the pooler output (`vendi_score/text_utils.py`, `get_embeddings`: tokenised with truncation at
//! 512 tokens, special tokens added, `pooler_output` when the model has a pooler, else the first
//! token's hidden state). This module computes the same: post-LayerNorm encoder layers
//! (multi-head self-attention with biases, GELU feed-forward), RoBERTa's positions counted from
//! `pad_token_id + 1`, BERT's from 0, and the pooler (`tanh(dense(h[CLS]))`) when the checkpoint
//! has `pooler.dense.*`. Matches transformers 5.24 to 1e-4 in float32 (`tests/it/encoder.rs`).
//!
//! The directory holds `config.json`, safetensors weights (a `bert.` / `roberta.` prefix, as task
//! models save, is accepted) and `tokenizer.json`. PyTorch `.bin` checkpoints are not read:
//! `AutoModel.from_pretrained(p).save_pretrained(out)` converts them.

use crate::checkpoint;
use crate::error::{PolicyError, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};
use tch::{Device, Kind, Tensor, nn};
use tokenizers::{TruncationParams, TruncationStrategy};

/// Tokens per text at most (the Vendi code's `max_length=512`).
pub const MAX_TOKENS: usize = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Bert,
    Roberta,
}

#[derive(Debug)]
struct Dense {
    weight: Tensor,
    bias: Tensor,
}

impl Dense {
    fn new(vs: nn::Path<'_>, inp: i64, out: i64) -> Result<Self> {
        Ok(Self {
            weight: vs.f_zeros("weight", &[out, inp])?,
            bias: vs.f_zeros("bias", &[out])?,
        })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.weight, Some(&self.bias))
    }
}

#[derive(Debug)]
struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

impl LayerNorm {
    fn new(vs: nn::Path<'_>, size: i64, eps: f64) -> Result<Self> {
        Ok(Self {
            weight: vs.f_ones("weight", &[size])?,
            bias: vs.f_zeros("bias", &[size])?,
            eps,
        })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let n = self.weight.size();
        x.layer_norm(
            n.as_slice(),
            Some(&self.weight),
            Some(&self.bias),
            self.eps,
            false,
        )
    }
}

#[derive(Debug)]
struct Layer {
    query: Dense,
    key: Dense,
    value: Dense,
    attn_out: Dense,
    attn_norm: LayerNorm,
    intermediate: Dense,
    output: Dense,
    out_norm: LayerNorm,
}

/// The encoder and its tokenizer.
#[derive(Debug)]
pub struct Encoder {
    _vs: nn::VarStore,
    tokenizer: tokenizers::Tokenizer,
    family: Family,
    word: Tensor,
    position: Tensor,
    token_type: Tensor,
    embed_norm: LayerNorm,
    layers: Vec<Layer>,
    pooler: Option<Dense>,
    heads: i64,
    gelu: &'static str,
    pad_token_id: i64,
    dir: PathBuf,
}

fn int(cfg: &Value, field: &str, default: Option<i64>) -> Result<i64> {
    match (cfg.get(field).filter(|v| !v.is_null()), default) {
        (None, Some(d)) => Ok(d),
        (None, None) => Err(PolicyError::field(field, "missing")),
        (Some(v), _) => v.as_i64().filter(|n| *n >= 0).ok_or_else(|| {
            PolicyError::field(field, format!("expected an integer >= 0, found {v}"))
        }),
    }
}

impl Encoder {
    /// Loads `dir` (see the module doc) onto `device`, in float32.
    pub fn load(dir: &Path, device: Device) -> Result<Self> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|source| PolicyError::MissingConfig {
            path: path.clone(),
            source,
        })?;
        let cfg: Value = serde_json::from_str(&text).map_err(|e| PolicyError::MalformedConfig {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let family = match cfg.get("model_type").and_then(Value::as_str) {
            Some("bert") => Family::Bert,
            Some("roberta") => Family::Roberta,
            other => {
                return Err(PolicyError::UnsupportedArchitecture {
                    found: format!(
                        "model_type {other:?} for a sentence encoder (expected \"bert\" or \"roberta\")"
                    ),
                });
            }
        };
        let gelu = match cfg
            .get("hidden_act")
            .and_then(Value::as_str)
            .unwrap_or("gelu")
        {
            "gelu" => "none",
            "gelu_new" | "gelu_pytorch_tanh" => "tanh",
            other => {
                return Err(PolicyError::UnsupportedConfig {
                    field: "hidden_act".into(),
                    value: other.into(),
                });
            }
        };
        let h = int(&cfg, "hidden_size", None)?;
        let heads = int(&cfg, "num_attention_heads", None)?;
        if heads == 0 || h % heads != 0 {
            return Err(PolicyError::field(
                "num_attention_heads",
                format!("{heads} does not divide hidden_size = {h}"),
            ));
        }
        let inter = int(&cfg, "intermediate_size", None)?;
        let eps = cfg
            .get("layer_norm_eps")
            .and_then(Value::as_f64)
            .unwrap_or(1e-12);
        let pad_token_id = int(&cfg, "pad_token_id", Some(0))?;
        let names = checkpoint::tensor_names(dir)?;
        let prefix = ["bert.", "roberta."]
            .into_iter()
            .find(|p| names.contains(&format!("{p}embeddings.word_embeddings.weight")))
            .unwrap_or("");
        let has_pooler = names.contains(&format!("{prefix}pooler.dense.weight"));

        let vs = nn::VarStore::new(device);
        let root = vs.root();
        let e = &root / "embeddings";
        let vocab = int(&cfg, "vocab_size", None)?;
        let positions = int(&cfg, "max_position_embeddings", Some(512))?;
        let types = int(&cfg, "type_vocab_size", Some(2))?.max(1);
        let word = (&e / "word_embeddings").f_zeros("weight", &[vocab, h])?;
        let position = (&e / "position_embeddings").f_zeros("weight", &[positions, h])?;
        let token_type = (&e / "token_type_embeddings").f_zeros("weight", &[types, h])?;
        let embed_norm = LayerNorm::new(&e / "LayerNorm", h, eps)?;
        let layers = (0..int(&cfg, "num_hidden_layers", None)?)
            .map(|i| {
                let l = &root / "encoder" / "layer" / i;
                let a = &l / "attention";
                Ok(Layer {
                    query: Dense::new(&a / "self" / "query", h, h)?,
                    key: Dense::new(&a / "self" / "key", h, h)?,
                    value: Dense::new(&a / "self" / "value", h, h)?,
                    attn_out: Dense::new(&a / "output" / "dense", h, h)?,
                    attn_norm: LayerNorm::new(&a / "output" / "LayerNorm", h, eps)?,
                    intermediate: Dense::new(&l / "intermediate" / "dense", h, inter)?,
                    output: Dense::new(&l / "output" / "dense", inter, h)?,
                    out_norm: LayerNorm::new(&l / "output" / "LayerNorm", h, eps)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let pooler = has_pooler
            .then(|| Dense::new(&root / "pooler" / "dense", h, h))
            .transpose()?;
        checkpoint::load_weights_renamed(&vs, dir, |n| n.strip_prefix(prefix).unwrap_or(n))?;

        let tok_path = dir.join("tokenizer.json");
        let mut tokenizer = tokenizers::Tokenizer::from_file(&tok_path)
            .map_err(|e| PolicyError::InvalidInput(format!("{}: {e}", tok_path.display())))?;
        let offset = if family == Family::Roberta {
            pad_token_id as usize + 1
        } else {
            0
        };
        let max_length = MAX_TOKENS.min((positions as usize).saturating_sub(offset));
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length,
                strategy: TruncationStrategy::LongestFirst,
                ..Default::default()
            }))
            .map_err(|e| PolicyError::InvalidInput(format!("{}: {e}", tok_path.display())))?;
        Ok(Self {
            _vs: vs,
            tokenizer,
            family,
            word,
            position,
            token_type,
            embed_norm,
            layers,
            pooler,
            heads,
            gelu,
            pad_token_id,
            dir: dir.to_path_buf(),
        })
    }

    /// `pooler` (the checkpoint's pooler, as the Vendi code uses) or `cls` (first token).
    pub fn pooling(&self) -> &'static str {
        if self.pooler.is_some() {
            "pooler"
        } else {
            "cls"
        }
    }

    /// Where the encoder was loaded from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Token ids of `text` as the encoder sees them: special tokens added, truncated to
    /// [`MAX_TOKENS`] (or the model's positions).
    pub fn encode(&self, text: &str) -> Result<Vec<i64>> {
        let enc = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| PolicyError::InvalidInput(format!("tokenizing for the encoder: {e}")))?;
        Ok(enc.get_ids().iter().map(|&i| i64::from(i)).collect())
    }

    /// One pooled vector per text (each text alone, so no padding enters the attention).
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        texts
            .iter()
            .map(|t| {
                let ids = self.encode(t)?;
                if ids.is_empty() {
                    return Err(PolicyError::InvalidInput(
                        "the encoder's tokenizer produced no tokens".into(),
                    ));
                }
                let v = tch::no_grad(|| self.forward(&ids))?;
                Ok(Vec::<f32>::try_from(v.to_device(Device::Cpu))?)
            })
            .collect()
    }

    fn forward(&self, ids: &[i64]) -> Result<Tensor> {
        let dev = self.word.device();
        let n = ids.len() as i64;
        let vocab = self.word.size()[0];
        if let Some(bad) = ids.iter().find(|&&i| i < 0 || i >= vocab) {
            return Err(PolicyError::InvalidInput(format!(
                "token id {bad} outside the encoder's vocabulary of {vocab}"
            )));
        }
        let ids = Tensor::from_slice(ids).to_device(dev);
        let start = match self.family {
            Family::Bert => 0,
            Family::Roberta => self.pad_token_id + 1,
        };
        let pos = Tensor::arange_start(start, start + n, (Kind::Int64, dev));
        let types = Tensor::zeros([n], (Kind::Int64, dev));
        let x = Tensor::embedding(&self.word, &ids, -1, false, false)
            + Tensor::embedding(&self.position, &pos, -1, false, false)
            + Tensor::embedding(&self.token_type, &types, -1, false, false);
        let mut x = self.embed_norm.forward(&x).unsqueeze(0);
        let h = x.size()[2];
        let hd = h / self.heads;
        for l in &self.layers {
            let split = |t: Tensor| t.view([1, n, self.heads, hd]).transpose(1, 2);
            let q = split(l.query.forward(&x));
            let k = split(l.key.forward(&x));
            let v = split(l.value.forward(&x));
            let a = Tensor::scaled_dot_product_attention(
                &q,
                &k,
                &v,
                None::<&Tensor>,
                0.0,
                false,
                None,
                false,
            );
            let a = a.transpose(1, 2).reshape([1, n, h]);
            x = l.attn_norm.forward(&(l.attn_out.forward(&a) + &x));
            let i = l.intermediate.forward(&x).gelu(self.gelu);
            x = l.out_norm.forward(&(l.output.forward(&i) + &x));
        }
        let cls = x.select(1, 0).squeeze_dim(0);
        Ok(match &self.pooler {
            Some(p) => p.forward(&cls).tanh(),
            None => cls,
        })
    }
}
