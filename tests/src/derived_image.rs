//! Runner images made from the test image with some of this host's
//! programs added (the test image is `FROM scratch`: no shell, no `rm`),
//! for the docker tests that need them. Made by copying the programs and
//! the libraries `ldd` names into a container of the test image and
//! committing it, once per run and only when the test image changed (a
//! label records which one it was made from); the one made from an
//! earlier test image is removed.

use std::path::{Path, PathBuf};

use crate::docker_image::{docker, docker_ok, TEST_IMAGE};

/// The label that says which runner image a derived one was made from.
const BASE_LABEL: &str = "sandboxd.test.base-image";

/// Makes `tag` from the test image with `tools` (from this host's
/// `/usr/bin` or `/bin`) in its `/usr/bin`, and whatever `extra` writes
/// into the image's root beside them.
pub fn derived_image(
    tag: &str,
    tools: &[&str],
    extra: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<(), String> {
    let base = docker_ok(&["image", "inspect", "--format", "{{.Id}}", TEST_IMAGE]);
    let label = format!("{{{{ index .Config.Labels \"{BASE_LABEL}\" }}}}");
    let have = docker(&["image", "inspect", "--format", &label, tag]);
    if String::from_utf8_lossy(&have.stdout).trim() == base {
        return Ok(());
    }
    let old = docker(&["image", "inspect", "--format", "{{.Id}}", tag]);
    let root = std::env::temp_dir().join(scratch_name(tag));
    let _ = std::fs::remove_dir_all(&root);
    let made = tools
        .iter()
        .try_for_each(|tool| copy_with_libraries(&which(tool)?, &root, tool))
        .and_then(|()| extra(&root));
    let built = made.and_then(|()| commit(&root, &base, tag));
    let _ = std::fs::remove_dir_all(&root);
    built?;
    let old = String::from_utf8_lossy(&old.stdout).trim().to_string();
    if old.starts_with("sha256:") {
        let _ = docker(&["image", "rm", &old]);
    }
    Ok(())
}

/// The name of the scratch folder and builder container making `tag`: of
/// this process and of this image, since one test binary runs tests that
/// make two different images at the same time (the docker group's
/// commands and files).
fn scratch_name(tag: &str) -> String {
    let tag: String = tag
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("sandboxd-image-{tag}-{}", std::process::id())
}

/// `root`'s files copied into a container of the test image, committed
/// as `tag` with the label naming `base`.
fn commit(root: &Path, base: &str, tag: &str) -> Result<(), String> {
    let builder = format!("{}-build", scratch_name(tag));
    let _ = docker(&["rm", "-f", &builder]);
    docker_ok(&["create", "--name", &builder, TEST_IMAGE]);
    let copied = docker(&[
        "cp",
        &format!("{}/.", root.display()),
        &format!("{builder}:/"),
    ]);
    let change = format!("LABEL {BASE_LABEL}={base}");
    let committed = docker(&["commit", "--change", &change, &builder, tag]);
    let _ = docker(&["rm", "-f", &builder]);
    for (step, output) in [("cp", copied), ("commit", committed)] {
        if !output.status.success() {
            return Err(format!(
                "docker {step}: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
    }
    Ok(())
}

fn which(tool: &str) -> Result<PathBuf, String> {
    ["/usr/bin", "/bin"]
        .iter()
        .map(|dir| Path::new(dir).join(tool))
        .find(|path| path.is_file())
        .and_then(|path| std::fs::canonicalize(path).ok())
        .ok_or_else(|| format!("no {tool} on this host"))
}

/// Copies `program` to `root/usr/bin/<name>`, and each library `ldd` names
/// to its own path under `root`.
fn copy_with_libraries(program: &Path, root: &Path, name: &str) -> Result<(), String> {
    let copy = |from: &Path, to: &Path| {
        std::fs::create_dir_all(to.parent().expect("a parent"))
            .and_then(|()| std::fs::copy(from, to).map(drop))
            .map_err(|error| format!("copy {}: {error}", from.display()))
    };
    copy(program, &root.join("usr/bin").join(name))?;
    let ldd = std::process::Command::new("ldd")
        .arg(program)
        .output()
        .map_err(|error| format!("ldd: {error}"))?;
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let library = match fields.as_slice() {
            [_, "=>", path, ..] if path.starts_with('/') => *path,
            [path, ..] if path.starts_with('/') => *path,
            _ => continue,
        };
        copy(
            Path::new(library),
            &root.join(library.trim_start_matches('/')),
        )?;
    }
    Ok(())
}
