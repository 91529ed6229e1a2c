//! `sandboxctl man-page`: the man pages, `sandboxctl(1)` and one page per
//! subcommand (`sandboxctl-ensure(1)`, `sandboxctl-connect-create(1)`, …),
//! generated from the clap definitions with `clap_mangen`, so the synopsis
//! and the options can never drift from what the binary parses.
//! `clap_mangen` names a subcommand's page `sandboxctl-<sub>(1)` in the
//! SUBCOMMANDS list of its parent, so every such reference has a page
//! here. What clap does not know — exit status, environment, files — is
//! written below, once. `systemd/install.sh` installs them all.

use clap::Args;

use crate::failure::Failure;

/// Print a man page, in roff (systemd/install.sh installs them all).
#[derive(Debug, Args)]
#[command(hide = true)]
pub struct ManPageArgs {
    /// The page: `sandboxctl` (the default) or `sandboxctl-<subcommand>`.
    pub name: Option<String>,
    /// Print the file name of every page instead, one a line.
    #[arg(long, conflicts_with = "name")]
    pub list: bool,
}

impl ManPageArgs {
    /// The page asked for, or the list of them, from `cli` (the whole
    /// command line, which the caller builds: it is above this file).
    pub fn answer(&self, cli: clap::Command) -> Result<String, Failure> {
        if self.list {
            let pages = pages(cli).map_err(Failure::Output)?;
            return Ok(pages
                .iter()
                .map(|page| format!("{}\n", page.file_name))
                .collect());
        }
        page(cli, self.name.as_deref().unwrap_or("sandboxctl")).map_err(Failure::Usage)
    }
}

/// The version every page's header carries.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Every page's exit codes.
const EXIT_STATUS: &str = "0 on success; 1 when the call failed (the message is on stderr: the \
daemon refused it, could not be reached, or the sandbox is not there); 2 on a usage error (a \
bad flag, id or value, named on stderr). status --check exits 3 when the daemon is degraded and \
4 when it is unhealthy; egress check exits 1 when any address is refused. exec and attach exit with \
the command's own code: its exit code, 128+N when signal N ended it, 124 when its --timeout did \
(and 1 or 2 as above when sandboxctl itself failed).";

/// The variables sandboxctl reads.
const ENVIRONMENT: [(&str, &str); 4] = [
    (
        "SANDBOXD_SOCKET",
        "the daemon's socket when --socket is not given",
    ),
    (
        "XDG_RUNTIME_DIR",
        "a non-root caller's own daemon is at $XDG_RUNTIME_DIR/stigmer/sandboxd.sock; when that \
         does not exist the system socket is used",
    ),
    (
        "COLUMNS",
        "the terminal width the tables of list, workspaces and top fit (else 80)",
    ),
    (
        "the variable named by --token-env",
        "ensure and connect create read the runner's token from it, never from the command line",
    ),
];

/// The files sandboxctl uses.
const FILES: [(&str, &str); 2] = [
    (
        "/run/stigmer/sandboxd.sock",
        "the system daemon's socket (root, and members of its socket group)",
    ),
    (
        "$XDG_RUNTIME_DIR/stigmer/sandboxd.sock",
        "a per-user daemon's socket",
    ),
];

/// One page: its file name (`sandboxctl-ensure.1`) and its roff text.
struct Page {
    file_name: String,
    roff: String,
}

/// Every page, the top one first, then each visible subcommand's
/// (depth first), as `clap_mangen::generate_to` would lay them out.
fn pages(cli: clap::Command) -> Result<Vec<Page>, String> {
    let mut top = cli.disable_help_subcommand(true);
    top.build();
    let mut pages = Vec::new();
    collect(&top, &mut pages)?;
    Ok(pages)
}

/// The page named `name` (`sandboxctl`, `sandboxctl-ensure`, or either
/// with `.1`).
fn page(cli: clap::Command, name: &str) -> Result<String, String> {
    let wanted = name.strip_suffix(".1").unwrap_or(name);
    let pages = pages(cli)?;
    let names: Vec<&str> = pages
        .iter()
        .map(|page| page.file_name.trim_end_matches(".1"))
        .collect();
    match pages
        .iter()
        .find(|page| page.file_name == format!("{wanted}.1"))
    {
        Some(page) => Ok(page.roff.clone()),
        None => Err(format!(
            "no man page '{name}'; the pages are: {}",
            names.join(", ")
        )),
    }
}

fn collect(command: &clap::Command, pages: &mut Vec<Page>) -> Result<(), String> {
    pages.push(render(command)?);
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        collect(sub, pages)?;
    }
    Ok(())
}

