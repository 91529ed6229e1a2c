//! `sandboxd-init`: what a sandbox runs before its runner, exec'd by the
//! daemon (see the `sandboxd-init` crate). It links that crate and std
//! only, so that its exec is cheap.

fn main() -> std::process::ExitCode {
    sandboxd_init::main()
}
