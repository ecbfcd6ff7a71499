//! Long-running jobs: the job table with its ring files, disk cap, janitor and recovery
//! (`table`), and the `bash_*` tools that start, poll, list and cancel them (`tools`).

pub mod job_tools;
pub mod table;
