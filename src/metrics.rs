//! STUB (replaced by the `store` branch): Prometheus counters.
#[derive(Debug, Default)]
pub struct Metrics {}

impl Metrics {
    pub fn dial(&self) {}
    pub fn dial_failed(&self) {}
    pub fn close(&self, _code: u16) {}
    pub fn tool_call(&self, _tool: &str, _outcome: &str) {}
    pub fn bytes_in(&self, _n: u64) {}
    pub fn bytes_out(&self, _n: u64) {}
    pub fn auth_denied(&self) {}
    pub fn throttled(&self) {}
    pub fn render(&self, _grants: &[(String, &'static str)]) -> String {
        String::new()
    }
}
