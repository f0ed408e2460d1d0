//! Compiles bpf/sockmap.bpf.c with clang (`-target bpf`) into OUT_DIR. Without
//! clang (or with WEFT_NO_BPF set) an empty object is written instead and
//! weft reports at run time that sockmap forwarding was not built.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("sockmap.bpf.o");
    println!("cargo:rerun-if-changed=bpf/sockmap.bpf.c");
    println!("cargo:rerun-if-env-changed=WEFT_NO_BPF");
    println!("cargo:rerun-if-env-changed=CLANG");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let built = std::env::var_os("WEFT_NO_BPF").is_none()
        && Command::new(&clang)
            .args([
                "-O2",
                "-g",
                "-target",
                "bpf",
                "-mcpu=v3",
                "-I/usr/include/x86_64-linux-gnu",
                "-c",
                "bpf/sockmap.bpf.c",
                "-o",
            ])
            .arg(&out)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
    if !built {
        println!("cargo:warning=clang -target bpf failed or is missing: weft is built without sockmap forwarding (apt-get install clang)");
        std::fs::write(&out, b"").expect("write empty BPF object");
        if std::env::var_os("WEFT_NO_BPF").is_none() {
            // Without these, the missing clang would be remembered until the
            // C source changes: installing clang adds an entry to a PATH
            // directory, which changes that directory's mtime.
            println!("cargo:rerun-if-env-changed=PATH");
            for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
                if dir.is_absolute() && dir.is_dir() {
                    println!("cargo:rerun-if-changed={}", dir.display());
                }
            }
        }
    }
}
