//! The isolation tiers behind [`crate::provisioner::Driver`].

pub mod docker;
pub mod key_lock;
pub mod local_process;
