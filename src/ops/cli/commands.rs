//! What each operator subcommand does: `grant` (and `--wait`), `grants` (and `--watch`),
//! `revoke`, `approvals`, `approve`/`deny`.

use super::*;

/// How often `grant --wait` asks for the grant's state.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// How long one `approvals --watch` long-poll waits for a change (seconds); under
/// [`REQUEST_TIMEOUT`], so a quiet daemon is not mistaken for a dead one.
pub const WATCH_WAIT_SECS: u64 = 25;

pub(super) fn grant(
    args: &GrantArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<i32, Failure> {
    let client = Client::new(&args.client);
    let mut body = json!({"runtime": args.runtime, "session": args.session});
    let profile = match args.profile {
        None if !args.allow.is_empty() => Some(Profile::Custom),
        profile => profile,
    };
    if let Some(profile) = profile {
        body["profile"] = json!(profile.as_str());
    }
    if !args.allow.is_empty() {
        body["allow"] = json!(args.allow);
    }
    if !args.deny.is_empty() {
        body["deny"] = json!(args.deny);
    }
    if let Some(folder) = &args.folder {
        body["folder"] = json!(folder.to_string_lossy());
    }
    if args.own_display {
        body["display"] = json!("own");
    }
    if let Some(ttl) = args.ttl_secs {
        body["ttl_secs"] = json!(ttl);
    }
    match args.approve.as_deref() {
        Some([word]) if word == crate::grants::approvals::SHELL_WORD => {
            body["approve"] = json!(word)
        }
        Some(names) => body["approve"] = json!(names),
        None => {}
    }
    match &args.credential {
        Credential::Secret(s) => body["secret"] = json!(s.expose()),
        Credential::AdminCredential(s) => body["admin_credential"] = json!(s.expose()),
    }
    body["replace"] = json!(args.replace);
    let reply = client.call("POST", "/attach", Some(&body))?;
    if reply.status == 409 {
        let _ = writeln!(err, "handnode: {}", reply.error_message());
        return Ok(EXIT_USAGE);
    }
    if !(200..300).contains(&reply.status) {
        return Err(client.refused("create the grant", &reply));
    }
    let mut grant = reply.body;
    let id = grant
        .get("id")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| Failure("the daemon's answer has no grant id".into()))?;
    // What the request did, first: create, renew or replace look alike otherwise.
    let _ = writeln!(err, "{}", attach_outcome(&grant, &args.credential));
    if !args.wait {
        print(
            out,
            &if args.json {
                pretty(&grant)
            } else {
                describe(&grant)
            },
        )?;
        return Ok(EXIT_OK);
    }
    if !args.json {
        print(out, &describe(&grant))?;
    }
    let path = format!("/attach/{id}");
    let give_up = std::time::Instant::now() + Duration::from_secs(args.wait_secs);
    // One line per change of state (not per tick of a redial countdown), so a log of it
    // reads as what happened.
    let mut last_state = String::new();
    let code = loop {
        let now_state = change_key(&grant);
        if now_state != last_state {
            let _ = writeln!(err, "grant {id}: {}", state_line(&grant));
            last_state = now_state;
        }
        match str_field(&grant, "state") {
            "attached" => break EXIT_OK,
            "ended" => break EXIT_GRANT_ENDED,
            _ => {}
        }
        if std::time::Instant::now() >= give_up {
            let error = grant
                .get("last_error")
                .and_then(Value::as_str)
                .map_or("no dial has failed yet".to_string(), |e| {
                    format!("last dial error: {e}")
                });
            let _ = writeln!(
                err,
                "handnode: grant {id} is not attached after {} s ({}; {error}). It stays live and keeps dialing until {}; to stop it: handnode revoke {id}",
                args.wait_secs,
                str_field(&grant, "state"),
                str_field(&grant, "expires_at"),
            );
            break EXIT_WAIT_GAVE_UP;
        }
        std::thread::sleep(POLL_INTERVAL);
        let reply = client.call("GET", &path, None)?;
        match reply.status {
            200 => grant = reply.body,
            404 => {
                let _ = writeln!(err, "grant {id}: the daemon no longer knows it");
                return Ok(EXIT_GRANT_ENDED);
            }
            _ => return Err(client.refused("show the grant", &reply)),
        }
    };
    if args.json {
        print(out, &pretty(&grant))?;
    }
    Ok(code)
}

