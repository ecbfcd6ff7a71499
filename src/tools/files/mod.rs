//! The file tools (contract §18): `file_get` (a range of a file as an embedded resource
//! with its SHA-256), `file_put` (chunks into a hidden part file renamed into place on
//! `final`), `file_list` (a directory's entries). Each declares its `path` argument
//! (`Reach::Paths`) and gets its confinement from [`super::paths`]: beneath a lent folder,
//! or absolute and fenced for a grant with its own display.
//!
//! Their class is `shell` in general (reading and writing any file of the user reaches
//! the shell: `~/.bashrc`, `~/.ssh/authorized_keys`), and `observe`/`act` under a lent
//! folder ([`confined_class`]); `tools::policy` asks which applies to a grant.
//!
//! Each call does bounded work on its pool worker (at most one 4 MiB read or write, and
//! on `final` one pass over the part file when its chunks came out of order) and never
//! waits on another call.

pub mod uploads;

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;

use base64::Engine;
use rustix::fs::{Mode, OFlags};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::args::{self, Naming};
use super::paths::{self, PathArg, Refusal};
use super::{CallContext, Needs, Reach, Tool};
use crate::pool::Completion;
use crate::profiles::{Class, Profile};
use crate::wire::mcp::ToolOutput;
use uploads::{Key, Part};

/// Default and largest range `file_get` answers, and the largest decoded `file_put` chunk.
pub const DEFAULT_GET_BYTES: i64 = 1 << 20;
pub const MAX_CHUNK_BYTES: i64 = 4 << 20;
/// Largest request body the pod's runtime takes (bytes): it closes on a larger one before
/// reading it, so an agent's `file_put` of a 4 MiB chunk through the pod fails (issue 36).
pub const POD_BODY_LIMIT: i64 = 1 << 20;
/// What of [`POD_BODY_LIMIT`] the request's envelope may take besides `data` (bytes): the
/// JSON-RPC frame, the tool name, a path of up to 4096 bytes escaped, the other arguments.
pub const POD_ENVELOPE_BYTES: i64 = 16 << 10;
/// The longest `data` (base64 characters, a multiple of 4) a `file_put` through the pod may
/// carry: the real largest chunk, given as `data.maxLength` over a grant socket (§24).
pub const POD_PUT_DATA_CHARS: i64 = (POD_BODY_LIMIT - POD_ENVELOPE_BYTES) / 4 * 4;
/// [`POD_PUT_DATA_CHARS`] decoded (bytes).
pub const POD_PUT_CHUNK_BYTES: i64 = POD_PUT_DATA_CHARS / 4 * 3;

/// `file_put` as a grant socket lists it: what crosses the pod must fit the pod's body limit,
/// so `data.maxLength` and the description give the real largest chunk. `/mcp` keeps 4 MiB.
pub fn fit_to_pod(tool: &mut Value) {
    if tool["name"] != "file_put" {
        return;
    }
    tool["inputSchema"]["properties"]["data"]["maxLength"] = json!(POD_PUT_DATA_CHARS);
    tool["inputSchema"]["properties"]["data"]["description"] = json!(format!(
        "base64, at most {POD_PUT_DATA_CHARS} characters ({POD_PUT_CHUNK_BYTES} bytes decoded) through the pod"
    ));
    if let Some(Value::String(d)) = tool.get_mut("description") {
        d.push_str(&format!(
            " Through this grant's pod a request body is at most 1 MiB: send chunks of at most \
             {POD_PUT_CHUNK_BYTES} bytes ({POD_PUT_DATA_CHARS} base64 characters)."
        ));
    }
}

/// Default and largest number of entries `file_list` answers.
pub const DEFAULT_LIST: i64 = 1000;
pub const MAX_LIST: i64 = 10_000;
/// Largest offset accepted (bytes); far beyond any `--upload-bytes`.
const MAX_OFFSET: i64 = 1 << 50;

const PROFILES: &[Profile] = &[Profile::Owner, Profile::Desktop, Profile::Files];

