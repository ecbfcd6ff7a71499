//! Who may use the admin API: the contract's §2 decision procedure, the check that some
//! authentication is configured at all, and the failed-authentication throttle.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::base::secret::Secret;

/// Longest client key the throttle stores (bytes); header values beyond it are cut so a
/// huge `X-Forwarded-For` cannot grow the table's memory.
pub const MAX_KEY_BYTES: usize = 128;

/// The admin API's authentication settings.
#[derive(Clone, Debug)]
pub struct Policy {
    token: Option<Secret>,
    /// Lowercase.
    allowed_logins: Vec<String>,
    insecure_local: bool,
}

/// What the decision needs to know about one request. Header values are as received;
/// build it with [`RequestFacts::from_headers`] so header names match case-insensitively.
#[derive(Clone, Debug, Default)]
pub struct RequestFacts {
    /// The `Authorization` header. A `Secret`: it may hold the real token or a near miss.
    pub authorization: Option<Secret>,
    /// The `Tailscale-User-Login` header, injected by `tailscale serve`.
    pub tailscale_user_login: Option<String>,
    /// The `X-Forwarded-For` header; its presence means a proxy relayed the request.
    pub forwarded_for: Option<String>,
    /// The TCP peer is a loopback address (see [`is_loopback`]).
    pub peer_is_loopback: bool,
}

/// The outcome of [`Policy::decide`]. `Allow` carries the principal recorded in the audit
/// log; `Deny` carries the reason for the log (the client only ever sees `unauthorized`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow(String),
    Deny(String),
}

impl RequestFacts {
    /// Pick the headers that matter out of `(name, value)` pairs; names are matched
    /// case-insensitively and the first occurrence of each wins.
    pub fn from_headers<'a>(
        headers: impl IntoIterator<Item = (&'a str, &'a str)>,
        peer_is_loopback: bool,
    ) -> Self {
        let mut facts = RequestFacts {
            peer_is_loopback,
            ..RequestFacts::default()
        };
        for (name, value) in headers {
            if name.eq_ignore_ascii_case("authorization") {
                facts
                    .authorization
                    .get_or_insert_with(|| Secret::new(value));
            } else if name.eq_ignore_ascii_case("tailscale-user-login") {
                facts
                    .tailscale_user_login
                    .get_or_insert_with(|| value.to_string());
            } else if name.eq_ignore_ascii_case("x-forwarded-for") {
                facts.forwarded_for.get_or_insert_with(|| value.to_string());
            }
        }
        facts
    }

    /// The login the request claims, lowercase; an empty header claims nobody.
    fn login(&self) -> Option<String> {
        self.tailscale_user_login
            .as_deref()
            .map(|l| l.trim().to_lowercase())
            .filter(|l| !l.is_empty())
    }

    /// A loopback caller that no proxy relayed: the only caller `--insecure-local` admits.
    pub fn is_local(&self) -> bool {
        self.peer_is_loopback && self.tailscale_user_login.is_none() && self.forwarded_for.is_none()
    }
}

fn deny(reason: impl Into<String>) -> Decision {
    Decision::Deny(reason.into())
}

/// `Bearer ` with the scheme matched case-insensitively.
const BEARER: &[u8] = b"bearer ";

impl Policy {
    pub fn new<S: AsRef<str>>(
        token: Option<Secret>,
        allowed_logins: impl IntoIterator<Item = S>,
        insecure_local: bool,
    ) -> Self {
        Policy {
            token,
            allowed_logins: allowed_logins
                .into_iter()
                .map(|l| l.as_ref().trim().to_lowercase())
                .collect(),
            insecure_local,
        }
    }

    /// An admin API nobody can use is a configuration mistake, not a locked door.
    pub fn validate(&self) -> Result<(), String> {
        if self.token.as_ref().is_some_and(Secret::is_empty) {
            return Err("the admin token is empty; put a token in the token file".into());
        }
        if self.allowed_logins.iter().any(String::is_empty) {
            return Err("--allow-login needs a login such as you@example.com".into());
        }
        if self.token.is_none() && self.allowed_logins.is_empty() && !self.insecure_local {
            return Err(
                "no authentication configured: give a token (--token-file or HANDNODE_TOKEN), --allow-login EMAIL, or --insecure-local"
                    .into(),
            );
        }
        Ok(())
    }

