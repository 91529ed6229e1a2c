//! Shell completions and the man page, generated from the clap definitions
//! (`clap_complete`, `clap_mangen`), so they never drift from the real
//! flags. `systemd/install.sh` writes them where shells and `man` look.

use clap::CommandFactory;

use crate::cli::Cli;

/// The completion script for `shell`.
pub fn completions(shell: clap_complete::Shell) -> String {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "sandboxctl", &mut script);
    String::from_utf8_lossy(&script).into_owned()
}

/// `sandboxctl.1`, in roff.
pub fn man_page() -> Result<String, String> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut page)
        .map_err(|error| format!("cannot render the man page: {error}"))?;
    Ok(String::from_utf8_lossy(&page).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_and_the_man_page_name_the_real_subcommands() {
        let bash = completions(clap_complete::Shell::Bash);
        assert!(
            bash.contains("sandboxctl") && bash.contains("deprovision"),
            "{bash}"
        );
        let page = man_page().unwrap();
        assert!(
            page.starts_with(".ie") || page.contains(".TH sandboxctl"),
            "{page}"
        );
        assert!(page.contains("ensure"));
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
