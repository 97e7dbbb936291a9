//! The policy, and the only crate that knows libtorch: a Qwen3-compatible transformer
//! ([`qwen3`]) with Hugging Face checkpoints ([`checkpoint`], [`policy`]) and tokenizers
//! ([`tokenizer`]), batched sampling with a KV cache ([`sample`]) and chat templates
//! ([`chat`]), GRPO ([`grpo`]) and supervised fine-tuning ([`sft`]) sharing [`train`].

pub mod chat;
pub mod checkpoint;
pub mod error;
pub mod grpo;
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
