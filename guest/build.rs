//! Build script: links the guest kit as a static, freestanding ELF with our own linker script.

fn main() {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR not set");
    let script = format!("{manifest_dir}/link.ld");

    println!("cargo:rerun-if-changed={script}");
    println!("cargo:rerun-if-changed=build.rs");

    let args = [
        "-nostartfiles".to_string(),
        "-nostdlib".to_string(),
        "-static".to_string(),
        // Keeps the link correct even if the relocation-model=static rustflag is lost
        // (e.g. when an outer cargo passes an empty CARGO_ENCODED_RUSTFLAGS).
        "-no-pie".to_string(),
        "-Wl,--build-id=none".to_string(),
        "-Wl,--no-dynamic-linker".to_string(),
        format!("-Wl,-T,{script}"),
    ];
    for arg in args {
        println!("cargo:rustc-link-arg-bins={arg}");
    }
}
