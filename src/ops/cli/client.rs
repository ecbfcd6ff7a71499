//! The operator CLI's calls to a running daemon's admin API (TCP or the local socket):
//! one request, its bounded reply, and the failure text a person reads.

use super::*;

/// Whole-request timeout; a grant with an admin credential waits for the pod's mint (15 s).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest admin API answer the CLI reads (a full grant list is a few KiB).
pub(super) const MAX_REPLY_BYTES: u64 = 4 << 20;

/// Something went wrong talking to the daemon; printed as `handnode: <message>`.
#[derive(Debug)]
pub(super) struct Failure(pub(super) String);

/// An answer from the daemon.
pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) body: Value,
    pub(super) etag: Option<String>,
}

impl Reply {
    /// The daemon's `{"error": …}` message, or the status when there is none.
    pub(super) fn error_message(&self) -> String {
        match self.body.get("error").and_then(Value::as_str) {
            Some(msg) => msg.to_string(),
            None => format!("HTTP {}", self.status),
        }
    }
}

/// An answer read as bytes.
pub(super) struct RawReply {
    pub(super) status: u16,
    pub(super) body: Vec<u8>,
    pub(super) etag: Option<String>,
    /// `Journal-Next-Since`: the journal's answer stopped early; ask again from here.
    pub(super) next_since: Option<String>,
}

impl RawReply {
    /// As a [`Reply`], for its error message.
    pub(super) fn as_reply(&self) -> Reply {
        Reply {
            status: self.status,
            body: serde_json::from_slice(&self.body).unwrap_or(Value::Null),
            etag: self.etag.clone(),
        }
    }
}

/// A blocking HTTP client of one daemon's admin API. The token goes to the daemon and
/// nowhere else: no proxy from the environment, no redirects ([`crate::wire::http`]).
pub(super) struct Client<'a> {
    pub(super) args: &'a ClientArgs,
    /// Built on the first https call and kept: `revoke --all` makes one call per grant.
    pub(super) tls: std::cell::OnceCell<Arc<rustls::ClientConfig>>,
}

impl<'a> Client<'a> {
    pub(super) fn new(args: &'a ClientArgs) -> Self {
        Client {
            args,
            tls: std::cell::OnceCell::new(),
        }
    }

    pub(super) fn tls(&self) -> Result<&Arc<rustls::ClientConfig>, String> {
        if let Some(config) = self.tls.get() {
            return Ok(config);
        }
        let config = crate::wire::tls::client_config(None).map_err(|e| e.to_string())?;
        Ok(self.tls.get_or_init(|| config))
    }

    pub(super) fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply, Failure> {
        self.call_within(method, path, body, REQUEST_TIMEOUT)
    }

    pub(super) fn call_within(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<Reply, Failure> {
        let raw = self.exchange(method, path, body, timeout, MAX_REPLY_BYTES)?;
        let text = String::from_utf8_lossy(&raw.body);
        let body = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.into_owned()))
        };
        Ok(Reply {
            status: raw.status,
            body,
            etag: raw.etag,
        })
    }

    /// A `GET` whose answer is not one JSON value (a journal's lines, its HTML file), read
    /// up to `max_bytes`.
    pub(super) fn get_raw(&self, path: &str, max_bytes: u64) -> Result<RawReply, Failure> {
        self.exchange("GET", path, None, REQUEST_TIMEOUT, max_bytes)
    }

    fn exchange(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
        max_bytes: u64,
    ) -> Result<RawReply, Failure> {
        let unreachable = |e: &dyn std::fmt::Display| {
            Failure(format!(
                "cannot reach the daemon at {}: {e} (is it running? pass --url for another address)",
                self.where_()
            ))
        };
        let url = match &self.args.socket {
            Some(_) => format!("http://localhost{path}"),
            None => format!("{}{path}", self.args.url),
        };
        let target = Target::parse(&url).map_err(|e| unreachable(&e))?;
        let tls = match target.tls {
            true => Some(self.tls().map_err(|e| unreachable(&e))?),
            false => None,
        };
        let authorization = self
            .args
            .token
            .as_ref()
            .map(|token| format!("Bearer {}", token.expose()));
        let mut headers = vec![("Accept", "application/json")];
        if let Some(value) = &authorization {
            headers.push(("Authorization", value));
        }
        let body = body.map(|b| b.to_string());
        if body.is_some() {
            headers.push(("Content-Type", "application/json"));
        }
        let request = Request {
            method,
            target: &target,
            headers: &headers,
            body: body.as_deref().map(str::as_bytes),
        };
        let response = match &self.args.socket {
            Some(socket) => HttpClient::unix(socket.clone(), timeout),
            None => HttpClient::new(timeout, tls.cloned()),
        }
        .send(&request)
        .map_err(|e| unreachable(&e))?;
        let status = response.status;
        let header = |name: &str| {
            response
                .header(name)
                .map(|v| String::from_utf8_lossy(v).trim().to_string())
        };
        let etag = header("etag");
        let next_since = header("journal-next-since");
        let body = response.read_body(max_bytes).map_err(|e| unreachable(&e))?;
        Ok(RawReply {
            status,
            body,
            etag,
            next_since,
        })
    }

    /// Where the daemon is reached, for messages.
    pub(super) fn where_(&self) -> String {
        match &self.args.socket {
            Some(socket) => format!("the local socket {}", socket.display()),
            None => self.args.url.clone(),
        }
    }

    /// A non-2xx answer as a message that says what to do about it.
    pub(super) fn refused(&self, what: &str, reply: &Reply) -> Failure {
        let mut msg = format!(
            "the daemon refused to {what} (HTTP {}): {}",
            reply.status,
            reply.error_message()
        );
        if let Some(reason) = reply.body.get("reason").and_then(Value::as_str) {
            msg.push_str(&format!(" ({reason})"));
        }
        let about_token = reply
            .body
            .get("reason")
            .and_then(Value::as_str)
            .is_none_or(|r| r.contains("admin token"));
        if reply.status == 401 && about_token {
            match &self.args.token_source {
                Some(source) => msg.push_str(&format!(
                    "; the token from {source} is not the daemon's"
                )),
                None => msg.push_str(
                    "; no admin token found (looked at --token-file, HANDNODE_TOKEN, $CREDENTIALS_DIRECTORY/handnode-token and <config dir>/token)",
                ),
            }
        }
        Failure(msg)
    }
}