pub static GET: Tool = Tool {
    name: "file_get",
    class: Class::Shell,
    class_reason: "reads any file of the daemon's user (keys, tokens) unless a lent folder confines it, where it only reads (observe)",
    description: "Read bytes of a file: up to `length` bytes (default 1 MiB, at most 4 MiB) from \
`offset`, answered as an embedded resource (base64 blob with a MIME type) plus `structuredContent` \
{path, size, offset, length, eof, sha256 of this range, mtime}. Read a large file in ranges until \
`eof`. Under a lent folder `path` is relative to it; otherwise it is absolute.",
    input_schema: get_schema,
    output_schema: Some(get_output_schema),
    start: get_start,
    inline: None,
    needs: Needs::Nothing,
    reach: Reach::Paths(&[PathArg::entry("path")]),
    changes_screen: false,
    profiles: PROFILES,
};

pub static PUT: Tool = Tool {
    name: "file_put",
    class: Class::Shell,
    class_reason: "writes any file of the daemon's user (~/.bashrc runs) unless a lent folder confines it, where it only changes files (act)",
    description: "Write a file from base64 `data` (at most 4 MiB decoded per call). Chunks go into \
a hidden part file beside `path`: send offset 0, then each next chunk at the offset where the last \
ended, `final: false` on all but the last. On `final` (the default) the part file is checked \
against `sha256` (hex, of the whole file) when given and renamed onto `path`, so no reader ever \
sees half a file; a wrong sha256 drops the upload and leaves `path` as it was. New files are \
0600. `mkdirs: true` creates missing directories. Unfinished uploads are removed when the grant \
ends.",
    input_schema: put_schema,
    output_schema: Some(put_output_schema),
    start: put_start,
    inline: None,
    needs: Needs::Nothing,
    reach: Reach::Paths(&[PathArg::entry("path")]),
    changes_screen: false,
    profiles: PROFILES,
};

pub static LIST: Tool = Tool {
    name: "file_list",
    class: Class::Shell,
    class_reason: "lists any directory of the daemon's user unless a lent folder confines it, where it only reads (observe)",
    description: "List a directory: each entry's name, type (file, dir, symlink, other), size \
and mtime, sorted by name, at most `max` (default 1000, at most 10000; `truncated` says when there \
were more). Under a lent folder `path` is relative to it (\".\" is the folder); otherwise absolute.",
    input_schema: list_schema,
    output_schema: Some(list_output_schema),
    start: list_start,
    inline: None,
    needs: Needs::Nothing,
    reach: Reach::Paths(&[PathArg::entry_or_folder("path")]),
    changes_screen: false,
    profiles: PROFILES,
};

/// `structuredContent` of `file_get`: the range read (the bytes are the resource block).
fn get_output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "size": {"type": "integer", "minimum": 0},
            "offset": {"type": "integer", "minimum": 0},
            "length": {"type": "integer", "minimum": 0},
            "eof": {"type": "boolean"},
            "sha256": {"type": "string"},
            "mtime": {},
        },
        "required": ["path", "size", "offset", "length", "eof", "sha256"],
    })
}

/// `structuredContent` of `file_put`: a chunk received, or the file renamed into place.
fn put_output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "received": {"type": "integer", "minimum": 0},
            "size": {"type": "integer", "minimum": 0},
            "sha256": {"type": "string"},
            "final": {"type": "boolean"},
        },
        "required": ["path", "final"],
    })
}

/// `structuredContent` of `file_list`: the entries, sorted by name.
fn list_output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "entries": {"type": "array", "items": {"type": "object", "properties": {
                "name": {"type": "string"},
                "type": {"type": "string", "enum": ["file", "dir", "symlink", "other"]},
                "size": {"type": "integer", "minimum": 0},
                "mtime": {},
            }, "required": ["name", "type"]}},
            "truncated": {"type": "boolean"},
        },
        "required": ["path", "entries", "truncated"],
    })
}

