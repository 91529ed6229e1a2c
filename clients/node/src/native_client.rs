//! `NativeClient`: one `SandboxdClient`, its calls as promises.
//!
//! Construction is synchronous on purpose: the seed's
//! `SandboxProvisionerFactory` returns its provisioner synchronously at
//! boot, and a daemon that is absent or speaks another protocol must fail
//! that construction, not the first ensure. Every other call is async and
//! runs on napi-rs's Tokio runtime, where the connection's reader task
//! also lives, so calls from one process share one multiplexed connection.
//! Reports cross as plain JSON objects (their serde shape, snake_case),
//! which `index.js` renames for JavaScript.

use std::time::Duration;

use napi_derive::napi;
use sandboxd_client::{
    Event, EventCursor, EventsReply, Expectation, SandboxEnv, SandboxdClient, Scope, Token,
};
use serde::Serialize;

use crate::error::{invalid_argument, to_napi};

#[napi]
pub struct NativeClient {
    pub(crate) client: SandboxdClient,
}

pub(crate) fn scope_of(scope: &str) -> napi::Result<Scope> {
    match scope {
        "session" => Ok(Scope::Session),
        "workflow" => Ok(Scope::Workflow),
        "connect" => Ok(Scope::Connect),
        other => Err(invalid_argument(format!(
            "scope must be session, workflow or connect, not {other:?}"
        ))),
    }
}

fn env_of(task_queue: String, stigmer_token: String, caller_class: String) -> SandboxEnv {
    SandboxEnv {
        task_queue,
        // Wrapped at once: the token's Debug is redacted from here on.
        stigmer_token: Token::new(stigmer_token),
        caller_class,
    }
}

pub(crate) fn json<T: Serialize>(value: &T) -> napi::Result<serde_json::Value> {
    serde_json::to_value(value).map_err(|error| napi::Error::from_reason(error.to_string()))
}

#[napi]
impl NativeClient {
    /// Connects to `socket` (the client library's default path when absent)
    /// and checks the daemon's protocol version, blocking until done or
    /// `deadline_ms` (the client's default when absent) passed.
    #[napi(factory)]
    pub fn connect(socket: Option<String>, deadline_ms: Option<u32>) -> napi::Result<NativeClient> {
        let mut builder = SandboxdClient::builder();
        if let Some(socket) = socket.filter(|socket| !socket.is_empty()) {
            builder = builder.socket(socket);
        }
        if let Some(ms) = deadline_ms {
            builder = builder.deadline(Duration::from_millis(u64::from(ms)));
        }
        let client = napi::bindgen_prelude::block_on(builder.connect()).map_err(to_napi)?;
        Ok(NativeClient { client })
    }

    /// The socket this client talks to.
    #[napi(getter)]
    pub fn socket_path(&self) -> String {
        self.client.socket_path().display().to_string()
    }

    /// Ensures a session or workflow sandbox; resolves to its `EnsureReport`.
    #[napi]
    pub async fn ensure(
        &self,
        scope: String,
        id: String,
        task_queue: String,
        stigmer_token: String,
        caller_class: String,
    ) -> napi::Result<serde_json::Value> {
        let scope = scope_of(&scope)?;
        let env = env_of(task_queue, stigmer_token, caller_class);
        let report = match scope {
            Scope::Session => self.client.ensure_session_sandbox(&id, &env).await,
            Scope::Workflow => self.client.ensure_workflow_sandbox(&id, &env).await,
            Scope::Connect => self.client.ensure(scope, &id, &env).await,
        };
        json(&report.map_err(to_napi)?)
    }

    /// Creates a connect sandbox (never re-sent); resolves to its sandbox id.
    #[napi]
    pub async fn create_connect(
        &self,
        request_id: String,
        task_queue: String,
        stigmer_token: String,
        caller_class: String,
    ) -> napi::Result<String> {
        let env = env_of(task_queue, stigmer_token, caller_class);
        self.client
            .create_connect_sandbox(&request_id, &env)
            .await
            .map_err(to_napi)
    }

    /// Tears a sandbox down; resolves to its `DeprovisionReport`.
    #[napi]
    pub async fn deprovision(&self, scope: String, id: String) -> napi::Result<serde_json::Value> {
        let scope = scope_of(&scope)?;
        let report = match scope {
            Scope::Session => self.client.deprovision_session_sandbox(&id).await,
            Scope::Workflow => self.client.deprovision_workflow_sandbox(&id).await,
            Scope::Connect => self.client.deprovision_connect_sandbox(&id).await,
        };
        json(&report.map_err(to_napi)?)
    }

    /// The live state: `absent`, `stopped` or `running`.
    #[napi]
    pub async fn probe(&self, scope: String, id: String) -> napi::Result<String> {
        let scope = scope_of(&scope)?;
        let state = self.client.probe(scope, &id).await.map_err(to_napi)?;
        Ok(state.as_str().to_string())
    }

