//! Checkpoints in the Hugging Face layout: `config.json`, weights in `model.safetensors` (or
//! shards listed by `model.safetensors.index.json`) and `tokenizer.json`.
//!
//! Loading matches every variable of the model by its Hugging Face name, checks its shape and
//! converts its dtype (bf16 checkpoints load into float32 models and back). Tensors the model
//! does not use (e.g. a redundant `lm_head.weight` next to tied embeddings) are skipped, as
//! transformers does. Saving writes `{"format": "pt"}` metadata, which transformers expects.

use crate::error::{PolicyError, Result};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use tch::{Kind, Tensor, nn::VarStore};

/// Name of the single weights file.
pub const WEIGHTS: &str = "model.safetensors";
/// Name of the shard index.
pub const INDEX: &str = "model.safetensors.index.json";
/// transformers' default shard size for `save_pretrained` (4.x: "5GB").
pub const DEFAULT_SHARD_BYTES: usize = 5_000_000_000;

/// The safetensors files of a checkpoint directory, in load order.
pub fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join(INDEX);
    if index.exists() {
        let text = std::fs::read_to_string(&index).map_err(|e| PolicyError::io(&index, e))?;
        let bad = |reason: String| PolicyError::Safetensors {
            path: index.clone(),
            reason,
        };
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let map = v
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| bad("no `weight_map` object".into()))?;
        let mut files = BTreeSet::new();
        for (name, file) in map {
            let file = file
                .as_str()
                .ok_or_else(|| bad(format!("`weight_map.{name}` is not a file name")))?;
            files.insert(file.to_string());
        }
        return Ok(files.into_iter().map(|f| dir.join(f)).collect());
    }
    let single = dir.join(WEIGHTS);
    if single.exists() {
        return Ok(vec![single]);
    }
    Err(PolicyError::NoWeights {
        dir: dir.to_path_buf(),
    })
}

fn dtype_kind(d: Dtype) -> Option<Kind> {
    Some(match d {
        Dtype::F32 => Kind::Float,
        Dtype::BF16 => Kind::BFloat16,
        Dtype::F16 => Kind::Half,
        Dtype::F64 => Kind::Double,
        _ => return None,
    })
}

fn kind_dtype(k: Kind) -> Result<Dtype> {
    Ok(match k {
        Kind::Float => Dtype::F32,
        Kind::BFloat16 => Dtype::BF16,
        Kind::Half => Dtype::F16,
        Kind::Double => Dtype::F64,
        other => {
            return Err(PolicyError::InvalidInput(format!(
                "cannot save weights of kind {other:?}"
            )));
        }
    })
}

/// Copies the checkpoint's weights in `dir` into the variables of `vs`. A tensor with no
/// variable is an error (the config and the weights disagree: loading would drop it), except
/// the rotary tables old Llama checkpoints carry and a tied model's copy of its head.
pub fn load_weights(vs: &VarStore, dir: &Path) -> Result<()> {
    let vars = vs.variables();
    let tied = !vars.contains_key("lm_head.weight");
    for name in tensor_names(dir)? {
        let harmless = name.ends_with(".rotary_emb.inv_freq") || (tied && name == "lm_head.weight");
        if !vars.contains_key(&name) && !harmless {
            return Err(PolicyError::UnexpectedTensor {
                name,
                path: dir.to_path_buf(),
            });
        }
    }
    load_weights_renamed(vs, dir, |n| n)
}

/// [`load_weights`] where a file's tensor `name` fills the variable `rename(name)` (e.g. a
/// checkpoint saved from a task model whose names carry a `bert.` prefix).
pub fn load_weights_renamed(
    vs: &VarStore,
    dir: &Path,
    rename: impl Fn(&str) -> &str,
) -> Result<()> {
    let vars = vs.variables();
    let mut missing: BTreeSet<&String> = vars.keys().collect();
    for file in weight_files(dir)? {
        let bytes = std::fs::read(&file).map_err(|e| PolicyError::io(&file, e))?;
        let st = SafeTensors::deserialize(&bytes).map_err(|e| PolicyError::Safetensors {
            path: file.clone(),
            reason: format!("{e:?}"),
        })?;
        for (name, view) in st.tensors() {
            let name = rename(&name).to_string();
            let Some(var) = vars.get(&name) else { continue };
            let mut var = var.shallow_clone();
            let found: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
            if found != var.size() {
                return Err(PolicyError::ShapeMismatch {
                    name,
                    expected: var.size(),
                    found,
                });
            }
            let kind = dtype_kind(view.dtype()).ok_or_else(|| PolicyError::Safetensors {
                path: file.clone(),
                reason: format!("`{name}` has unsupported dtype {:?}", view.dtype()),
            })?;
            let t = Tensor::f_from_data_size(view.data(), &found, kind)?;
            tch::no_grad(|| var.f_copy_(&t))?;
            missing.remove(&name);
        }
    }
    match missing.into_iter().next() {
        Some(name) => Err(PolicyError::MissingTensor {
            name: name.clone(),
            path: dir.to_path_buf(),
        }),
        None => Ok(()),
    }
}