/// The class of a file tool under a lent folder, where it reaches that folder and
/// nothing else; `None` for every other tool (its class does not depend on a folder).
pub fn confined_class(name: &str) -> Option<Class> {
    [
        (&GET, Class::Observe),
        (&PUT, Class::Act),
        (&LIST, Class::Observe),
    ]
    .into_iter()
    .find(|(t, _)| t.name == name)
    .map(|(_, c)| c)
}

/// A schema from its JSON text: shorter to read than `json!`, and less code.
fn schema(text: &str) -> Value {
    serde_json::from_str(text).expect("a built-in schema is valid JSON")
}

fn get_schema() -> Value {
    schema(
        r#"{"type":"object","properties":{
        "path":{"type":"string","description":"relative to the lent folder, else absolute"},
        "offset":{"type":"integer","minimum":0,"description":"first byte, default 0"},
        "length":{"type":"integer","minimum":0,"maximum":4194304,"description":"bytes, default 1048576"}},
        "required":["path"]}"#,
    )
}

fn put_schema() -> Value {
    schema(
        r#"{"type":"object","properties":{
        "path":{"type":"string","description":"relative to the lent folder, else absolute"},
        "data":{"type":"string","description":"base64, at most 4 MiB decoded"},
        "offset":{"type":"integer","minimum":0,"description":"where this chunk goes: 0, or where the previous chunk ended"},
        "final":{"type":"boolean","description":"default true: this chunk completes the file"},
        "sha256":{"type":"string","description":"hex SHA-256 of the whole file, checked on the final chunk"},
        "mkdirs":{"type":"boolean","description":"create missing directories, default false"}},
        "required":["path","data"]}"#,
    )
}

fn list_schema() -> Value {
    schema(
        r#"{"type":"object","properties":{
        "path":{"type":"string","description":"relative to the lent folder (\".\" is the folder), else absolute"},
        "max":{"type":"integer","minimum":1,"maximum":10000,"description":"entries, default 1000"}},
        "required":["path"]}"#,
    )
}

/// The scope of this call's uploads: its grant, or the owner's `/mcp`.
fn scope(cx: &CallContext) -> String {
    cx.grant
        .as_ref()
        .map_or_else(|| "owner".to_string(), |g| g.id.clone())
}

fn string<'a>(map: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    match map.get(key) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(format!("{key} is required")),
        Some(_) => Err(format!("{key} must be a string")),
    }
}

fn flag(map: &Map<String, Value>, key: &str, default: bool) -> Result<bool, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(format!("{key} must be true or false")),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Run a tool's body: argument errors are `-32602`, everything else a tool error.
fn answer(done: Completion, body: impl FnOnce() -> Result<Value, Failure>) {
    answer_output(done, || body().map(ToolOutput::Result));
}

/// [`answer`] for a body that builds its own [`ToolOutput`] (`file_get`'s pre-encoded one).
fn answer_output(done: Completion, body: impl FnOnce() -> Result<ToolOutput, Failure>) {
    done.complete(match body() {
        Ok(output) => output,
        Err(Failure::Args(m)) => ToolOutput::InvalidParams(m),
        Err(Failure::Tool(m)) => ToolOutput::tool_error(m),
    });
}

enum Failure {
    /// Arguments of the wrong shape.
    Args(String),
    /// Arguments well formed, but the file system says no (or the bytes are wrong).
    Tool(String),
}

fn args_err(m: String) -> Failure {
    Failure::Args(m)
}

fn tool_err(m: String) -> Failure {
    Failure::Tool(m)
}

/// A path refused by [`paths::confine`], as this tool answers it.
fn refused(r: Refusal) -> Failure {
    match r {
        Refusal::Args(m) => Failure::Args(m),
        Refusal::Place(m) => Failure::Tool(m),
    }
}

fn mtime(st: &rustix::fs::Stat) -> String {
    crate::base::timefmt::rfc3339(st.st_mtime.max(0) as u64)
}

fn file_type(st: &rustix::fs::Stat) -> &'static str {
    use rustix::fs::FileType;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => "file",
        FileType::Directory => "dir",
        FileType::Symlink => "symlink",
        _ => "other",
    }
}

