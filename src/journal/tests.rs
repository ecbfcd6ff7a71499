use super::*;
use std::sync::mpsc;

fn temp(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "hn-journal-{tag}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn journal(dir: &std::path::Path, max_bytes: u64) -> Arc<Journal> {
    Journal::start(Settings {
        dir: Some(dir.join("journal")),
        max_bytes,
        keep: Duration::from_secs(86_400),
        sweep_every: Duration::from_secs(3600),
    })
    .unwrap()
}

const GRANT: &str = "0b9d3c1e-6f4a-4c3e-9a51-2f0e8d7c6b5a";

/// One call through the journal; returns what the call's own completion got.
fn call(
    j: &Arc<Journal>,
    grant: Option<&str>,
    tool: &str,
    args: Value,
    output: ToolOutput,
    capture: Option<Capture>,
) -> ToolOutput {
    let (tx, rx) = mpsc::channel();
    let ctl = CallCtl::new();
    let done = j.track(
        grant,
        tool,
        &args,
        &ctl,
        capture,
        Completion::new(move |o| {
            let _ = tx.send(o);
        }),
    );
    done.complete(output);
    rx.recv_timeout(Duration::from_secs(10)).unwrap()
}

fn records(dir: &std::path::Path, id: &str, since: u64) -> Vec<Value> {
    let (body, _) = store::read_since(&dir.join("journal"), id, since, usize::MAX, true)
        .unwrap()
        .expect("the journal exists");
    body.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

fn tiny_jpeg() -> Thumb {
    Thumb {
        jpeg: vec![0xff, 0xd8, 0xff, 0xd9],
        width: 2,
        height: 1,
    }
}

#[test]
fn calls_are_kept_in_order_with_what_they_did() {
    let dir = temp("order");
    let j = journal(&dir, DEFAULT_MAX_BYTES);
    call(
        &j,
        Some(GRANT),
        "sys_info",
        json!({}),
        ToolOutput::text("box facts"),
        None,
    );
    let ctl_args = json!({"command": "echo \u{202e}hi"});
    call(
        &j,
        Some(GRANT),
        "bash",
        ctl_args.clone(),
        ToolOutput::NotApproved("denied by you: no; it did not run".into()),
        None,
    );
    let shot: Capture = Box::new(|deliver| deliver(Ok(tiny_jpeg())));
    call(
        &j,
        Some(GRANT),
        "key",
        json!({"keys": "ctrl+s"}),
        ToolOutput::text("pressed"),
        Some(shot),
    );
    assert!(j.flush(Duration::from_secs(10)));
    let got = records(&dir, GRANT, 0);
    let tools: Vec<&str> = got.iter().map(|r| r["tool"].as_str().unwrap()).collect();
    assert_eq!(tools, ["sys_info", "bash", "key"]);
    let seqs: Vec<u64> = got.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 3]);
    assert_eq!(got[0]["outcome"], "ok");
    assert_eq!(got[0]["summary"], "box facts");
    assert_eq!(got[1]["outcome"], "not_approved");
    assert_eq!(got[1]["arguments"], ctl_args);
    assert!(got[2]["thumbnail"]["data_url"]
        .as_str()
        .unwrap()
        .starts_with("data:image/jpeg;base64,"));
    assert!(got[0].get("thumbnail").is_none());
    // since= gives what came after.
    let later = records(&dir, GRANT, 2);
    assert_eq!(later.len(), 1);
    assert_eq!(later[0]["tool"], "key");
    // A restart carries on from the last seq.
    drop(j);
    let j = journal(&dir, DEFAULT_MAX_BYTES);
    call(
        &j,
        Some(GRANT),
        "sys_info",
        json!({}),
        ToolOutput::text("again"),
        None,
    );
    assert!(j.flush(Duration::from_secs(10)));
    assert_eq!(records(&dir, GRANT, 3)[0]["seq"], 4);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_call_gets_no_thumbnail_and_a_failed_capture_says_why() {
    let dir = temp("thumbs");
    let j = journal(&dir, DEFAULT_MAX_BYTES);
    let never: Capture = Box::new(|_| panic!("no capture after a failed call"));
    call(
        &j,
        Some(GRANT),
        "mouse",
        json!({}),
        ToolOutput::tool_error("no display"),
        Some(never),
    );
    let fails: Capture =
        Box::new(|deliver| deliver(Err("screenshot unavailable: no display".into())));
    call(
        &j,
        Some(GRANT),
        "mouse",
        json!({}),
        ToolOutput::text("moved"),
        Some(fails),
    );
    assert!(j.flush(Duration::from_secs(10)));
    let got = records(&dir, GRANT, 0);
    assert_eq!(got.len(), 2);
    assert!(got[0].get("thumbnail").is_none() && got[0].get("thumbnail_error").is_none());
    assert_eq!(
        got[1]["thumbnail_error"],
        "screenshot unavailable: no display"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_owner_journal_is_per_day() {
    let dir = temp("owner");
    let j = journal(&dir, DEFAULT_MAX_BYTES);
    call(&j, None, "sys_info", json!({}), ToolOutput::text("x"), None);
    assert!(j.flush(Duration::from_secs(10)));
    let id = owner_journal_id(crate::base::timefmt::now_unix());
    assert!(is_journal_id(&id), "{id}");
    assert_eq!(records(&dir, &id, 0).len(), 1);
    let listed = store::list(&dir.join("journal"));
    assert_eq!(listed[0]["id"], id);
    assert_eq!(listed[0]["grant"], Value::Null);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn journal_ids_are_grant_ids_or_owner_days() {
    assert!(is_journal_id(GRANT));
    assert!(is_journal_id("mcp-2026-12-03"));
    for bad in [
        "mcp-2026-12-3",
        "mcp-2026_12_03",
        "../x",
        "mcp-",
        "",
        "mcp-2026-12-03/..",
    ] {
        assert!(!is_journal_id(bad), "{bad}");
    }
    assert!(
        store::read_since(std::path::Path::new("/nonexistent"), "../etc", 0, 10, false)
            .unwrap()
            .is_none()
    );
}

#[test]
fn the_bound_drops_thumbnails_first_then_the_oldest_records() {
    let dir = temp("bound");
    let max = 4096u64;
    let j = journal(&dir, max);
    let big = || -> Capture {
        Box::new(|deliver| {
            deliver(Ok(Thumb {
                jpeg: vec![7u8; 1500],
                width: 10,
                height: 10,
            }))
        })
    };
    // Two thumbnails fit with their records, a third does not: the first goes.
    for i in 0..3 {
        call(
            &j,
            Some(GRANT),
            "key",
            json!({"i": i}),
            ToolOutput::text("k"),
            Some(big()),
        );
        assert!(j.flush(Duration::from_secs(10)));
    }
    let got = records(&dir, GRANT, 0);
    assert_eq!(got.len(), 3, "every record is still there");
    assert_eq!(got[0]["thumbnail"]["dropped"], true);
    assert!(got[2]["thumbnail"]["data_url"].is_string());
    // Records alone past the bound: the oldest go, and a line says how many.
    for i in 0..60 {
        call(
            &j,
            Some(GRANT),
            "sys_info",
            json!({"pad": "x".repeat(100), "i": i}),
            ToolOutput::text("s"),
            None,
        );
    }
    assert!(j.flush(Duration::from_secs(10)));
    let got = records(&dir, GRANT, 0);
    assert_eq!(got[0]["kind"], "dropped", "{}", got[0]);
    assert!(got[0]["records"].as_u64().unwrap() > 0);
    let last = got.last().unwrap();
    assert_eq!(last["arguments"]["i"], 59, "the newest record is kept");
    let on_disk: u64 = std::fs::read_dir(dir.join("journal").join(GRANT))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(on_disk <= max, "{on_disk} bytes on disk, bound {max}");
    // seq goes on rising past a compaction.
    let seqs: Vec<u64> = got.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn long_arguments_and_results_are_cut_and_say_so() {
    let long = "a".repeat(ARG_STRING_BYTES + 1);
    let cut = bounded_arguments(&json!({"data": long}));
    let text = cut["data"].as_str().unwrap();
    assert!(text.ends_with("(+1 bytes not kept)"), "{text}");
    let at_bound = "b".repeat(ARG_STRING_BYTES);
    assert_eq!(
        bounded_arguments(&json!({"data": at_bound}))["data"],
        at_bound
    );
    let many: Vec<String> = (0..40).map(|_| "c".repeat(ARG_STRING_BYTES)).collect();
    assert!(bounded_arguments(&json!(many))
        .as_str()
        .unwrap()
        .contains("bytes of arguments, not kept"));
    let (s, cut) = clip(&"d".repeat(SUMMARY_CHARS + 1));
    assert!(cut && s.ends_with('…') && s.chars().count() == SUMMARY_CHARS + 1);
    let (s, cut) = clip(&"d".repeat(SUMMARY_CHARS));
    assert!(!cut && s.len() == SUMMARY_CHARS);
    // Characters, not bytes: multi-byte text is cut after as many characters, on a
    // boundary, whether the non-ASCII part is before the cut or at it.
    for text in [
        format!("é{}", "d".repeat(SUMMARY_CHARS)),
        format!("{}é", "d".repeat(SUMMARY_CHARS)),
        format!("{}éx", "d".repeat(SUMMARY_CHARS - 1)),
        "✓".repeat(SUMMARY_CHARS + 1),
    ] {
        let (s, cut) = clip(&text);
        let kept: String = text.chars().take(SUMMARY_CHARS).collect();
        assert_eq!((s, cut), (format!("{kept}…"), true), "{text}");
    }
    let (s, cut) = clip(&"✓".repeat(SUMMARY_CHARS));
    assert!(!cut && s.chars().count() == SUMMARY_CHARS);
    // The head of a large JSON output still gives its first text.
    let head = r#"{"content":[{"type":"text","text":"line one\nline \"two\" and more"#;
    let (s, cut) = summarise_json(head);
    assert!(cut);
    assert_eq!(s, "line one\nline \"two\" and more");
    let (s, _) = summarise_value(&json!({"content": [
        {"type": "image", "mimeType": "image/png", "data": "AAAA"},
        {"type": "text", "text": "Screenshot"}]}));
    assert_eq!(s, "[image/png, about 3 bytes]\nScreenshot");
}

/// A serialized result is summarised from its text as its `Value` would be, whatever its
/// blocks hold: the fast read (fields borrowed, others skipped) and the `Value` read agree.
#[test]
fn a_serialized_result_is_summarised_as_its_value() {
    let blob = "QUJD".repeat(1000);
    let results = [
        json!({"content": [
            {"type": "resource", "resource": {"uri": "file:///a", "blob": blob}},
            {"type": "text", "text": "a: bytes 0..3000 of 3000 \"end\"\n\u{1}"}],
            "structuredContent": {"path": "a", "size": 3000}}),
        json!({"content": [
            {"type": "image", "mimeType": "image/png", "data": blob},
            {"type": "image", "data": "AAAA"},
            {"type": "text", "text": "Screenshot"},
            {"text": "untyped"}]}),
        // Odd shapes read through the `Value`: a text that is not a string, a block that
        // is not an object, content that is not an array, no content.
        json!({"content": [{"type": "text", "text": 5}, {"type": "text", "text": "x"}]}),
        json!({"content": [7, {"type": "text", "text": "y"}]}),
        json!({"content": "z"}),
        json!({"isError": true}),
        json!({"content": (0..200).map(|i| json!({"type": "text", "text": format!("{i:0>50}")})).collect::<Vec<_>>()}),
    ];
    for v in results {
        assert_eq!(summarise_json(&v.to_string()), summarise_value(&v), "{v}");
    }
    let (s, cut) = summarise_json(&results_head());
    assert_eq!((s.as_str(), cut), ("[resource]\nfile text", false));
}

fn results_head() -> String {
    json!({"content": [{"type": "resource", "resource": {"blob": "QUJD"}},
                       {"type": "text", "text": "file text"}]})
    .to_string()
}

#[test]
fn old_journals_are_swept_but_not_a_live_grants() {
    let dir = temp("sweep");
    let root = dir.join("journal");
    let other = "1b9d3c1e-6f4a-4c3e-9a51-2f0e8d7c6b5a";
    for id in [GRANT, other, "mcp-2020-01-01"] {
        let mut s = store::State::load(&root, id).unwrap();
        s.append(b"{\"seq\":1}\n", Vec::new(), DEFAULT_MAX_BYTES)
            .unwrap();
    }
    let later = SystemTime::now() + Duration::from_secs(3 * 86_400);
    let removed = store::sweep(&root, Duration::from_secs(2 * 86_400), later, |id| {
        id == GRANT
    });
    let mut removed = removed;
    removed.sort();
    assert_eq!(removed, [other.to_string(), "mcp-2020-01-01".to_string()]);
    assert!(root.join(GRANT).is_dir());
    // Not yet old: kept.
    assert!(store::sweep(&root, Duration::from_secs(4 * 86_400), later, |_| false).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_link_in_place_of_the_journal_file_is_refused() {
    let dir = temp("link");
    let root = dir.join("journal");
    std::fs::create_dir_all(root.join(GRANT)).unwrap();
    std::fs::write(dir.join("elsewhere"), b"{\"seq\":9}\n").unwrap();
    std::os::unix::fs::symlink(dir.join("elsewhere"), root.join(GRANT).join(store::FILE)).unwrap();
    assert!(store::State::load(&root, GRANT).is_err());
    assert!(store::read_since(&root, GRANT, 0, 100, false).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_html_file_is_self_contained_and_keeps_agent_text_as_text() {
    let records = vec![
        json!({"seq": 1, "tool": "<b>bash</b>", "arguments": {"command": "echo <script>alert(1)</script>"},
               "started_at": "2026-12-03T10:00:00.000Z", "duration_ms": 5, "outcome": "ok",
               "summary": "<img src=x onerror=alert(1)>",
               "approval": {"decision": "allow", "by": "owner", "at": "2026-12-03T10:00:00Z"}}),
        json!({"seq": 2, "tool": "key", "arguments": {}, "outcome": "ok", "summary": "",
               "thumbnail": {"data_url": "data:image/jpeg;base64,AAAA", "width": 2, "height": 1}}),
        json!({"seq": 3, "tool": "key", "arguments": {}, "outcome": "ok", "summary": "",
               "thumbnail": {"data_url": "https://evil.example/x.jpg", "width": 2, "height": 1}}),
    ];
    let page = html::render(GRANT, &records, "2026-12-03T10:00:01Z");
    assert!(!page.contains("<script"), "no script at all");
    assert!(!page.contains("<img src=x"));
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(page.contains("src=\"data:image/jpeg;base64,AAAA\""));
    assert!(
        !page.contains("evil.example"),
        "only our own data URLs reach an attribute"
    );
    for reference in ["http://", "https://", "src=\"//", "href="] {
        assert!(!page.contains(reference), "{reference}");
    }
    assert!(page.contains("allow</b> by owner"));
}

/// The compaction reads the journal line by line and copies what it keeps as it is: the
/// newest whole lines within 3/4 of the bound, after one line counting what went (across
/// compactions too, a line a crash cut short among them), every line ended.
#[test]
fn a_compaction_keeps_the_newest_lines_and_counts_the_rest() {
    let dir = temp("compact");
    let root = dir.join("journal");
    let mut s = store::State::load(&root, GRANT).unwrap();
    let line = |seq: u64| format!("{{\"seq\":{seq},\"pad\":\"{}\"}}\n", "p".repeat(80));
    let max = 2000u64;
    // 30 lines of ~100 bytes: past the bound at the 21st.
    for seq in 1..=30 {
        s.append(line(seq).as_bytes(), Vec::new(), max).unwrap();
    }
    let read = || std::fs::read_to_string(root.join(GRANT).join(store::FILE)).unwrap();
    let text = read();
    assert!(text.len() as u64 <= max, "{} bytes", text.len());
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let marker = &lines[0];
    assert_eq!(marker["kind"], "dropped", "{marker}");
    let kept: Vec<u64> = lines[1..]
        .iter()
        .map(|v| v["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(*kept.last().unwrap(), 30, "the newest is kept");
    assert!(
        kept.windows(2).all(|w| w[1] == w[0] + 1),
        "a run of the newest: {kept:?}"
    );
    let gone = kept[0] - 1;
    assert_eq!(marker["records"], gone, "{marker}");
    assert!(marker["first_seq"].as_u64().unwrap() < kept[0], "{marker}");
    // The marker carries the last seq it replaced (the second compaction's is higher).
    assert!(marker["seq"].as_u64().unwrap() < kept[0], "{marker}");
    // A line cut short (no newline) then more records: the next compactions count the
    // earlier markers' records and their own, and every line stays whole.
    std::fs::OpenOptions::new()
        .append(true)
        .open(root.join(GRANT).join(store::FILE))
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"{\"seq\":31,\"cut"))
        .unwrap();
    let mut s = store::State::load(&root, GRANT).unwrap();
    for seq in 32..=60 {
        s.append(line(seq).as_bytes(), Vec::new(), max).unwrap();
    }
    let text = read();
    assert!(text.ends_with('\n') && text.len() as u64 <= max);
    let lines: Vec<&str> = text.lines().collect();
    let marker: Value = serde_json::from_str(lines[0]).unwrap();
    let first_kept: Value = serde_json::from_str(lines[1]).unwrap();
    let first_kept = first_kept["seq"].as_u64().unwrap();
    // Dropped: every seq below the first kept; the cut line and the record appended
    // after it read as one line, one record.
    assert_eq!(marker["records"], first_kept - 2, "{marker}");
    assert!(lines[1..]
        .iter()
        .all(|l| serde_json::from_str::<Value>(l).is_ok()));
    let _ = std::fs::remove_dir_all(&dir);
}
