//! The end-to-end test harness: the real `sandboxd` and `sandboxctl`
//! binaries, and a runner fixture that records what it was given.
//!
//! Each test starts its own [`TestDaemon`] in its own directory, so tests
//! run in parallel. Build the workspace's binaries first:
//! `cargo build --workspace --bins && cargo test --workspace`.

pub mod binaries;
pub mod commands;
pub mod daemon;
pub mod executables;
pub mod noise;
pub mod procs;
pub mod raw;
pub mod runner;

pub use daemon::{
    make_test_dir, run_with_timeout, Options, ScratchDir, TestDaemon, UidClaims, KEEP_DIRS_ENV,
    NOBODY, RUNNER_UIDS,
};
pub use procs::{eventually, pid_is_gone, start_time, wait_until};
pub use raw::{context, read_response, request_frame, sandbox_env, tarpc_client};
pub use runner::{
    dir_entries, read_grandchild_pid, read_runner_pid, request_attack, runner_env, start_session,
    wait_for_runner, RUNNER_TIMEOUT,
};
pub mod activation;
pub mod derived_image;
pub mod docker_image;
pub mod docker_leftovers;
pub mod events;
pub mod k8s;
pub mod k8s_standin;
pub mod logs;
