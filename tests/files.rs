//! The file tools and the lent folder (contract §18) through a real reverse-attach grant:
//! the stub pod calls `file_get`/`file_put`/`file_list` over the grant socket. Every
//! traversal trick is refused by every tool that takes a path (read from the registry, so a
//! new one is attacked too) (and, where it could write, changes nothing outside), a
//! 100 MiB round trip is byte-exact with its sha256, an interrupted upload leaves nothing
//! at its path and its part file goes with the grant, two grants cannot see each other's
//! folders, the folder itself is vetted, and a `files` grant lists exactly its profile's
//! tools (read from the registry).

mod common;
#[path = "common/path_tools.rs"]
mod path_tools;

use std::path::Path;

use base64::Engine;
use common::*;
use handnode::profiles::Profile;
use handnode::tools::policy::ToolPolicy;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A grant of `profile` lending `folder`, attached, with the pod's socket.
fn lend(
    d: &TestDaemon,
    pod: &StubPod,
    session: &str,
    profile: &str,
    folder: &Path,
) -> (String, PodConn) {
    let mut body = attach_body(pod, session, profile);
    body["folder"] = json!(folder);
    let (id, mut conn) = d.attached_with(pod, body);
    conn.set_read_timeout(WATCHDOG);
    (id, conn)
}

struct Caller {
    conn: PodConn,
    n: u64,
}

impl Caller {
    fn call(&mut self, tool: &str, args: Value) -> Value {
        self.n += 1;
        self.conn.call_tool(json!(self.n), tool, args)
    }

    /// A call that must succeed: its result.
    fn ok(&mut self, tool: &str, args: Value) -> Value {
        let r = self.call(tool, args.clone());
        assert!(r.get("error").is_none(), "{tool} {args}: {r}");
        assert_ne!(r["result"]["isError"], true, "{tool} {args}: {r}");
        r["result"].clone()
    }

    /// A call that must fail (tool error or invalid params): its message.
    fn refused(&mut self, tool: &str, args: Value) -> String {
        let r = self.call(tool, args.clone());
        if let Some(e) = r.get("error") {
            return e["message"].as_str().unwrap_or("").to_string();
        }
        assert_eq!(
            r["result"]["isError"], true,
            "{tool} {args} should fail: {r}"
        );
        r["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    fn put(&mut self, path: &str, data: &[u8], extra: Value) -> Value {
        let mut args = json!({"path": path, "data": B64.encode(data)});
        for (k, v) in extra.as_object().unwrap() {
            args[k] = v.clone();
        }
        self.call("file_put", args)
    }
}

fn caller(conn: PodConn) -> Caller {
    Caller { conn, n: 0 }
}

/// Part files left in a directory.
fn parts_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".handnode-part"))
        .collect()
}

