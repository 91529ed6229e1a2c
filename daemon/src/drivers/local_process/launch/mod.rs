//! A runner's start and end: the clone that starts it ([`clone_exec`]),
//! what it starts with ([`runner_plan`], from the settings in [`spawn`]), the threads it is started
//! from ([`spawner`]) and that reap it ([`child_exits`]), and how its
//! start time is read back ([`proc_stat`]); process descriptors for the
//! moments one exit is awaited ([`pidfd`]).

pub mod child_exits;
pub mod child_step;
pub mod clone_exec;
pub mod fd_band;
pub mod holder;
pub mod in_view;
pub mod proc_stat;
pub mod runner_plan;
pub mod spawn;
pub mod spawner;
