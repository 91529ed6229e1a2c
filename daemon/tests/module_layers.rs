//! The daemon's modules form layers: no module imports, directly or
//! through others, from a module that imports it back; the drivers' seam
//! (`provisioner`) never imports a tier or the server; and no tier imports
//! another (what two tiers share lives above both, in `drivers/`). A
//! circle makes every file in it a place to read before changing any of
//! them; this test names the circle as soon as one comes back.
//!
//! It reads the source: every `crate::…` and `super::…` path (in `use`
//! trees too) outside comments and the files' test modules, resolved to
//! the deepest module file that exists. A child naming its own parent
//! (`super::Inner`) is how Rust splits one module over files, not a layer
//! crossed, and is not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`drivers::local_process::launch`) → its file.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut found = BTreeMap::new();
    let mut pending = vec![src.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("read the source folder") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                found.insert(module_of(src, &path), path);
            }
        }
    }
    found
}

fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "main" | "lib")
    ) {
        parts.pop();
    }
    parts.join("::")
}

/// The code of a file without comments and without its test modules.
fn code_of(text: &str) -> String {
    let text = text
        .split("\n#[cfg(test)]\nmod ")
        .next()
        .unwrap_or_default();
    text.lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path that starts at `crate::` or `super::` in `code`, `use`
/// trees expanded (`super::{a::B, c}` gives `super::a::B` and `super::c`).
fn paths_in(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        if !code.is_char_boundary(at) {
            at += 1;
            continue;
        }
        let rest = &code[at..];
        let starts = (rest.starts_with("crate::") || rest.starts_with("super::"))
            && (at == 0 || !is_ident(bytes[at - 1]));
        if starts {
            let (tree, used) = use_tree(rest);
            paths.extend(tree);
            at += used.max(1);
        } else {
            at += 1;
        }
    }
    paths
}

fn is_ident(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b':'
}

/// The paths one use tree at the start of `text` names, and its length.
fn use_tree(text: &str) -> (Vec<String>, usize) {
    let head_len = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(text.len());
    let head = text[..head_len].trim_end_matches(':').to_string();
    if !text[head_len..].starts_with('{') || !text[..head_len].ends_with("::") {
        return (vec![head], head_len);
    }
    let mut paths = Vec::new();
    let mut at = head_len + 1;
    loop {
        let rest = &text[at..];
        let skipped = rest.len() - rest.trim_start_matches([' ', '\n', ',', '\t']).len();
        at += skipped;
        if at >= text.len() || text[at..].starts_with('}') {
            return (paths, at + 1);
        }
        let (inner, used) = use_tree(&text[at..]);
        paths.extend(inner.into_iter().map(|path| format!("{head}::{path}")));
        at += used.max(1);
        // ` as Name` and anything else up to the next item of the tree.
        while at < text.len() && !matches!(text.as_bytes()[at], b',' | b'}') {
            at += 1;
        }
    }
}

/// The module `path` (seen from `module`) names: the deepest one that
/// exists, or `None` for a path outside the crate's own modules.
fn resolve(module: &str, path: &str, known: &BTreeMap<String, PathBuf>) -> Option<String> {
    let mut parts: Vec<&str> = path.split("::").collect();
    let mut base: Vec<&str> = if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").collect()
    };
    if parts.first() == Some(&"crate") {
        base.clear();
        parts.remove(0);
    } else {
        // `super` of a file module `a::b::c` and of a folder module `a::b`
        // (its `mod.rs`) is one step up either way.
        while parts.first() == Some(&"super") {
            base.pop()?;
            parts.remove(0);
        }
    }
    base.extend(parts);
    while !base.is_empty() {
        let candidate = base.join("::");
        if known.contains_key(&candidate) {
            return Some(candidate);
        }
        base.pop();
    }
    None
}

fn within(module: &str, ancestor: &str) -> bool {
    module == ancestor || module.starts_with(&format!("{ancestor}::"))
}

/// Module → the modules it imports (ancestors and itself left out).
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let known = modules(src);
    let mut graph = BTreeMap::new();
    for (module, file) in &known {
        let text = std::fs::read_to_string(file).expect("read a source file");
        let targets = paths_in(&code_of(&text))
            .into_iter()
            .filter_map(|path| resolve(module, &path, &known))
            .filter(|target| !within(module, target) && !within(target, module))
            .collect();
        graph.insert(module.clone(), targets);
    }
    graph
}

