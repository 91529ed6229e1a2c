//! Every relative link of the manual (README.md and docs/**/*.md) leads
//! somewhere: the file or folder it names exists, and an anchor it names
//! (`page.md#a-heading`, `#a-heading`) is a heading of that page. The
//! manual is split over pages that link each other; a section moved or
//! renamed must not leave a link behind pointing at nothing.
//!
//! Links are Markdown's `[text](target)` outside code blocks; `http:`,
//! `https:` and `mailto:` targets are not followed. Anchors are GitHub's:
//! the heading lowercased, everything but letters, digits, `-`, `_` and
//! spaces dropped, spaces turned into `-`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use regex::Regex;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf()
}

/// README.md and every `.md` file under docs/, in a stable order.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut found = vec![root.join("README.md")];
    let mut pending = vec![root.join("docs")];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("read a docs folder") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The lines of a page outside its fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            lines.push(line);
        }
    }
    lines
}

fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors a page's headings give.
fn anchors(text: &str) -> BTreeSet<String> {
    let heading = Regex::new(r"^#{1,6} (.+)$").unwrap();
    prose(text)
        .into_iter()
        .filter_map(|line| heading.captures(line))
        .map(|found| slug(&found[1]))
        .collect()
}

/// Each link of `text` (a page at `page`) that leads nowhere, described.
fn broken_links(page: &Path, text: &str) -> Vec<String> {
    let link = Regex::new(r"\]\(([^)\s]*)\)").unwrap();
    let dir = page.parent().unwrap();
    let mut broken = Vec::new();
    for line in prose(text) {
        for found in link.captures_iter(line) {
            let target = &found[1];
            if ["http:", "https:", "mailto:"]
                .iter()
                .any(|scheme| target.starts_with(scheme))
            {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target, None),
            };
            let linked = if file.is_empty() {
                text.to_string()
            } else {
                let path = dir.join(file);
                if !path.exists() {
                    broken.push(format!("{target}: no file {}", path.display()));
                    continue;
                }
                std::fs::read_to_string(&path).unwrap_or_default()
            };
            let Some(anchor) = anchor else { continue };
            if !anchors(&linked).contains(anchor) {
                broken.push(format!("{target}: no heading #{anchor} there"));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_of_the_manual_leads_somewhere() {
    let root = root();
    let pages = pages(&root);
    assert!(pages.len() > 5, "too few pages found: {pages:?}");
    let mut broken = Vec::new();
    let mut links = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("read a page");
        links += text.matches("](").count();
        for problem in broken_links(page, &text) {
            let shown = page.strip_prefix(&root).unwrap().display();
            broken.push(format!("{shown}: {problem}"));
        }
    }
    assert!(links > 20, "too few links found: {links}");
    assert!(
        broken.is_empty(),
        "links that lead nowhere:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_check_finds_a_missing_file_and_a_missing_heading() {
    let page = root().join("docs").join("sample.md");
    let text = "# A page\n\n[fine](#a-page) [gone](nowhere.md) \
                [file there, heading not](../README.md#no-such-heading) \
                [web](https://example.com/x)\n\n```\n[in code](nowhere.md)\n```\n";
    let broken = broken_links(&page, text);
    assert_eq!(broken.len(), 2, "{broken:#?}");
    assert!(broken[0].starts_with("nowhere.md: no file"), "{broken:#?}");
    assert!(
        broken[1].contains("no heading #no-such-heading"),
        "{broken:#?}"
    );
}

#[test]
fn anchors_are_githubs() {
    assert_eq!(
        slug("The TypeScript control plane (`clients/node`)"),
        "the-typescript-control-plane-clientsnode"
    );
    assert_eq!(
        slug("The sandbox's init binary"),
        "the-sandboxs-init-binary"
    );
    assert_eq!(
        slug("Commands in a sandbox: `exec`, `commands`, `attach`, `kill`"),
        "commands-in-a-sandbox-exec-commands-attach-kill"
    );
}
