//! [`Policy`]: a Qwen3 model with its variables, device and tokenizer, loaded from and saved to
//! a Hugging Face checkpoint directory.

use crate::chat_template::ChatTemplate;
use crate::checkpoint::{self, DEFAULT_SHARD_BYTES, write_json};
use crate::error::{PolicyError, Result};
use crate::qwen3::{Config, Qwen3, WeightInit};
use crate::tokenizer::{END_OF_TEXT, IM_END, Tokenizer};
use serde_json::{Value, json};
use std::path::Path;
use tch::{Device, Kind, Tensor, nn::VarStore};

/// The weights' kind for a device: bfloat16 on CUDA (what Qwen3 checkpoints are trained and
/// shipped in; training keeps float32 masters, see [`crate::optim`]), float32 on CPU (bf16
/// matmuls are slow there and the reference tests are fp32).
pub fn default_kind(device: Device) -> Kind {
    if device.is_cuda() {
        Kind::BFloat16
    } else {
        Kind::Float
    }
}

/// A model ready to run: variables, architecture and (usually) a tokenizer.
#[derive(Debug)]
pub struct Policy {
    vs: VarStore,
    model: Qwen3,
    tokenizer: Option<Tokenizer>,
    /// The checkpoint's own chat template (ChatML when it has none).
    chat: ChatTemplate,
    /// Text after every generation prompt's assistant header ([`Policy::set_thinking`]).
    gen_suffix: String,
    /// JSON files of the source checkpoint this crate does not interpret, written back on save.
    side_files: Vec<(String, Value)>,
}

/// Files copied through a load/save round trip unchanged.
const SIDE_FILES: &[&str] = &["tokenizer_config.json", "generation_config.json"];

impl Policy {
    /// A new model with weights from `init` (use a seed with `tch::manual_seed` beforehand).
    pub fn new(
        cfg: &Config,
        device: Device,
        kind: Kind,
        init: WeightInit,
        tokenizer: Option<Tokenizer>,
    ) -> Result<Self> {
        cfg.validate()?;
        if let Some(t) = &tokenizer {
            check_vocab(cfg, t)?;
        }
        let mut vs = VarStore::new(device);
        vs.set_kind(kind);
        let mut model = Qwen3::new(&vs.root(), cfg, init)?;
        if let Some(t) = &tokenizer {
            model.set_usable_vocab(t.vocab_size() as i64);
        }
        Ok(Self {
            vs,
            model,
            tokenizer,
            chat: ChatTemplate::chatml(),
            gen_suffix: String::new(),
            side_files: vec![],
        })
    }

    /// Thinking on or off for a hybrid-thinking checkpoint (Qwen3's `enable_thinking`): off,
    /// every generation prompt ends with what its template adds for `enable_thinking = false`
    /// ([`ChatTemplate::no_thinking_suffix`]: the empty `<think>` block); on, or a template
    /// without the switch, with nothing.
    pub fn set_thinking(&mut self, on: bool) -> Result<()> {
        self.gen_suffix = if on {
            String::new()
        } else {
            self.chat.no_thinking_suffix()?.unwrap_or_default()
        };
        Ok(())
    }

    /// What follows the assistant header of every generation prompt (see
    /// [`Policy::set_thinking`]); empty by default.
    pub fn generation_suffix(&self) -> &str {
        &self.gen_suffix
    }

    /// Loads `dir` onto `device` in [`default_kind`].
    pub fn load(dir: &Path, device: Device) -> Result<Self> {
        Self::load_as(dir, device, default_kind(device))
    }

    /// Loads `dir` onto `device` with weights of `kind`. `tokenizer.json` is optional.
    pub fn load_as(dir: &Path, device: Device, kind: Kind) -> Result<Self> {
        let cfg = Config::from_dir(dir)?;
        let tok_path = dir.join("tokenizer.json");
        let tokenizer = if tok_path.exists() {
            Some(Tokenizer::from_file(&tok_path)?)
        } else {
            None
        };
        let mut p = Self::new(&cfg, device, kind, WeightInit::Zeros, tokenizer)?;
        p.chat = ChatTemplate::from_dir(dir)?;
        checkpoint::load_weights(&p.vs, dir)?;
        for name in SIDE_FILES {
            let path = dir.join(name);
            if let Ok(text) = std::fs::read_to_string(&path)
                && let Ok(v) = serde_json::from_str(&text)
            {
                p.side_files.push((name.to_string(), v));
            }
        }
        Ok(p)
    }