#[test]
fn every_traversal_trick_is_refused_and_nothing_outside_changes() {
    let pod = StubPod::start();
    let d = TestDaemon::new("files-trav");
    let root = temp_dir("files-trav-root");
    let lent = root.join("lent");
    let outside = root.join("outside");
    std::fs::create_dir_all(lent.join("sub")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), b"outside bytes").unwrap();
    std::fs::write(lent.join("sub/inside"), b"inside bytes").unwrap();
    let link =
        |target: &str, name: &str| std::os::unix::fs::symlink(target, lent.join(name)).unwrap();
    link("../outside", "out");
    link(outside.join("secret").to_str().unwrap(), "abs");
    link("loop2", "loop1");
    link("loop1", "loop2");
    link("/proc/self/root", "procroot");
    link("sub/inside", "ok-link");
    let (_, conn) = lend(&d, &pod, "trav", "files", &lent);
    let mut c = caller(conn);

    let secret = outside.join("secret");
    let tricks = [
        ("../outside/secret", "must not contain .."),
        ("sub/../../outside/secret", "must not contain .."),
        (secret.to_str().unwrap(), "absolute paths are refused"),
        ("/proc/self/root/etc/passwd", "absolute paths are refused"),
        ("out/secret", "outside the lent folder"),
        ("abs", "outside the lent folder"),
        ("procroot/etc/passwd", "outside the lent folder"),
        ("loop1", "loop"),
    ];
    for (path, why) in tricks {
        for tool in path_tools::path_tools() {
            for path in [path.to_string(), format!("{path}/new")] {
                let err = c.refused(tool.name, path_tools::with_path(tool, &path));
                assert!(err.contains(why), "{} {path}: {err}", tool.name);
            }
        }
        let err = c.put(&format!("{path}/new"), b"x", json!({"mkdirs": true}));
        assert!(
            err.get("error").is_some() || err["result"]["isError"] == true,
            "file_put {path}/new: {err}"
        );
    }
    // Nothing outside changed, nothing appeared there.
    assert_eq!(std::fs::read(&secret).unwrap(), b"outside bytes");
    let names: Vec<_> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    // A symlink that stays inside is followed.
    let r = c.ok("file_get", json!({"path": "ok-link"}));
    assert_eq!(r["structuredContent"]["size"], 12);
    let blob = r["content"][0]["resource"]["blob"].as_str().unwrap();
    assert_eq!(B64.decode(blob).unwrap(), b"inside bytes");
    assert_eq!(
        r["content"][0]["resource"]["mimeType"],
        "application/octet-stream"
    );
    // The folder itself lists; its symlinks show as symlinks.
    let r = c.ok("file_list", json!({"path": "."}));
    let entries = r["structuredContent"]["entries"].as_array().unwrap();
    let out = entries.iter().find(|e| e["name"] == "out").unwrap();
    assert_eq!(out["type"], "symlink");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_folder_is_vetted_at_attach() {
    let pod = StubPod::start();
    let d = TestDaemon::new("files-vet");
    let root = temp_dir("files-vet-root");
    let real = root.join("real");
    std::fs::create_dir_all(&real).unwrap();
    std::os::unix::fs::symlink(&real, root.join("linked")).unwrap();
    std::fs::write(root.join("plain-file"), b"").unwrap();
    let state = d.state_dir();
    std::fs::create_dir_all(state.join("inner")).unwrap();
    let cases: Vec<(Value, &str)> = vec![
        (json!(null), "profile files needs \"folder\""),
        (json!("relative/path"), "folder must be an absolute path"),
        (
            json!(format!("{}/../real", root.display())),
            "without . or .. parts",
        ),
        (json!(root.join("missing")), "does not exist"),
        (json!(root.join("plain-file")), "is not a directory"),
        (json!(root.join("linked")), "passes through a symlink"),
        (json!(state), "is the state dir"),
        (json!(state.parent().unwrap()), "holds the state dir"),
        (json!(state.join("inner")), "lies inside the state dir"),
        (json!("/"), "holds"),
        (json!(42), "folder must be a string"),
    ];
    for (folder, want) in cases {
        let mut body = attach_body(&pod, "vet", "files");
        if !folder.is_null() {
            body["folder"] = folder.clone();
        }
        let (status, v) = d.call("POST", "/attach", Some(&body));
        assert_eq!(status, 400, "{folder}: {v}");
        let msg = v["error"].as_str().unwrap();
        assert!(msg.contains(want), "{folder}: {msg}");
    }
    // Nothing was granted by any of them.
    let (_, list) = d.call("GET", "/attach", None);
    assert_eq!(list["grants"].as_array().unwrap().len(), 0, "{list}");
    // The real path is lent, and the grant JSON shows it.
    let mut body = attach_body(&pod, "vet", "files");
    body["folder"] = json!(real);
    let g = d.attach(body);
    assert_eq!(g["folder"], json!(real));
    assert_eq!(g["shell"], "no");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_files_grant_lists_its_profile_tools_and_nothing_else() {
    let pod = StubPod::start();
    let d = TestDaemon::new("files-list");
    let lent = temp_dir("files-list-lent");
    let (id, conn) = lend(&d, &pod, "list", "files", &lent);
    let mut c = caller(conn);
    let want: Vec<String> = ToolPolicy::fixed(Profile::Files)
        .unwrap()
        .tools()
        .iter()
        .map(|t| t.to_string())
        .collect();
    assert_eq!(want, handnode::tools::names(Profile::Files));
    c.n += 1;
    let list = c.conn.request(json!(c.n), "tools/list", json!({}));
    let listed: Vec<String> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, want);
    // Annotations follow the confined class: get and list read only.
    for t in list["result"]["tools"].as_array().unwrap() {
        let class = ToolPolicy::fixed(Profile::Files)
            .unwrap()
            .class_of(t["name"].as_str().unwrap())
            .unwrap();
        assert_eq!(t["annotations"], class.annotations().to_json(), "{t}");
    }
    // Any other local tool is answered as unknown.
    for other in handnode::tools::TOOLS
        .iter()
        .filter(|t| !want.iter().any(|w| w == t.name))
    {
        let r = c.call(other.name, json!({}));
        assert!(r.get("error").is_some(), "{}: {r}", other.name);
    }
    let g = d.grant(&id);
    assert_eq!(g["shell"], "no");
    assert_eq!(g["tools"], json!(want));
    let _ = std::fs::remove_dir_all(&lent);
}

