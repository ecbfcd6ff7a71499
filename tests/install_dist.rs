//! `scripts/install.sh --from-dist DIR` (issue 17) against a small fake dist dir: it picks the
//! artifact for `uname -m` (a fake `uname` on PATH), and a tampered, missing or unlisted
//! artifact is refused with a clear message and changes nothing. The artifacts are tiny shell
//! scripts, so this runs in well under a second; the real cross-built artifacts go through
//! the same script in `scripts/ci/dist-check.sh`.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};

/// Longest one install.sh run may take before the test fails (it takes ~50 ms).
const WATCHDOG: Duration = Duration::from_secs(20);
/// The dist architectures, as scripts/build-static.sh names them.
const ARCHES: [&str; 4] = ["x86_64", "aarch64", "armv7", "armv6"];
const VERSION: &str = "0.1.0";

static COUNTER: AtomicU64 = AtomicU64::new(0);

struct Fixture {
    root: PathBuf,
    dist: PathBuf,
    prefix: PathBuf,
}

struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn write_exec(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

impl Fixture {
    /// A dist dir with one artifact per arch and their SHA256SUMS, as build-static.sh writes it.
    fn new() -> Fixture {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let root =
            std::env::temp_dir().join(format!("handnode-test-dist-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dist = root.join("dist");
        std::fs::create_dir_all(&dist).unwrap();
        std::fs::create_dir_all(root.join("home")).unwrap();
        std::fs::create_dir_all(root.join("fakebin")).unwrap();
        let mut sums = String::new();
        for arch in ARCHES {
            let name = format!("handnode-{VERSION}-{arch}");
            let body = format!("#!/bin/sh\necho handnode {VERSION} {arch}\n");
            write_exec(&dist.join(&name), &body);
            sums.push_str(&format!("{}  {name}\n", sha256_hex(body.as_bytes())));
        }
        std::fs::write(dist.join("SHA256SUMS"), sums).unwrap();
        let prefix = root.join("prefix");
        Fixture { root, dist, prefix }
    }

    fn artifact(&self, arch: &str) -> PathBuf {
        self.dist.join(format!("handnode-{VERSION}-{arch}"))
    }

    /// install.sh with HOME and the XDG dirs inside the fixture and `uname -m` = `machine`.
    fn install(&self, machine: &str, args: &[&str]) -> Run {
        let fakebin = self.root.join("fakebin");
        write_exec(
            &fakebin.join("uname"),
            &format!(
                "#!/bin/sh\n[ \"$1\" = -m ] && echo {machine} && exit 0\nexec /bin/uname \"$@\"\n"
            ),
        );
        // A box whose init is systemd, reached from a shell without a user bus (as CI's
        // sessions are): the units' route, whatever this machine's own init is.
        write_exec(
            &fakebin.join("systemctl"),
            "#!/bin/sh\n[ \"$1\" = is-system-running ] && echo running && exit 0\n\
             echo 'Failed to connect to bus: No medium found' >&2\nexit 1\n",
        );
        let home = self.root.join("home");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/install.sh");
        let mut cmd = Command::new("bash");
        cmd.arg(script)
            .args(["--prefix", self.prefix.to_str().unwrap()])
            .args(args)
            .env_clear()
            .env(
                "PATH",
                format!("{}:/usr/local/bin:/usr/bin:/bin", fakebin.display()),
            )
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_STATE_HOME", home.join(".local/state"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let child = cmd.spawn().expect("spawn bash scripts/install.sh");
        let pgid = rustix::process::Pid::from_child(&child);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(child.wait_with_output()));
        let out = match rx.recv_timeout(WATCHDOG) {
            Ok(out) => out.unwrap(),
            Err(_) => {
                let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
                panic!("watchdog: install.sh {args:?} ran for more than {WATCHDOG:?}");
            }
        };
        Run {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into(),
            stderr: String::from_utf8_lossy(&out.stderr).into(),
        }
    }

    /// Every file and directory under the fixture but the fake `uname`, with its content.
    fn snapshot(&self) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
        fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, Option<Vec<u8>>>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    out.insert(p.clone(), None);
                    walk(&p, out);
                } else {
                    out.insert(p.clone(), Some(std::fs::read(&p).unwrap()));
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(&self.root, &mut out);
        out.retain(|p, _| !p.starts_with(self.root.join("fakebin")));
        out
    }

    fn installed(&self) -> Option<Vec<u8>> {
        std::fs::read(self.prefix.join("bin/handnode")).ok()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The run failed, said `want` and that nothing changed, and changed nothing.
fn assert_refused(fx: &Fixture, machine: &str, args: &[&str], want: &str) {
    let before = fx.snapshot();
    let run = fx.install(machine, args);
    assert!(!run.ok, "{args:?} on {machine} succeeded: {}", run.stdout);
    assert!(
        run.stderr.contains("install: error: ") && run.stderr.contains(want),
        "{args:?} on {machine}: want {want:?} in: {}",
        run.stderr
    );
    assert_eq!(
        run.stderr.lines().count(),
        1,
        "one clear line: {}",
        run.stderr
    );
    assert!(
        fx.snapshot() == before,
        "{args:?} on {machine} changed files"
    );
}

#[test]
fn from_dist_installs_the_artifact_for_uname_m() {
    for (machine, arch) in [
        ("x86_64", "x86_64"),
        ("aarch64", "aarch64"),
        ("arm64", "aarch64"),
        ("armv7l", "armv7"),
        ("armv8l", "armv7"),
        ("armv6l", "armv6"),
    ] {
        let fx = Fixture::new();
        let dist = fx.dist.to_str().unwrap();
        let run = fx.install(machine, &["--from-dist", dist]);
        assert!(run.ok, "{machine}: {}{}", run.stdout, run.stderr);
        assert_eq!(
            fx.installed().as_deref(),
            Some(std::fs::read(fx.artifact(arch)).unwrap().as_slice()),
            "{machine} must get the {arch} artifact"
        );
        let mode = std::fs::metadata(fx.prefix.join("bin/handnode"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert!(
            run.stdout
                .contains(&format!("verified   handnode-{VERSION}-{arch} (sha256 ")),
            "{}",
            run.stdout
        );
        // Installed like any other binary: units and a token came along.
        assert!(fx
            .prefix
            .join("share/systemd/user/handnode.service")
            .is_file());
        assert!(fx.root.join("home/.config/handnode/token").is_file());
        // Again: verified again, nothing else to do.
        let again = fx.install(machine, &["--from-dist", dist]);
        assert!(
            again.ok && again.stdout.contains("nothing changed"),
            "{}",
            again.stdout
        );
    }
}

#[test]
fn a_tampered_artifact_is_refused_and_changes_nothing() {
    let fx = Fixture::new();
    let dist = fx.dist.to_str().unwrap().to_string();
    let path = fx.artifact("aarch64");
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 2;
    bytes[last] ^= 0x01; // one byte: "aarch64" becomes "aarch65"
    std::fs::write(&path, &bytes).unwrap();
    // On a fresh box: no binary, no unit, no token appear.
    assert_refused(
        &fx,
        "aarch64",
        &["--from-dist", &dist],
        "does not match its SHA256SUMS entry",
    );
    assert!(!fx.prefix.exists() && !fx.root.join("home/.config").exists());
    // Over an earlier install: the installed binary stays the one that was verified.
    let good = fx.install("x86_64", &["--from-dist", &dist]);
    assert!(good.ok, "{}", good.stderr);
    let installed = fx.installed();
    assert_refused(
        &fx,
        "aarch64",
        &["--from-dist", &dist],
        "a damaged or tampered copy; nothing was changed",
    );
    assert_eq!(fx.installed(), installed);
    // A tampered SHA256SUMS (the hash edited to match nothing) is refused the same way.
    let sums = std::fs::read_to_string(fx.dist.join("SHA256SUMS")).unwrap();
    let flipped = sums.replacen(|c: char| c.is_ascii_digit(), "a", 1);
    assert_ne!(flipped, sums);
    std::fs::write(fx.dist.join("SHA256SUMS"), flipped).unwrap();
    assert_refused(
        &fx,
        "x86_64",
        &["--from-dist", &dist],
        "does not match its SHA256SUMS entry",
    );
}

#[test]
fn a_missing_or_unlisted_artifact_or_checksum_file_is_refused() {
    let fx = Fixture::new();
    let dist = fx.dist.to_str().unwrap().to_string();
    let from = ["--from-dist", dist.as_str()];
    std::fs::remove_file(fx.artifact("armv7")).unwrap();
    assert_refused(
        &fx,
        "armv7l",
        &from,
        &format!("handnode-{VERSION}-armv7 is missing (SHA256SUMS lists it for armv7)"),
    );
    let sums = std::fs::read_to_string(fx.dist.join("SHA256SUMS")).unwrap();
    let without: String = sums
        .lines()
        .filter(|l| !l.ends_with("-aarch64"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(fx.dist.join("SHA256SUMS"), &without).unwrap();
    assert_refused(&fx, "aarch64", &from, "lists no artifact for aarch64");
    // Two versions for one arch: which one is meant is not guessed.
    let other = fx.dist.join("handnode-0.2.0-x86_64");
    std::fs::copy(fx.artifact("x86_64"), &other).unwrap();
    let x86 = sums.lines().find(|l| l.ends_with("-x86_64")).unwrap();
    std::fs::write(
        fx.dist.join("SHA256SUMS"),
        format!("{without}{}\n", x86.replace(VERSION, "0.2.0")),
    )
    .unwrap();
    assert_refused(&fx, "x86_64", &from, "several artifacts for x86_64");
    std::fs::remove_file(fx.dist.join("SHA256SUMS")).unwrap();
    assert_refused(&fx, "x86_64", &from, "SHA256SUMS is missing");
    assert_refused(
        &fx,
        "mips",
        &from,
        "no handnode artifact is built for this machine (mips)",
    );
    let nowhere = fx.root.join("nowhere");
    let nowhere = nowhere.to_str().unwrap();
    assert_refused(
        &fx,
        "x86_64",
        &["--from-dist", nowhere],
        "is not a directory",
    );
    assert!(!fx.prefix.exists());
}

#[test]
fn from_dist_does_not_mix_with_binary_or_uninstall() {
    let fx = Fixture::new();
    let dist = fx.dist.to_str().unwrap().to_string();
    let bin = fx.artifact("x86_64");
    let bin = bin.to_str().unwrap();
    assert_refused(
        &fx,
        "x86_64",
        &["--from-dist", &dist, "--binary", bin],
        "--binary and --from-dist both name the binary",
    );
    assert_refused(
        &fx,
        "x86_64",
        &["--uninstall", "--from-dist", &dist],
        "--from-dist makes no sense with --uninstall",
    );
    assert_refused(
        &fx,
        "x86_64",
        &["--from-dist"],
        "--from-dist needs a directory",
    );
}

/// Issue 30: with `--prefix`, the unit is outside the user manager's search path, so the
/// next steps link it first, before `enable --now` (which would fail on an unknown unit).
#[test]
fn a_prefix_install_says_to_link_the_unit_before_enabling_it() {
    let fx = Fixture::new();
    let dist = fx.dist.to_str().unwrap();
    let run = fx.install("x86_64", &["--from-dist", dist]);
    assert!(run.ok, "{}{}", run.stdout, run.stderr);
    let steps = &run.stdout[run.stdout.find("Next steps:").expect("next steps")..];
    let link = steps
        .find("systemctl --user link ")
        .unwrap_or_else(|| panic!("no link step: {steps}"));
    let reload = steps.find("systemctl --user daemon-reload").unwrap();
    let enable = steps
        .find("systemctl --user enable --now handnode")
        .unwrap();
    assert!(link < reload && reload < enable, "{steps}");
    let unit = fx.prefix.join("share/systemd/user/handnode.service");
    assert!(
        steps.contains(&format!("systemctl --user link {}", unit.display())),
        "{steps}"
    );
}
