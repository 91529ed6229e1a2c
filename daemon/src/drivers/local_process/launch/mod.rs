//! A runner's start and end, in the order a start runs through them: the
//! threads it is started from ([`spawner`]; a command's give up what they
//! can once, [`command_threads`]); its settings, workspace,
//! output and environment ([`spawn`], what it starts with as one value in
//! [`runner_plan`]); its start in a private view ([`in_view`]) or not;
//! the clone that starts it ([`clone_exec`], the kernel's side). Then the
//! threads that reap it ([`child_exits`]), how its start time is read
//! back ([`proc_stat`]), and what holds a prepared view open ([`holder`]).
//! Nothing here imports the driver that calls it.

pub mod child_exits;
pub mod child_step;
pub mod clone_exec;
pub mod command_threads;
pub mod fd_band;
pub mod holder;
pub mod in_view;
pub mod proc_stat;
pub mod runner_plan;
pub mod spawn;
pub mod spawner;
