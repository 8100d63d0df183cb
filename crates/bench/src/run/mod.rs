//! Running each family's experiments: memvisor or QEMU as child processes through the
//! harness, `memvisor host` for the host experiments.
