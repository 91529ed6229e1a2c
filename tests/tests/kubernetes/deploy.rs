//! `deploy/`: the kustomization applies every manifest, namespaces first,
//! and the image recipe names the binary it copies. These read the files;
//! no cluster is needed (none is here: `kubectl apply -k` itself was not
//! run against a cluster).

use std::fs;
use std::path::PathBuf;

fn deploy() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// The `resources:` list of the kustomization, in order.
fn kustomization_resources() -> Vec<String> {
    let text = fs::read_to_string(deploy().join("kubernetes/kustomization.yaml")).unwrap();
    let mut lines = text.lines().skip_while(|line| *line != "resources:");
    assert_eq!(lines.next(), Some("resources:"), "{text}");
    lines
        .map_while(|line| line.strip_prefix("  - "))
        .map(|name| name.trim().to_string())
        .collect()
}

#[test]
fn the_kustomization_lists_every_manifest_with_the_namespaces_first() {
    let listed = kustomization_resources();
    let mut on_disk: Vec<String> = fs::read_dir(deploy().join("kubernetes"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml") && name != "kustomization.yaml")
        .collect();
    on_disk.sort();
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(sorted, on_disk, "every manifest, once");
    // Every Namespace object lives in the first file listed, and only there.
    for (index, name) in listed.iter().enumerate() {
        let text = fs::read_to_string(deploy().join("kubernetes").join(name)).unwrap();
        let has_namespace = text.lines().any(|line| line == "kind: Namespace");
        assert_eq!(
            has_namespace,
            index == 0,
            "{name}: Namespace objects belong in the first file only"
        );
    }
}

#[test]
fn the_image_recipe_copies_the_binary_it_runs() {
    let dockerfile = fs::read_to_string(deploy().join("image/Dockerfile")).unwrap();
    assert!(dockerfile.contains("\nFROM scratch\n"), "{dockerfile}");
    assert!(
        dockerfile.contains("ENTRYPOINT [\"/usr/local/bin/sandboxd\"]"),
        "{dockerfile}"
    );
    let build = fs::read_to_string(deploy().join("image/build.sh")).unwrap();
    assert!(
        build.contains("\"$rootfs/usr/local/bin/sandboxd\""),
        "{build}"
    );
    let pod = fs::read_to_string(deploy().join("kubernetes/control-plane.yaml")).unwrap();
    assert!(
        pod.contains("image: sandboxd:"),
        "the example pod runs that image"
    );
}

/// With kubectl on the machine (it is here), its own kustomize renders the
/// directory offline: every object, the namespaces first.
#[test]
fn kubectl_kustomize_renders_the_namespaces_first() {
    let Ok(output) = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(deploy().join("kubernetes"))
        .output()
    else {
        eprintln!("SKIPPED: no kubectl on this machine");
        return;
    };
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rendered = String::from_utf8(output.stdout).unwrap();
    let kinds: Vec<&str> = rendered
        .lines()
        .filter_map(|line| line.strip_prefix("kind: "))
        .collect();
    assert_eq!(
        kinds,
        [
            "Namespace",
            "Namespace",
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "Deployment"
        ],
        "{rendered}"
    );
}
