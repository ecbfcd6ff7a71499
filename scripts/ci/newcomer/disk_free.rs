//! `disk_free`: how much room the file system holding a path has left. The newcomer's
//! tool of issue 40: scripts/ci/newcomer.sh adds it to a scratch copy as this module plus
//! one line in `tools::TOOLS`, blesses, and runs every list, class, doc and layer check.

use serde_json::{json, Value};

use super::paths::{self, PathArg, Refusal};
use super::{CallContext, Needs, Reach, Tool};
use crate::pool::Completion;
use crate::profiles::{Class, Profile};
use crate::wire::mcp::ToolOutput;

pub static TOOL: Tool = Tool {
    name: "disk_free",
    class: Class::Observe,
    class_reason: "reads the size and free space of a file system, nothing of its files",
    description: "How many bytes the file system holding `path` has, and how many are free. \
Under a lent folder `path` is relative to it (\".\" is the folder); otherwise absolute.",
    input_schema: || {
        json!({
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        })
    },
    output_schema: None,
    start,
    inline: None,
    needs: Needs::Nothing,
    reach: Reach::Paths(&[PathArg::entry_or_folder("path")]),
    changes_screen: false,
    profiles: &[Profile::Owner, Profile::Desktop, Profile::Observe, Profile::Files],
};

fn start(args: Value, cx: CallContext, done: Completion) {
    done.complete(match free(&args, &cx) {
        Ok(text) => ToolOutput::Result(json!({"content": [{"type": "text", "text": text}]})),
        Err(Refusal::Args(m)) => ToolOutput::InvalidParams(m),
        Err(Refusal::Place(m)) => ToolOutput::tool_error(m),
    });
}

fn free(args: &Value, cx: &CallContext) -> Result<String, Refusal> {
    let map = super::args::object(args).map_err(Refusal::Args)?;
    let given = paths::given(&TOOL, map).map_err(Refusal::Args)?;
    let (place, checked) = paths::confine(&TOOL, given, cx)?;
    let fd = place
        .open(
            checked[0],
            rustix::fs::OFlags::PATH,
            rustix::fs::Mode::empty(),
        )
        .map_err(Refusal::Place)?;
    let st = rustix::fs::fstatvfs(&fd).map_err(|e| Refusal::Place(e.to_string()))?;
    let block = st.f_frsize;
    Ok(format!(
        "{} bytes free of {}",
        st.f_bavail * block,
        st.f_blocks * block
    ))
}
