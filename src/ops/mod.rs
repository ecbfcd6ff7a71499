//! The operator's side: the command line and its subcommands, `doctor`, `tools` (the
//! registry's list for scripts), the halt key read from the box's keyboards, and telling
//! systemd that the daemon is ready or stopping.

pub mod cli;
pub mod docgen;
pub mod doctor;
pub mod halt_key;
pub mod lists;
pub mod sdnotify;
pub mod tool_list;
