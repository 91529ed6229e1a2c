//! Finding the binaries under test.
//!
//! Integration tests get `CARGO_BIN_EXE_*` only for their own package's
//! binaries, so `sandboxd` and `sandboxctl` are looked up next to the test
//! executable: `target/<profile>/deps/<test>` → `target/<profile>/`.

use std::path::PathBuf;

fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let deps = exe.parent().expect("the test executable's directory");
    if deps.file_name().is_some_and(|name| name == "deps") {
        deps.parent().expect("target/<profile>").to_path_buf()
    } else {
        deps.to_path_buf()
    }
}

fn find(name: &str, package: &str) -> PathBuf {
    let path = profile_dir().join(name);
    assert!(
        path.is_file(),
        "{} not found: the end-to-end tests run the real binaries of the workspace; \
         run `cargo build --workspace --bins` first (package {package}), then `cargo test --workspace`",
        path.display()
    );
    path
}

/// The daemon binary (package `sandboxd`).
pub fn sandboxd() -> PathBuf {
    find("sandboxd", "sandboxd")
}

/// The admin CLI (package `sandboxd-client`).
pub fn sandboxctl() -> PathBuf {
    find("sandboxctl", "sandboxd-client")
}

/// The example runner shipped with the daemon (package `sandboxd`).
pub fn example_runner() -> PathBuf {
    find("sandboxd-example-runner", "sandboxd")
}

/// This package's runner fixture (cargo builds it for the integration tests).
pub fn runner_fixture() -> PathBuf {
    match option_env!("CARGO_BIN_EXE_runner-fixture") {
        Some(path) => PathBuf::from(path),
        None => find("runner-fixture", "sandboxd-tests"),
    }
}

/// This package's socket holder, which opens connections and holds them.
pub fn socket_holder() -> PathBuf {
    match option_env!("CARGO_BIN_EXE_socket-holder") {
        Some(path) => PathBuf::from(path),
        None => find("socket-holder", "sandboxd-tests"),
    }
}
