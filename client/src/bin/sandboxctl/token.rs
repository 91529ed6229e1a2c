//! Reading the runner's token from the environment.
//!
//! The token is a secret: it is read from a variable the operator names,
//! never from argv, and no message here ever contains its value, only the
//! variable's name. A named variable that is unset is an operator mistake,
//! not "no token", so it is refused rather than silently launching a runner
//! without credentials.

use std::ffi::OsString;

use sandboxd_client::Token;

/// The token held by `var`, or an empty token when no variable was named.
/// The error is a usage message naming the variable.
pub fn from_env(var: Option<&str>) -> Result<Token, String> {
    let Some(name) = var else {
        return Ok(Token::default());
    };
    token_from(name, std::env::var_os(name))
}

fn token_from(name: &str, value: Option<OsString>) -> Result<Token, String> {
    match value {
        None => Err(format!(
            "--token-env {name}: environment variable {name} is not set"
        )),
        Some(value) => value.into_string().map(Token::new).map_err(|_| {
            format!("--token-env {name}: environment variable {name} is not valid UTF-8")
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_variable_means_no_token() {
        assert!(from_env(None).unwrap().is_empty());
    }

    #[test]
    fn a_set_variable_gives_its_value() {
        let token = token_from("TOK", Some(OsString::from("s3cr3t"))).unwrap();
        assert_eq!(token.expose(), "s3cr3t");
    }

    #[test]
    fn an_unset_variable_is_named_in_the_error() {
        let message = token_from("SANDBOXCTL_TEST_UNSET", None).unwrap_err();
        assert!(
            message.contains("SANDBOXCTL_TEST_UNSET is not set"),
            "{message}"
        );
    }

    #[test]
    fn a_non_utf8_value_is_refused_without_echoing_it() {
        use std::os::unix::ffi::OsStringExt;
        let value = OsString::from_vec(b"s3cr3t\xff".to_vec());
        let message = token_from("TOK", Some(value)).unwrap_err();
        assert!(
            message.contains("TOK") && !message.contains("s3cr3t"),
            "{message}"
        );
    }
}
