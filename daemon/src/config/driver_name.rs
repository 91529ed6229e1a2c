//! The names of the tiers, as the configuration checks them: here, below
//! the tiers, so the configuration never reaches into the drivers' seam.

/// Every driver name, built or not, in the order the error message lists them.
pub const KNOWN_DRIVERS: [&str; 3] = ["docker", "kubernetes", "local-process"];

/// `'docker', 'kubernetes', 'local-process'`, for the unknown-driver error.
fn known_drivers() -> String {
    KNOWN_DRIVERS.map(|name| format!("'{name}'")).join(", ")
}

/// ` (did you mean 'docker'?)` for a name a typo or two away from a known
/// one, else nothing.
fn suggestion(name: &str) -> String {
    KNOWN_DRIVERS
        .iter()
        .map(|known| (edit_distance(name, known), known))
        .filter(|(distance, _)| *distance <= 2)
        .min()
        .map_or_else(String::new, |(_, known)| {
            format!(" (did you mean '{known}'?)")
        })
}

/// Levenshtein distance over characters (the names are a few bytes long).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

/// The configuration's check of a driver name: an unknown one is refused
/// before anything starts, with the known names and the likely intended one.
pub fn check(name: &str) -> Result<(), UnknownDriver> {
    if KNOWN_DRIVERS.contains(&name) {
        Ok(())
    } else {
        Err(UnknownDriver(name.to_string()))
    }
}

/// A driver name no tier answers to.
#[derive(Debug, thiserror::Error)]
#[error("unknown sandbox provisioner type '{0}'{hint} — known types: {known}", hint = suggestion(.0), known = known_drivers())]
pub struct UnknownDriver(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_driver_names_every_known_type_and_the_likely_one() {
        assert_eq!(
            UnknownDriver("lcoal-process".into()).to_string(),
            "unknown sandbox provisioner type 'lcoal-process' (did you mean 'local-process'?) — known types: 'docker', 'kubernetes', 'local-process'"
        );
        assert_eq!(
            check("dokcer").unwrap_err().to_string(),
            "unknown sandbox provisioner type 'dokcer' (did you mean 'docker'?) — known types: 'docker', 'kubernetes', 'local-process'"
        );
        assert_eq!(
            UnknownDriver("podman".into()).to_string(),
            "unknown sandbox provisioner type 'podman' — known types: 'docker', 'kubernetes', 'local-process'"
        );
        assert!(check("kubernetes").is_ok());
    }
}
