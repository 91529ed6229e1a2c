//! The process tier at work, end to end against the real daemon and real
//! runner processes: the state machine and its limits, commands, files,
//! logs, the prepared sandboxes and parked runners, what a runner is told
//! and given, its view as listed, and real toolchains at home in it.
//!
//! One test binary for the group (each former test file a module, its
//! tests named `<module>::<test>`): one link instead of one per file.

mod commands;
mod deprovision_deadline;
mod deprovision_teardown;
mod disk_limit;
mod files;
mod files_pipelined;
mod files_tar;
mod honest_limits;
mod lifecycle;
mod lifecycle_limits;
mod live_figures;
mod logs;
mod logs_follow_ends;
mod output_cap;
mod parked_runners;
mod prepared_sandboxes;
mod runner_env;
mod toolchains_at_home;
mod view_listing;
mod workspaces;