    /// The contract's §2 procedure, step for step; reasons are exact (conformance vectors).
    pub fn decide(&self, req: &RequestFacts) -> Decision {
        let login = req.login();
        let local = req.is_local();
        if let Some(token) = &self.token {
            let Some(header) = &req.authorization else {
                return deny("missing Authorization header");
            };
            let header = header.expose();
            let bytes = header.as_bytes();
            if bytes.len() < BEARER.len() || !bytes[..BEARER.len()].eq_ignore_ascii_case(BEARER) {
                return deny("Authorization must be Bearer");
            }
            // The prefix is ASCII, so this index is a char boundary.
            if !token.matches(header[BEARER.len()..].trim()) {
                return deny("bad token");
            }
        }
        if !self.allowed_logins.is_empty() {
            return match login {
                None if local && self.insecure_local => Decision::Allow("local".into()),
                None => deny("no Tailscale identity on request"),
                Some(login) if !self.allowed_logins.contains(&login) => {
                    deny(format!("login {login} not allowed"))
                }
                Some(login) => Decision::Allow(login),
            };
        }
        if self.token.is_some() {
            return Decision::Allow(login.unwrap_or_else(|| "token".into()));
        }
        if local && self.insecure_local {
            return Decision::Allow("local".into());
        }
        deny("unauthenticated")
    }
}

impl Policy {
    /// What a client is told about a denial of `req` for `reason` (one of [`Policy::decide`]'s
    /// reasons): which requirement failed and what to do instead. The client learns nothing
    /// it did not send or could not read in `--help` (never the token, never the list).
    pub fn explain(&self, reason: &str, req: &RequestFacts) -> String {
        const LOCAL_SOCKET: &str =
            "on the box itself, the CLI's default local socket ($XDG_RUNTIME_DIR/handnode.sock) needs no credential";
        match reason {
            "missing Authorization header" => format!(
                "this daemon needs its admin token: send Authorization: Bearer <token> (the CLI reads --token-file, HANDNODE_TOKEN or <config dir>/token); {LOCAL_SOCKET}"
            ),
            "Authorization must be Bearer" => {
                "the Authorization header must be Bearer <token>".to_string()
            }
            "bad token" => "the bearer token is not this daemon's admin token".to_string(),
            "no Tailscale identity on request" if req.is_local() => format!(
                "no Tailscale identity on this request (it came from loopback, not through tailscale serve), and --allow-login requires one{}: on the box, use the local socket ($XDG_RUNTIME_DIR/handnode.sock, the CLI's default, needs no credential), or come through tailscale serve",
                if self.token.is_some() { " besides the token" } else { "" }
            ),
            "no Tailscale identity on request" => {
                "no Tailscale identity on this request, and --allow-login requires one: come through tailscale serve".to_string()
            }
            r if r.starts_with("login ") => format!(
                "the Tailscale {} is not in this daemon's --allow-login list",
                truncate(r.trim_end_matches(" not allowed"))
            ),
            _ => format!(
                "no credential this daemon takes: it wants {}; {LOCAL_SOCKET}",
                if self.insecure_local {
                    "a loopback request not relayed by a proxy"
                } else {
                    "its admin token or an allowed Tailscale login"
                }
            ),
        }
    }
}

/// Loopback, including an IPv4 loopback address mapped into IPv6 (`::ffff:127.0.0.1`),
/// which is how a dual-stack listener reports a local IPv4 peer.
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

fn truncate(value: &str) -> &str {
    if value.len() <= MAX_KEY_BYTES {
        return value;
    }
    let mut end = MAX_KEY_BYTES;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    &value[..end]
}

/// The key failed authentications are counted under. Behind a local proxy (`tailscale
/// serve`) every request comes from loopback, so the proxy's headers tell clients apart:
/// the last `X-Forwarded-For` entry (the one our proxy appended; earlier ones are whatever
/// the client sent), else the claimed login. Otherwise the peer address.
pub fn client_key(facts: &RequestFacts, peer: IpAddr) -> String {
    if is_loopback(peer) {
        let forwarded = facts
            .forwarded_for
            .as_deref()
            .and_then(|v| v.rsplit(',').next())
            .map(str::trim)
            .filter(|v| !v.is_empty());
        if let Some(addr) = forwarded {
            return format!("xff:{}", truncate(addr));
        }
        if let Some(login) = facts.login() {
            return format!("login:{}", truncate(&login));
        }
    }
    format!("ip:{peer}")
}

