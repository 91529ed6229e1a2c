//! The daemon itself: its own life and its start-up sweep, systemd,
//! metrics, the event stream and fenced calls, the socket under abuse and
//! hostile input, its allow-lists, running out of file descriptors, the
//! init binary and the lifeline, the egress posture, and the Node package
//! against it.
//!
//! One test binary for the group (each former test file a module, its
//! tests named `<module>::<test>`): one link instead of one per file.

mod access_and_secrets;
mod commands_hostile;
mod daemon_lifecycle;
mod egress;
mod events;
mod fd_limit;
mod fencing;
mod hostile_input;
mod init_binary;
mod init_lifeline;
mod metrics;
mod node_provisioner;
mod socket_abuse;
mod systemd;
