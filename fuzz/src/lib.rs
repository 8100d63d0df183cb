//! What the virtio fuzz targets share, and their bodies: `fuzz_targets/virtio_*.rs` only call
//! [`virtio_mmio::run`], [`virtio_blk::run`] and [`virtio_balloon::run`], so the seed tests
//! (`cargo +nightly test` here) run an input exactly as the fuzzer does.
//!
//! Every input decodes: a field past the end of the input reads as zero.

pub mod guest;
pub mod input;
pub mod virtio_balloon;
pub mod virtio_blk;
pub mod virtio_mmio;

#[cfg(test)]
mod seeds;

pub use input::Input;