/// The MIME type of a file name, by its extension; `application/octet-stream` otherwise.
pub fn mime_type(name: &str) -> &'static str {
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "txt" | "log" | "md" | "rs" | "py" | "sh" | "c" | "h" | "toml" | "yaml" | "yml" | "ini"
        | "cfg" => "text/plain",
        "csv" => "text/csv",
        "html" | "htm" => "text/html",
        "css" => "text/css",
        "js" | "mjs" => "text/javascript",
        "json" => "application/json",
        "xml" => "application/xml",
        "pdf" => "application/pdf",
        "zip" => "application/zip",
        "gz" | "tgz" => "application/gzip",
        "tar" => "application/x-tar",
        "wasm" => "application/wasm",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "mp3" => "audio/mpeg",
        "wav" => "audio/wav",
        "mp4" => "video/mp4",
        "webm" => "video/webm",
        _ => "application/octet-stream",
    }
}

fn get_start(args: Value, cx: CallContext, done: Completion) {
    answer_output(done, || {
        let map = args::object(&args).map_err(args_err)?;
        let given = paths::given(&GET, map).map_err(args_err)?;
        let offset = args::int(map, "offset", 0..=MAX_OFFSET, Naming::Plain, None)
            .map_err(args_err)?
            .unwrap_or(0) as u64;
        let length = args::int(
            map,
            "length",
            0..=MAX_CHUNK_BYTES,
            Naming::Plain,
            Some("4 MiB"),
        )
        .map_err(args_err)?
        .unwrap_or(DEFAULT_GET_BYTES) as usize;
        let (place, checked) = paths::confine(&GET, given, &cx).map_err(refused)?;
        let path = checked[0];
        // O_NONBLOCK: opening a FIFO must not wait for a writer; anything but a regular
        // file is refused before a byte is read.
        let fd = place
            .open(path, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty())
            .map_err(tool_err)?;
        let st = rustix::fs::fstat(&fd).map_err(|e| tool_err(format!("{path}: {e}")))?;
        if file_type(&st) != "file" {
            return Err(tool_err(format!(
                "not a regular file ({}): {path}",
                file_type(&st)
            )));
        }
        let size = st.st_size.max(0) as u64;
        if offset > size {
            return Err(tool_err(format!(
                "offset {offset} is past the end of {path} ({size} bytes)"
            )));
        }
        let want = length.min((size - offset) as usize);
        let file = File::from(fd);
        let mut buf = vec![0u8; want];
        let mut got = 0;
        while got < want {
            match file.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break, // shrank meanwhile
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(tool_err(format!("reading {path}: {e}"))),
            }
        }
        buf.truncate(got);
        let end = offset + got as u64;
        let name = path.rsplit('/').next().unwrap_or(path);
        let sha = hex(&Sha256::digest(&buf));
        let eof = end >= size;
        let text = format!(
            "{path}: bytes {offset}..{end} of {size}{}, sha256 {sha}",
            if eof { " (end of file)" } else { "" }
        );
        let structured = json!({
            "path": place.shown(path),
            "size": size,
            "offset": offset,
            "length": got,
            "eof": eof,
            "sha256": sha,
            "mtime": mtime(&st),
        });
        // The result is written out here rather than as a `Value`: the blob (up to 5.6 MB
        // of base64) is encoded straight into the reply text, once, and never scanned for
        // characters to escape (the base64 alphabet has none).
        let small = |v: &Value| serde_json::to_string(v).expect("JSON values serialise");
        let mut json = String::with_capacity(buf.len() / 3 * 4 + 1024);
        json.push_str(r#"{"content":[{"type":"resource","resource":{"uri":"#);
        json.push_str(&small(&json!(place.uri(path))));
        json.push_str(r#","mimeType":"#);
        json.push_str(&small(&json!(mime_type(name))));
        json.push_str(r#","blob":""#);
        base64::engine::general_purpose::STANDARD.encode_string(&buf, &mut json);
        json.push_str(r#""}},{"type":"text","text":"#);
        json.push_str(&small(&json!(text)));
        json.push_str(r#"}],"structuredContent":"#);
        json.push_str(&small(&structured));
        json.push('}');
        Ok(ToolOutput::Encoded {
            json: json.into(),
            is_error: false,
        })
    });
}

/// A `file_put` call's arguments, checked before anything is touched.
struct PutArgs<'a> {
    path: &'a str,
    data: Vec<u8>,
    offset: u64,
    last: bool,
    sha256: Option<String>,
    mkdirs: bool,
}

fn put_args(map: &Map<String, Value>) -> Result<PutArgs<'_>, String> {
    let path = paths::given(&PUT, map)?[0];
    let text = string(map, "data")?;
    // Decoded size from the text's length, before decoding anything.
    if text.len() as i64 > (MAX_CHUNK_BYTES / 3 + 1) * 4 {
        return Err(format!(
            "data must be at most {MAX_CHUNK_BYTES} bytes (4 MiB) once decoded; send the file in chunks"
        ));
    }
    let data = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("data must be base64 (standard alphabet, padded): {e}"))?;
    if data.len() as i64 > MAX_CHUNK_BYTES {
        return Err(format!(
            "data must be at most {MAX_CHUNK_BYTES} bytes (4 MiB) once decoded; send the file in chunks"
        ));
    }
    let offset = args::int(map, "offset", 0..=MAX_OFFSET, Naming::Plain, None)?.unwrap_or(0) as u64;
    let last = flag(map, "final", true)?;
    let mkdirs = flag(map, "mkdirs", false)?;
    let sha256 = match map.get("sha256") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Some(s.to_ascii_lowercase())
        }
        Some(_) => return Err("sha256 must be 64 hex digits".into()),
    };
    Ok(PutArgs {
        path,
        data,
        offset,
        last,
        sha256,
        mkdirs,
    })
}

