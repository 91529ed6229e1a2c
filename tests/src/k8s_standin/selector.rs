//! Stand-in API server: label selectors on list (`a=b`, `a==b`, `a!=b`,
//! `a`, `!a`, joined by commas; set-based `in`/`notin` are not taken).

use serde_json::Value;

use super::status::{bad_request, Failure};

enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

pub struct Selector(Vec<Requirement>);

impl Selector {
    pub fn parse(text: &str) -> Result<Selector, Failure> {
        let mut requirements = Vec::new();
        for part in text
            .split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
        {
            let requirement = if let Some((key, value)) = part.split_once("!=") {
                Requirement::NotEquals(key.trim().into(), value.trim().into())
            } else if let Some((key, value)) = part.split_once("==") {
                Requirement::Equals(key.trim().into(), value.trim().into())
            } else if let Some((key, value)) = part.split_once('=') {
                Requirement::Equals(key.trim().into(), value.trim().into())
            } else if let Some(key) = part.strip_prefix('!') {
                Requirement::Absent(key.trim().into())
            } else if part.contains(' ') || part.contains('(') {
                return Err(bad_request(format!(
                    "unable to parse requirement: the stand-in takes only equality selectors: {part}"
                )));
            } else {
                Requirement::Exists(part.into())
            };
            requirements.push(requirement);
        }
        Ok(Selector(requirements))
    }

    pub fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        let label = |key: &str| labels.get(key).and_then(Value::as_str);
        self.0.iter().all(|requirement| match requirement {
            Requirement::Equals(key, value) => label(key) == Some(value.as_str()),
            Requirement::NotEquals(key, value) => label(key) != Some(value.as_str()),
            Requirement::Exists(key) => label(key).is_some(),
            Requirement::Absent(key) => label(key).is_none(),
        })
    }
}