/// What to answer a request whose authentication failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// `401`: counted.
    Unauthorized,
    /// `429`: the client is locked out for this long more.
    Throttled { retry_after: Duration },
}

#[derive(Clone, Debug)]
struct Entry {
    window_start: Instant,
    failures: u32,
    locked_until: Option<Instant>,
    last_seen: Instant,
}

impl Entry {
    fn locked_at(&self, now: Instant) -> Option<Duration> {
        self.locked_until
            .filter(|until| *until > now)
            .map(|until| until - now)
    }
}

/// Failed-authentication throttle: `max_failures` failures from one key within `window`
/// (counted from the key's first failure) lock it for `lockout`. The table holds at most
/// `capacity` keys. Only failures are recorded: valid credentials are never throttled, so
/// callers consult it only after [`Policy::decide`] denied. Time is passed in.
#[derive(Debug)]
pub struct Throttle {
    max_failures: u32,
    window: Duration,
    lockout: Duration,
    capacity: usize,
    table: HashMap<String, Entry>,
}

impl Throttle {
    pub fn new(max_failures: u32, window: Duration, lockout: Duration, capacity: usize) -> Self {
        Throttle {
            max_failures: max_failures.max(1),
            window,
            lockout,
            capacity: capacity.max(1),
            table: HashMap::new(),
        }
    }

    /// How long `key` stays locked out, if it is locked now.
    pub fn locked(&self, key: &str, now: Instant) -> Option<Duration> {
        self.table.get(key).and_then(|e| e.locked_at(now))
    }

    /// Record a failed authentication from `key` and say how to answer it. While a key is
    /// locked its failures are answered `429` and not counted, so the lockout is not
    /// extended by retries. The failure that reaches the limit is still answered `401`;
    /// the lockout applies from the next one.
    pub fn fail(&mut self, key: &str, now: Instant) -> Verdict {
        if let Some(retry_after) = self.locked(key, now) {
            return Verdict::Throttled { retry_after };
        }
        if !self.table.contains_key(key) && self.table.len() >= self.capacity {
            self.evict(now);
        }
        let fresh = Entry {
            window_start: now,
            failures: 0,
            locked_until: None,
            last_seen: now,
        };
        let entry = self.table.entry(key.to_string()).or_insert(fresh.clone());
        if entry.locked_until.is_some() || now.duration_since(entry.window_start) >= self.window {
            *entry = fresh;
        }
        entry.failures += 1;
        entry.last_seen = now;
        if entry.failures >= self.max_failures {
            entry.locked_until = Some(now + self.lockout);
        }
        Verdict::Unauthorized
    }