/// What a grant's `--wait` lines change on: its state, end and last error.
pub(super) fn change_key(grant: &Value) -> String {
    format!(
        "{} {} {}",
        str_field(grant, "state"),
        str_field(grant, "ended"),
        str_field(grant, "last_error")
    )
}

/// The first line of `handnode grant`'s answer: created, renewed (and what a new secret
/// means) or replaced, from the `202`'s `attach` field.
pub(super) fn attach_outcome(grant: &Value, credential: &Credential) -> String {
    let id = str_field(grant, "id");
    let session = str_field(grant, "session");
    match str_field(grant, "attach") {
        "renewed" => {
            let mut line = format!(
                "renewed grant {id} for session {session}: same id and socket, deadline now {}",
                str_field(grant, "expires_at")
            );
            let new_secret = grant.get("new_secret").and_then(Value::as_bool) == Some(true);
            if new_secret || matches!(credential, Credential::AdminCredential(_)) {
                line.push_str(
                    "; the new secret is used at the next dial and is not checked now (a pod that refuses it ends the grant handshake_rejected_401, naming this renewal)",
                );
            }
            line
        }
        "replaced" => format!(
            "replaced grant {} (it ended `replaced`) with grant {id} for session {session}",
            str_field(grant, "replaced_id")
        ),
        "created" => format!("created grant {id} for session {session}"),
        // A daemon that predates the field.
        _ => format!("grant {id} for session {session}"),
    }
}

pub(super) fn list(client: &Client) -> Result<Vec<Value>, Failure> {
    let reply = client.call("GET", "/attach", None)?;
    if reply.status != 200 {
        return Err(client.refused("list grants", &reply));
    }
    match reply.body.get("grants").and_then(Value::as_array) {
        Some(grants) => Ok(grants.clone()),
        None => Err(Failure(
            "the daemon's answer to GET /attach has no \"grants\" list".into(),
        )),
    }
}

pub(super) fn grants(args: &GrantsArgs, out: &mut dyn Write) -> Result<i32, Failure> {
    let client = Client::new(&args.client);
    let grants = list(&client)?;
    if args.json {
        print(out, &pretty(&json!({ "grants": grants })))?;
        return Ok(EXIT_OK);
    }
    if grants.is_empty() {
        print(out, "no grants\n")?;
        return Ok(EXIT_OK);
    }
    let mut rows = vec![[
        "ID",
        "STATE",
        "PROFILE",
        "SHELL",
        "SESSION",
        "EXPIRES IN",
        "CALLS",
        "JOBS",
        "RUNTIME",
        "LAST ERROR",
    ]
    .map(String::from)
    .to_vec()];
    for g in &grants {
        rows.push(vec![
            str_field(g, "id").to_string(),
            state_cell(g),
            str_field(g, "profile").to_string(),
            shell_line(g),
            str_field(g, "session").to_string(),
            // An ended grant expires in nothing.
            g.get("expires_in_secs")
                .and_then(Value::as_u64)
                .filter(|_| str_field(g, "state") != "ended")
                .map_or("-".into(), human_secs),
            g.get("calls")
                .and_then(Value::as_u64)
                .map_or("-".into(), |c| c.to_string()),
            // Running jobs; a daemon that predates jobs sends none.
            g.get("jobs")
                .and_then(Value::as_u64)
                .map_or("-".into(), |c| c.to_string()),
            str_field(g, "runtime").to_string(),
            error_cell(g),
        ]);
    }
    print(out, &table(&rows))?;
    Ok(EXIT_OK)
}

