//! What a process-tier sandbox cannot do, tried from inside real runners:
//! its cgroups, private view, kernel filters and keyrings, its own uid,
//! disk and network walls, its ptys, and a sandbox or a foreign runner
//! calling a daemon.
//!
//! One test binary for the group (each former test file a module, its
//! tests named `<module>::<test>`): one link instead of one per file.

mod containment;
mod disk_holes;
mod egress_addresses;
mod foreign_peers;
mod gvisor;
mod gvisor_commands;
mod handover_links;
mod kernel_filters;
mod keyring_reuse;
mod prepared_views;
mod private_network;
mod private_ptys;
mod private_view;
mod sandbox_network;
mod sandbox_peers;
mod sandbox_uids;
mod uid_claims;
