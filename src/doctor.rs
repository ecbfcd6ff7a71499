//! `handnode doctor`: what works on this box, and what to install or set for the rest.

/// Print the report (human text, or JSON with `json`) and return the process exit code.
pub fn main(json: bool) -> i32 {
    if json {
        println!("{{}}");
    } else {
        println!("handnode doctor: no checks implemented yet");
    }
    0
}