/// DELETE one grant; `Ok(false)` when the daemon did not know it (nothing to do).
pub(super) fn revoke_one(client: &Client, id: &str) -> Result<bool, Failure> {
    let reply = client.call("DELETE", &format!("/attach/{id}"), None)?;
    match reply.status {
        200..=299 => Ok(true),
        404 => Ok(false),
        _ => Err(client.refused(&format!("revoke grant {id}"), &reply)),
    }
}

pub(super) fn revoke(args: &RevokeArgs, out: &mut dyn Write) -> Result<i32, Failure> {
    let client = Client::new(&args.client);
    match &args.target {
        RevokeTarget::One(id) => {
            if revoke_one(&client, id)? {
                print(out, &format!("revoked grant {id}\n"))?;
            } else {
                // An ended grant is what the person wanted; an id the daemon never had is a
                // typo, and a script that revoked nothing must not read success.
                let reply = client.call("GET", &format!("/attach/{id}"), None)?;
                if reply.status != 200 {
                    return Err(Failure(format!(
                        "no grant {id} on this daemon; 'handnode grants' lists the grants"
                    )));
                }
                let why = str_field(&reply.body, "ended");
                let why = if why.is_empty() {
                    String::new()
                } else {
                    format!(" ({why})")
                };
                print(
                    out,
                    &format!("grant {id} already ended{why}; nothing to revoke\n"),
                )?;
            }
        }
        RevokeTarget::All => {
            let live: Vec<String> = list(&client)?
                .iter()
                .filter(|g| str_field(g, "state") != "ended")
                .map(|g| str_field(g, "id").to_string())
                .collect();
            if live.is_empty() {
                print(out, "no live grants; nothing to revoke\n")?;
            }
            for id in live {
                // A grant may end between the list and its DELETE; that is not a failure.
                if revoke_one(&client, &id)? {
                    print(out, &format!("revoked grant {id}\n"))?;
                }
            }
        }
    }
    Ok(EXIT_OK)
}

/// `GET /approvals`, optionally a long-poll past `seen`: the list and its `ETag`.
pub(super) fn approvals_list(
    client: &Client,
    seen: Option<&str>,
) -> Result<(Vec<Value>, String), Failure> {
    let (path, timeout) = match seen {
        Some(etag) => (
            format!(
                "/approvals?wait={WATCH_WAIT_SECS}&seen={}",
                etag.trim_matches('"')
            ),
            REQUEST_TIMEOUT.max(Duration::from_secs(WATCH_WAIT_SECS + 5)),
        ),
        None => ("/approvals".to_string(), REQUEST_TIMEOUT),
    };
    let reply = client.call_within("GET", &path, None, timeout)?;
    if reply.status != 200 {
        return Err(client.refused("list approvals", &reply));
    }
    let list = reply
        .body
        .get("approvals")
        .and_then(Value::as_array)
        .cloned()
        .ok_or_else(|| {
            Failure("the daemon's answer to GET /approvals has no \"approvals\" list".into())
        })?;
    Ok((list, reply.etag.unwrap_or_default()))
}

pub(super) fn approvals(args: &ApprovalsArgs, out: &mut dyn Write) -> Result<i32, Failure> {
    let client = Client::new(&args.client);
    let show = |list: &[Value], out: &mut dyn Write| {
        print(
            out,
            &if args.json {
                format!("{}\n", json!({ "approvals": list }))
            } else {
                approvals_table(list)
            },
        )
    };
    if let Some(id) = &args.full {
        // GET /approvals may cut long arguments; this route never does.
        let reply = client.call("GET", &format!("/approvals/{id}"), None)?;
        return match reply.status {
            200 => {
                let a = &reply.body;
                print(
                    out,
                    &if args.json {
                        format!("{a}\n")
                    } else {
                        approval_full(a)
                    },
                )?;
                Ok(EXIT_OK)
            }
            404 => Err(Failure(format!(
                "no call with id {id} is waiting for approval (decided, expired or withdrawn?); \
                 handnode approvals lists the waiting ones"
            ))),
            _ => Err(client.refused("show the approval", &reply)),
        };
    }
    let (list, mut etag) = approvals_list(&client, None)?;
    show(&list, out)?;
    if !args.watch {
        return Ok(EXIT_OK);
    }
    loop {
        let (next, next_etag) = approvals_list(&client, Some(&etag))?;
        if next_etag != etag {
            if !args.json {
                print(out, "--\n")?;
            }
            show(&next, out)?;
        }
        etag = next_etag;
    }
}