    /// One sandbox's facts (`SandboxInfo`, never the token).
    #[napi]
    pub async fn describe(&self, scope: String, id: String) -> napi::Result<serde_json::Value> {
        let scope = scope_of(&scope)?;
        json(&self.client.describe(scope, &id).await.map_err(to_napi)?)
    }

    /// Every sandbox the daemon owns, optionally of one scope.
    #[napi]
    pub async fn list(&self, scope: Option<String>) -> napi::Result<serde_json::Value> {
        let scope = scope.as_deref().map(scope_of).transpose()?;
        json(&self.client.list(scope).await.map_err(to_napi)?)
    }

    /// Facts about the daemon (`DaemonStatus`).
    #[napi]
    pub async fn status(&self) -> napi::Result<serde_json::Value> {
        json(&self.client.status().await.map_err(to_napi)?)
    }

    /// Tears a sandbox down only if it is still the incarnation the caller
    /// saw (`expect_uid`, `expect_generation`; either may be absent);
    /// resolves to its `DeprovisionReport`, rejects with `conflict` when
    /// the sandbox changed. One already gone is success.
    #[napi]
    pub async fn deprovision_fenced(
        &self,
        scope: String,
        id: String,
        expect_uid: Option<String>,
        expect_generation: Option<i64>,
    ) -> napi::Result<serde_json::Value> {
        let scope = scope_of(&scope)?;
        let generation = expect_generation
            .map(|generation| {
                u64::try_from(generation).map_err(|_| {
                    invalid_argument(format!(
                        "expected generation must be 0 or more, not {generation}"
                    ))
                })
            })
            .transpose()?;
        let expect = Expectation {
            uid: expect_uid,
            generation,
        };
        let report = match scope {
            Scope::Connect => self.client.deprovision_connect_fenced(&id, &expect).await,
            _ => {
                self.client
                    .deprovision_fenced(scope, &id, false, &expect)
                    .await
            }
        };
        json(&report.map_err(to_napi)?)
    }

    /// One long-poll of the event stream: the events after `since` (a
    /// `BOOT-SEQ` cursor; absent: from the oldest kept), waiting up to
    /// `wait_ms` for one. Resolves to `{type: "events", events, next}` or
    /// `{type: "expired", reason, now}` (relist, then follow from `now`);
    /// cursors cross as their `BOOT-SEQ` strings.
    #[napi]
    pub async fn events(
        &self,
        since: Option<String>,
        max: u32,
        wait_ms: u32,
    ) -> napi::Result<serde_json::Value> {
        let since = since
            .filter(|since| !since.is_empty())
            .map(|since| since.parse::<EventCursor>())
            .transpose()
            .map_err(invalid_argument)?;
        let wait = Duration::from_millis(u64::from(wait_ms));
        let reply = self
            .client
            .events(since.as_ref(), max, wait)
            .await
            .map_err(to_napi)?;
        Ok(match reply {
            EventsReply::Events { events, next } => serde_json::json!({
                "type": "events",
                "events": events.iter().map(event_json).collect::<napi::Result<Vec<_>>>()?,
                "next": next.to_string(),
            }),
            EventsReply::Expired { reason, now } => serde_json::json!({
                "type": "expired",
                "reason": reason,
                "now": now.to_string(),
            }),
        })
    }
}

/// An event as JavaScript gets it: its serde shape with the cursor as its
/// `BOOT-SEQ` string, and the kind as its stable name (`as_str`, the name
/// `sandboxctl events` prints: serde's own spelling of a kind need not be
/// it, `commandexited` against `command-exited`), and an exit's `outcome`
/// as its reason's short name, as a proof has it.
fn event_json(event: &Event) -> napi::Result<serde_json::Value> {
    let mut value = json(event)?;
    value["cursor"] = serde_json::Value::String(event.cursor.to_string());
    value["kind"] = serde_json::Value::String(event.kind.as_str().to_string());
    if let Some(exit) = &event.exit {
        value["exit"]["outcome"] = serde_json::Value::String(exit.reason.as_str().to_string());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_client::{EventCommand, EventKind, ExitInfo};

    #[test]
    fn a_command_event_crosses_with_its_stable_kind_command_and_outcome() {
        let event = Event {
            cursor: EventCursor {
                boot_id: "ab12".into(),
                seq: 7,
            },
            at_unix_ms: 1,
            kind: EventKind::CommandExited,
            scope: Scope::Session,
            id: "ses_1".into(),
            name: "sbx-ses-000000000000".into(),
            uid: "0".repeat(32),
            generation: 1,
            exit: Some(ExitInfo::from_facts(Some(3), None, 2, false)),
            command: Some(Box::new(EventCommand {
                command_id: "f".repeat(32),
                tag: Some("build".into()),
            })),
        };
        let value = event_json(&event).unwrap();
        assert_eq!(value["kind"], "command-exited");
        assert_eq!(value["cursor"], "ab12-7");
        assert_eq!(value["command"]["tag"], "build");
        assert_eq!(value["exit"]["code"], 3);
        assert_eq!(value["exit"]["outcome"], "exited");
    }
}
