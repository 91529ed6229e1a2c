//! Stamps the crate with a digest of its own sources (`SOURCE_DIGEST`), so
//! that the daemon can tell a `sandboxd-init` binary built from these very
//! sources from one of another build (see `STAMP` in `lib.rs`).

use std::hash::{DefaultHasher, Hasher};
use std::path::Path;

fn main() {
    let mut files: Vec<_> = std::fs::read_dir("src")
        .expect("src/ of sandboxd-init")
        .map(|entry| entry.expect("an entry of src/").path())
        .collect();
    files.push(Path::new("Cargo.toml").to_path_buf());
    files.sort();
    // SipHash with fixed keys: the same bytes give the same digest with the
    // same compiler, which builds both ends of one build. It is an identity,
    // not a defence (the file's owner and mode are what the daemon trusts).
    let mut hasher = DefaultHasher::new();
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
        hasher.write(file.to_string_lossy().as_bytes());
        hasher.write(&std::fs::read(file).expect("a source file of sandboxd-init"));
    }
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rustc-env=SOURCE_DIGEST={:016x}", hasher.finish());
}
