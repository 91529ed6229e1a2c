//! Stand-in API server: a NetworkPolicy's validation, as the real server's
//! `ValidateNetworkPolicySpec` does it for what the tier sends: the policy
//! types, each peer (an `ipBlock` alone, or selectors), each `ipBlock`
//! (`cidr` a CIDR, every `except` a strict subset of it, of its family),
//! each port (protocol TCP, UDP or SCTP; a number in 1..=65535).
//! Enforcement is a network plugin's, which the stand-in has none of.

use std::net::IpAddr;

use serde_json::Value;

/// `(field, message)` of the first invalid field.
pub type Invalid = (String, String);

/// A CIDR: its network and prefix length; `None` when it is none.
fn cidr(text: &str) -> Option<(IpAddr, u8)> {
    let (address, prefix) = text.split_once('/')?;
    let address: IpAddr = address.parse().ok()?;
    let prefix: u8 = prefix.parse().ok()?;
    let max = if address.is_ipv4() { 32 } else { 128 };
    (prefix <= max).then_some((address, prefix))
}

/// True when `inner` lies within `outer` and is strictly smaller.
fn strict_subset(outer: (IpAddr, u8), inner: (IpAddr, u8)) -> bool {
    let within = match (outer.0, inner.0) {
        (IpAddr::V4(outer_ip), IpAddr::V4(inner_ip)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(outer.1)).unwrap_or(0);
            u32::from(outer_ip) & mask == u32::from(inner_ip) & mask
        }
        (IpAddr::V6(outer_ip), IpAddr::V6(inner_ip)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(outer.1)).unwrap_or(0);
            u128::from(outer_ip) & mask == u128::from(inner_ip) & mask
        }
        _ => false,
    };
    within && inner.1 > outer.1
}

fn invalid(field: String, message: impl Into<String>) -> Result<(), Invalid> {
    Err((field, message.into()))
}

fn ip_block(block: &Value, path: &str) -> Result<(), Invalid> {
    let text = block["cidr"].as_str().unwrap_or_default();
    let Some(outer) = cidr(text) else {
        return invalid(
            format!("{path}.cidr"),
            format!("Invalid value: \"{text}\": must be a valid CIDR value"),
        );
    };
    for (i, except) in block["except"].as_array().into_iter().flatten().enumerate() {
        let text = except.as_str().unwrap_or_default();
        let field = format!("{path}.except[{i}]");
        match cidr(text) {
            None => {
                return invalid(
                    field,
                    format!("Invalid value: \"{text}\": must be a valid CIDR value"),
                )
            }
            Some(inner) if !strict_subset(outer, inner) => {
                return invalid(
                    field,
                    format!("Invalid value: \"{text}\": must be a strict subset of `cidr`"),
                )
            }
            Some(_) => {}
        }
    }
    Ok(())
}

fn peer(peer: &Value, path: &str) -> Result<(), Invalid> {
    let has = |key: &str| peer.get(key).is_some_and(|value| !value.is_null());
    let selectors = has("podSelector") || has("namespaceSelector");
    match (has("ipBlock"), selectors) {
        (true, true) => invalid(
            path.to_string(),
            "Forbidden: may not specify both ipBlock and another peer",
        ),
        (false, false) => invalid(path.to_string(), "Required value: must specify a peer"),
        (true, false) => ip_block(&peer["ipBlock"], &format!("{path}.ipBlock")),
        (false, true) => Ok(()),
    }
}

fn port(port: &Value, path: &str) -> Result<(), Invalid> {
    if let Some(protocol) = port.get("protocol").and_then(Value::as_str) {
        if !["TCP", "UDP", "SCTP"].contains(&protocol) {
            return invalid(
                format!("{path}.protocol"),
                format!("Unsupported value: \"{protocol}\": supported values: \"SCTP\", \"TCP\", \"UDP\""),
            );
        }
    }
    match port.get("port") {
        None | Some(Value::Null) | Some(Value::String(_)) => Ok(()),
        Some(Value::Number(number))
            if number.as_u64().is_some_and(|n| (1..=65535).contains(&n)) =>
        {
            Ok(())
        }
        Some(other) => invalid(
            format!("{path}.port"),
            format!("Invalid value: {other}: must be between 1 and 65535, inclusive"),
        ),
    }
}

/// Checks a NetworkPolicy's `spec`.
pub fn validate(spec: &Value) -> Result<(), Invalid> {
    if !spec["podSelector"].is_object() {
        return invalid("spec.podSelector".into(), "Required value");
    }
    let types: Vec<&str> = spec["policyTypes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|value| value.as_str().unwrap_or_default())
        .collect();
    for (i, kind) in types.iter().enumerate() {
        if !["Ingress", "Egress"].contains(kind) || types[..i].contains(kind) {
            return invalid(
                format!("spec.policyTypes[{i}]"),
                format!("Unsupported value: \"{kind}\": supported values: \"Egress\", \"Ingress\""),
            );
        }
    }
    if !spec["ingress"].is_null() && !spec["ingress"].is_array() {
        return invalid("spec.ingress".into(), "Invalid value: must be a list");
    }
    for (i, rule) in spec["ingress"].as_array().into_iter().flatten().enumerate() {
        for (j, from) in rule["from"].as_array().into_iter().flatten().enumerate() {
            peer(from, &format!("spec.ingress[{i}].from[{j}]"))?;
        }
        for (j, ports) in rule["ports"].as_array().into_iter().flatten().enumerate() {
            port(ports, &format!("spec.ingress[{i}].ports[{j}]"))?;
        }
    }
    for (i, rule) in spec["egress"].as_array().into_iter().flatten().enumerate() {
        for (j, to) in rule["to"].as_array().into_iter().flatten().enumerate() {
            peer(to, &format!("spec.egress[{i}].to[{j}]"))?;
        }
        for (j, ports) in rule["ports"].as_array().into_iter().flatten().enumerate() {
            port(ports, &format!("spec.egress[{i}].ports[{j}]"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(except: &[&str], cidr: &str) -> Value {
        json!({"podSelector": {}, "policyTypes": ["Egress"],
               "egress": [{"to": [{"ipBlock": {"cidr": cidr, "except": except}}]}]})
    }

    #[test]
    fn except_must_be_a_strict_subset_of_its_own_family() {
        assert!(validate(&spec(&["169.254.0.0/16", "0.0.0.0/8"], "0.0.0.0/0")).is_ok());
        assert!(validate(&spec(&["::/128", "fe80::/10"], "::/0")).is_ok());
        let (field, _) = validate(&spec(&["10.0.0.0/8", "fe80::/10"], "0.0.0.0/0")).unwrap_err();
        assert_eq!(field, "spec.egress[0].to[0].ipBlock.except[1]");
        assert!(
            validate(&spec(&["0.0.0.0/0"], "0.0.0.0/0")).is_err(),
            "not strict"
        );
        assert!(validate(&spec(&["10.0.0.0/33"], "0.0.0.0/0")).is_err());
        assert!(validate(&json!({"policyTypes": ["Egress"]})).is_err());
        assert!(validate(&json!({"podSelector": {}, "policyTypes": ["Outbound"]})).is_err());
        let ingress_only = json!({"podSelector": {}, "policyTypes": ["Ingress"], "ingress": []});
        assert!(validate(&ingress_only).is_ok());
        let bad_from = json!({"podSelector": {}, "policyTypes": ["Ingress"],
                              "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}]});
        assert!(validate(&bad_from).is_err());
    }
}
