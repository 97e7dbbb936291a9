//! The policy, and the only crate that knows libtorch.
//!
//! - [`qwen3`]: a transformer matching Hugging Face's `Qwen3ForCausalLM`, built from its
//!   `config.json`; [`checkpoint`] and [`policy::Policy`] load and save checkpoints in the Hugging
//!   Face layout (safetensors, shards, `tokenizer.json` through [`tokenizer`]).
//! - [`sample`]: batched sampling with a KV cache; [`engine`]: continuous batching over a
//!   paged KV cache that keeps sequences between turns and stores shared prefixes once (the rollout engine the worker
//!   drives); [`chat`]: the three roles' templates; [`chat_template`]: a checkpoint's own
//!   Jinja chat template.
//! - [`grpo`]: the GRPO step (its module doc states the exact variant); [`sft`]: supervised
//!   fine-tuning; [`train`]: what they share; [`optim`]: AdamW with a saveable state.
//! - [`embed`]: mean-pooled hidden states (for diversity metrics); [`kernels`]: which CPU
//!   kernels libtorch computes with, the part of a trained-weights cache key inputs do not name.
//! - [`gguf`]: imports a GGUF file (llama.cpp's format; llama and qwen2 models) as a Hugging
//!   Face checkpoint directory (`spade model import`).
//! - [`preset`]: the tiny model for tests and the CPU demo, and random-init Qwen3 shapes;
//!   [`bench`]: one timed training step of such a shape (`spade model bench`);
//!   [`rollout_bench`]: one step's generation on the sampler and on the engine
//!   (`spade model bench-rollout`).
//!
//! Precision: CPU runs in float32. On CUDA a policy's weights default to bf16
//! ([`default_kind`]) and training is mixed precision: forward and backward run in the bf16
//! weights, while [`optim::AdamW`] keeps float32 master weights and float32 moments, applies
//! the update to the masters and rounds them into the bf16 weights after every step, so the
//! sampler (which reads the same weights) samples from the updated policy (the recipe of
//! PyTorch AMP with bf16 plus a float32-master AdamW, as Megatron trains).

pub mod bench;
pub mod chat;
pub mod chat_template;
pub mod checkpoint;
pub mod device;
pub mod embed;
pub mod encoder;
pub mod engine;
pub mod error;
pub mod gguf;
mod gguf_error;
pub mod grpo;
pub mod kernels;
pub mod memplan;
pub mod optim;
pub use optim::GradientSync;
pub mod policy;
pub mod preset;
pub mod qwen3;
pub mod rollout_bench;
pub mod sample;
pub mod sft;
pub mod tokenizer;
pub mod train;
pub mod zero;

/// libtorch's random generator is global to the process: the unit tests that seed it and draw
/// weights from it take turns under this lock, or one test's draws land between another's
/// seed and its draws (a seed's weights then differ between two calls).
#[cfg(test)]
pub(crate) fn seeded_draws() -> std::sync::MutexGuard<'static, ()> {
    static RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());
    RNG.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub use error::{PolicyError, Result};
pub use policy::{NamedWeight, Policy, default_kind};
/// Where tensors live; re-exported so that crates above this one name devices without
/// depending on libtorch themselves.
pub use tch::Device;

/// CUDA when libtorch sees a GPU, else CPU.
pub fn default_device() -> Device {
    Device::cuda_if_available()
}

/// A device by name: `auto` ([`default_device`]), `cpu`, `cuda` (the first GPU) or `cuda:N`;
/// a GPU this binary or node cannot give is an error ([`device::resolve`]).
pub fn device_named(name: &str) -> Result<Device> {
    device::resolve(name).map_err(|e| PolicyError::InvalidInput(e.0))
}
