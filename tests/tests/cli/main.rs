//! `sandboxctl` and the manual: exit codes, `--json`, commands and files
//! through the CLI, its conventions and honest answers, and the README's
//! and docs' sections run as written, their links followed.
//!
//! One test binary for the group (each former test file a module, its
//! tests named `<module>::<test>`): one link instead of one per file.

mod cli_conventions;
mod doc_links;
mod honest_answers;
mod readme;
mod sandboxctl;
mod sandboxctl_commands;
mod sandboxctl_files;
mod toolchain_home;
mod troubleshooting;