#[test]
fn bad_input_gets_a_clear_error_and_changes_nothing() {
    let pod = StubPod::start();
    let d = TestDaemon::with("files-bad", |c| c.limits.upload_bytes = 1000);
    let lent = temp_dir("files-bad-lent");
    std::fs::write(lent.join("keep"), b"original").unwrap();
    let (_, conn) = lend(&d, &pod, "bad", "files", &lent);
    let mut c = caller(conn);
    // A missing parent without mkdirs; with it, created 0700.
    let err = c.refused("file_put", json!({"path": "a/b/c", "data": "aGk="}));
    assert!(err.contains("mkdirs: true"), "{err}");
    assert!(!lent.join("a").exists());
    c.ok(
        "file_put",
        json!({"path": "a/b/c", "data": "aGk=", "mkdirs": true}),
    );
    assert_eq!(std::fs::read(lent.join("a/b/c")).unwrap(), b"hi");
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&lent.join("a/b/c")), 0o600, "new files are 0600");
    assert_eq!(mode(&lent.join("a/b")), 0o700);
    // Invalid base64.
    let err = c.refused("file_put", json!({"path": "keep", "data": "%%%"}));
    assert!(err.contains("base64"), "{err}");
    // A wrong sha256: the part is dropped, the path untouched.
    let r = c.put(
        "keep",
        b"replacement",
        json!({"sha256": hex(&Sha256::digest(b"other"))}),
    );
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(r["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("sha256 mismatch"));
    assert_eq!(std::fs::read(lent.join("keep")).unwrap(), b"original");
    assert!(parts_in(&lent).is_empty());
    // An offset that leaves a hole: with no upload, and past the upload's end.
    let err = c.refused(
        "file_put",
        json!({"path": "new", "data": "aGk=", "offset": 5}),
    );
    assert!(err.contains("leave a hole"), "{err}");
    c.ok(
        "file_put",
        json!({"path": "new", "data": "aGk=", "final": false}),
    );
    let err = c.refused(
        "file_put",
        json!({"path": "new", "data": "aGk=", "offset": 3, "final": false}),
    );
    assert!(err.contains("send offset 2"), "{err}");
    assert!(!lent.join("new").exists(), "no half file at path");
    // The bound: exactly --upload-bytes of part files fits, one more byte does not.
    let r = c.put("new", &[7u8; 998], json!({"offset": 2, "final": false}));
    assert_ne!(r["result"]["isError"], true, "{r}");
    let r = c.put("other", &[1u8], json!({"final": false}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(r["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("--upload-bytes"));
    assert_eq!(
        parts_in(&lent).len(),
        1,
        "the refused chunk created nothing"
    );
    // Finishing frees the room; the file is whole.
    c.ok(
        "file_put",
        json!({"path": "new", "data": "", "offset": 1000}),
    );
    assert_eq!(std::fs::metadata(lent.join("new")).unwrap().len(), 1000);
    c.ok("file_put", json!({"path": "other", "data": "AQ=="}));
    // Ranges: past the end is refused; at the end is empty and eof.
    let err = c.refused("file_get", json!({"path": "keep", "offset": 9}));
    assert!(err.contains("past the end"), "{err}");
    let r = c.ok("file_get", json!({"path": "keep", "offset": 8}));
    assert_eq!(r["structuredContent"]["length"], 0);
    assert_eq!(r["structuredContent"]["eof"], true);
    let err = c.refused("file_get", json!({"path": "keep", "length": 4194305}));
    assert!(
        err.contains("length must be an integer in 0..=4194304"),
        "{err}"
    );
    // Writing onto a directory is refused before anything is written.
    let err = c.refused("file_put", json!({"path": "a", "data": "aGk="}));
    assert!(err.contains("path is a directory"), "{err}");
    assert!(parts_in(&lent).is_empty());
    // A directory, a FIFO: not regular files, refused without blocking.
    let err = c.refused("file_get", json!({"path": "a"}));
    assert!(err.contains("not a regular file"), "{err}");
    let fifo = lent.join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let err = c.refused("file_get", json!({"path": "fifo"}));
    assert!(err.contains("not a regular file"), "{err}");
    let _ = std::fs::remove_dir_all(&lent);
}

#[test]
fn a_hundred_mib_round_trip_is_byte_exact() {
    let pod = StubPod::start();
    let d = TestDaemon::with("files-big", quiet_liveness);
    let lent = temp_dir("files-big-lent");
    let (_, conn) = lend(&d, &pod, "big", "files", &lent);
    let mut c = caller(conn);
    const SIZE: usize = 100 << 20;
    const CHUNK: usize = 4 << 20;
    // Not a repeating pattern: a shifted chunk would hash differently.
    let mut data = vec![0u8; SIZE];
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for word in data.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        word.copy_from_slice(&x.to_le_bytes());
    }
    let sha = hex(&Sha256::digest(&data));
    for (i, chunk) in data.chunks(CHUNK).enumerate() {
        let last = (i + 1) * CHUNK >= SIZE;
        let mut extra = json!({"offset": i * CHUNK, "final": last});
        if last {
            extra["sha256"] = json!(sha);
        }
        let r = c.put("dir/big.bin", chunk, extra.clone());
        if i == 0 {
            assert_eq!(r["result"]["isError"], true, "no mkdirs: {r}");
            let mut extra = extra;
            extra["mkdirs"] = json!(true);
            let r = c.put("dir/big.bin", chunk, extra);
            assert_ne!(r["result"]["isError"], true, "{r}");
        } else {
            assert_ne!(r["result"]["isError"], true, "{r}");
        }
        if !last {
            assert!(!lent.join("dir/big.bin").exists(), "half a file at path");
        }
    }
    assert!(std::fs::read(lent.join("dir/big.bin")).unwrap() == data);
    // Read it back in 4 MiB ranges; each range's sha256 and the whole file's agree.
    let mut back = Vec::with_capacity(SIZE);
    loop {
        let r = c.ok(
            "file_get",
            json!({"path": "dir/big.bin", "offset": back.len(), "length": CHUNK}),
        );
        let s = &r["structuredContent"];
        let bytes = B64
            .decode(r["content"][0]["resource"]["blob"].as_str().unwrap())
            .unwrap();
        assert_eq!(s["sha256"], hex(&Sha256::digest(&bytes)));
        assert_eq!(s["length"], bytes.len());
        assert_eq!(s["size"], SIZE);
        back.extend_from_slice(&bytes);
        if s["eof"] == true {
            break;
        }
    }
    assert_eq!(back.len(), SIZE);
    assert_eq!(hex(&Sha256::digest(&back)), sha);
    let _ = std::fs::remove_dir_all(&lent);
}

#[test]
fn an_interrupted_upload_leaves_nothing_and_its_part_goes_with_the_grant() {
    let pod = StubPod::start();
    let d = TestDaemon::new("files-int");
    let lent = temp_dir("files-int-lent");
    std::fs::write(lent.join("existing"), b"old").unwrap();
    let (id, conn) = lend(&d, &pod, "int", "files", &lent);
    let mut c = caller(conn);
    for path in ["fresh", "existing"] {
        let r = c.put(path, &[1u8; 1000], json!({"final": false}));
        assert_ne!(r["result"]["isError"], true, "{r}");
    }
    assert!(!lent.join("fresh").exists());
    assert_eq!(std::fs::read(lent.join("existing")).unwrap(), b"old");
    assert_eq!(parts_in(&lent).len(), 2);
    // The pod goes away mid-upload (the grant lives on and redials): still nothing at path.
    drop(c);
    assert!(!lent.join("fresh").exists());
    assert_eq!(std::fs::read(lent.join("existing")).unwrap(), b"old");
    // The grant ends: its part files go.
    let (status, _) = d.call("DELETE", &format!("/attach/{id}"), None);
    assert_eq!(status, 204);
    poll_until(
        || parts_in(&lent),
        |p| p.is_empty(),
        |p| format!("part files left after the grant ended: {p:?}"),
    );
    assert!(!lent.join("fresh").exists());
    assert_eq!(std::fs::read(lent.join("existing")).unwrap(), b"old");
    let _ = std::fs::remove_dir_all(&lent);
}

#[test]
fn two_grants_with_different_folders_cannot_see_each_others() {
    let pod = StubPod::start();
    let d = TestDaemon::new("files-two");
    let root = temp_dir("files-two-root");
    let (fa, fb) = (root.join("a"), root.join("b"));
    std::fs::create_dir_all(&fa).unwrap();
    std::fs::create_dir_all(&fb).unwrap();
    std::fs::write(fa.join("mine-a"), b"A").unwrap();
    std::fs::write(fb.join("mine-b"), b"B").unwrap();
    let (_, conn_a) = lend(&d, &pod, "ga", "files", &fa);
    let (_, conn_b) = lend(&d, &pod, "gb", "files", &fb);
    let (mut a, mut b) = (caller(conn_a), caller(conn_b));
    for (c, mine, theirs, their_dir) in [
        (&mut a, "mine-a", "mine-b", &fb),
        (&mut b, "mine-b", "mine-a", &fa),
    ] {
        c.ok("file_get", json!({"path": mine}));
        let err = c.refused("file_get", json!({"path": theirs}));
        assert!(err.contains("no such file"), "{err}");
        let up = format!(
            "../{}/{theirs}",
            their_dir.file_name().unwrap().to_str().unwrap()
        );
        let absolute = their_dir.join(theirs).display().to_string();
        for tool in path_tools::path_tools() {
            let err = c.refused(tool.name, path_tools::with_path(tool, &up));
            assert!(err.contains(".."), "{} {up}: {err}", tool.name);
            let err = c.refused(tool.name, path_tools::with_path(tool, &absolute));
            assert!(err.contains("absolute"), "{} {absolute}: {err}", tool.name);
        }
        let listed = c.ok("file_list", json!({"path": "."}));
        let names: Vec<&str> = listed["structuredContent"]["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, [mine]);
    }
    // Uploads of the same name in each land in each folder only.
    a.ok(
        "file_put",
        json!({"path": "same", "data": B64.encode(b"from a")}),
    );
    b.ok(
        "file_put",
        json!({"path": "same", "data": B64.encode(b"from b")}),
    );
    assert_eq!(std::fs::read(fa.join("same")).unwrap(), b"from a");
    assert_eq!(std::fs::read(fb.join("same")).unwrap(), b"from b");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_folder_persists_with_the_grant_and_a_shell_grant_without_one_takes_absolute_paths() {
    let pod = StubPod::start();
    let dir = temp_dir("files-persist");
    let lent = dir.join("lent");
    std::fs::create_dir_all(&lent).unwrap();
    let mut d = TestDaemon::start(test_config(&dir), dir.clone());
    let mut body = attach_body(&pod, "keep", "files");
    body["folder"] = json!(lent);
    let g = d.attach(body.clone());
    let id = g["id"].as_str().unwrap().to_string();
    // The same folder renews; another folder is another grant (a replace).
    assert_eq!(
        d.attach(body.clone())["id"],
        json!(id),
        "same folder: a renew"
    );
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let mut moved = body.clone();
    moved["folder"] = json!(other);
    let mut careful = moved.clone();
    careful["replace"] = json!(false);
    let (status, v) = d.call("POST", "/attach", Some(&careful));
    assert_eq!(status, 409, "{v}");
    assert!(v["error"].as_str().unwrap().contains("lent folder"), "{v}");
    let replaced = d.attach(moved);
    assert_ne!(replaced["id"], json!(id), "another folder: a replace");
    assert_eq!(d.grant(&id)["ended"], "replaced");
    let g = d.attach(body);
    let id = g["id"].as_str().unwrap().to_string();
    let stored = std::fs::read_to_string(d.state_dir().join("grants.json")).unwrap();
    assert!(
        stored.contains(&format!("\"folder\": \"{}\"", lent.display())),
        "{stored}"
    );
    d.stop();
    let mut d = TestDaemon::start(test_config(&dir), dir.clone());
    let g = d.grant(&id);
    assert_eq!(g["folder"], json!(lent));
    assert_eq!(g["shell"], "no");
    // A folder that no longer passes its vetting (here: a symlink now stands in its
    // place) is not lent again at the next start: the grant is dropped.
    d.stop();
    std::fs::rename(&lent, dir.join("moved")).unwrap();
    std::os::unix::fs::symlink(dir.join("moved"), &lent).unwrap();
    let d = TestDaemon::start(test_config(&dir), dir.clone());
    let (status, _) = d.call("GET", &format!("/attach/{id}"), None);
    assert_eq!(
        status, 404,
        "a grant whose folder fails the vetting is dropped at load"
    );
    std::fs::remove_file(&lent).unwrap();
    std::fs::rename(dir.join("moved"), &lent).unwrap();
    // owner without a folder: file tools are shell tools and take absolute paths.
    let pod = StubPod::start();
    let (_, conn) = d.attached(&pod, "own", "owner");
    let mut c = caller(conn);
    c.conn.set_read_timeout(WATCHDOG);
    std::fs::write(lent.join("f"), b"abs").unwrap();
    let r = c.ok("file_get", json!({"path": lent.join("f")}));
    assert_eq!(r["structuredContent"]["size"], 3);
    let err = c.refused("file_get", json!({"path": "f"}));
    assert!(err.contains("must be absolute"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
