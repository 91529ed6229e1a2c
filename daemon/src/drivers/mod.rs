//! The isolation tiers behind [`crate::provisioner::Driver`].

pub mod local_process;
