//! The docker tier's host-wide objects, against the real engine: the
//! default instance's network and the egress tables on instances'
//! bridges, which these tests make, remove, and look at after a SIGKILL.
//!
//! A docker daemon that starts serving sweeps the network and table of
//! every instance no live daemon holds, the default one's included; so
//! these tests are a binary of their own (no other docker test's daemon
//! starts meanwhile: test binaries run one after another) and run one at
//! a time, each holding [`ONE_AT_A_TIME`] (CI once saw a SIGKILLed
//! instance's table or network already gone, taken by a concurrent test's
//! daemon).

mod docker_egress;
mod docker_stop_cleanup;

/// Held by each test here for its whole run.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