fn put_start(args: Value, cx: CallContext, done: Completion) {
    answer(done, || {
        let map = args::object(&args).map_err(args_err)?;
        let a = put_args(map).map_err(args_err)?;
        let (place, checked) = paths::confine(&PUT, vec![a.path], &cx).map_err(refused)?;
        let path = checked[0];
        let split = place.split(path).map_err(args_err)?;
        let dir = place.open_dir(split.parent, a.mkdirs).map_err(|e| {
            if a.mkdirs {
                tool_err(e)
            } else {
                tool_err(format!("{e} (mkdirs: true creates missing directories)"))
            }
        })?;
        // What is at `path` now must resolve beneath the folder too: a symlink there
        // that leaves (or loops) is refused before anything is written. One that stays
        // inside is replaced by the rename, never written through.
        match place.open(path, OFlags::PATH, Mode::empty()) {
            Ok(fd) => {
                if rustix::fs::fstat(&fd).is_ok_and(|st| file_type(&st) == "dir") {
                    return Err(tool_err(format!("path is a directory: {path}")));
                }
            }
            Err(e) if e.starts_with("no such file") => {}
            Err(e) => return Err(tool_err(e)),
        }
        let st = rustix::fs::fstat(&dir).map_err(|e| tool_err(format!("{path}: {e}")))?;
        let key = Key {
            dev: st.st_dev,
            ino: st.st_ino,
            name: split.name.to_string(),
        };
        let scope = scope(&cx);
        let uploads = &cx.host.files;
        let new_size = a.offset + a.data.len() as u64;
        let taken = uploads.take(&scope, &key, new_size).map_err(tool_err)?;
        let result = write_chunk(taken.part, dir, &scope, split.name, &a, path);
        match result {
            Ok(Step::More(part)) => {
                let size = part.size;
                uploads.give_back(&scope, &key, Some(part));
                Ok(json!({
                    "content": [{"type": "text", "text": format!(
                        "{path}: {size} bytes received; send the next chunk at offset {size}")}],
                    "structuredContent": {"path": place.shown(path), "received": size, "final": false},
                }))
            }
            Ok(Step::Done { size, sha256 }) => {
                uploads.finish(&scope, &key);
                Ok(json!({
                    "content": [{"type": "text", "text": format!(
                        "{path}: written, {size} bytes, sha256 {sha256}")}],
                    "structuredContent": {"path": place.shown(path), "size": size, "sha256": sha256, "final": true},
                }))
            }
            Err((part, why)) => {
                uploads.give_back(&scope, &key, part);
                Err(tool_err(why))
            }
        }
    });
}