pub(super) fn decide(args: &DecideArgs, out: &mut dyn Write) -> Result<i32, Failure> {
    let client = Client::new(&args.client);
    let mut body = json!({"decision": if args.allow { "allow" } else { "deny" }});
    if args.remember {
        body["remember"] = json!(true);
    }
    if let Some(reason) = &args.reason {
        body["reason"] = json!(reason);
    }
    let reply = client.call("POST", &format!("/approvals/{}", args.id), Some(&body))?;
    match reply.status {
        200 => {
            let a = &reply.body;
            let mut text = format!(
                "{} {} of {} (session {}), by {}",
                if args.allow { "allowed" } else { "denied" },
                str_field(a, "id"),
                str_field(a, "tool"),
                str_field(a, "session"),
                str_field(a, "decided_by"),
            );
            if args.remember {
                text.push_str("; later calls of this tool under the grant run without asking");
            }
            text.push('\n');
            print(out, &text)?;
            Ok(EXIT_OK)
        }
        404 => Err(Failure(format!(
            "approval {} is unknown, already decided, expired or withdrawn",
            args.id
        ))),
        _ => Err(client.refused(&format!("decide approval {}", args.id), &reply)),
    }
}

/// `handnode calls` and `handnode jobs` (§22).
pub(super) fn calls(args: &CallsArgs, out: &mut dyn Write) -> Result<i32, Failure> {
    let client = Client::new(&args.client);
    let fetch = || -> Result<Vec<Value>, Failure> {
        let reply = client.call("GET", "/calls", None)?;
        if reply.status != 200 {
            return Err(client.refused("list the calls", &reply));
        }
        let mut list = reply.body["calls"].as_array().cloned().unwrap_or_default();
        if args.jobs {
            list.retain(|c| str_field(c, "state") == "job");
        }
        Ok(list)
    };
    let show = |list: &[Value], out: &mut dyn Write| {
        print(
            out,
            &if args.json {
                format!("{}\n", json!({ "calls": list }))
            } else if args.jobs {
                jobs_table(list)
            } else {
                calls_table(list)
            },
        )
    };
    let mut list = fetch()?;
    show(&list, out)?;
    if !args.watch {
        return Ok(EXIT_OK);
    }
    // What changed, not how long it has run: elapsed times alone do not reprint the list.
    let key = |list: &[Value]| -> Vec<(String, String)> {
        list.iter()
            .map(|c| {
                (
                    str_field(c, "id").to_string(),
                    str_field(c, "state").to_string(),
                )
            })
            .collect()
    };
    loop {
        std::thread::sleep(WATCH_INTERVAL);
        let next = fetch()?;
        if key(&next) != key(&list) {
            if !args.json {
                print(out, "--\n")?;
            }
            show(&next, out)?;
        }
        list = next;
    }
}

