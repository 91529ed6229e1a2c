//! The docker tier against the real engine on this machine: ensure and
//! repair, recovery, logs and limits, commands, files, events, gVisor,
//! hardening, instances, pause and idleness, and the network between
//! containers. (The tests that remove or watch the host-wide network and
//! tables are in `docker_host`.)
//!
//! One test binary for the group (each former test file a module, its
//! tests named `<module>::<test>`): one link instead of one per file.

mod docker_commands;
mod docker_ensure;
mod docker_events;
mod docker_files;
mod docker_gvisor;
mod docker_hardening;
mod docker_instances;
mod docker_lifecycle;
mod docker_logs;
mod docker_network;
mod docker_recovery;
mod docker_support;
