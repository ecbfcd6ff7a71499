//! Process-wide hardening `main` applies before anything else: the daemon holds the admin
//! token and attach secrets in memory (and `HANDNODE_TOKEN` may be in its environment), so it
//! never writes a core file and is not dumpable: no core, no `ptrace` attach, and
//! `/proc/<pid>/environ`, `mem` and `fd` are closed to other processes of the same user.

use rustix::process::{DumpableBehavior, Resource, Rlimit};

/// `RLIMIT_CORE` 0, soft and hard (a same-user `prlimit` cannot raise a hard limit back),
/// then `PR_SET_DUMPABLE` 0. Children start dumpable again (the kernel resets it on
/// `execve`), but inherit the core limit: a `bash` tool command cannot `ulimit -c` above 0.
pub fn apply() -> std::io::Result<()> {
    rustix::process::setrlimit(
        Resource::Core,
        Rlimit {
            current: Some(0),
            maximum: Some(0),
        },
    )?;
    rustix::process::set_dumpable_behavior(DumpableBehavior::NotDumpable)?;
    Ok(())
}

/// Whether [`apply`] is in effect for this process.
pub fn in_effect() -> bool {
    let core = rustix::process::getrlimit(Resource::Core);
    core.current == Some(0)
        && core.maximum == Some(0)
        && matches!(
            rustix::process::dumpable_behavior(),
            Ok(DumpableBehavior::NotDumpable)
        )
}