    /// Keys currently remembered.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Make room for one key: drop entries that no longer matter, else the least recently
    /// seen one — preferring a key that is not locked, so a flood of new keys cannot free
    /// a client that is locked out.
    fn evict(&mut self, now: Instant) {
        let window = self.window;
        self.table.retain(|_, e| {
            e.locked_at(now).is_some()
                || (e.locked_until.is_none() && now.duration_since(e.window_start) < window)
        });
        if self.table.len() < self.capacity {
            return;
        }
        let victim = self
            .table
            .iter()
            .min_by_key(|(_, e)| (e.locked_at(now).is_some(), e.last_seen))
            .map(|(k, _)| k.clone());
        if let Some(key) = victim {
            self.table.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(headers: &[(&str, &str)], loopback: bool) -> RequestFacts {
        RequestFacts::from_headers(headers.iter().copied(), loopback)
    }

    fn token_policy() -> Policy {
        Policy::new(Some(Secret::new("s3cret")), Vec::<String>::new(), false)
    }

    /// Policy, request headers, peer is loopback, expected decision.
    type Case<'a> = (&'a Policy, Vec<(&'a str, &'a str)>, bool, Decision);

    #[test]
    fn decisions_follow_the_contract() {
        let logins = Policy::new(None, ["You@Example.com"], true);
        let both = Policy::new(Some(Secret::new("s3cret")), ["you@example.com"], false);
        let token = token_policy();
        let local_only = Policy::new(None, Vec::<String>::new(), true);
        let cases: Vec<Case> = vec![
            (
                &token,
                vec![("Authorization", "Bearer s3cret")],
                false,
                Decision::Allow("token".into()),
            ),
            (
                &token,
                vec![("AUTHORIZATION", "BEARER  s3cret ")],
                true,
                Decision::Allow("token".into()),
            ),
            (
                &token,
                vec![("authorization", "Bearer")],
                true,
                deny("Authorization must be Bearer"),
            ),
            (
                &token,
                vec![("authorization", "é")],
                true,
                deny("Authorization must be Bearer"),
            ),
            (
                &token,
                vec![
                    ("authorization", "Bearer s3cret"),
                    ("tailscale-user-login", "A@B.c"),
                ],
                false,
                Decision::Allow("a@b.c".into()),
            ),
            (
                &both,
                vec![
                    ("authorization", "Bearer s3cret"),
                    ("tailscale-user-login", "you@example.com"),
                ],
                true,
                Decision::Allow("you@example.com".into()),
            ),
            (
                &both,
                vec![("authorization", "Bearer s3cret")],
                true,
                deny("no Tailscale identity on request"),
            ),
            (
                &both,
                vec![("tailscale-user-login", "you@example.com")],
                true,
                deny("missing Authorization header"),
            ),
            // An allow-listed login configured in mixed case still matches.
            (
                &logins,
                vec![("tailscale-user-login", "you@example.com")],
                false,
                Decision::Allow("you@example.com".into()),
            ),
            // A login header alone, with only --insecure-local: not local, so denied.
            (
                &local_only,
                vec![("tailscale-user-login", "you@example.com")],
                true,
                deny("unauthenticated"),
            ),
            // An empty login header claims nobody, but still marks the request as relayed.
            (
                &logins,
                vec![("tailscale-user-login", " ")],
                true,
                deny("no Tailscale identity on request"),
            ),
        ];
        for (i, (policy, headers, loopback, want)) in cases.into_iter().enumerate() {
            assert_eq!(policy.decide(&facts(&headers, loopback)), want, "case {i}");
        }
    }

    #[test]
    fn validation_refuses_an_unusable_configuration() {
        assert!(Policy::new(None, Vec::<String>::new(), false)
            .validate()
            .is_err());
        assert!(
            Policy::new(Some(Secret::new("")), Vec::<String>::new(), false)
                .validate()
                .is_err()
        );
        assert!(Policy::new(None, [" "], false).validate().is_err());
        assert!(token_policy().validate().is_ok());
        assert!(Policy::new(None, ["a@b"], false).validate().is_ok());
        assert!(Policy::new(None, Vec::<String>::new(), true)
            .validate()
            .is_ok());
    }

    #[test]
    fn facts_never_print_the_authorization_header() {
        let f = facts(&[("Authorization", "Bearer hunter2")], true);
        assert!(!format!("{f:?}").contains("hunter2"));
        assert!(!format!("{:?}", token_policy()).contains("s3cret"));
    }

    #[test]
    fn first_header_occurrence_wins() {
        let f = facts(
            &[
                ("authorization", "Bearer s3cret"),
                ("Authorization", "Bearer other"),
            ],
            true,
        );
        assert_eq!(token_policy().decide(&f), Decision::Allow("token".into()));
    }

    #[test]
    fn loopback_includes_mapped_ipv4() {
        for (ip, want) in [
            ("127.0.0.1", true),
            ("127.3.4.5", true),
            ("::1", true),
            ("::ffff:127.0.0.1", true),
            ("::ffff:10.0.0.1", false),
            ("100.64.1.2", false),
            ("fd7a:115c:a1e0::1", false),
        ] {
            assert_eq!(is_loopback(ip.parse().unwrap()), want, "{ip}");
        }
    }

    #[test]
    fn client_keys() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let remote: IpAddr = "100.64.1.2".parse().unwrap();
        let relayed = facts(
            &[
                ("x-forwarded-for", "6.6.6.6, 100.70.0.9"),
                ("tailscale-user-login", "A@b"),
            ],
            true,
        );
        assert_eq!(client_key(&relayed, lo), "xff:100.70.0.9");
        let login_only = facts(&[("tailscale-user-login", "A@b")], true);
        assert_eq!(client_key(&login_only, lo), "login:a@b");
        assert_eq!(client_key(&facts(&[], true), lo), "ip:127.0.0.1");
        // A remote peer's own headers are not trusted to pick its key.
        assert_eq!(client_key(&relayed, remote), "ip:100.64.1.2");
        let huge = "1".repeat(MAX_KEY_BYTES + 1);
        let key = client_key(&facts(&[("x-forwarded-for", &huge)], true), lo);
        assert_eq!(key, format!("xff:{}", "1".repeat(MAX_KEY_BYTES)));
    }

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn the_failure_after_the_limit_is_throttled() {
        let t0 = Instant::now();
        let mut throttle = Throttle::new(10, 60 * SEC, 60 * SEC, 16);
        for i in 0..10 {
            assert_eq!(
                throttle.fail("k", t0 + i * SEC),
                Verdict::Unauthorized,
                "failure {i}"
            );
        }
        // The 10th failure (at 9 s) locked the key until 69 s; the 11th is refused with
        // the time left.
        assert_eq!(
            throttle.fail("k", t0 + 15 * SEC),
            Verdict::Throttled {
                retry_after: 54 * SEC
            }
        );
        // Retries while locked do not extend the lockout.
        assert_eq!(throttle.locked("k", t0 + 68 * SEC), Some(SEC));
        assert_eq!(throttle.locked("k", t0 + 69 * SEC), None);
        // After the lockout the count starts afresh.
        assert_eq!(throttle.fail("k", t0 + 69 * SEC), Verdict::Unauthorized);
        assert_eq!(throttle.locked("k", t0 + 69 * SEC), None);
    }

