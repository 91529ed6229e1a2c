//! Shell completions, generated from the clap definitions
//! (`clap_complete`), so they never drift from the real
//! flags (the man pages are in `man`). `systemd/install.sh` writes them where shells and `man` look.

use clap::CommandFactory;

use crate::cli::Cli;

/// The completion script for `shell`.
pub fn completions(shell: clap_complete::Shell) -> String {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "sandboxctl", &mut script);
    String::from_utf8_lossy(&script).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_name_the_real_subcommands() {
        let bash = completions(clap_complete::Shell::Bash);
        assert!(
            bash.contains("sandboxctl") && bash.contains("deprovision"),
            "{bash}"
        );
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