    /// Writes `config.json`, the weights (as `kind`, sharded above 5 GB) and the tokenizer, so
    /// that `AutoModelForCausalLM.from_pretrained(dir)` and `AutoTokenizer` load them.
    pub fn save_as(&self, dir: &Path, kind: Kind) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| PolicyError::io(dir, e))?;
        let dtype = torch_dtype(kind);
        write_json(&dir.join("config.json"), &self.config().to_json(dtype))?;
        checkpoint::save_weights(&self.vs, dir, kind, DEFAULT_SHARD_BYTES)?;
        if let Some(t) = &self.tokenizer {
            t.save(&dir.join("tokenizer.json"))?;
        }
        // Written beside tokenizer_config.json too: transformers 4.5x+ reads this file first.
        if let Some(src) = self.chat.source() {
            let path = dir.join("chat_template.jinja");
            std::fs::write(&path, src).map_err(|e| PolicyError::io(&path, e))?;
        }
        let mut wrote_tok_config = false;
        for (name, v) in &self.side_files {
            write_json(&dir.join(name), v)?;
            wrote_tok_config |= name == "tokenizer_config.json";
        }
        if let (Some(t), false) = (&self.tokenizer, wrote_tok_config) {
            let special = |s: &'static str| t.token_id(s).map(|_| s);
            let tok_config = json!({
                "tokenizer_class": "PreTrainedTokenizerFast",
                "eos_token": special(IM_END),
                "pad_token": special(END_OF_TEXT),
                "bos_token": null,
                "model_max_length": self.config().max_position_embeddings,
            });
            write_json(&dir.join("tokenizer_config.json"), &tok_config)?;
        }
        Ok(())
    }

    /// [`Policy::save`], with a tied model written untied: `tie_word_embeddings: false` and the
    /// input embedding copied to `lm_head.weight`. The same function; for readers that cannot
    /// reload tied weights in place (vLLM 0.32's in-place reload restores a tied head's old
    /// values, `vllm/model_executor/model_loader/reload/layerwise.py`).
    pub fn save_untied(&self, dir: &Path) -> Result<()> {
        self.save(dir)?;
        if !self.config().tie_word_embeddings {
            return Ok(());
        }
        let mut cfg = self.config().clone();
        cfg.tie_word_embeddings = false;
        write_json(
            &dir.join("config.json"),
            &cfg.to_json(torch_dtype(self.kind())),
        )?;
        checkpoint::save_weights_with(
            &self.vs,
            dir,
            self.kind(),
            DEFAULT_SHARD_BYTES,
            &[TIED_HEAD],
        )
    }

    /// The weights as [`Policy::save_untied`] writes them, in name order, where they live (no
    /// copy): what a reader that loads tensor by tensor receives (vLLM's weight transfer).
    pub fn untied_weights(&self) -> Vec<NamedWeight> {
        let mut vars: std::collections::BTreeMap<String, Tensor> =
            self.vs.variables().into_iter().collect();
        let (head, embedding) = TIED_HEAD;
        if self.config().tie_word_embeddings
            && let Some(e) = vars.get(embedding)
        {
            let e = e.shallow_clone();
            vars.insert(head.to_string(), e);
        }
        vars.into_iter()
            .map(|(name, t)| NamedWeight {
                name,
                tensor: t.detach().contiguous(),
            })
            .collect()
    }

    /// [`Policy::save_as`] in bfloat16: half a float32 model's disk and load time, and the
    /// kind a CUDA run trains in anyway (`spade model init --bf16`).
    pub fn save_bf16(&self, dir: &Path) -> Result<()> {
        self.save_as(dir, Kind::BFloat16)
    }

    /// [`Policy::save_as`] in the weights' own kind.
    pub fn save(&self, dir: &Path) -> Result<()> {
        self.save_as(dir, self.kind())
    }

    /// The transformer.
    pub fn model(&self) -> &Qwen3 {
        &self.model
    }

    /// Its configuration.
    pub fn config(&self) -> &Config {
        self.model.config()
    }

    /// The variables (for optimizers and copies).
    pub fn var_store(&self) -> &VarStore {
        &self.vs
    }

    /// Mutable variables (e.g. to freeze a reference copy).
    pub fn var_store_mut(&mut self) -> &mut VarStore {
        &mut self.vs
    }

    /// The tokenizer, if the checkpoint has one.
    pub fn tokenizer(&self) -> Option<&Tokenizer> {
        self.tokenizer.as_ref()
    }

    /// The checkpoint's own chat template (ChatML when it has none).
    pub fn chat_template(&self) -> &ChatTemplate {
        &self.chat
    }

    /// The tokenizer, or an error naming what needs it.
    pub fn require_tokenizer(&self) -> Result<&Tokenizer> {
        self.tokenizer.as_ref().ok_or_else(|| {
            PolicyError::Tokenizer("this checkpoint has no tokenizer.json".to_string())
        })
    }

    /// Where the weights live.
    pub fn device(&self) -> Device {
        self.vs.device()
    }

    /// The weights' kind.
    pub fn kind(&self) -> Kind {
        self.vs.kind()
    }

    /// A copy with the same weights, frozen (no gradients): the reference for a KL penalty.
    pub fn frozen_copy(&self) -> Result<Self> {
        let mut p = self.copy_to(self.device(), self.kind())?;
        p.vs.freeze();
        Ok(p)
    }

    /// A copy on `device` with weights of `kind` (e.g. a float32 copy for a reference, a bf16
    /// copy to sample with, refreshed by [`Policy::copy_weights_from`]). Training bf16 weights
    /// needs no copy: the optimiser keeps float32 masters itself ([`crate::optim`]).
    pub fn copy_to(&self, device: Device, kind: Kind) -> Result<Self> {
        let mut p = Self::new(
            self.config(),
            device,
            kind,
            WeightInit::Zeros,
            self.tokenizer.clone(),
        )?;
        p.copy_weights_from(self)?;
        p.chat = self.chat.clone();
        p.side_files = self.side_files.clone();
        Ok(p)
    }

    /// Overwrites this policy's weights with `other`'s (same architecture; kinds and devices
    /// may differ and are converted).
    pub fn copy_weights_from(&mut self, other: &Policy) -> Result<()> {
        if self.config() != other.config() {
            return Err(PolicyError::InvalidInput(
                "cannot copy weights between different architectures".into(),
            ));
        }
        Ok(self.vs.copy(&other.vs)?)
    }

    /// A fingerprint of every weight: per variable (in name order) the sum and the sum of
    /// squares in float64, on the weights' device (no host copy of the model). Any update an
    /// optimiser makes changes it; equal fingerprints before and after are how a run shows a
    /// frozen model stayed frozen.
    pub fn weights_fingerprint(&self) -> String {
        let mut vars: Vec<(String, Tensor)> = self.vs.variables().into_iter().collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        let (mut sum, mut squares, mut mixed) = (0.0f64, 0.0f64, 0.0f64);
        tch::no_grad(|| {
            for (i, (_, t)) in vars.iter().enumerate() {
                let d = t.to_kind(Kind::Double);
                let s = d.sum(Kind::Double).double_value(&[]);
                sum += s;
                squares += (&d * &d).sum(Kind::Double).double_value(&[]);
                // Position-weighted, so two weights trading values still show.
                mixed += s * (i + 1) as f64;
            }
        });
        format!("{sum:.17e}/{squares:.17e}/{mixed:.17e}")
    }

    /// The last position's logits (float32) for one sequence of token ids.
    pub fn last_logits(&self, ids: &[i64]) -> Result<Vec<f32>> {
        let t = Tensor::from_slice(ids)
            .to_device(self.device())
            .unsqueeze(0);
        let logits = tch::no_grad(|| -> Result<Tensor> {
            let h = self.model.forward(&t)?;
            Ok(self.model.logits(&h.select(1, -1)))
        })?;
        Ok(Vec::<f32>::try_from(
            logits.squeeze_dim(0).to_device(Device::Cpu),
        )?)
    }
}