    #[test]
    fn failures_spread_over_windows_never_lock() {
        let t0 = Instant::now();
        let mut throttle = Throttle::new(3, 10 * SEC, 60 * SEC, 16);
        for i in 0..20 {
            // Two failures per 10 s window: always under the limit of three.
            let at = t0 + (i / 2) * 10 * SEC + (i % 2) * SEC;
            assert_eq!(throttle.fail("k", at), Verdict::Unauthorized, "failure {i}");
        }
        assert_eq!(throttle.locked("k", t0 + 100 * SEC), None);
    }

    #[test]
    fn one_bad_client_never_locks_out_another() {
        let t0 = Instant::now();
        let mut throttle = Throttle::new(2, 60 * SEC, 60 * SEC, 16);
        throttle.fail("xff:6.6.6.6", t0);
        throttle.fail("xff:6.6.6.6", t0);
        assert!(throttle.locked("xff:6.6.6.6", t0).is_some());
        assert_eq!(throttle.locked("xff:100.70.0.9", t0), None);
        assert_eq!(throttle.fail("xff:100.70.0.9", t0), Verdict::Unauthorized);
        assert_eq!(throttle.locked("xff:100.70.0.9", t0), None);
    }

    #[test]
    fn the_table_holds_at_most_its_capacity() {
        let t0 = Instant::now();
        let capacity = 4;
        let mut throttle = Throttle::new(2, 60 * SEC, 60 * SEC, capacity);
        // k0 gets locked; k1..k3 have one failure each.
        throttle.fail("k0", t0);
        throttle.fail("k0", t0);
        for i in 1..capacity as u32 {
            throttle.fail(&format!("k{i}"), t0 + i * SEC);
        }
        assert_eq!(throttle.len(), capacity);
        // Key number capacity+1: the least recently seen unlocked key (k1) goes, the
        // locked k0 stays.
        throttle.fail("new", t0 + 10 * SEC);
        assert_eq!(throttle.len(), capacity);
        assert!(throttle.locked("k0", t0 + 10 * SEC).is_some());
        assert!(!throttle.table.contains_key("k1"));
        assert!(throttle.table.contains_key("k2"));
        assert!(throttle.table.contains_key("new"));
    }

    #[test]
    fn stale_entries_are_dropped_before_live_ones() {
        let t0 = Instant::now();
        let mut throttle = Throttle::new(5, 10 * SEC, 10 * SEC, 2);
        throttle.fail("old", t0);
        throttle.fail("recent", t0 + 15 * SEC);
        throttle.fail("new", t0 + 16 * SEC);
        assert_eq!(throttle.len(), 2);
        assert!(throttle.table.contains_key("recent"));
        assert!(!throttle.table.contains_key("old"));
    }

    #[test]
    fn a_full_table_of_locked_keys_still_takes_new_ones() {
        let t0 = Instant::now();
        let mut throttle = Throttle::new(1, 60 * SEC, 60 * SEC, 2);
        throttle.fail("a", t0);
        throttle.fail("b", t0 + SEC);
        throttle.fail("c", t0 + 2 * SEC);
        assert_eq!(throttle.len(), 2);
        assert!(throttle.locked("c", t0 + 2 * SEC).is_some());
        assert!(throttle.locked("a", t0 + 2 * SEC).is_none());
    }
}