enum Step {
    /// The chunk is in the part file; more to come.
    More(Part),
    /// Renamed into place.
    Done { size: u64, sha256: String },
}

/// Write one chunk into the part (created at offset 0), and on `final` check and rename
/// it. On error: the part as it was before this chunk (or `None`: dropped, or never
/// created), and why. A refused chunk changes nothing; a failed `final` drops the part.
fn write_chunk(
    part: Option<Part>,
    dir: std::os::fd::OwnedFd,
    scope: &str,
    name: &str,
    a: &PutArgs<'_>,
    path: &str,
) -> Result<Step, (Option<Part>, String)> {
    let mut part = match part {
        Some(p) if a.offset > p.size => {
            let size = p.size;
            return Err((
                Some(p),
                format!(
                    "offset {} would leave a hole: this upload of {path} has {size} bytes so far; send offset {size} (or 0 to start again)",
                    a.offset
                ),
            ));
        }
        Some(p) => p,
        None if a.offset > 0 => {
            return Err((
                None,
                format!(
                    "offset {} would leave a hole: no upload of {path} is in progress; start at offset 0",
                    a.offset
                ),
            ))
        }
        None => {
            let part_name = uploads::part_name(scope, name);
            let fd = rustix::fs::openat(
                &dir,
                part_name.as_str(),
                OFlags::RDWR | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )
            .map_err(|e| (None, format!("cannot create the part file beside {path}: {e}")))?;
            Part {
                dir,
                part_name,
                file: File::from(fd),
                size: 0,
                hasher: Some(Box::default()),
            }
        }
    };
    // Write: the part becomes its first `offset` bytes plus this chunk.
    let before = part.size;
    let wrote = (|| -> std::io::Result<()> {
        if a.offset < part.size {
            part.file.set_len(a.offset)?;
            part.hasher = if a.offset == 0 {
                Some(Box::default())
            } else {
                None
            };
        }
        part.file.write_all_at(&a.data, a.offset)?;
        Ok(())
    })();
    if let Err(e) = wrote {
        // Back to what it was, as far as the file system lets us: drop it if unsure.
        let restored = part.file.set_len(before.min(a.offset)).is_ok();
        part.size = before.min(a.offset);
        if a.offset < before {
            part.hasher = None;
        }
        let why = format!("writing {path} failed: {e}");
        return Err((restored.then_some(part), why));
    }
    part.size = a.offset + a.data.len() as u64;
    if let Some(h) = part.hasher.as_mut() {
        h.update(&a.data);
    }
    if !a.last {
        return Ok(Step::More(part));
    }
    finish(part, name, a.sha256.as_deref(), path)
}

/// The final chunk: fsync, check the whole file's SHA-256, keep an existing target's
/// permissions, rename onto the target. Any failure drops the part (the upload is over).
fn finish(
    mut part: Part,
    name: &str,
    want: Option<&str>,
    path: &str,
) -> Result<Step, (Option<Part>, String)> {
    let fail = |part: Part, why: String| {
        part.discard();
        Err((None, why))
    };
    let sha = match part.hasher.take() {
        Some(h) => hex(&h.finalize()),
        None => match hash_file(&mut part.file) {
            Ok(s) => s,
            Err(e) => return fail(part, format!("reading back {path} failed: {e}")),
        },
    };
    if let Some(want) = want {
        if want != sha {
            return fail(
                part,
                format!(
                    "sha256 mismatch: the uploaded bytes hash to {sha}, not {want}; the upload \
                     is dropped and {path} is unchanged"
                ),
            );
        }
    }
    // An existing file keeps its permissions; a new one stays 0600.
    match rustix::fs::statat(&part.dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if file_type(&st) == "dir" => {
            return fail(part, format!("path is a directory: {path}"));
        }
        Ok(st) if file_type(&st) == "file" => {
            let mode = Mode::from_raw_mode(st.st_mode & 0o7777);
            if let Err(e) = rustix::fs::fchmod(&part.file, mode) {
                return fail(part, format!("cannot set the permissions of {path}: {e}"));
            }
        }
        _ => {}
    }
    if let Err(e) = part.file.sync_all() {
        return fail(part, format!("cannot flush {path} to disk: {e}"));
    }
    if let Err(e) = rustix::fs::renameat(&part.dir, part.part_name.as_str(), &part.dir, name) {
        return fail(part, format!("cannot rename the upload onto {path}: {e}"));
    }
    // The rename is durable once the directory is.
    if let Ok(d) = rustix::fs::openat(
        &part.dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        let _ = rustix::fs::fsync(&d);
    }
    Ok(Step::Done {
        size: part.size,
        sha256: sha,
    })
}

