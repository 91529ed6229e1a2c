//! The kubernetes tier, against the in-process stand-in API server or a
//! real cluster (`SANDBOXD_TEST_KUBECONFIG`): lifecycle, commands, files,
//! the event stream, runtime classes; and `deploy/`'s manifests.
//!
//! One test binary for the group (each former test file a module, its
//! tests named `<module>::<test>`): one link instead of one per file.

mod deploy;
mod kubernetes_commands;
mod kubernetes_describe;
mod kubernetes_drift;
mod kubernetes_events;
mod kubernetes_files;
mod kubernetes_health;
mod kubernetes_lifecycle;
mod kubernetes_network_policy;
mod kubernetes_no_kubelet;
mod kubernetes_objects;
mod kubernetes_runtime_class;
mod kubernetes_support;
