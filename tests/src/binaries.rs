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

/// What the daemon execs as a sandbox's init, view holder and parked
/// runner, next to it (package `sandboxd`).
pub fn sandboxd_init() -> PathBuf {
    find("sandboxd-init", "sandboxd")
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

/// The Node package's native addon (package `sandboxd-node`, a cdylib):
/// `cargo build --workspace --bins --lib` puts it next to the binaries.
/// Refused when older than a source it is built from, so a test never runs
/// a stale addon against a changed client.
pub fn node_addon() -> PathBuf {
    let path = profile_dir().join("libsandboxd_node.so");
    assert!(
        path.is_file(),
        "{} not found: the Node package's tests load the native addon; run \
         `cargo build --workspace --bins --lib` first (package sandboxd-node), then `cargo test --workspace`",
        path.display()
    );
    let built = modified(&path);
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // The library's sources, not sandboxctl's (`client/src/bin`): the
    // addon does not link those, so a change there never relinks it.
    let sandboxctl = workspace.join("client/src/bin");
    for dir in ["clients/node/src", "client/src", "protocol/src"] {
        let sources = rust_sources(&workspace.join(dir));
        for source in sources
            .iter()
            .filter(|source| !source.starts_with(&sandboxctl))
        {
            assert!(
                modified(source) <= built,
                "{} is older than {}: rebuild the addon with `cargo build -p sandboxd-node`",
                path.display(),
                source.display()
            );
        }
    }
    path
}

fn modified(path: &std::path::Path) -> std::time::SystemTime {
    std::fs::metadata(path)
        .and_then(|meta| meta.modified())
        .unwrap_or_else(|error| panic!("stat {}: {error}", path.display()))
}

/// Every `.rs` file under `dir`.
fn rust_sources(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                found.push(path);
            }
        }
    }
    found
}

/// The Node package's directory (`clients/node`).
pub fn node_package_dir() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("clients")
        .join("node")
}