/// How often `handnode calls --watch` asks again (`GET /calls` has no long-poll).
pub const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// `handnode stop ID` (§22).
pub(super) fn stop(args: &StopArgs, out: &mut dyn Write) -> Result<i32, Failure> {
    let client = Client::new(&args.client);
    let reply = client.call("DELETE", &format!("/calls/{}", args.id), None)?;
    match reply.status {
        204 => {
            print(
                out,
                &format!(
                    "stopped {}; the agent is told: {}\n",
                    args.id,
                    crate::grants::running::STOPPED_BY_LENDER
                ),
            )?;
            Ok(EXIT_OK)
        }
        404 => Err(Failure(format!(
            "nothing with id {} runs now (ended already?); handnode calls lists what runs",
            args.id
        ))),
        _ => Err(client.refused(&format!("stop {}", args.id), &reply)),
    }
}

/// `handnode halt [REASON]` and `handnode resume` (§22).
pub(super) fn halt(args: &HaltArgs, out: &mut dyn Write) -> Result<i32, Failure> {
    let client = Client::new(&args.client);
    let reply = if args.halt {
        let body = match &args.reason {
            Some(r) => json!({ "reason": r }),
            None => json!({}),
        };
        client.call("POST", "/halt", Some(&body))?
    } else {
        client.call("POST", "/resume", Some(&json!({})))?
    };
    if reply.status != 200 {
        let what = if args.halt { "halt" } else { "resume" };
        return Err(client.refused(what, &reply));
    }
    let v = &reply.body;
    let text = if v["halted"] == true {
        let reason = v["reason"]
            .as_str()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        format!(
            "halted since {} by {}{reason}: nothing runs and no grant dials until handnode resume\n",
            str_field(v, "since"),
            str_field(v, "by"),
        )
    } else {
        "not halted: live grants dial again\n".to_string()
    };
    print(out, &text)?;
    Ok(EXIT_OK)
}

/// Largest journal the CLI reads in one answer (the daemon sends at most 8 MiB of lines;
/// an HTML file holds a whole journal, `--journal-bytes` and its base64).
const MAX_JOURNAL_BYTES: u64 = 4 << 30;

/// `handnode journal [ID] [--html FILE] [--json]` (§22).
pub(super) fn journal(args: &JournalArgs, out: &mut dyn Write) -> Result<i32, Failure> {
    let client = Client::new(&args.client);
    let Some(id) = &args.id else {
        let reply = client.call("GET", "/journals", None)?;
        if reply.status != 200 {
            return Err(client.refused("list the journals", &reply));
        }
        if args.json {
            print(out, &format!("{}\n", reply.body))?;
            return Ok(EXIT_OK);
        }
        return print(out, &journals_table(&reply.body)).map(|_| EXIT_OK);
    };
    if let Some(file) = &args.html {
        let reply = client.get_raw(&format!("/attach/{id}/journal.html"), MAX_JOURNAL_BYTES)?;
        if reply.status != 200 {
            return Err(client.refused(&format!("journal {id}"), &reply.as_reply()));
        }
        write_private(file, &reply.body)
            .map_err(|e| Failure(format!("cannot write {}: {e}", file.display())))?;
        print(
            out,
            &format!(
                "wrote {} ({} bytes): open it in any browser, offline; it fetches nothing\n",
                file.display(),
                reply.body.len()
            ),
        )?;
        return Ok(EXIT_OK);
    }
    let mut since = 0u64;
    loop {
        let reply = client.get_raw(
            &format!("/attach/{id}/journal?since={since}&thumbnails=0"),
            MAX_JOURNAL_BYTES,
        )?;
        if reply.status != 200 {
            return Err(client.refused(&format!("journal {id}"), &reply.as_reply()));
        }
        for line in reply.body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            if args.json {
                out.write_all(line)
                    .and_then(|_| out.write_all(b"\n"))
                    .map_err(|e| Failure(format!("cannot write: {e}")))?;
            } else {
                let record: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
                print(out, &journal_line(&record))?;
            }
        }
        match reply.next_since.and_then(|n| n.parse::<u64>().ok()) {
            Some(next) if next > since => since = next,
            _ => return Ok(EXIT_OK),
        }
    }
}

/// A file only its owner may read (a journal holds what was typed).
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}