/// The tensor names of a checkpoint's safetensors files, read from their headers only.
pub fn tensor_names(dir: &Path) -> Result<BTreeSet<String>> {
    use std::io::Read;
    let mut names = BTreeSet::new();
    for file in weight_files(dir)? {
        let bad = |reason: String| PolicyError::Safetensors {
            path: file.clone(),
            reason,
        };
        let mut f = std::fs::File::open(&file).map_err(|e| PolicyError::io(&file, e))?;
        let mut len = [0u8; 8];
        f.read_exact(&mut len).map_err(|e| bad(e.to_string()))?;
        let len = u64::from_le_bytes(len);
        // The format caps headers at 100 MB; a larger length is a corrupt file.
        if len > 100_000_000 {
            return Err(bad(format!("header of {len} bytes")));
        }
        let mut header = vec![0u8; len as usize];
        f.read_exact(&mut header).map_err(|e| bad(e.to_string()))?;
        let v: serde_json::Value =
            serde_json::from_slice(&header).map_err(|e| bad(e.to_string()))?;
        let map = v
            .as_object()
            .ok_or_else(|| bad("header is not an object".into()))?;
        names.extend(map.keys().filter(|k| *k != "__metadata__").cloned());
    }
    Ok(names)
}

/// A tensor copied to host memory for writing: name, shape, bytes.
type HostTensor = (String, Vec<usize>, Vec<u8>);

/// Writes every variable of `vs` as `kind` into `dir`: one `model.safetensors`, or shards of at
/// most `shard_bytes` each plus `model.safetensors.index.json` when the weights are larger.
pub fn save_weights(vs: &VarStore, dir: &Path, kind: Kind, shard_bytes: usize) -> Result<()> {
    save_weights_with(vs, dir, kind, shard_bytes, &[])
}

/// [`save_weights`] plus `aliases`: (new name, existing variable) pairs written as copies.
pub fn save_weights_with(
    vs: &VarStore,
    dir: &Path,
    kind: Kind,
    shard_bytes: usize,
    aliases: &[(&str, &str)],
) -> Result<()> {
    let dtype = kind_dtype(kind)?;
    let mut vars: BTreeMap<String, Tensor> = vs.variables().into_iter().collect();
    for (alias, of) in aliases {
        let t = vars
            .get(*of)
            .ok_or_else(|| {
                PolicyError::InvalidInput(format!("no variable {of} to write as {alias}"))
            })?
            .shallow_clone();
        vars.insert((*alias).to_string(), t);
    }
    // Host copies, grouped greedily into shards in name order.
    let mut shards: Vec<Vec<HostTensor>> = vec![vec![]];
    let mut current = 0usize;
    for (name, var) in vars {
        let t = var
            .detach()
            .to_kind(kind)
            .to_device(tch::Device::Cpu)
            .contiguous();
        let shape: Vec<usize> = t.size().iter().map(|&d| d as usize).collect();
        let numel = t.numel();
        let mut data = vec![0u8; numel * kind.elt_size_in_bytes()];
        t.f_copy_data_u8(&mut data, numel)?;
        if current > 0 && current + data.len() > shard_bytes {
            shards.push(vec![]);
            current = 0;
        }
        current += data.len();
        if let Some(last) = shards.last_mut() {
            last.push((name, shape, data));
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| PolicyError::io(dir, e))?;
    let n = shards.len();
    let metadata = Some(HashMap::from([("format".to_string(), "pt".to_string())]));
    let mut weight_map = serde_json::Map::new();
    let mut total = 0usize;
    for (i, shard) in shards.iter().enumerate() {
        let file = if n == 1 {
            WEIGHTS.to_string()
        } else {
            format!("model-{:05}-of-{n:05}.safetensors", i + 1)
        };
        let path = dir.join(&file);
        let mut views = Vec::with_capacity(shard.len());
        for (name, shape, data) in shard {
            let view = TensorView::new(dtype, shape.clone(), data).map_err(|e| {
                PolicyError::Safetensors {
                    path: path.clone(),
                    reason: format!("{name}: {e:?}"),
                }
            })?;
            views.push((name.as_str(), view));
            total += data.len();
            weight_map.insert(name.clone(), file.clone().into());
        }
        safetensors::tensor::serialize_to_file(views, &metadata, &path).map_err(|e| {
            PolicyError::Safetensors {
                path: path.clone(),
                reason: format!("{e:?}"),
            }
        })?;
    }
    if n == 1 {
        // A stale index from an earlier sharded save would take precedence when loading.
        let stale = dir.join(INDEX);
        if stale.exists() {
            std::fs::remove_file(&stale).map_err(|e| PolicyError::io(&stale, e))?;
        }
    } else {
        let index = serde_json::json!({
            "metadata": {"total_size": total},
            "weight_map": weight_map,
        });
        write_json(&dir.join(INDEX), &index)?;
    }
    Ok(())
}

/// Writes pretty JSON (as transformers does, so diffs of configs stay readable).
pub fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| PolicyError::InvalidInput(format!("{}: {e}", path.display())))?;
    std::fs::write(path, text + "\n").map_err(|e| PolicyError::io(path, e))
}