fn check_vocab(cfg: &Config, t: &Tokenizer) -> Result<()> {
    // Qwen pads the embedding matrix beyond the tokenizer (151936 rows, 151669 tokens), so only
    // a tokenizer larger than the model is an error.
    if t.vocab_size() as i64 > cfg.vocab_size {
        return Err(PolicyError::field(
            "vocab_size",
            format!(
                "{} is smaller than the tokenizer's {} tokens",
                cfg.vocab_size,
                t.vocab_size()
            ),
        ));
    }
    Ok(())
}

/// One tensor of [`Policy::untied_weights`]: its checkpoint name and the weights themselves.
#[derive(Debug)]
pub struct NamedWeight {
    pub name: String,
    pub tensor: Tensor,
}

impl NamedWeight {
    /// The dtype as torch names it (`torch.<name>`).
    pub fn dtype_name(&self) -> &'static str {
        torch_dtype(self.tensor.kind())
    }

    pub fn shape(&self) -> Vec<i64> {
        self.tensor.size()
    }
}

/// A tied model's head as an untied copy writes it: (its name, the variable it is).
const TIED_HEAD: (&str, &str) = ("lm_head.weight", "model.embed_tokens.weight");

/// `kind` as torch names it (`torch.<name>`, `config.json`'s `torch_dtype`).
fn torch_dtype(kind: Kind) -> &'static str {
    match kind {
        Kind::BFloat16 => "bfloat16",
        Kind::Half => "float16",
        Kind::Double => "float64",
        _ => "float32",
    }
}