fn render(command: &clap::Command) -> Result<Page, String> {
    let man = clap_mangen::Man::new(command.clone())
        .source(format!("sandboxctl {VERSION}"))
        .manual("sandboxd");
    let file_name = man.get_filename();
    let fail = |error: std::io::Error| format!("cannot render {file_name}: {error}");
    // The whole page as clap_mangen lays it out (one preamble, NAME,
    // SYNOPSIS, DESCRIPTION, OPTIONS, SUBCOMMANDS), then what clap cannot know.
    let mut out = Vec::new();
    man.render(&mut out).map_err(fail)?;
    let mut roff = String::from_utf8_lossy(&out).into_owned();
    roff.push_str(&section("EXIT STATUS"));
    roff.push_str(&paragraph(EXIT_STATUS));
    roff.push_str(&section("ENVIRONMENT"));
    roff.push_str(&items(&ENVIRONMENT));
    roff.push_str(&section("FILES"));
    roff.push_str(&items(&FILES));
    roff.push_str(&section("VERSION"));
    roff.push_str(&paragraph(&format!("sandboxctl {VERSION}")));
    roff.push_str(&section("SEE ALSO"));
    roff.push_str(&paragraph(if command.get_name() == "sandboxctl" {
        "sandboxd(8)"
    } else {
        "sandboxctl(1), sandboxd(8)"
    }));
    Ok(Page {
        file_name: file_name.clone(),
        roff,
    })
}

/// A `.SH` heading.
fn section(title: &str) -> String {
    format!(".SH \"{title}\"\n")
}

/// Plain text as one roff paragraph: backslashes escaped, dashes made
/// minus signs (so an option copied from the page works), and a leading
/// `.` or `'` (a roff request) neutralised.
fn paragraph(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    let line = match escaped.chars().next() {
        Some('.' | '\'') => format!("\\&{escaped}"),
        _ => escaped,
    };
    format!("{line}\n")
}

/// `.TP` items: the term in bold, its meaning below.
fn items(entries: &[(&str, &str)]) -> String {
    entries
        .iter()
        .map(|(term, meaning)| {
            format!(
                ".TP\n\\fB{}\\fR\n{}",
                term.replace('\\', "\\e").replace('-', "\\-"),
                paragraph(meaning)
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli() -> clap::Command {
        crate::cli::full_command()
    }

    /// Every `sandboxctl-…(1)` a page names (clap_mangen's SUBCOMMANDS
    /// lists), as page names.
    fn references(roff: &str) -> Vec<String> {
        roff.replace("\\-", "-")
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter_map(|word| word.strip_suffix("(1)").map(str::to_string))
            .map(|name| name.trim_start_matches("\\fB").to_string())
            .filter(|name| name.starts_with("sandboxctl"))
            .collect()
    }

    #[test]
    fn every_page_referenced_exists_and_has_every_section() {
        let pages = pages(cli()).unwrap();
        let names: Vec<String> = pages
            .iter()
            .map(|page| page.file_name.trim_end_matches(".1").to_string())
            .collect();
        assert!(
            names.contains(&"sandboxctl-ensure".to_string()),
            "{names:?}"
        );
        assert!(
            names.contains(&"sandboxctl-connect-create".to_string()),
            "{names:?}"
        );
        assert!(
            !names.iter().any(|name| name.contains("man-page")),
            "{names:?}"
        );
        for page in &pages {
            let title = page.file_name.trim_end_matches(".1");
            assert!(
                page.roff
                    .lines()
                    .any(|line| line.starts_with(&format!(".TH {title} 1 "))
                        && line.contains(&format!("\"sandboxctl {VERSION}\""))),
                "{}: no version in the header:\n{}",
                page.file_name,
                page.roff
            );
            for heading in [
                "NAME",
                "SYNOPSIS",
                "DESCRIPTION",
                "OPTIONS",
                "EXIT STATUS",
                "ENVIRONMENT",
                "FILES",
            ] {
                assert!(
                    page.roff.contains(&format!(".SH {heading}\n"))
                        || page.roff.contains(&format!(".SH \"{heading}\"\n")),
                    "{} has no {heading} section:\n{}",
                    page.file_name,
                    page.roff
                );
            }
            for reference in references(&page.roff) {
                assert!(
                    names.contains(&reference),
                    "{} names {reference}(1), which has no page",
                    page.file_name
                );
            }
        }
        assert!(references(&pages[0].roff).contains(&"sandboxctl-ensure".to_string()));
    }

    #[test]
    fn one_page_is_found_by_name_and_a_wrong_name_lists_them() {
        assert!(page(cli(), "sandboxctl-ensure")
            .unwrap()
            .contains(".TH sandboxctl-ensure"));
        assert!(page(cli(), "sandboxctl-ensure.1").is_ok());
        let error = page(cli(), "sandboxctl-frobnicate").unwrap_err();
        assert!(
            error.contains("sandboxctl-frobnicate") && error.contains("sandboxctl-ensure"),
            "{error}"
        );
    }

    #[test]
    fn roff_requests_in_text_are_neutralised() {
        assert_eq!(paragraph(".SH x \\ y-z"), "\\&.SH x \\e y\\-z\n");
    }
}
