//! What this binary was built for: target triple, C library, static or dynamic. Fixed at
//! build time (`build.rs` passes `$TARGET`; the rest is `cfg`), reported by `handnode doctor`
//! and `sys_info` so whoever copied a file onto a Pi can tell which one it is.

use serde_json::{json, Value};

/// The target triple cargo built this binary for, e.g. `aarch64-unknown-linux-musl`.
pub const TARGET: &str = env!("HANDNODE_TARGET");

/// The C library linked in: `musl`, `glibc`, or the target's `target_env` otherwise.
pub const LIBC: &str = if cfg!(target_env = "musl") {
    "musl"
} else if cfg!(target_env = "gnu") {
    "glibc"
} else {
    "unknown"
};

/// Whether the C library is linked in statically (`+crt-static`; musl's default).
pub const STATIC: bool = cfg!(target_feature = "crt-static");

/// `{"target", "libc", "static"}`.
pub fn to_json() -> Value {
    json!({"target": TARGET, "libc": LIBC, "static": STATIC})
}

/// One line for people: `aarch64-unknown-linux-musl, musl, static`.
pub fn describe() -> String {
    let linking = if STATIC { "static" } else { "dynamic" };
    format!("{TARGET}, {LIBC}, {linking}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_libc_and_linking_agree_with_what_was_compiled() {
        // `arm` for armv7-…; the triple names the architecture the code was compiled for.
        assert!(
            TARGET.starts_with(std::env::consts::ARCH),
            "{TARGET} vs {}",
            std::env::consts::ARCH
        );
        assert!(TARGET.contains("-linux-"), "{TARGET}");
        assert_eq!(TARGET.contains("musl"), LIBC == "musl", "{TARGET} / {LIBC}");
        assert_eq!(
            TARGET.ends_with("-gnu") || TARGET.contains("-gnueabi"),
            LIBC == "glibc"
        );
        let v = to_json();
        // musl targets link statically unless told otherwise; glibc only with +crt-static.
        if LIBC == "musl" {
            assert_eq!(v["static"], true);
        }
        assert_eq!(v["target"], TARGET);
        assert_eq!(v["libc"], LIBC);
        assert_eq!(v["static"], STATIC);
        assert_eq!(
            describe(),
            format!(
                "{TARGET}, {LIBC}, {}",
                if STATIC { "static" } else { "dynamic" }
            )
        );
    }
}
