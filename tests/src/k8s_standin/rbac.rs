//! Stand-in API server: who may do what. Two users, by bearer token: the
//! test's `admin` may do everything, and `sandboxd` is held to a Role the
//! test sets (everything until it sets one). Every request is checked, and
//! `SelfSubjectAccessReview` answers from the same rules, as RBAC does.

/// One rule of a Role: these verbs on these resources (`deployments/scale`
/// names a subresource; `*` is every verb or resource).
#[derive(Debug, Clone)]
pub struct Rule {
    pub resources: Vec<String>,
    pub verbs: Vec<String>,
}

impl Rule {
    pub fn new(resources: &[&str], verbs: &[&str]) -> Rule {
        Rule {
            resources: resources.iter().map(|r| r.to_string()).collect(),
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
        }
    }
}

pub const ADMIN_TOKEN: &str = "stand-in-admin";
pub const DAEMON_TOKEN: &str = "stand-in-sandboxd";

/// The user a bearer token names, if any.
pub fn user_of(token: &str) -> Option<&'static str> {
    match token {
        ADMIN_TOKEN => Some("admin"),
        DAEMON_TOKEN => Some("system:serviceaccount:stigmer:sandboxd"),
        _ => None,
    }
}

/// True when `user` may `verb` the `resource` (with `/subresource`).
pub fn allowed(role: Option<&[Rule]>, user: &str, verb: &str, resource: &str) -> bool {
    if user == "admin" {
        return true;
    }
    let Some(rules) = role else {
        return true;
    };
    rules.iter().any(|rule| {
        (rule.verbs.iter().any(|v| v == "*" || v == verb))
            && rule.resources.iter().any(|r| r == "*" || r == resource)
    })
}
