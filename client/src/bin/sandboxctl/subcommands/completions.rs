//! `sandboxctl completions`: a shell completion script, generated from the
//! clap definitions (`clap_complete`), so it never drifts from the real
//! flags (the man pages are in `man_page`). `systemd/install.sh` writes
//! them where shells look.

use clap::Args;

/// Print a shell completion script (systemd/install.sh installs them).
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    pub shell: clap_complete::Shell,
}

impl CompletionsArgs {
    /// The completion script of `cli` (the whole command line, which the
    /// caller builds: it is above this file) for the shell; no daemon needed.
    pub fn script(&self, mut cli: clap::Command) -> String {
        let mut script = Vec::new();
        clap_complete::generate(self.shell, &mut cli, "sandboxctl", &mut script);
        String::from_utf8_lossy(&script).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_name_the_real_subcommands() {
        let bash = CompletionsArgs {
            shell: clap_complete::Shell::Bash,
        }
        .script(crate::cli::full_command());
        assert!(
            bash.contains("sandboxctl") && bash.contains("deprovision"),
            "{bash}"
        );
    }
}
