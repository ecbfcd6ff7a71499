//! Unit tests of `rules::desktop_entry`.

use super::*;
use crate::base::testutil::TempDir;

fn write(dir: &Path, rel: &str, text: &str) -> PathBuf {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

fn entry(exec: &str, extra: &str) -> String {
    format!("[Desktop Entry]\nType=Application\nName=T\nExec={exec}\n{extra}\n")
}

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

#[test]
fn exec_is_split_by_the_quoting_rules_with_field_codes_removed() {
    let cases: &[(&str, &[&str])] = &[
        ("gnome-calculator", &["gnome-calculator"]),
        ("app %U", &["app"]),
        ("app %f --x %F %u %i %c %k", &["app", "--x"]),
        ("app --file=%f", &["app", "--file="]),
        ("app 100%%", &["app", "100%"]),
        (r#"app "two words" x"#, &["app", "two words", "x"]),
        (
            r#"app "a \"q\" \$ \` \\\\ b""#,
            &["app", r#"a "q" $ ` \ b"#],
        ),
        (r#"app """#, &["app", ""]),
        (r"app\sx y", &["app", "x", "y"]),
        ("app  \t  y", &["app", "y"]),
        (
            "app ; rm -rf ~ | x",
            &["app", ";", "rm", "-rf", "~", "|", "x"],
        ),
    ];
    for (raw, want) in cases {
        assert_eq!(exec_argv(raw).unwrap(), *want, "{raw}");
    }
    for (raw, why) in [
        (r#"app "open"#, "unclosed quote"),
        ("app %z", "unknown field code %z"),
        ("app %", "lone %"),
        ("%U", "names no program"),
        ("", "names no program"),
    ] {
        let err = exec_argv(raw).unwrap_err();
        assert!(err.contains(why), "{raw}: {err}");
    }
    let many = format!("app{}", " a".repeat(MAX_EXEC_ARGS - 1));
    assert_eq!(exec_argv(&many).unwrap().len(), MAX_EXEC_ARGS);
    let err = exec_argv(&format!("{many} a")).unwrap_err();
    assert!(err.contains(&format!("at most {MAX_EXEC_ARGS}")), "{err}");
}

#[test]
fn only_the_desktop_entry_group_counts_and_translations_are_skipped() {
    let text = "# c\n[Desktop Entry]\nName=Calc\nName[fr]=Calculette\nExec=calc\n\
                    [Desktop Action evil]\nExec=bash -c x\nName=Evil\n";
    let keys = parse_group(text).unwrap();
    assert_eq!(keys["Exec"], "calc");
    assert_eq!(keys["Name"], "Calc");
    assert_eq!(keys.len(), 2);
    for (text, why) in [
        ("[Other]\nA=b\n[Desktop Entry]\nExec=x\n", "first group"),
        ("Exec=x\n", "before any group"),
        (
            "[Desktop Entry]\nExec=x\nExec=bash\n",
            "Exec is given twice",
        ),
        (
            "[Desktop Entry]\nExec=x\n[Desktop Entry]\n",
            "two [Desktop Entry]",
        ),
        ("[Desktop Entry]\njunk\n", "neither"),
        ("", "no [Desktop Entry]"),
    ] {
        let err = parse_group(text).unwrap_err();
        assert!(err.contains(why), "{text:?}: {err}");
    }
    assert_eq!(list(r"A;B\;C;;D"), ["A", "B;C", "D"]);
}

#[test]
fn ids_follow_the_subdirectory_rule_and_the_first_dir_wins() {
    let home = TempDir::new("de-home");
    let sys = TempDir::new("de-sys");
    write(&home.0, "applications/a.desktop", &entry("true", ""));
    write(&sys.0, "applications/a.desktop", &entry("false", ""));
    write(&sys.0, "applications/kde/foo.desktop", &entry("true", ""));
    write(&sys.0, "applications/notes.txt", "x");
    let dirs = DataDirs::from_env(|k| match k {
        "XDG_DATA_HOME" => Some(home.0.display().to_string()),
        "XDG_DATA_DIRS" => Some(format!("relative/dir:{}", sys.0.display())),
        _ => None,
    });
    assert_eq!(dirs.dirs.len(), 2, "the relative dir is ignored");
    assert_eq!(dirs.find("a").unwrap(), home.path("applications/a.desktop"));
    assert_eq!(
        dirs.find("kde-foo").unwrap(),
        sys.path("applications/kde/foo.desktop")
    );
    assert!(dirs.find("foo").unwrap_err().starts_with("not found in"));
    let (all, cut) = dirs.scan();
    assert!(!cut);
    assert_eq!(
        all.iter().map(|(i, _)| i.as_str()).collect::<Vec<_>>(),
        ["a", "kde-foo"]
    );
    // Defaults: ~/.local/share, then /usr/local/share and /usr/share.
    let d = DataDirs::from_env(|k| (k == "HOME").then(|| "/h".to_string()));
    assert_eq!(
        d.dirs,
        [
            "/h/.local/share/applications",
            "/usr/local/share/applications",
            "/usr/share/applications"
        ]
        .map(PathBuf::from)
    );
}

#[test]
fn the_walk_enters_subdirectories_to_its_depth_and_no_deeper() {
    let sys = TempDir::new("de-deep");
    let at = "a/".repeat(MAX_DEPTH);
    let past = "b/".repeat(MAX_DEPTH + 1);
    write(&sys.0, &format!("applications/{at}x.desktop"), "");
    write(&sys.0, &format!("applications/{past}y.desktop"), "");
    let dirs = DataDirs {
        dirs: vec![sys.path("applications")],
    };
    let at_id = format!("{}x", "a-".repeat(MAX_DEPTH));
    assert!(dirs.find(&at_id).is_ok(), "at the depth bound");
    let past_id = format!("{}y", "b-".repeat(MAX_DEPTH + 1));
    assert!(dirs.find(&past_id).is_err(), "one level deeper");
}

#[test]
fn the_scan_stops_at_its_bound_and_says_so() {
    let sys = TempDir::new("de-many");
    for i in 0..=MAX_SCAN_FILES {
        write(&sys.0, &format!("applications/a{i:05}.desktop"), "");
    }
    let dirs = DataDirs {
        dirs: vec![sys.path("applications")],
    };
    let (all, cut) = dirs.scan();
    assert!(cut);
    assert_eq!(all.len(), MAX_SCAN_FILES);
    let last = format!("a{MAX_SCAN_FILES:05}");
    assert!(dirs.find(&last).unwrap_err().contains("stopped after"));
    std::fs::remove_file(sys.path(&format!("applications/{last}.desktop"))).unwrap();
    let (all, cut) = dirs.scan();
    assert!(!cut && all.len() == MAX_SCAN_FILES, "at the bound");
}

#[test]
fn ids_that_are_paths_or_tricks_are_refused_by_shape() {
    assert_eq!(
        check_id("org.gnome.Calculator").unwrap(),
        "org.gnome.Calculator"
    );
    assert_eq!(
        check_id("org.gnome.Calculator.desktop").unwrap(),
        "org.gnome.Calculator"
    );
    assert_eq!(check_id("kde-foo").unwrap(), "kde-foo");
    for bad in [
        "",
        ".desktop",
        "/usr/share/applications/xterm.desktop",
        "../xterm",
        "kde/foo",
        "..",
        ".hidden",
        "-flag",
        "a b",
        "a\0b",
        "a..b",
        "xterm --e=bash",
        "caf\u{e9}",
    ] {
        assert!(check_id(bad).is_err(), "{bad:?}");
    }
    assert!(check_id("/x").unwrap_err().contains("a path"));
    let at = "a".repeat(MAX_ID_BYTES);
    assert!(check_id(&at).is_ok());
    assert!(check_id(&format!("{at}a"))
        .unwrap_err()
        .contains(&format!("at most {MAX_ID_BYTES}")));
}

#[test]
fn apps_are_refused_for_what_they_can_do_and_named_with_the_reason() {
    let sys = TempDir::new("de-vet");
    let bin = TempDir::new("de-bin");
    // A symlink named like an app that ends at a shell.
    std::os::unix::fs::symlink("/bin/bash", bin.path("calculator")).unwrap();
    // Issue 35's: each runs any command; installed here as stand-ins for the real ones.
    for name in ["strace", "watch", "flock", "find", "gdb", "chromium"] {
        std::os::unix::fs::symlink("/bin/true", bin.path(name)).unwrap();
    }
    let path = format!("{}:{PATH}", bin.0.display());
    let cases: &[(&str, &str, &str, &str)] = &[
        (
            "term",
            "xterm",
            "Categories=System;TerminalEmulator;",
            "is a terminal emulator (Categories has TerminalEmulator)",
        ),
        (
            "term2",
            "true",
            "Categories=Utility;TerminalEmulator;",
            "is a terminal emulator (Categories has TerminalEmulator)",
        ),
        (
            "tty",
            "true",
            "Terminal=true",
            "runs in a terminal (Terminal=true)",
        ),
        (
            "panel",
            "true",
            "Categories=GTK;Settings;",
            "changes the system's or the desktop's settings",
        ),
        (
            "cc",
            "gnome-control-center",
            "",
            "its program gnome-control-center changes",
        ),
        ("sh", "sh -c 'x'", "", "its program sh is a shell"),
        ("abs", "/bin/bash", "", "is a shell"),
        ("py", "python3 -c x", "", "is an interpreter"),
        (
            "env",
            "env FOO=1 true",
            "",
            "runs another command by design",
        ),
        ("open", "xdg-open .", "", "opens or launches"),
        (
            "fm",
            "true",
            "Categories=Utility;FileManager;",
            "is a file manager",
        ),
        (
            "link",
            "calculator",
            "",
            "its program calculator (bash) is a shell",
        ),
        (
            "trace",
            "strace -f bash",
            "",
            "its program strace is a debugger",
        ),
        ("gdb", "gdb", "", "its program gdb is a debugger"),
        (
            "watch",
            "watch id",
            "",
            "its program watch runs another command",
        ),
        (
            "flock",
            "flock /tmp/x bash",
            "",
            "its program flock runs another command",
        ),
        (
            "find",
            "find / -exec id ;",
            "",
            "its program find runs another command",
        ),
        (
            "web",
            "chromium",
            "",
            "its program chromium is a web browser",
        ),
        (
            "web2",
            "true",
            "Categories=Network;WebBrowser;",
            "reach past the URL guard (Categories has WebBrowser)",
        ),
    ];
    for (id, exec, extra, _) in cases {
        write(
            &sys.0,
            &format!("applications/{id}.desktop"),
            &entry(exec, extra),
        );
    }
    write(
        &sys.0,
        "applications/ok.desktop",
        &entry("true --flag %U", "Categories=Utility;"),
    );
    write(
        &sys.0,
        "applications/gone.desktop",
        &entry("true", "Hidden=true"),
    );
    write(
        &sys.0,
        "applications/link2.desktop",
        &entry("/no/such/program", ""),
    );
    write(
        &sys.0,
        "applications/dir.desktop",
        "[Desktop Entry]\nType=Directory\nName=D\n",
    );
    // Exactly the bound reads; one byte more does not.
    let at_bound = |extra: usize| {
        let head = entry("true", "");
        let pad = MAX_ENTRY_BYTES as usize - head.len() - 2 + extra;
        format!("{head}#{}\n", "x".repeat(pad))
    };
    write(&sys.0, "applications/full.desktop", &at_bound(0));
    write(&sys.0, "applications/big.desktop", &at_bound(1));
    let dirs = DataDirs {
        dirs: vec![sys.path("applications")],
    };
    let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    for (id, _, _, why) in cases {
        let err = resolve_apps(&ids(&["ok", id]), &dirs, &path).unwrap_err();
        assert!(err.starts_with(&format!("{id} (")), "{err}");
        assert!(err.contains("is refused: "), "{err}");
        assert!(err.contains(why), "{id}: {err}");
    }
    for (id, why) in [
        ("gone", "is deleted (Hidden=true)"),
        (
            "link2",
            "is refused: its program /no/such/program is not installed",
        ),
        ("dir", "is not an application (Type=Directory)"),
        ("big", &format!("larger than {MAX_ENTRY_BYTES} bytes")),
        ("nope", "nope: not found in"),
        ("../ok", "not a desktop entry ID"),
    ] {
        let err = resolve_apps(&ids(&[id]), &dirs, &path).unwrap_err();
        assert!(err.contains(why), "{id}: {err}");
    }
    assert_eq!(
        std::fs::metadata(sys.path("applications/full.desktop"))
            .unwrap()
            .len(),
        MAX_ENTRY_BYTES
    );
    assert!(resolve_apps(&ids(&["full"]), &dirs, &path).is_ok());
    let ok = resolve_apps(&ids(&["ok", "ok.desktop"]), &dirs, &path).unwrap();
    assert_eq!(ok.len(), 1);
    assert_eq!(ok[0].argv, ["true", "--flag"]);
    assert!(ok[0].program.as_ref().unwrap().is_absolute());
    let many: Vec<String> = vec!["ok".into(); MAX_APPS];
    assert!(resolve_apps(&many, &dirs, &path).is_ok());
    let err = resolve_apps(&vec!["ok".to_string(); MAX_APPS + 1], &dirs, &path).unwrap_err();
    assert!(err.contains(&format!("at most {MAX_APPS}")), "{err}");
}

#[test]
fn the_refusal_lists_hold_patterns_once() {
    for table in [REFUSED_PROGRAMS, REFUSED_CATEGORIES] {
        let mut names: Vec<&str> = table.iter().map(|(p, _)| *p).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n);
    }
    assert!(matches("python*", "python3.11"));
    assert!(!matches("sh", "shotwell"));
}