/// Every set of modules that import each other in a circle (Tarjan).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(walk: &mut Walk<'a>, node: &'a str) {
        let number = walk.index.len();
        walk.index.insert(node, number);
        walk.low.insert(node, number);
        walk.stack.push(node);
        for next in walk.graph.get(node).into_iter().flatten() {
            let next = next.as_str();
            if !walk.index.contains_key(next) {
                visit(walk, next);
                let low = walk.low[node].min(walk.low[next]);
                walk.low.insert(node, low);
            } else if walk.stack.contains(&next) {
                let low = walk.low[node].min(walk.index[next]);
                walk.low.insert(node, low);
            }
        }
        if walk.low[node] == walk.index[node] {
            let mut members = Vec::new();
            while let Some(member) = walk.stack.pop() {
                members.push(member.to_string());
                if member == node {
                    break;
                }
            }
            if members.len() > 1 {
                members.sort();
                walk.found.push(members);
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_str()) {
            visit(&mut walk, node);
        }
    }
    walk.found
}

fn daemon_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// `a -> b` for each import from one member of `members` to another.
fn shown(graph: &BTreeMap<String, BTreeSet<String>>, members: &[String]) -> String {
    let mut lines = Vec::new();
    for member in members {
        for target in &graph[member] {
            if members.contains(target) {
                lines.push(format!("  {member} -> {target}"));
            }
        }
    }
    lines.join("\n")
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let graph = imports(&daemon_src());
    assert!(
        graph.len() > 100,
        "the source was read: {} modules",
        graph.len()
    );
    let found = circles(&graph);
    let report: Vec<String> = found.iter().map(|members| shown(&graph, members)).collect();
    assert!(
        found.is_empty(),
        "modules in a circle (move what both need below both):\n{}",
        report.join("\n\n")
    );
}

#[test]
fn the_seam_imports_no_tier_and_no_tier_another() {
    let graph = imports(&daemon_src());
    let tiers = ["local_process", "docker", "kubernetes"].map(|tier| format!("drivers::{tier}"));
    let mut wrong = Vec::new();
    for (module, targets) in &graph {
        for target in targets {
            let seam_reaches_up = within(module, "provisioner")
                && (within(target, "drivers") || within(target, "server"));
            let tier_to_tier = tiers.iter().any(|tier| within(module, tier))
                && tiers
                    .iter()
                    .any(|tier| within(target, tier) && !within(module, tier));
            if seam_reaches_up || tier_to_tier {
                wrong.push(format!("{module} -> {target}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports across layers:\n{}",
        wrong.join("\n")
    );
}

/// Module → the modules it imports, its ancestors included (which
/// [`imports`] leaves out): for the checks that a module never reaches
/// back up to the one that calls it.
fn imports_with_ancestors(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let known = modules(src);
    let mut graph = BTreeMap::new();
    for (module, file) in &known {
        let text = std::fs::read_to_string(file).expect("read a source file");
        // `pub(in crate::…)` names where an item is seen, not an import.
        let code = code_of(&text).replace("pub(in crate::", "pub(in ");
        let targets = paths_in(&code)
            .into_iter()
            .filter_map(|path| resolve(module, &path, &known))
            .filter(|target| !within(target, module))
            .collect();
        graph.insert(module.clone(), targets);
    }
    graph
}

/// An ensure on the process tier reads downward: the driver's own files
/// (the table, the ensure, the start, the watcher) → `launch` →
/// `isolation`'s plans and the clone. Nothing below the driver imports
/// those files back, the plans never import the launch that follows
/// them, and the clone never imports what prepares it.
#[test]
fn the_process_tiers_request_path_never_hops_back_up() {
    let graph = imports_with_ancestors(&daemon_src());
    let tier = "drivers::local_process";
    let driver = [
        "",
        "::ensure",
        "::runner_start",
        "::watch",
        "::record",
        "::startup",
    ]
    .map(|file| format!("{tier}{file}"));
    let launch = format!("{tier}::launch");
    let isolation = format!("{tier}::isolation");
    let clone = format!("{tier}::launch::clone_exec");
    let preparing =
        ["spawn", "spawner", "in_view", "runner_plan"].map(|file| format!("{launch}::{file}"));
    let mut wrong = Vec::new();
    for (module, targets) in &graph {
        for target in targets {
            let below_the_driver = within(module, &launch) || within(module, &isolation);
            let back_to_the_driver = below_the_driver && driver.contains(target);
            let plan_to_launch = within(module, &isolation) && within(target, &launch);
            let clone_to_caller =
                within(module, &clone) && preparing.iter().any(|caller| within(target, caller));
            if back_to_the_driver || plan_to_launch || clone_to_caller {
                wrong.push(format!("{module} -> {target}"));
            }
        }
    }
    assert!(
        graph.contains_key(&clone) && graph.contains_key(&format!("{tier}::ensure")),
        "the process tier's files were read"
    );
    assert!(
        wrong.is_empty(),
        "the request path hops back up:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_reader_sees_use_trees_and_skips_comments() {
    let code = code_of(
        "use super::{a::B, c as D};\n// crate::hidden\nlet x = crate::e::f();\n#[cfg(test)]\nmod tests { use crate::g; }",
    );
    assert_eq!(paths_in(&code), ["super::a::B", "super::c", "crate::e::f"]);
}
