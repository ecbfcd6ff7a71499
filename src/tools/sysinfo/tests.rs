//! Unit tests of `tools::sysinfo`.

use super::*;
use crate::pool::CallCtl;
use crate::tools::testutil::{completion, cx, host, result, WATCHDOG};
use crate::tools::{CallLimits, GrantNote, TtlCache};

const FIB_TRIE: &str = "\
Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 100.64.0.0/10 2 0 2
        |-- 100.101.102.103
           /32 host LOCAL
        |-- 100.127.255.255
           /32 link BROADCAST
     |-- 127.0.0.1
        /32 host LOCAL
     |-- 192.168.1.0
        /24 link UNICAST
     |-- 192.168.1.20
        /32 host LOCAL
Local:
  +-- 0.0.0.0/0 3 0 5
     |-- 100.101.102.103
        /32 host LOCAL
";

const IF_INET6: &str = "\
00000000000000000000000000000001 01 80 10 80       lo
fd7a115ca1e0ab120000000000000001 05 80 00 80 tailscale0
fe8000000000000000fc00fffe000001 04 40 20 80     eth0
fd7a115ca1e1ab120000000000000001 06 80 00 80    other
";

#[test]
fn local_addresses_and_tailnet_ranges() {
    let v4 = local_ipv4s(FIB_TRIE);
    let expect: Vec<Ipv4Addr> = ["100.101.102.103", "127.0.0.1", "192.168.1.20"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    assert_eq!(v4, expect);
    let tail: Vec<Ipv4Addr> = v4.into_iter().filter(|a| is_tailnet_v4(*a)).collect();
    assert_eq!(tail, [Ipv4Addr::new(100, 101, 102, 103)]);
    // The /10 boundaries, each side.
    assert!(is_tailnet_v4(Ipv4Addr::new(100, 64, 0, 0)));
    assert!(is_tailnet_v4(Ipv4Addr::new(100, 127, 255, 255)));
    assert!(!is_tailnet_v4(Ipv4Addr::new(100, 63, 255, 255)));
    assert!(!is_tailnet_v4(Ipv4Addr::new(100, 128, 0, 0)));

    let v6 = local_ipv6s(IF_INET6);
    assert_eq!(v6.len(), 4);
    let tail: Vec<_> = v6.into_iter().filter(|(a, _)| is_tailnet_v6(*a)).collect();
    assert_eq!(tail.len(), 1);
    assert_eq!(tail[0].0.to_string(), "fd7a:115c:a1e0:ab12::1");
    assert_eq!(tail[0].1, "tailscale0");
}

#[test]
fn proc_file_parsers() {
    assert_eq!(
        parse_meminfo("MemTotal:        8000000 kB\nMemFree: 1 kB\nMemAvailable:    2000 kB\n"),
        (Some(8_192_000_000), Some(2_048_000))
    );
    assert_eq!(parse_meminfo("garbage"), (None, None));
    assert_eq!(parse_uptime("12345.67 890.12\n"), Some(12345));
    assert_eq!(parse_uptime("-1 0"), None);
    assert_eq!(
        parse_loadavg("0.10 0.20 1.50 1/234 5678\n"),
        Some([0.1, 0.2, 1.5])
    );
    assert_eq!(parse_loadavg("0.10"), None);
    assert_eq!(
        parse_os_release("NAME=Debian\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"),
        Some("Debian GNU/Linux 12 (bookworm)".into())
    );
    assert_eq!(
        parse_os_release("PRETTY_NAME='Say \\\"hi\\\"'"),
        Some("Say \"hi\"".into())
    );
    assert_eq!(parse_os_release("PRETTY_NAME=Plain"), Some("Plain".into()));
    assert_eq!(parse_os_release("NAME=x"), None);
    assert_eq!(
        parse_cpu_model("processor: 0\nmodel name\t: Intel(R) Xeon(R)\n"),
        Some("Intel(R) Xeon(R)".into())
    );
    assert_eq!(
        parse_cpu_model("processor: 0\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n"),
        Some("Raspberry Pi 4 Model B Rev 1.4".into())
    );
    assert_eq!(
        user_name(
            "root:x:0:0::/root:/bin/bash\npi:x:1000:1000::/home/pi:/bin/bash\n",
            1000
        ),
        Some("pi".into())
    );
    assert_eq!(user_name("root:x:0:0::/root:/bin/bash\n", 5), None);
}

#[test]
fn live_facts_are_reused_within_the_ttl_and_reread_after() {
    let cache = TtlCache::default();
    let hour = Duration::from_secs(3600);
    let (a, _) = cache.get(hour, LiveFacts::read);
    let (b, _) = cache.get(hour, LiveFacts::read);
    assert!(Arc::ptr_eq(&a, &b), "a fresh copy is reused");
    assert!(a.mem_total.is_some() && a.uptime.is_some(), "{a:?}");
    let cache = TtlCache::default();
    let (a, age) = cache.get(Duration::ZERO, LiveFacts::read);
    let (b, _) = cache.get(Duration::ZERO, LiveFacts::read);
    assert!(!Arc::ptr_eq(&a, &b), "a stale copy is read again");
    assert_eq!(age, Duration::ZERO);
}

#[test]
fn answers_inline_only_when_both_caches_are_fresh() {
    let host_with = |ttl: Duration| {
        crate::tools::ToolHost::new(crate::tools::ToolConfig {
            display_env: Some(Default::default()),
            display_probe_ttl: ttl,
            sys_info_ttl: ttl,
            ..Default::default()
        })
        .unwrap()
    };
    let host = host_with(Duration::from_secs(3600));
    let call = cx(&host, CallLimits::GRANT, CallCtl::new());
    assert!(
        from_cache(&json!({}), &call).is_none(),
        "nothing is cached before a first call"
    );
    let (done, rx) = completion();
    start(json!({}), call.clone(), done);
    let slow = result(rx.recv_timeout(WATCHDOG).unwrap());
    let encoded = |out: Option<ToolOutput>| match out.expect("both caches are filled") {
        ToolOutput::Encoded { json, is_error } => {
            assert!(!is_error);
            json
        }
        other => panic!("expected an encoded answer, got {other:?}"),
    };
    let fast: Value = serde_json::from_str(&encoded(from_cache(&json!({}), &call))).unwrap();
    assert_eq!(
        fast["structuredContent"]["hostname"],
        slow["structuredContent"]["hostname"]
    );
    // Asked again within the same second, the same text is handed out (retried in case
    // a second boundary fell between the two calls).
    let reused = (0..3).any(|_| {
        Arc::ptr_eq(
            &encoded(from_cache(&json!({}), &call)),
            &encoded(from_cache(&json!({}), &call)),
        )
    });
    assert!(reused, "the cached answer is reused");
    assert_eq!(
        fast["structuredContent"]["display"],
        slow["structuredContent"]["display"]
    );
    assert_eq!(fast["content"][0]["type"], "text");

    let host = host_with(Duration::ZERO);
    let call = cx(&host, CallLimits::GRANT, CallCtl::new());
    let (done, rx) = completion();
    start(json!({}), call.clone(), done);
    rx.recv_timeout(WATCHDOG).unwrap();
    assert!(
        from_cache(&json!({}), &call).is_none(),
        "stale caches go to the pool"
    );
}

#[test]
fn finds_bash_on_path_without_spawning() {
    let found = find_in_path("bash", std::env::var_os("PATH").as_deref()).unwrap();
    assert!(found.is_absolute() && found.ends_with("bash"));
    assert_eq!(
        find_in_path("bash", Some(std::ffi::OsStr::new("relative:/nonexistent"))),
        None
    );
    // A non-executable file does not count.
    let dir = std::env::temp_dir().join(format!("handnode-path-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("bash"), b"not a program").unwrap();
    assert_eq!(find_in_path("bash", Some(dir.as_os_str())), None);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn static_facts_are_gathered() {
    let f = StaticFacts::gather();
    assert!(!f.hostname.is_empty() && !f.kernel.is_empty() && !f.arch.is_empty());
    assert!(f.cpus >= 1);
    assert_eq!(f.uid, rustix::process::getuid().as_raw());
    assert_eq!(f.bash_status(), Ok(()));
}

/// The whole answer (`{"detail":true}`; an unknown field beside it is ignored).
fn sys_info(cx: crate::tools::CallContext) -> Value {
    sys_info_with(cx, json!({"detail": true, "ignored": true}))
}

fn sys_info_with(cx: crate::tools::CallContext, args: Value) -> Value {
    let (done, rx) = completion();
    start(args, cx, done);
    result(rx.recv_timeout(WATCHDOG).unwrap())
}

/// A grant under `desktop` on a box without a display: every display tool unavailable
/// with the long no-display reason, the largest brief answer this box gives.
fn desktop_grant(host: &Arc<crate::tools::ToolHost>) -> crate::tools::CallContext {
    let mut cx = cx(host, CallLimits::GRANT, CallCtl::new());
    cx.policy = Arc::new(ToolPolicy::fixed(Profile::Desktop).unwrap());
    cx.grant = Some(GrantNote {
        id: "0b6c1e9e-7d4f-4f43-9a53-2a1e3c9d8f00".into(),
        session: "s".repeat(64),
        expires_at: crate::base::timefmt::now_unix() + 3600,
        approve: vec![],
        approval_wait: Duration::from_secs(60),
    });
    cx
}

#[test]
fn the_default_answer_is_brief_and_says_how_to_get_the_rest() {
    let host = host();
    let r = sys_info_with(desktop_grant(&host), json!({}));
    let bytes = r.to_string().len();
    assert!(bytes <= 2048, "{bytes} bytes: {r}");
    let s = &r["structuredContent"];
    assert_eq!(s["detail"], false);
    assert_eq!(s["hostname"], host.facts.hostname);
    assert_eq!(s["profile"], "desktop");
    assert_eq!(s["display"]["backend"], "none");
    assert!(
        s.get("tools").is_none() && s.get("tailnet_addresses").is_none(),
        "{s}"
    );
    assert_eq!(s["agent"]["pid"], std::process::id());
    assert_eq!(s["grant"]["expires_in_secs"], 3600);
    // The display tools share one reason, cut, and bash is not among them.
    let groups = s["unavailable"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{s}");
    let names = &groups[0]["tools"];
    for t in [
        "screenshot",
        "mouse",
        "key",
        "desktop_snapshot",
        "desktop_act",
        "app_open",
    ] {
        assert!(names.as_array().unwrap().iter().any(|n| n == t), "{t}: {s}");
    }
    // Their reason is the display's own problem, said once under display, cut.
    assert_eq!(groups[0]["why"], SEE_DISPLAY_PROBLEM, "{s}");
    let problem = s["display"]["problem"].as_str().unwrap();
    assert!(problem.starts_with("no display"), "{problem}");
    assert!(problem.len() <= BRIEF_WHY_BYTES + "…".len(), "{problem}");
    let text = r["content"][0]["text"].as_str().unwrap();
    for needle in [
        "display: backend none",
        "you may use: sys_info, bash",
        "reaches a shell: yes",
        "not working: screenshot, mouse",
        "{\"detail\":true}",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
    // With detail: everything, marked so.
    let full = sys_info(desktop_grant(&host));
    assert_eq!(full["structuredContent"]["detail"], true);
    assert!(full["structuredContent"]["tools"].is_array());
    assert!(full.to_string().len() > bytes);
}

#[test]
fn a_detail_that_is_not_a_boolean_is_refused() {
    let host = host();
    for (bad, what) in [
        (json!("yes"), "a string"),
        (json!(1), "a number"),
        (json!([true]), "an array"),
        (json!({}), "an object"),
    ] {
        let r = sys_info_with(
            cx(&host, CallLimits::GRANT, CallCtl::new()),
            json!({ "detail": bad }),
        );
        assert_eq!(r["isError"], true, "{r}");
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains(what) && text.contains("true or false"),
            "{text}"
        );
        let call = cx(&host, CallLimits::GRANT, CallCtl::new());
        assert!(from_cache(&json!({ "detail": bad }), &call).is_none());
    }
    let null = sys_info_with(
        cx(&host, CallLimits::GRANT, CallCtl::new()),
        json!({"detail": null}),
    );
    assert_eq!(null["structuredContent"]["detail"], false);
}

#[test]
fn reports_structured_facts_and_a_summary() {
    let host = host();
    let r = sys_info(cx(&host, CallLimits::LOCAL_HTTP, CallCtl::new()));
    assert!(r.get("isError").is_none());
    let s = &r["structuredContent"];
    assert_eq!(s["hostname"], host.facts.hostname);
    assert!(s["memory"]["total_bytes"].as_u64().unwrap() > 0);
    assert!(s["uptime_secs"].is_u64());
    assert!(s["tailnet_addresses"].is_array());
    assert_eq!(s["display"]["backend"], "none");
    assert_eq!(s["agent"]["name"], "handnode");
    assert_eq!(s["agent"]["pid"], std::process::id());
    assert_eq!(s["agent"]["build"], crate::base::build_info::to_json());
    assert_eq!(s["profile"], "owner");
    assert_eq!(s["grant"], Value::Null);
    assert_eq!(s["max_run_secs"], 600);
    let tools: Vec<&str> = s["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, crate::tools::names(Profile::Owner));
    let status = |name: &str| {
        s["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} has no status"))
            .clone()
    };
    assert_eq!(status("bash")["works"], true);
    assert_eq!(status("screenshot")["works"], false);
    assert!(status("screenshot")["why"].is_string());
    assert_eq!(
        status("bash_start")["works"],
        true,
        "the job tools work where bash does"
    );
    let text = r["content"][0]["text"].as_str().unwrap();
    for needle in [
        host.facts.hostname.as_str(),
        host.facts.kernel.as_str(),
        "memory:",
        "uptime:",
        "tailnet:",
        "display: backend none",
        "no grant",
        "at most 600 s",
        crate::base::build_info::TARGET,
        "screenshot: unavailable:",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
}

#[test]
fn reports_the_grant_and_only_the_profiles_tools() {
    let host = host();
    let mut cx = cx(&host, CallLimits::GRANT, CallCtl::new());
    cx.policy = Arc::new(ToolPolicy::fixed(Profile::Observe).unwrap());
    cx.grant = Some(GrantNote {
        id: "g-1".into(),
        session: "laptop".into(),
        expires_at: crate::base::timefmt::now_unix() + 3600,
        approve: Vec::new(),
        approval_wait: std::time::Duration::from_secs(60),
    });
    let r = sys_info(cx);
    let s = &r["structuredContent"];
    assert_eq!(s["profile"], "observe");
    assert_eq!(s["grant"]["session"], "laptop");
    assert!(s["grant"]["expires_in_secs"].as_u64().unwrap() > 3500);
    assert_eq!(s["max_run_secs"], 110);
    let tools: Vec<&str> = s["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, crate::tools::names(Profile::Observe));
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("grant: profile observe, session laptop"),
        "{text}"
    );
    assert_eq!(s["shell"], "no");
    let observe = crate::tools::names(Profile::Observe);
    assert_eq!(s["allowed_tools"], json!(observe));
    assert!(text.contains(&format!(
        "you may use: {}\nreaches a shell: no",
        observe.join(", ")
    )));
}

#[test]
fn tells_a_custom_grant_what_it_may_use_and_whether_it_reaches_a_shell() {
    let host = host();
    let mut cx = cx(&host, CallLimits::GRANT, CallCtl::new());
    let lists = crate::tools::policy::ToolLists {
        allow: vec!["sys_info".into(), "key".into(), "browser_snapshot".into()],
        ..Default::default()
    };
    cx.policy = Arc::new(ToolPolicy::new(Profile::Custom, lists).unwrap());
    let r = sys_info(cx);
    let s = &r["structuredContent"];
    assert_eq!(s["profile"], "custom");
    assert_eq!(
        s["allowed_tools"],
        json!(["sys_info", "key", "browser_snapshot"])
    );
    assert_eq!(s["upstream_tools_without_class"], false);
    assert_eq!(s["shell"], "yes");
    assert_eq!(s["shell_because"], "key is a shell tool");
    let local: Vec<&str> = s["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(local, ["sys_info", "key"]);
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(
            text.contains("you may use: sys_info, key, browser_snapshot\nreaches a shell: yes (key is a shell tool)"),
            "{text}"
        );
}

/// Issue 30: with no upstream configured the owner is not told of browser_* tools.
#[test]
fn lists_no_browser_tool_without_an_upstream() {
    let host = crate::tools::ToolHost::new(crate::tools::ToolConfig {
        display_env: Some(Default::default()),
        upstreams: false,
        ..Default::default()
    })
    .unwrap();
    let mut cx = cx(&host, CallLimits::LOCAL_HTTP, CallCtl::new());
    cx.policy = Arc::new(ToolPolicy::fixed(Profile::Owner).unwrap());
    let r = sys_info(cx);
    let allowed = r["structuredContent"]["allowed_tools"].to_string();
    assert!(
        !allowed.contains("browser_") && allowed.contains("bash"),
        "{allowed}"
    );
    let text = r["content"][0]["text"].as_str().unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("you may use:"))
        .unwrap();
    assert!(!line.contains("browser_"), "{line}");
}
