//! Link-time options of the release binary, and the target triple.
//!
//! * `-z pack-relative-relocs` (DT_RELR): the ~5 000 relative relocations of a PIE take
//!   ~4 KiB instead of ~130 KiB. The binary then needs glibc >= 2.36 to start, so it is
//!   used only when the glibc we link against defines `GLIBC_ABI_DT_RELR` (a binary built
//!   on an older system keeps running there). Needs LLD, which rustc uses for
//!   `x86_64-unknown-linux-gnu` since 1.90; where it is missing a `cargo:warning` says so,
//!   so the size figures in docs/performance.md are not silently lost.
//!
//! `HANDNODE_PLAIN_LINK=1` turns it off. It applies only when building for the host and
//! the host is `x86_64-unknown-linux-gnu`: a cross build (the Pi artifacts of
//! `scripts/build-static.sh`) links with a GNU cross `ld` that does not know it.
//!
//! It also passes the target triple to the crate as `HANDNODE_TARGET` (`src/base/build_info.rs`),
//! for any target and profile.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=HANDNODE_PLAIN_LINK");
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    println!("cargo:rustc-env=HANDNODE_TARGET={}", env("TARGET"));
    if env("HANDNODE_PLAIN_LINK") == "1" || env("PROFILE") != "release" {
        return;
    }
    let host_linux_gnu_x86_64 = env("TARGET") == env("HOST")
        && env("CARGO_CFG_TARGET_ARCH") == "x86_64"
        && env("CARGO_CFG_TARGET_OS") == "linux"
        && env("CARGO_CFG_TARGET_ENV") == "gnu";
    if !host_linux_gnu_x86_64 {
        return;
    }
    // A linker chosen by the user (config `linker`, `-C linker=…`, another flavour) may be
    // GNU ld, which does not know the option.
    let flags = env("CARGO_ENCODED_RUSTFLAGS");
    let own_linker = !env("RUSTC_LINKER").is_empty()
        || flags.contains("linker")
        || flags.contains("link-self-contained");
    if own_linker || !rustc_links_with_lld() {
        println!(
            "cargo:warning=release link without packed relocations \
             (needs rustc >= 1.90 with its default LLD): a larger binary"
        );
        return;
    }
    if glibc_has_dt_relr() {
        println!("cargo:rustc-link-arg-bin=handnode=-Wl,-z,pack-relative-relocs");
    }
}

/// rustc >= 1.90 links `x86_64-unknown-linux-gnu` with its bundled LLD by default.
fn rustc_links_with_lld() -> bool {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(out) = Command::new(rustc).arg("-vV").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(release) = text.lines().find_map(|l| l.strip_prefix("release: ")) else {
        return false;
    };
    let mut parts = release
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (1, 90)
}

/// Whether the libc.so.6 the linker will use knows packed relative relocations.
fn glibc_has_dt_relr() -> bool {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let Ok(out) = Command::new(cc).arg("-print-file-name=libc.so.6").output() else {
        return false;
    };
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    match std::fs::read(&path) {
        Ok(bytes) => bytes
            .windows(b"GLIBC_ABI_DT_RELR".len())
            .any(|w| w == b"GLIBC_ABI_DT_RELR"),
        Err(_) => false,
    }
}