fn hash_file(file: &mut File) -> std::io::Result<String> {
    use std::io::Seek;
    file.seek(std::io::SeekFrom::Start(0))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

fn list_start(args: Value, cx: CallContext, done: Completion) {
    answer(done, || {
        let map = args::object(&args).map_err(args_err)?;
        let given = paths::given(&LIST, map).map_err(args_err)?;
        let max = args::int(map, "max", 1..=MAX_LIST, Naming::Plain, None)
            .map_err(args_err)?
            .unwrap_or(DEFAULT_LIST) as usize;
        let (place, checked) = paths::confine(&LIST, given, &cx).map_err(refused)?;
        let path = checked[0];
        let fd = place
            .open(path, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
            .map_err(tool_err)?;
        let mut dir = rustix::fs::Dir::read_from(&fd)
            .map_err(|e| tool_err(format!("cannot read {path}: {e}")))?;
        let mut entries = Vec::new();
        let mut truncated = false;
        while let Some(entry) = dir.read() {
            let entry = entry.map_err(|e| tool_err(format!("cannot read {path}: {e}")))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == "." || name == ".." {
                continue;
            }
            if entries.len() == max {
                truncated = true;
                break;
            }
            let st = rustix::fs::statat(
                &fd,
                entry.file_name(),
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            );
            let item = match st {
                Ok(st) => json!({"name": name, "type": file_type(&st),
                    "size": st.st_size.max(0), "mtime": mtime(&st)}),
                Err(_) => json!({"name": name, "type": "other"}),
            };
            entries.push(item);
        }
        entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        let text = list_text(path, &entries, truncated.then_some(max));
        Ok(json!({
            "content": [{"type": "text", "text": text}],
            "structuredContent": {"path": place.shown(path), "entries": entries, "truncated": truncated},
        }))
    });
}

/// `file_list`'s text: a line per entry. Names (and the path) are shown as approvals show
/// arguments, control characters escaped (contract §21): a newline in a file name cannot
/// fake entry lines. `structuredContent` keeps the names as they are.
fn list_text(path: &str, entries: &[Value], cut_at: Option<usize>) -> String {
    use crate::rules::reveal::escape;
    let mut text = format!("{}: {} entries", escape(path), entries.len());
    if let Some(max) = cut_at {
        text.push_str(&format!(" (the first {max} read; more are not shown)"));
    }
    for e in entries {
        text.push_str(&format!(
            "\n{}\t{}\t{}",
            e["type"].as_str().unwrap_or(""),
            e["size"],
            escape(e["name"].as_str().unwrap_or(""))
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 36: the runtime refused 1,051,464 bytes and took 1,037,812; the largest chunk a
    /// grant socket offers, in a real tools/call envelope with a 4096-byte path, fits.
    #[test]
    fn over_a_grant_socket_file_puts_largest_chunk_fits_the_pods_body_limit() {
        let tool = super::super::find("file_put").unwrap();
        let mut json = super::super::tool_json(tool, None);
        fit_to_pod(&mut json);
        let max = json["inputSchema"]["properties"]["data"]["maxLength"]
            .as_i64()
            .unwrap();
        assert_eq!(max, POD_PUT_DATA_CHARS);
        assert_eq!(max % 4, 0);
        assert!(json["description"]
            .as_str()
            .unwrap()
            .contains(&POD_PUT_CHUNK_BYTES.to_string()));
        let request = json!({"jsonrpc": "2.0", "id": 9_007_199_254_740_991_u64,
            "method": "tools/call", "params": {"name": "file_put", "arguments": {
                "path": "d".repeat(4096), "data": "A".repeat(max as usize), "offset": MAX_CHUNK_BYTES * 1000,
                "final": false, "sha256": "0".repeat(64), "mkdirs": true}}});
        assert!(request.to_string().len() as i64 <= POD_BODY_LIMIT);
        const {
            assert!(
                POD_PUT_CHUNK_BYTES > 700 << 10,
                "700 KiB chunks worked through the real pod"
            )
        };
        let mut other = super::super::tool_json(super::super::find("file_get").unwrap(), None);
        let before = other.clone();
        fit_to_pod(&mut other);
        assert_eq!(other, before, "only file_put changes");
    }

    #[test]
    fn a_listings_text_escapes_control_characters_in_names() {
        let entries = [
            json!({"name": "evil\nfile\t4096\tpasswords", "type": "file", "size": 1}),
            json!({"name": "plain.txt", "type": "file", "size": 2}),
        ];
        let text = list_text("/tmp/d\u{202e}", &entries, None);
        assert_eq!(
            text,
            "/tmp/d\\u{202e}: 2 entries\nfile\t1\tevil\\u{a}file\\u{9}4096\\u{9}passwords\nfile\t2\tplain.txt"
        );
        assert_eq!(text.lines().count(), 3, "one line per entry");
        assert!(
            list_text("/d", &entries, Some(2)).contains("(the first 2 read; more are not shown)")
        );
    }

    #[test]
    fn mime_types_come_from_the_name_else_octet_stream() {
        assert_eq!(mime_type("a.PNG"), "image/png");
        assert_eq!(mime_type("notes.txt"), "text/plain");
        assert_eq!(mime_type("blob"), "application/octet-stream");
        assert_eq!(mime_type("x.unknownext"), "application/octet-stream");
    }

    #[test]
    fn only_the_file_tools_change_class_under_a_folder() {
        for tool in super::super::TOOLS {
            let confined = confined_class(tool.name);
            let ours = [GET.name, PUT.name, LIST.name].contains(&tool.name);
            assert_eq!(confined.is_some(), ours, "{}", tool.name);
            if ours {
                assert_eq!(tool.class, Class::Shell, "{}", tool.name);
                assert_ne!(confined, Some(Class::Shell));
            }
        }
    }

    #[test]
    fn put_arguments_refuse_bad_input_before_anything_is_touched() {
        let m = |v: Value| v.as_object().unwrap().clone();
        let ok = m(json!({"path": "a", "data": "aGk="}));
        let a = put_args(&ok).unwrap();
        assert_eq!(a.data, b"hi");
        assert!(a.last && !a.mkdirs && a.offset == 0);
        let err = put_args(&m(json!({"path": "a", "data": "not base64!"})))
            .err()
            .unwrap();
        assert!(err.starts_with("data must be base64"), "{err}");
        let err = put_args(&m(json!({"path": "a", "data": "", "sha256": "xyz"})))
            .err()
            .unwrap();
        assert_eq!(err, "sha256 must be 64 hex digits");
        let b64 = base64::engine::general_purpose::STANDARD;
        let at = b64.encode(vec![0u8; MAX_CHUNK_BYTES as usize]);
        assert!(put_args(&m(json!({"path": "a", "data": at}))).is_ok());
        let past = b64.encode(vec![0u8; MAX_CHUNK_BYTES as usize + 1]);
        let err = put_args(&m(json!({"path": "a", "data": past})))
            .err()
            .unwrap();
        assert!(err.contains("at most 4194304 bytes"), "{err}");
    }
}
