//! The policy, and the only crate that knows libtorch.
//!
//! - [`qwen3`]: a transformer matching Hugging Face's `Qwen3ForCausalLM`, built from its
//!   `config.json`; [`checkpoint`] and [`policy::Policy`] load and save checkpoints in the Hugging
//!   Face layout (safetensors, shards, `tokenizer.json` through [`tokenizer`]).
//! - [`sample`]: batched sampling with a KV cache; [`chat`]: the three roles' templates.
//! - [`grpo`]: the GRPO step (its module doc states the exact variant); [`sft`]: supervised
//!   fine-tuning; [`train`]: what they share; [`optim`]: AdamW with a saveable state.
//! - [`embed`]: mean-pooled hidden states (for diversity metrics).
//! - [`preset`]: the tiny model for tests and the CPU demo.
//!
//! CPU runs in float32; on CUDA, weights default to bf16 for sampling ([`default_kind`]) and
//! training keeps a float32 copy ([`Policy::copy_to`]).

pub mod chat;
pub mod checkpoint;
pub mod embed;
pub mod error;
pub mod grpo;
pub mod optim;
pub mod policy;
pub mod preset;
pub mod qwen3;
pub mod sample;
pub mod sft;
pub mod tokenizer;
pub mod train;

pub use error::{PolicyError, Result};
pub use policy::{Policy, default_kind};
use tch::Device;

/// CUDA when libtorch sees a GPU, else CPU.
pub fn default_device() -> Device {
    Device::cuda_if_available()
}
